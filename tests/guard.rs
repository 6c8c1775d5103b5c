//! LOCK.GUARD (writes only a live exclusive holder can make) and the TOKEN option of
//! LOCK.RELEASE / LOCK.EXTEND (a late retry never hits a newer hold of the same owner).

use std::time::Duration;

use redis_lock_harness::*;

#[test]
fn guard_runs_the_command_only_for_the_live_exclusive_token() {
    let s = Server::start();
    let mut c = s.con();
    ok(&mut c, &["SET", "{sku:9}:stock", "100"]);
    let t = acquire(&mut c, "{sku:9}:lock", "w1", 60_000).unwrap();
    assert_eq!(
        ok(
            &mut c,
            &[
                "LOCK.GUARD",
                "{sku:9}:lock",
                &t.to_string(),
                "DECRBY",
                "{sku:9}:stock",
                "1"
            ]
        ),
        Value::Int(99),
        "the command's own reply"
    );
    // After a handoff the old token is stale: nothing runs.
    release(&mut c, "{sku:9}:lock", "w1");
    let t2 = acquire(&mut c, "{sku:9}:lock", "w2", 60_000).unwrap();
    let err = cmd(
        &mut c,
        &[
            "LOCK.GUARD",
            "{sku:9}:lock",
            &t.to_string(),
            "DECRBY",
            "{sku:9}:stock",
            "1",
        ],
    )
    .unwrap_err();
    assert!(err.starts_with("STALE"), "{err}");
    assert_eq!(
        ok(&mut c, &["GET", "{sku:9}:stock"]),
        Value::BulkString(b"99".to_vec())
    );
    assert_eq!(stat(&mut c, "guard_stale"), 1.0);
    // Shared holds and semaphores do not guard writes; a free lock neither.
    release(&mut c, "{sku:9}:lock", "w2");
    let r = int(&ok(
        &mut c,
        &["LOCK.ACQUIRE", "{sku:9}:lock", "r", "60000", "SHARED"],
    ));
    for token in [r, t2] {
        let err = cmd(
            &mut c,
            &[
                "LOCK.GUARD",
                "{sku:9}:lock",
                &token.to_string(),
                "SET",
                "{sku:9}:stock",
                "0",
            ],
        )
        .unwrap_err();
        assert!(err.starts_with("STALE"), "{err}");
    }
    // Errors of the command come back as they are.
    let t3 = {
        release(&mut c, "{sku:9}:lock", "r");
        acquire(&mut c, "{sku:9}:lock", "w3", 60_000).unwrap()
    };
    let err = cmd(
        &mut c,
        &[
            "LOCK.GUARD",
            "{sku:9}:lock",
            &t3.to_string(),
            "LPUSH",
            "{sku:9}:stock",
            "x",
        ],
    )
    .unwrap_err();
    assert!(err.starts_with("WRONGTYPE"), "{err}");
    let err = cmd(
        &mut c,
        &[
            "LOCK.GUARD",
            "{sku:9}:lock",
            &t3.to_string(),
            "NOSUCHCOMMAND",
        ],
    )
    .unwrap_err();
    assert!(err.contains("nknown"), "{err}");
}

#[test]
fn guard_refuses_blocking_transactions_scripts_and_lock_commands() {
    let s = Server::start();
    let mut c = s.con();
    let t = acquire(&mut c, "lock", "w", 60_000).unwrap().to_string();
    for (words, wanted) in [
        (vec!["BLPOP", "list", "0"], "blocking"),
        (vec!["BRPOPLPUSH", "a", "b", "0"], "blocking"),
        (vec!["MULTI"], "ERR"),
        (vec!["EXEC"], "ERR"),
        (vec!["EVAL", "return 1", "0"], "ERR"),
        (vec!["LOCK.RELEASE", "lock", "w"], "LOCK.* commands"),
        (
            vec!["LOCK.GUARD", "lock", "1", "GET", "x"],
            "LOCK.* commands",
        ),
    ] {
        let mut all = vec!["LOCK.GUARD", "lock", &t];
        all.extend(words.iter());
        let err = cmd(&mut c, &all).unwrap_err();
        assert!(err.contains(wanted), "{words:?}: {err}");
    }
    assert!(fence(&mut c, "lock").is_some(), "still held");
    assert_eq!(
        cmd(&mut c, &["PING"]),
        Ok(Value::SimpleString("PONG".into()))
    );
}

