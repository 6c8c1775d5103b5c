//! lock.* configuration: defaults, bounds, effects, and module arguments at load.

use redis_lock_harness::*;

fn get(c: &mut Connection, name: &str) -> String {
    match ok(c, &["CONFIG", "GET", name]) {
        Value::Array(v) if v.len() == 2 => match &v[1] {
            Value::BulkString(b) => String::from_utf8(b.clone()).unwrap(),
            other => panic!("{other:?}"),
        },
        Value::Map(m) if m.len() == 1 => match &m[0].1 {
            Value::BulkString(b) => String::from_utf8(b.clone()).unwrap(),
            other => panic!("{other:?}"),
        },
        other => panic!("CONFIG GET {name}: {other:?}"),
    }
}

#[test]
fn defaults_and_bounds() {
    let s = Server::start();
    let mut c = s.con();
    assert_eq!(get(&mut c, "lock.max-waiters"), "100000");
    assert_eq!(get(&mut c, "lock.max-ttl"), "2592000000");
    assert_eq!(get(&mut c, "lock.max-owner-length"), "1024");
    assert_eq!(get(&mut c, "lock.max-set-size"), "64");
    assert_eq!(get(&mut c, "lock.hot-names"), "10");
    for (name, bad) in [
        ("lock.hot-names", "-1"),
        ("lock.hot-names", "1001"),
        ("lock.max-set-size", "0"),
        ("lock.max-set-size", "10001"),
        ("lock.max-waiters", "0"),
        ("lock.max-waiters", "100000001"),
        ("lock.max-ttl", "0"),
        ("lock.max-ttl", "315360000001"),
        ("lock.max-owner-length", "0"),
        ("lock.max-owner-length", "nope"),
    ] {
        let err = cmd(&mut c, &["CONFIG", "SET", name, bad]).unwrap_err();
        assert!(err.starts_with("ERR"), "{name} {bad}: {err}");
    }
    assert_eq!(
        get(&mut c, "lock.max-waiters"),
        "100000",
        "a refused value changes nothing"
    );
}

#[test]
fn limits_apply_with_clear_errors() {
    let s = Server::start();
    let mut c = s.con();
    ok(&mut c, &["CONFIG", "SET", "lock.max-ttl", "1000"]);
    assert_eq!(
        cmd(&mut c, &["LOCK.ACQUIRE", "k", "a", "1001"]).unwrap_err(),
        "ERR invalid ttl: above lock.max-ttl"
    );
    acquire(&mut c, "k", "a", 1000).unwrap();
    assert_eq!(
        cmd(&mut c, &["LOCK.EXTEND", "k", "a", "5000"]).unwrap_err(),
        "ERR invalid ttl: above lock.max-ttl"
    );
    ok(&mut c, &["CONFIG", "SET", "lock.max-owner-length", "4"]);
    assert_eq!(
        cmd(&mut c, &["LOCK.ACQUIRE", "k2", "12345", "100"]).unwrap_err(),
        "ERR invalid owner: longer than lock.max-owner-length"
    );
    assert!(acquire(&mut c, "k2", "1234", 100).is_some());
    ok(&mut c, &["CONFIG", "SET", "lock.max-waiters", "2"]);
    ok(&mut c, &["CONFIG", "SET", "lock.max-ttl", "60000"]);
    acquire(&mut c, "q", "h", 60_000).unwrap();
    let w1 = spawn_wait(&s, "q", "w1", 1_000, 0);
    let w2 = spawn_wait(&s, "q", "w2", 1_000, 0);
    wait_blocked(&mut c, 2);
    assert_eq!(
        cmd(&mut c, &["LOCK.ACQUIRE", "q", "w3", "1000", "WAIT", "0"]).unwrap_err(),
        "ERR lock queue is full: lock.max-waiters clients already wait"
    );
    assert_eq!(
        acquire(&mut c, "q", "w3", 1_000),
        None,
        "without WAIT: just busy"
    );
    release(&mut c, "q", "h");
    w1.join().unwrap().unwrap();
    release(&mut c, "q", "w1");
    w2.join().unwrap().unwrap();
}

