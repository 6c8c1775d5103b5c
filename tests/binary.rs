//! Keys and owners are binary: NUL bytes, 0xFF, empty segments and 512 KB values go through every
//! command and every expiry, handoff, event, replication and persistence path without a crash
//! (a NUL byte in a key used to abort the server when its lease ran out).

use redis_lock_harness::*;
use std::time::Duration;

/// Keys (and owners) that no code path may turn into a C string.
fn awkward_names() -> Vec<Vec<u8>> {
    vec![
        b"a\x00b".to_vec(),
        b"\x00".to_vec(),
        b"\xff\xfe\x00\xff".to_vec(),
        b"::\x00::".to_vec(),
        b"{tag}\x00\r\n".to_vec(),
        vec![b'k'; 512 * 1024],
        [b"big\x00".as_slice(), &vec![0xffu8; 512 * 1024]].concat(),
    ]
}

/// Allow 512 KB owners (the default limit is 1 KB).
const BIG_OWNERS: [&str; 2] = ["max-owner-length", "1048576"];

fn r(con: &mut Connection, args: &[&[u8]]) -> Result<Value, String> {
    run(con, args)
}

/// `LOCK.ACQUIRE name owner 60000 WAIT 10000` on its own connection and thread.
fn wait_for(
    s: &Server,
    name: &[u8],
    owner: &[u8],
) -> std::thread::JoinHandle<Result<Value, String>> {
    spawn_run(
        s,
        &[b"LOCK.ACQUIRE", name, owner, b"60000", b"WAIT", b"10000"],
    )
}

fn alive_and_calm(s: &Server, c: &mut Connection) {
    assert_eq!(cmd(c, &["PING"]), Ok(Value::SimpleString("PONG".into())));
    assert_eq!(
        stat(c, "panics"),
        0.0,
        "no panic anywhere; log:\n{}",
        s.log()
    );
}

#[test]
fn every_command_takes_binary_keys_and_owners() {
    let s = Server::builder().module_args(&BIG_OWNERS).start();
    let mut c = s.con();
    let mut c3 = s.con3();
    for name in awkward_names() {
        for owner in awkward_names() {
            let k = &name[..];
            let o = &owner[..];
            let t = token_of(r(&mut c, &[b"LOCK.ACQUIRE", k, o, b"60000"]));
            assert_eq!(
                token_of(r(&mut c, &[b"LOCK.ACQUIRE", k, o, b"60000"])),
                t,
                "renewal"
            );
            assert_eq!(
                r(&mut c, &[b"LOCK.ACQUIRE", k, b"other", b"100"]),
                Ok(Value::Nil)
            );
            assert_eq!(r(&mut c, &[b"LOCK.FENCE", k]), Ok(Value::Int(t)));
            let ts = t.to_string();
            assert_eq!(
                r(&mut c, &[b"LOCK.FENCE", k, ts.as_bytes()]),
                Ok(Value::Int(1))
            );
            assert_eq!(
                r(&mut c, &[b"LOCK.EXTEND", k, o, b"60000"]),
                Ok(Value::Int(1))
            );
            assert_eq!(
                r(&mut c, &[b"LOCK.EXTEND", k, b"x", b"60000"]),
                Ok(Value::Int(0))
            );
            for con in [&mut c, &mut c3] {
                let info = r(con, &[b"LOCK.INFO", k]).expect("LOCK.INFO");
                assert_eq!(
                    map_field(&info, "owner"),
                    Some(Value::BulkString(owner.clone()))
                );
            }
            assert_eq!(r(&mut c, &[b"LOCK.RELEASE", k, b"x"]), Ok(Value::Int(0)));
            assert_eq!(r(&mut c, &[b"LOCK.RELEASE", k, o]), Ok(Value::Int(1)));
            assert_eq!(r(&mut c, &[b"LOCK.FENCE", k]), Ok(Value::Nil));
            token_of(r(&mut c, &[b"LOCK.ACQUIRE", k, o, b"60000"]));
            assert_eq!(r(&mut c, &[b"LOCK.FORCERELEASE", k]), Ok(Value::Int(1)));
        }
        // Owner `*`: the generated owner comes back with the token.
        let got = r(&mut c, &[b"LOCK.ACQUIRE", &name, b"*", b"60000"]).expect("acquire *");
        assert!(
            matches!(got, Value::Array(ref v) if v.len() == 2),
            "{got:?}"
        );
        assert_eq!(r(&mut c, &[b"LOCK.FORCERELEASE", &name]), Ok(Value::Int(1)));
    }
    alive_and_calm(&s, &mut c);
}