const WRITES_LOCK: &str =
    "ERR LOCK.GUARD cannot run a command that writes, moves or deletes a key holding a lock";
const DATABASE: &str =
    "ERR LOCK.GUARD cannot run a command that flushes, swaps or copies into another database";
const CONNECTION: &str =
    "ERR LOCK.GUARD cannot run a command about the connection (SELECT, MULTI, CLIENT, ...)";

/// A guarded command never writes, moves or deletes a key holding a lock (its own or another),
/// never flushes or swaps a database, never acts on the connection: each is refused with its
/// error and changes nothing. Reads of lock keys and writes of other keys run.
#[test]
fn guard_never_writes_moves_or_wipes_a_lock() {
    let s = Server::start();
    let mut c = s.con();
    let t = acquire(&mut c, "k", "o", 60_000).unwrap();
    let other = acquire(&mut c, "other", "o", 60_000).unwrap();
    ok(&mut c, &["SET", "s", "1"]);
    ok(&mut c, &["SADD", "set", "m"]);
    let before = ok(&mut c, &["DEBUG", "DIGEST"]);
    let token = t.to_string();
    let refused: [(&[&str], &str); 23] = [
        (&["SET", "k", "v"], WRITES_LOCK),
        (&["DEL", "k"], WRITES_LOCK),
        (&["UNLINK", "s", "k"], WRITES_LOCK),
        (&["EXPIRE", "k", "100"], WRITES_LOCK),
        (&["PERSIST", "k"], WRITES_LOCK),
        (&["RENAME", "s", "k"], WRITES_LOCK),
        (&["RENAME", "k", "s2"], WRITES_LOCK),
        (&["MOVE", "k", "1"], WRITES_LOCK),
        (&["COPY", "s", "k", "REPLACE"], WRITES_LOCK),
        (&["SET", "other", "1"], WRITES_LOCK),
        (&["DEL", "s", "other"], WRITES_LOCK),
        (&["SUNIONSTORE", "other", "set"], WRITES_LOCK),
        (&["SORT", "set", "ALPHA", "STORE", "k"], WRITES_LOCK),
        (&["FLUSHALL"], DATABASE),
        (&["FLUSHDB", "ASYNC"], DATABASE),
        (&["SWAPDB", "0", "1"], DATABASE),
        (&["COPY", "s", "x", "DB", "1"], DATABASE),
        (&["SELECT", "1"], CONNECTION),
        (&["MULTI"], CONNECTION),
        (&["WATCH", "k"], CONNECTION),
        (&["CLIENT", "ID"], CONNECTION),
        (&["READONLY"], CONNECTION),
        (&["reset"], CONNECTION),
    ];
    for (words, wanted) in refused {
        let mut all = vec!["LOCK.GUARD", "k", &token];
        all.extend_from_slice(words);
        assert_eq!(cmd(&mut c, &all), Err(wanted.to_string()), "{words:?}");
    }
    // From a script too: the same refusal, nothing written.
    let script = "return redis.call('LOCK.GUARD', KEYS[1], ARGV[1], 'SET', KEYS[1], 'v')";
    let err = cmd(&mut c, &["EVAL", script, "1", "k", &token]).unwrap_err();
    assert!(err.contains(WRITES_LOCK), "{err}");
    assert_eq!(ok(&mut c, &["DEBUG", "DIGEST"]), before, "nothing changed");
    assert_eq!(fence(&mut c, "k"), Some(t));
    assert_eq!(fence(&mut c, "other"), Some(other));
    // Reads of the lock key run (GET's own WRONGTYPE is its reply); other keys are writable.
    let guarded = |c: &mut Connection, words: &[&str]| {
        let mut all = vec!["LOCK.GUARD", "k", &token];
        all.extend_from_slice(words);
        cmd(c, &all)
    };
    assert_eq!(
        guarded(&mut c, &["TYPE", "k"]),
        Ok(Value::SimpleString("redislock".into()))
    );
    assert_eq!(
        guarded(&mut c, &["EXISTS", "k", "other"]),
        Ok(Value::Int(2))
    );
    assert!(guarded(&mut c, &["GET", "k"])
        .unwrap_err()
        .starts_with("WRONGTYPE"));
    assert_eq!(guarded(&mut c, &["SET", "s", "2"]), Ok(Value::Okay));
    assert_eq!(guarded(&mut c, &["DEL", "s", "set"]), Ok(Value::Int(2)));
    assert_eq!(
        ok(&mut c, &["DBSIZE"]),
        Value::Int(2),
        "only the locks are left"
    );
}