#[test]
fn module_arguments_set_the_configuration_at_load() {
    // `loadmodule path name value ...`
    let s = Server::builder()
        .module_args(&["max-waiters", "7", "max-ttl", "5000"])
        .start();
    let mut c = s.con();
    assert_eq!(get(&mut c, "lock.max-waiters"), "7");
    assert_eq!(get(&mut c, "lock.max-ttl"), "5000");
    assert_eq!(get(&mut c, "lock.max-owner-length"), "1024");
}

#[test]
fn a_config_file_line_wins_over_a_module_argument() {
    let s = Server::builder()
        .module_args(&["max-ttl", "5000"])
        .args(&["--lock.max-ttl", "9000"])
        .start();
    assert_eq!(get(&mut s.con(), "lock.max-ttl"), "9000");
}

/// The bounds and wording of CONFIG SET, checked before the module registers anything: a bad
/// value, an unknown name, a name without a value or given twice stops the server from starting,
/// with one log line that names the argument.
#[test]
fn bad_module_arguments_refuse_the_module_with_one_log_line() {
    let cases: [(&[&str], &str); 8] = [
        (
            &["max-ttl", "0"],
            "module argument 'max-ttl' ('0'): argument must be between 1 and 315360000000 inclusive",
        ),
        (
            &["max-waiters", "0"],
            "module argument 'max-waiters' ('0'): argument must be between 1 and 100000000 inclusive",
        ),
        (
            &["max-waiters", "-1"],
            "module argument 'max-waiters' ('-1'): argument must be between 1 and 100000000 inclusive",
        ),
        (
            &["max-owner-length", "1048577"],
            "module argument 'max-owner-length' ('1048577'): argument must be between 1 and 1048576 inclusive",
        ),
        (
            &["max-ttl", "nope"],
            "module argument 'max-ttl' ('nope'): argument couldn't be parsed into an integer",
        ),
        (&["max-tll", "100"], "unknown module argument 'max-tll'"),
        (&["max-ttl"], "module argument 'max-ttl' has no value"),
        (
            &["max-ttl", "5", "lock.max-ttl", "6"],
            "module argument 'max-ttl' is given twice",
        ),
    ];
    for (args, line) in cases {
        let (status, log) = Server::builder().module_args(args).refused_start();
        assert!(!status.success(), "{args:?}: {status}");
        let refusals: Vec<&str> = log
            .lines()
            .filter(|l| l.contains("redis-lock refused to load"))
            .collect();
        assert_eq!(refusals.len(), 1, "{args:?}: one line\n{log}");
        assert!(
            refusals[0].contains(&format!("redis-lock refused to load: {line}")),
            "{args:?}: {}",
            refusals[0]
        );
    }
}

/// MODULE LOAD at run time: refused the same way, nothing left registered, and the same server
/// then loads the module with good arguments.
#[test]
fn module_load_refuses_bad_arguments_then_loads_good_ones() {
    let s = Server::builder()
        .without_module()
        .args(&["--enable-module-command", "yes"])
        .start();
    let mut c = s.con();
    let path = module_path().display().to_string();
    let refused = cmd(&mut c, &["MODULE", "LOAD", &path, "max-waiters", "0"]).unwrap_err();
    assert!(refused.starts_with("ERR"), "{refused}");
    assert!(s.log().contains(
        "redis-lock refused to load: module argument 'max-waiters' ('0'): argument must be between 1 and 100000000 inclusive"
    ));
    let modules = format!("{:?}", ok(&mut c, &["MODULE", "LIST"]));
    assert!(!modules.contains("\"lock\""), "not loaded: {modules}");
    assert!(cmd(&mut c, &["CONFIG", "GET", "lock.max-waiters"])
        .map(|v| format!("{v:?}"))
        .is_ok_and(|v| !v.contains("max-waiters")));
    ok(&mut c, &["MODULE", "LOAD", &path, "max-waiters", "3"]);
    assert_eq!(get(&mut c, "lock.max-waiters"), "3");
    assert!(acquire(&mut c, "k", "o", 1_000).is_some());
}
