//! COMMAND DOCS / COMMAND INFO describe every LOCK.* command; ACL rules can target them.

use redis_lock_harness::*;

const COMMANDS: [&str; 10] = [
    "lock.acquire",
    "lock.release",
    "lock.extend",
    "lock.fence",
    "lock.info",
    "lock.forcerelease",
    "lock.apply",
    "lock.applystate",
    "lock.guard",
    "lock.epoch",
];

#[test]
fn command_docs_cover_every_command() {
    let s = Server::start();
    let mut c = s.con();
    let mut words = vec!["COMMAND", "DOCS"];
    words.extend(COMMANDS);
    let docs = ok(&mut c, &words);
    for name in COMMANDS {
        let doc = map_field(&docs, name).unwrap_or_else(|| panic!("no docs for {name}"));
        let summary = text(&map_field(&doc, "summary").expect("summary"));
        assert!(summary.len() > 20, "{name}: {summary}");
        assert!(text(&map_field(&doc, "complexity").expect("complexity")).starts_with("O("));
        assert_eq!(text(&map_field(&doc, "since").expect("since")), "0.1.0");
        let args = map_field(&doc, "arguments").expect("arguments");
        let Value::Array(args) = args else {
            panic!("{args:?}")
        };
        // Every command but the internal LOCK.EPOCH starts with its key.
        let first = if name == "lock.epoch" { "epoch" } else { "key" };
        assert_eq!(text(&map_field(&args[0], "name").unwrap()), first, "{name}");
        let kind = if name == "lock.epoch" {
            "integer"
        } else {
            "key"
        };
        assert_eq!(text(&map_field(&args[0], "type").unwrap()), kind, "{name}");
    }
    assert_eq!(
        cmd(&mut c, &["COMMAND", "GETKEYS", "LOCK.EPOCH", "7"]),
        Err("ERR The command has no key arguments".into()),
        "LOCK.EPOCH has no key"
    );
    let acquire = map_field(&docs, "lock.acquire").unwrap();
    let Value::Array(args) = map_field(&acquire, "arguments").unwrap() else {
        panic!()
    };
    let names: Vec<String> = args
        .iter()
        .map(|a| text(&map_field(a, "name").unwrap()))
        .collect();
    assert_eq!(
        names,
        [
            "key",
            "owner",
            "ttl-ms",
            "SHARED",
            "SESSION",
            "max",
            "n",
            "timeout-ms"
        ]
    );
    assert_eq!(text(&map_field(&args[5], "token").unwrap()), "LIMIT");
    assert_eq!(text(&map_field(&args[7], "token").unwrap()), "WAIT");
}

#[test]
fn command_info_has_arity_flags_and_key_specs() {
    let s = Server::start();
    let mut c = s.con();
    let mut words = vec!["COMMAND", "INFO"];
    words.extend(COMMANDS);
    let Value::Array(infos) = ok(&mut c, &words) else {
        panic!()
    };
    let arity: Vec<i64> = infos
        .iter()
        .map(|i| match i {
            Value::Array(f) => int(&f[1]),
            other => panic!("{other:?}"),
        })
        .collect();
    assert_eq!(arity, [-4, -3, -4, -2, -2, 2, -5, 3, -4, 2]);
    let all = format!("{infos:?}");
    assert!(
        all.contains("key_specs") || all.contains("begin_search"),
        "key specs present"
    );
    // Redis enforces the declared arity itself.
    assert_eq!(
        cmd(&mut c, &["LOCK.RELEASE", "k"]).unwrap_err(),
        "ERR wrong number of arguments for 'lock.release' command"
    );
}

#[test]
fn acl_rules_can_deny_forcerelease() {
    let s = Server::start();
    let mut admin = s.con();
    ok(
        &mut admin,
        &[
            "ACL",
            "SETUSER",
            "app",
            "on",
            "nopass",
            "+@all",
            "~*",
            "-lock.forcerelease",
        ],
    );
    acquire(&mut admin, "k", "a", 60_000).unwrap();
    let mut app = s.con();
    ok(&mut app, &["AUTH", "app", "x"]);
    assert!(acquire(&mut app, "k2", "b", 1_000).is_some());
    let err = cmd(&mut app, &["LOCK.FORCERELEASE", "k"]).unwrap_err();
    assert!(err.starts_with("NOPERM"), "{err}");
    // Where the server supports module ACL categories, all commands are in @lock. Redis 7.4's
    // `ACL CAT <category>` lists no module command at all (fixed in 8.0, redis#13489) though
    // `+@lock` grants them: there the categories COMMAND INFO shows are checked instead.
    if let Ok(Value::Array(cat)) = cmd(&mut admin, &["ACL", "CAT", "lock"]) {
        let names: Vec<String> = cat.iter().map(text).collect();
        for name in COMMANDS {
            let listed = if names.is_empty() {
                let Value::Array(infos) = ok(&mut admin, &["COMMAND", "INFO", name]) else {
                    panic!()
                };
                let Value::Array(info) = &infos[0] else {
                    panic!("{infos:?}")
                };
                let Value::Array(categories) = &info[6] else {
                    panic!("{info:?}")
                };
                categories.iter().any(|c| text(c) == "@lock")
            } else {
                names.iter().any(|n| n == name)
            };
            assert!(listed, "{name} in @lock: {names:?}");
        }
    }
}