#[test]
fn binary_keys_expire_hand_off_and_wake_waiters_on_delete() {
    let s = Server::builder().module_args(&BIG_OWNERS).start();
    let mut c = s.con();
    ok(&mut c, &["CONFIG", "SET", "notify-keyspace-events", "KEA"]);
    for name in awkward_names() {
        let k = &name[..];
        // 1. The lease runs out with nobody waiting: Redis expires the key (the crash report).
        token_of(r(&mut c, &[b"LOCK.ACQUIRE", k, b"a\x00o", b"50"]));
        assert!(
            eventually(Duration::from_secs(5), || {
                r(&mut c, &[b"EXISTS", k]) == Ok(Value::Int(0))
            }),
            "the expired lock left the keyspace"
        );
        // 2. The lease runs out with a waiter: the timer hands it over (the lease shortened
        // once the waiter is queued).
        token_of(r(&mut c, &[b"LOCK.ACQUIRE", k, b"first\x00", b"60000"]));
        let waiter = wait_for(&s, &name, b"\xffnext");
        wait_blocked(&mut c, 1);
        assert_eq!(
            r(&mut c, &[b"LOCK.EXTEND", k, b"first\x00", b"100"]),
            Ok(Value::Int(1))
        );
        let t = token_of(waiter.join().unwrap());
        assert_eq!(
            r(&mut c, &[b"LOCK.FENCE", k]),
            Ok(Value::Int(t)),
            "handed over at expiry"
        );
        // 3. DEL with a waiter queued: the unlink hook wakes it.
        let waiter = wait_for(&s, &name, b"third");
        wait_blocked(&mut c, 1);
        assert_eq!(r(&mut c, &[b"DEL", k]), Ok(Value::Int(1)));
        let t = token_of(waiter.join().unwrap());
        assert_eq!(
            r(&mut c, &[b"LOCK.FENCE", k]),
            Ok(Value::Int(t)),
            "handed over after DEL"
        );
        // 4. Release to a waiter, then the waiter's connection drops while queued.
        let waiter = wait_for(&s, &name, b"fourth");
        wait_blocked(&mut c, 1);
        assert_eq!(
            r(&mut c, &[b"LOCK.RELEASE", k, b"third"]),
            Ok(Value::Int(1))
        );
        token_of(waiter.join().unwrap());
        assert_eq!(r(&mut c, &[b"LOCK.FORCERELEASE", k]), Ok(Value::Int(1)));
        // 5. UNLINK, RENAME and SWAPDB-free paths with a binary key: FLUSHALL under a waiter.
        token_of(r(&mut c, &[b"LOCK.ACQUIRE", k, b"h", b"60000"]));
        let waiter = wait_for(&s, &name, b"fifth");
        wait_blocked(&mut c, 1);
        ok(&mut c, &["FLUSHALL"]);
        let t = token_of(waiter.join().unwrap());
        assert_eq!(
            r(&mut c, &[b"LOCK.FENCE", k]),
            Ok(Value::Int(t)),
            "handed over after FLUSHALL"
        );
        ok(&mut c, &["FLUSHALL"]);
    }
    // Each expiry is counted when the server's `expired` event comes by, a moment after the
    // handoff on a loaded machine.
    let expiries = awkward_names().len() as f64 * 2.0;
    assert!(eventually(Duration::from_secs(5), || stat(
        &mut c,
        "expired_while_held"
    ) >= expiries));
    alive_and_calm(&s, &mut c);
}

#[test]
fn binary_keys_replicate_persist_and_restore() {
    let mut s = Server::builder()
        .module_args(&BIG_OWNERS)
        .args(&["--appendonly", "yes"])
        .start();
    let port = s.port.to_string();
    let replica = Server::builder()
        .module_args(&BIG_OWNERS)
        .args(&["--replicaof", "127.0.0.1", &port])
        .start();
    let mut c = s.con();
    let mut rc = replica.con();
    wait_link_up(&mut rc);
    let mut tokens = Vec::new();
    for (i, name) in awkward_names().into_iter().enumerate() {
        let owner = [b"o\x00".as_slice(), &name].concat();
        let t = token_of(r(&mut c, &[b"LOCK.ACQUIRE", &name, &owner, b"600000"]));
        tokens.push((name, owner, t));
        // DUMP / RESTORE round trip of a binary key under another binary name.
        let payload = match r(&mut c, &[b"DUMP", &tokens[i].0]) {
            Ok(Value::BulkString(p)) => p,
            other => panic!("DUMP {other:?}"),
        };
        let copy = [b"copy\x00".as_slice(), &tokens[i].0].concat();
        assert_eq!(
            r(&mut c, &[b"RESTORE", &copy, b"0", &payload]),
            Ok(Value::Okay)
        );
        assert_eq!(r(&mut c, &[b"LOCK.FENCE", &copy]), Ok(Value::Int(t)));
        assert_eq!(r(&mut c, &[b"DEL", &copy]), Ok(Value::Int(1)));
    }
    assert_eq!(int(&ok(&mut c, &["WAIT", "1", "5000"])), 1);
    for (name, owner, t) in &tokens {
        assert_eq!(
            r(&mut rc, &[b"LOCK.FENCE", name]),
            Ok(Value::Int(*t)),
            "replica"
        );
        let info = r(&mut rc, &[b"LOCK.INFO", name]).expect("info on the replica");
        assert_eq!(
            map_field(&info, "owner"),
            Some(Value::BulkString(owner.clone()))
        );
    }
    ok(&mut c, &["DEBUG", "RELOAD"]);
    for (name, _, t) in &tokens {
        assert_eq!(
            r(&mut c, &[b"LOCK.FENCE", name]),
            Ok(Value::Int(*t)),
            "after DEBUG RELOAD"
        );
    }
    ok(&mut c, &["BGREWRITEAOF"]);
    wait_persistence_idle(&mut c);
    s.restart();
    let mut c = s.con();
    for (name, owner, t) in &tokens {
        assert_eq!(
            r(&mut c, &[b"LOCK.FENCE", name]),
            Ok(Value::Int(*t)),
            "after AOF restart"
        );
        assert_eq!(
            r(&mut c, &[b"LOCK.RELEASE", name, owner]),
            Ok(Value::Int(1))
        );
    }
    alive_and_calm(&s, &mut c);
}
