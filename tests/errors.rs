//! Bad input for every argument of every command: a clear Redis error, nothing changed, and
//! the server keeps answering. WRONGTYPE in both directions.

use redis_lock_harness::*;

const NOT_INT: &str = "ERR value is not an integer or out of range";
const BAD_TTL: &str = "ERR invalid ttl: must be a positive integer of milliseconds";
const HUGE_TTL: &str = "ERR invalid ttl: the deadline would overflow";
const EMPTY_OWNER: &str = "ERR invalid owner: must not be empty";
const BAD_TOKEN: &str = "ERR invalid token: must be a positive integer";
const SYNTAX: &str = "ERR syntax error";
const WRONGTYPE: &str = "WRONGTYPE Operation against a key holding the wrong kind of value";

fn arity(cmd: &str) -> String {
    format!(
        "ERR wrong number of arguments for '{}' command",
        cmd.to_lowercase()
    )
}

fn state(c: &mut Connection) -> Value {
    ok(c, &["DEBUG", "DIGEST"])
}

#[test]
fn every_bad_argument_gets_a_clear_error_and_changes_nothing() {
    let s = Server::start();
    let mut c = s.con();
    let token = acquire(&mut c, "held", "alice", 60_000).unwrap();
    let before = state(&mut c);
    let t = token.to_string();

    let cases: Vec<(Vec<&str>, String)> = vec![
        // LOCK.ACQUIRE key owner ttl-ms [WAIT timeout-ms]
        (vec!["LOCK.ACQUIRE"], arity("lock.acquire")),
        (vec!["LOCK.ACQUIRE", "k"], arity("lock.acquire")),
        (vec!["LOCK.ACQUIRE", "k", "o"], arity("lock.acquire")),
        (vec!["LOCK.ACQUIRE", "k", "", "100"], EMPTY_OWNER.into()),
        (vec!["LOCK.ACQUIRE", "k", "o", "0"], BAD_TTL.into()),
        (vec!["LOCK.ACQUIRE", "k", "o", "-1"], BAD_TTL.into()),
        (vec!["LOCK.ACQUIRE", "k", "o", "1.5"], NOT_INT.into()),
        (vec!["LOCK.ACQUIRE", "k", "o", "abc"], NOT_INT.into()),
        (vec!["LOCK.ACQUIRE", "k", "o", ""], NOT_INT.into()),
        (
            vec!["LOCK.ACQUIRE", "k", "o", "99999999999999999999"],
            NOT_INT.into(),
        ),
        (
            vec!["LOCK.ACQUIRE", "k", "o", "9223372036854775807"],
            HUGE_TTL.into(),
        ),
        (vec!["LOCK.ACQUIRE", "k", "o", "100", "WAIT"], SYNTAX.into()),
        (
            vec!["LOCK.ACQUIRE", "k", "o", "100", "NOWAIT", "1"],
            SYNTAX.into(),
        ),
        (
            vec!["LOCK.ACQUIRE", "k", "o", "100", "WAIT", "-1"],
            "ERR timeout is negative".into(),
        ),
        (
            vec!["LOCK.ACQUIRE", "k", "o", "100", "WAIT", "x"],
            NOT_INT.into(),
        ),
        (
            vec![
                "LOCK.ACQUIRE",
                "k",
                "o",
                "100",
                "WAIT",
                "9223372036854775807",
            ],
            "ERR timeout is out of range".into(),
        ),
        (
            vec!["LOCK.ACQUIRE", "k", "o", "100", "WAIT", "1", "WAIT", "1"],
            SYNTAX.into(),
        ),
        (
            vec!["LOCK.ACQUIRE", "held", "bob", "0", "WAIT", "10"],
            BAD_TTL.into(),
        ),
        // LOCK.RELEASE key owner [TOKEN token]
        (vec!["LOCK.RELEASE"], arity("lock.release")),
        (vec!["LOCK.RELEASE", "held"], arity("lock.release")),
        (
            vec!["LOCK.RELEASE", "held", "alice", "extra"],
            "ERR syntax error".into(),
        ),
        (
            vec!["LOCK.RELEASE", "held", "alice", "TOKEN", "1", "x"],
            SYNTAX.into(),
        ),
        (
            vec!["LOCK.RELEASE", "held", "alice", "TOKEN", "1", "TOKEN", "2"],
            SYNTAX.into(),
        ),
        (
            vec!["LOCK.RELEASE", "held", "alice", "TOKEN", "0"],
            BAD_TOKEN.into(),
        ),
        (vec!["LOCK.RELEASE", "held", ""], EMPTY_OWNER.into()),
        // LOCK.EXTEND key owner ttl-ms [TOKEN token]
        (vec!["LOCK.EXTEND", "held", "alice"], arity("lock.extend")),
        (
            vec!["LOCK.EXTEND", "held", "alice", "10", "x"],
            "ERR syntax error".into(),
        ),
        (
            vec!["LOCK.EXTEND", "held", "alice", "10", "TOKEN", "1", "x"],
            SYNTAX.into(),
        ),
        (
            vec!["LOCK.EXTEND", "held", "alice", "10", "TOKEN", "1", "TOKEN", "2"],
            SYNTAX.into(),
        ),
        // LOCK.GUARD key token command [arg ...]
        (vec!["LOCK.GUARD", "held", "1"], arity("lock.guard")),
        (vec!["LOCK.GUARD", "held", "x", "GET", "k"], NOT_INT.into()),
        (vec!["LOCK.GUARD", "held", "0", "GET", "k"], BAD_TOKEN.into()),
        (vec!["LOCK.EXTEND", "held", "", "10"], EMPTY_OWNER.into()),
        (vec!["LOCK.EXTEND", "held", "alice", "0"], BAD_TTL.into()),
        (vec!["LOCK.EXTEND", "held", "alice", "-5"], BAD_TTL.into()),
        (vec!["LOCK.EXTEND", "held", "alice", "ten"], NOT_INT.into()),
        (
            vec!["LOCK.EXTEND", "held", "alice", "9223372036854775807"],
            HUGE_TTL.into(),
        ),
        // LOCK.FENCE key [token]
        (vec!["LOCK.FENCE"], arity("lock.fence")),
        (vec!["LOCK.FENCE", "held", &t, "x"], arity("lock.fence")),
        (vec!["LOCK.FENCE", "held", "0"], BAD_TOKEN.into()),
        (vec!["LOCK.FENCE", "held", "-3"], BAD_TOKEN.into()),
        (vec!["LOCK.FENCE", "held", "abc"], NOT_INT.into()),
        // LOCK.APPLY is for the master link and the AOF only
        (
            vec![
                "LOCK.APPLY",
                "held",
                "mallory",
                "99999999999999",
                "99999999999999",
            ],
            "ERR LOCK.APPLY is internal: it is accepted only from the master link or the AOF"
                .into(),
        ),
        (vec!["LOCK.APPLY", "held"], arity("lock.apply")),
        (
            vec!["LOCK.APPLYSTATE", "held", "\x03"],
            "ERR LOCK.APPLY is internal: it is accepted only from the master link or the AOF"
                .into(),
        ),
        (vec!["LOCK.APPLYSTATE", "held"], arity("lock.applystate")),
        // The lock family's options
        (
            vec!["LOCK.ACQUIRE", "held", "x", "10", "LIMIT", "2"],
            "ERR the key holds another kind of lock: a semaphore takes LIMIT, a plain or SHARED lock does not".into(),
        ),
        (
            vec!["LOCK.ACQUIRE", "held", "x", "10", "PERMITS", "2"],
            "ERR syntax error".into(),
        ),
        (
            vec!["LOCK.ACQUIRE", "held", "x", "10", "LIMIT", "0"],
            "ERR invalid PERMITS or LIMIT: need 1 <= permits <= limit".into(),
        ),
    ];
    for (words, expected) in &cases {
        assert_eq!(cmd(&mut c, words).unwrap_err(), *expected, "{words:?}");
        assert_eq!(ok(&mut c, &["PING"]), Value::SimpleString("PONG".into()));
    }
    assert_eq!(state(&mut c), before, "no bad command changed anything");
    assert_eq!(fence(&mut c, "held"), Some(token));
    assert_eq!(int(&ok(&mut c, &["DBSIZE"])), 1);
}