#[test]
fn guard_checks_the_callers_acl_and_reports_keys() {
    let s = Server::start();
    let mut admin = s.con();
    ok(
        &mut admin,
        &[
            "ACL", "SETUSER", "app", "on", "nopass", "+@all", "-decrby", "~*",
        ],
    );
    let mut app = s.con();
    ok(&mut app, &["AUTH", "app", "x"]);
    let t = acquire(&mut app, "lock", "w", 60_000).unwrap().to_string();
    ok(&mut app, &["SET", "stock", "5"]);
    let err = cmd(
        &mut app,
        &["LOCK.GUARD", "lock", &t, "DECRBY", "stock", "1"],
    )
    .unwrap_err();
    // Each server's own wording, as the README gives it.
    let wanted = if is_redis_7_0(&mut admin) {
        "ERR acl verification failed, can't run this command or subcommand."
    } else {
        "NOPERM User app has no permissions to run the 'decrby' command"
    };
    assert_eq!(err, wanted);
    assert_eq!(
        ok(&mut app, &["GET", "stock"]),
        Value::BulkString(b"5".to_vec())
    );
    // COMMAND GETKEYS finds the lock and the guarded command's keys (movable keys).
    let keys = ok(
        &mut admin,
        &[
            "COMMAND",
            "GETKEYS",
            "LOCK.GUARD",
            "lock",
            &t,
            "MSET",
            "a",
            "1",
            "b",
            "2",
        ],
    );
    assert_eq!(
        keys,
        Value::Array(
            ["lock", "a", "b"]
                .iter()
                .map(|k| Value::BulkString(k.as_bytes().to_vec()))
                .collect()
        )
    );
}

#[test]
fn replicas_and_the_aof_see_the_command_not_the_guard() {
    let mut m = Server::builder()
        .args(&["--appendonly", "yes", "--appendfsync", "always"])
        .start();
    let r = Server::builder().replica_of(&m).start();
    let mut rc = r.con();
    let mut mc = m.con();
    ok(&mut mc, &["SET", "stock", "10"]);
    let t = acquire(&mut mc, "lock", "w", 60_000).unwrap().to_string();
    assert_eq!(
        ok(&mut mc, &["LOCK.GUARD", "lock", &t, "DECRBY", "stock", "3"]),
        Value::Int(7)
    );
    ok(&mut mc, &["WAIT", "1", "5000"]);
    assert_eq!(
        ok(&mut rc, &["GET", "stock"]),
        Value::BulkString(b"7".to_vec())
    );
    let aof = std::fs::read_dir(m.dir.join("appendonlydir"))
        .map(|d| {
            d.flatten()
                .filter(|e| e.file_name().to_string_lossy().contains(".incr."))
                .map(|e| std::fs::read_to_string(e.path()).unwrap_or_default())
                .collect::<String>()
        })
        .unwrap_or_default();
    assert!(
        aof.contains("DECRBY") || aof.contains("decrby"),
        "the AOF logs the command"
    );
    assert!(
        !aof.to_ascii_uppercase().contains("LOCK.GUARD"),
        "not the guard"
    );
    m.restart();
    let mut mc = m.con();
    assert_eq!(
        ok(&mut mc, &["GET", "stock"]),
        Value::BulkString(b"7".to_vec())
    );
}

