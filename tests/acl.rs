//! ACL: where the server lets a module set command categories (Redis 7.2+, Valkey), every LOCK.*
//! command is in the standard categories its flags imply plus @lock, so category rules work as
//! for built-in commands. Redis 7.0 gives module commands no categories: per-command rules
//! (the README's table) are the way there, and work everywhere.

use redis_lock_harness::*;

fn categories(c: &mut Connection, command: &str) -> Vec<String> {
    let info = ok(c, &["COMMAND", "INFO", command]);
    let Value::Array(entries) = info else {
        panic!("{info:?}")
    };
    let Some(Value::Array(fields)) = entries.first() else {
        panic!("{entries:?}")
    };
    let cats = match fields.get(6) {
        Some(Value::Array(v)) | Some(Value::Set(v)) => v.clone(),
        other => panic!("{other:?}"),
    };
    let mut names: Vec<String> = cats
        .iter()
        .map(|v| match v {
            Value::SimpleString(s) => s.clone(),
            Value::BulkString(b) => String::from_utf8_lossy(b).into_owned(),
            other => panic!("{other:?}"),
        })
        .collect();
    names.sort();
    names
}

fn user(s: &Server, c: &mut Connection, name: &str, rules: &[&str]) -> Connection {
    let mut args = vec!["ACL", "SETUSER", name, "reset", "on", "nopass", "~*"];
    args.extend_from_slice(rules);
    ok(c, &args);
    let mut u = s.con();
    ok(&mut u, &["AUTH", name, "x"]);
    u
}

fn denied(c: &mut Connection, words: &[&str]) -> bool {
    matches!(cmd(c, words), Err(e) if e.starts_with("NOPERM"))
}

#[test]
fn commands_carry_the_categories_their_flags_imply() {
    let s = Server::start();
    let mut c = s.con();
    if is_redis_7_0(&mut c) {
        // No API to set them: module commands have none, as the README says.
        assert!(categories(&mut c, "lock.fence").is_empty());
        return;
    }
    let expect = [
        (
            "lock.acquire",
            &["@blocking", "@lock", "@slow", "@write"][..],
        ),
        ("lock.release", &["@fast", "@lock", "@write"]),
        ("lock.macquire", &["@blocking", "@lock", "@slow", "@write"]),
        ("lock.mrelease", &["@lock", "@slow", "@write"]),
        ("lock.extend", &["@fast", "@lock", "@write"]),
        ("lock.fence", &["@fast", "@lock", "@read"]),
        ("lock.info", &["@lock", "@read", "@slow"]),
        (
            "lock.forcerelease",
            &["@admin", "@dangerous", "@fast", "@lock", "@write"],
        ),
    ];
    for (command, cats) in expect {
        assert_eq!(categories(&mut c, command), cats, "{command}");
    }
}

#[test]
fn category_rules_grant_and_deny_as_for_built_in_commands() {
    let s = Server::start();
    let mut c = s.con();
    acquire(&mut c, "k", "a", 60_000).unwrap();
    if is_redis_7_0(&mut c) {
        // Redis 7.0: categories do not reach module commands, so `+@all -@dangerous` still
        // runs LOCK.FORCERELEASE; the per-command rule is what works.
        let mut u = user(&s, &mut c, "ops", &["+@all", "-@dangerous"]);
        assert!(
            !denied(&mut u, &["LOCK.FORCERELEASE", "nothing"]),
            "documented limitation"
        );
        let mut u = user(&s, &mut c, "ops2", &["+@all", "-lock.forcerelease"]);
        assert!(denied(&mut u, &["LOCK.FORCERELEASE", "k"]));
        let mut r = user(&s, &mut c, "reader", &["+lock.fence", "+lock.info"]);
        assert!(fence(&mut r, "k").is_some());
        assert!(denied(&mut r, &["LOCK.ACQUIRE", "k", "r", "10"]));
        return;
    }
    let mut r = user(&s, &mut c, "reader", &["+@read"]);
    assert!(fence(&mut r, "k").is_some());
    assert!(cmd(&mut r, &["LOCK.INFO", "k"]).is_ok());
    assert!(denied(&mut r, &["LOCK.ACQUIRE", "k", "r", "10"]));
    assert!(denied(&mut r, &["LOCK.RELEASE", "k", "a"]));

    let mut w = user(&s, &mut c, "writer", &["+@write"]);
    assert!(acquire(&mut w, "k2", "w", 60_000).is_some());
    assert_eq!(release(&mut w, "k2", "w"), 1);
    assert!(denied(&mut w, &["LOCK.FENCE", "k"]));

    for rules in [&["+@all", "-@dangerous"][..], &["+@all", "-@admin"]] {
        let mut u = user(&s, &mut c, "ops", rules);
        assert!(denied(&mut u, &["LOCK.FORCERELEASE", "k"]), "{rules:?}");
        assert!(fence(&mut u, "k").is_some());
    }
    let mut u = user(&s, &mut c, "noblock", &["+@all", "-@blocking"]);
    assert!(denied(&mut u, &["LOCK.ACQUIRE", "k", "x", "10"]));
    let mut u = user(&s, &mut c, "locks", &["+@lock"]);
    assert!(fence(&mut u, "k").is_some());
    assert!(cmd(&mut u, &["LOCK.FORCERELEASE", "k"]).is_ok());
    assert!(denied(&mut u, &["GET", "k"]));
}

/// Key patterns reach every key of a lock set (found through `numkeys`), on every server.
#[test]
fn key_patterns_cover_every_key_of_a_set() {
    let s = Server::start();
    let mut c = s.con();
    ok(
        &mut c,
        &[
            "ACL", "SETUSER", "teller", "reset", "on", "nopass", "~acct:*", "+@all",
        ],
    );
    let mut u = s.con();
    ok(&mut u, &["AUTH", "teller", "x"]);
    let set = ["LOCK.MACQUIRE", "2", "acct:1", "acct:2", "t", "60000"];
    assert!(matches!(ok(&mut u, &set), Value::Array(_)));
    for words in [
        &["LOCK.MACQUIRE", "2", "acct:3", "vault", "t", "60000"][..],
        &["LOCK.MRELEASE", "2", "acct:1", "vault", "t"],
    ] {
        assert!(denied(&mut u, words), "{words:?}");
    }
    assert_eq!(fence(&mut c, "acct:3"), None, "a denied set takes nothing");
    let release = ["LOCK.MRELEASE", "2", "acct:1", "acct:2", "t"];
    assert_eq!(ok(&mut u, &release), Value::Int(2));
}