#[test]
fn lock_commands_on_other_types_and_other_commands_on_locks_are_wrongtype() {
    let s = Server::start();
    let mut c = s.con();
    ok(&mut c, &["SET", "str", "v"]);
    ok(&mut c, &["LPUSH", "list", "v"]);
    // A plain string is another client's old-style lock (tests/foreign.rs), not the wrong type.
    for key in ["list"] {
        for words in [
            vec!["LOCK.ACQUIRE", key, "o", "100"],
            vec!["LOCK.ACQUIRE", key, "o", "100", "WAIT", "10"],
            vec!["LOCK.RELEASE", key, "o"],
            vec!["LOCK.EXTEND", key, "o", "100"],
            vec!["LOCK.FENCE", key],
            vec!["LOCK.FENCE", key, "1"],
        ] {
            assert_eq!(cmd(&mut c, &words).unwrap_err(), WRONGTYPE, "{words:?}");
        }
    }
    assert_eq!(
        ok(&mut c, &["GET", "str"]),
        Value::BulkString(b"v".to_vec())
    );
    acquire(&mut c, "lock", "o", 60_000).unwrap();
    for words in [
        vec!["GET", "lock"],
        vec!["LPUSH", "lock", "x"],
        vec!["HGET", "lock", "f"],
        vec!["INCR", "lock"],
    ] {
        let err = cmd(&mut c, &words).unwrap_err();
        assert!(err.starts_with("WRONGTYPE"), "{words:?}: {err}");
    }
    assert!(fence(&mut c, "lock").is_some());
    assert_eq!(ok(&mut c, &["PING"]), Value::SimpleString("PONG".into()));
}