#[test]
fn a_late_retry_with_an_old_token_does_not_touch_a_newer_hold_of_the_same_owner() {
    let s = Server::start();
    let mut c = s.con();
    let old = acquire(&mut c, "job", "worker-1", 60_000).unwrap();
    assert_eq!(release(&mut c, "job", "worker-1"), 1);
    let new = acquire(&mut c, "job", "worker-1", 60_000).unwrap();
    assert!(new > old);
    // The first release is retried late (etcd issue 22082): with TOKEN it cannot free the new hold.
    let old = old.to_string();
    assert_eq!(
        int(&ok(
            &mut c,
            &["LOCK.RELEASE", "job", "worker-1", "TOKEN", &old]
        )),
        0
    );
    assert_eq!(
        int(&ok(
            &mut c,
            &["LOCK.EXTEND", "job", "worker-1", "1000", "TOKEN", &old]
        )),
        0
    );
    assert_eq!(fence(&mut c, "job"), Some(new));
    let new_s = new.to_string();
    assert_eq!(
        int(&ok(
            &mut c,
            &["LOCK.EXTEND", "job", "worker-1", "1000", "TOKEN", &new_s]
        )),
        1
    );
    assert_eq!(
        int(&ok(
            &mut c,
            &["LOCK.RELEASE", "job", "worker-1", "TOKEN", &new_s]
        )),
        1
    );
    assert_eq!(fence(&mut c, "job"), None);
    for bad in [
        vec!["LOCK.RELEASE", "job", "worker-1", "TOKEN"],
        vec!["LOCK.RELEASE", "job", "worker-1", "TOKENS", "1"],
    ] {
        assert!(cmd(&mut c, &bad).is_err(), "{bad:?}");
    }
}

/// The field reports' inventory scenario: 100 in stock, 16 workers selling one at a time through
/// LOCK.GUARD, holders pausing past their TTL and dropping their connections at random:
/// exactly 100 sold, never 101.
#[test]
fn inventory_exactly_100_sold_never_101() {
    let s = Server::start();
    let mut c = s.con();
    ok(&mut c, &["SET", "{sku:9}:stock", "100"]);
    let workers: Vec<_> = (0..16)
        .map(|w| {
            let port = s.port;
            std::thread::spawn(move || {
                let connect = || {
                    redis::Client::open(format!("redis://127.0.0.1:{port}/"))
                        .unwrap()
                        .get_connection()
                        .unwrap()
                };
                let mut con = connect();
                let mut sold = 0;
                let mut rng = (w as u64 + 1).wrapping_mul(0x9E37_79B9_7F4A_7C15);
                for op in 0..200 {
                    rng ^= rng << 13;
                    rng ^= rng >> 7;
                    rng ^= rng << 17;
                    let owner = format!("w{w}-{op}");
                    let Ok(Value::Int(token)) = cmd(
                        &mut con,
                        &["LOCK.ACQUIRE", "{sku:9}:lock", &owner, "50", "WAIT", "2000"],
                    ) else {
                        continue;
                    };
                    let stock: i64 = match ok(&mut con, &["GET", "{sku:9}:stock"]) {
                        Value::BulkString(b) => String::from_utf8_lossy(&b).parse().unwrap(),
                        other => panic!("{other:?}"),
                    };
                    if stock <= 0 {
                        let _ = release(&mut con, "{sku:9}:lock", &owner);
                        break;
                    }
                    match rng % 10 {
                        0 => std::thread::sleep(Duration::from_millis(80)), // paused past the TTL
                        1 => {
                            con = connect(); // the holder's connection dies mid-hold
                            continue;
                        }
                        _ => {}
                    }
                    match cmd(
                        &mut con,
                        &[
                            "LOCK.GUARD",
                            "{sku:9}:lock",
                            &token.to_string(),
                            "DECRBY",
                            "{sku:9}:stock",
                            "1",
                        ],
                    ) {
                        Ok(Value::Int(_)) => sold += 1,
                        Err(e) if e.starts_with("STALE") => {}
                        other => panic!("{other:?}"),
                    }
                    let _ = release(&mut con, "{sku:9}:lock", &owner);
                }
                sold
            })
        })
        .collect();
    let sold: i64 = workers.into_iter().map(|w| w.join().unwrap()).sum();
    assert_eq!(
        ok(&mut c, &["GET", "{sku:9}:stock"]),
        Value::BulkString(b"0".to_vec())
    );
    assert_eq!(sold, 100, "exactly the stock was sold");
    assert!(
        stat(&mut c, "guard_stale") > 0.0,
        "some paused holders were refused"
    );
}
