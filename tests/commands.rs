//! The command contract: grants, owner checks, re-acquire, EXTEND, FENCE, `*` owners,
//! binary owners, RESP2 and RESP3, key routing and flags.

use redis_lock_harness::*;

#[test]
fn acquire_release_cycle_and_owner_checks() {
    let s = Server::start();
    let mut c = s.con();
    let t1 = acquire(&mut c, "order:1", "alice", 10_000).expect("free lock is granted");
    assert!(t1 > 0);
    assert_eq!(
        acquire(&mut c, "order:1", "bob", 10_000),
        None,
        "held by alice"
    );
    assert_eq!(release(&mut c, "order:1", "bob"), 0, "bob does not hold it");
    assert_eq!(
        fence(&mut c, "order:1"),
        Some(t1),
        "a wrong owner changes nothing"
    );
    assert_eq!(
        int(&ok(&mut c, &["LOCK.EXTEND", "order:1", "bob", "5000"])),
        0
    );
    assert_eq!(release(&mut c, "order:1", "alice"), 1);
    assert_eq!(release(&mut c, "order:1", "alice"), 0, "already released");
    assert_eq!(fence(&mut c, "order:1"), None);
    assert_eq!(
        int(&ok(&mut c, &["EXISTS", "order:1"])),
        0,
        "a free lock is not a key"
    );
    let t2 = acquire(&mut c, "order:1", "bob", 10_000).unwrap();
    assert!(t2 > t1, "tokens increase across release and re-acquire");
}

#[test]
fn reacquire_by_the_holder_keeps_the_token_and_restarts_the_lease() {
    let s = Server::start();
    let mut c = s.con();
    let t = acquire(&mut c, "k", "me", 1_000).unwrap();
    assert_eq!(acquire(&mut c, "k", "me", 60_000), Some(t));
    let left = lease_left(&mut c, "k").unwrap();
    assert!(
        left > 50_000 && left <= 60_000,
        "lease restarted at the new ttl: {left}"
    );
}

#[test]
fn extend_moves_the_deadline_only_for_the_holder() {
    let s = Server::start();
    let mut c = s.con();
    let t = acquire(&mut c, "k", "me", 1_000).unwrap();
    assert_eq!(int(&ok(&mut c, &["LOCK.EXTEND", "k", "me", "30000"])), 1);
    let left = lease_left(&mut c, "k").unwrap();
    assert!(left > 25_000, "time left {left}");
    assert_eq!(fence(&mut c, "k"), Some(t), "extend keeps the token");
    assert_eq!(int(&ok(&mut c, &["LOCK.EXTEND", "free", "me", "30000"])), 0);
}

#[test]
fn expired_lease_cannot_be_released_or_extended() {
    let s = Server::start();
    let mut c = s.con();
    let t1 = acquire(&mut c, "k", "slow", 50).unwrap();
    std::thread::sleep(std::time::Duration::from_millis(120));
    assert_eq!(fence(&mut c, "k"), None);
    assert_eq!(release(&mut c, "k", "slow"), 0);
    assert_eq!(int(&ok(&mut c, &["LOCK.EXTEND", "k", "slow", "1000"])), 0);
    let t2 = acquire(&mut c, "k", "next", 1_000).unwrap();
    assert!(t2 > t1, "tokens increase across expiry");
    assert_eq!(
        int(&ok(&mut c, &["LOCK.FENCE", "k", &t1.to_string()])),
        0,
        "stale token"
    );
    assert_eq!(int(&ok(&mut c, &["LOCK.FENCE", "k", &t2.to_string()])), 1);
}

#[test]
fn tokens_increase_across_del_of_the_key() {
    let s = Server::start();
    let mut c = s.con();
    let t1 = acquire(&mut c, "k", "a", 10_000).unwrap();
    ok(&mut c, &["DEL", "k"]);
    let t2 = acquire(&mut c, "k", "b", 10_000).unwrap();
    assert!(t2 > t1);
    ok(&mut c, &["UNLINK", "k"]);
    assert!(acquire(&mut c, "k", "c", 10_000).unwrap() > t2);
}

#[test]
fn star_owner_returns_a_generated_uuid_and_token() {
    let s = Server::start();
    let mut c = s.con();
    let reply = ok(&mut c, &["LOCK.ACQUIRE", "k", "*", "10000"]);
    let Value::Array(items) = reply else {
        panic!("expected [owner, token], got {reply:?}")
    };
    let Value::BulkString(owner) = &items[0] else {
        panic!("owner {:?}", items[0])
    };
    let owner = String::from_utf8(owner.clone()).unwrap();
    assert_eq!(owner.len(), 36, "a hyphenated uuid: {owner}");
    assert_eq!(owner.matches('-').count(), 4);
    let token = int(&items[1]);
    assert_eq!(fence(&mut c, "k"), Some(token));
    assert_eq!(
        ok(&mut c, &["LOCK.ACQUIRE", "k", "*", "10000"]),
        Value::Nil,
        "busy: nil"
    );
    assert_eq!(
        release(&mut c, "k", &owner),
        1,
        "the generated owner releases"
    );
    let Value::Array(again) = ok(&mut c, &["LOCK.ACQUIRE", "k", "*", "10000"]) else {
        panic!()
    };
    assert_ne!(again[0], items[0], "every * owner is fresh");
}

#[test]
fn binary_owners_are_compared_byte_for_byte() {
    let s = Server::start();
    let mut c = s.con();
    let owner: &[u8] = b"\x00\xffowner\r\n\x01";
    let Value::Int(t) = run(&mut c, &[b"LOCK.ACQUIRE", b"bin", owner, b"10000"]).unwrap() else {
        panic!()
    };
    assert_eq!(
        run(&mut c, &[b"LOCK.RELEASE", b"bin", b"\x00\xffowner\r\n"]),
        Ok(Value::Int(0))
    );
    assert_eq!(
        run(&mut c, &[b"LOCK.ACQUIRE", b"bin", owner, b"10000"]),
        Ok(Value::Int(t))
    );
    assert_eq!(
        run(&mut c, &[b"LOCK.RELEASE", b"bin", owner]),
        Ok(Value::Int(1))
    );
}

#[test]
fn resp3_replies_have_the_same_shape() {
    let s = Server::start();
    let mut c = s.con3();
    let t = acquire(&mut c, "k", "a", 10_000).unwrap();
    assert_eq!(ok(&mut c, &["LOCK.ACQUIRE", "k", "b", "10000"]), Value::Nil);
    assert_eq!(ok(&mut c, &["LOCK.FENCE", "k"]), Value::Int(t));
    assert_eq!(ok(&mut c, &["LOCK.FENCE", "nope"]), Value::Nil);
    let Value::Array(pair) = ok(&mut c, &["LOCK.ACQUIRE", "k2", "*", "10000"]) else {
        panic!()
    };
    assert_eq!(pair.len(), 2);
    assert_eq!(release(&mut c, "k", "a"), 1);
    assert_eq!(
        cmd(&mut c, &["LOCK.ACQUIRE", "k", "a", "0"]).unwrap_err(),
        "ERR invalid ttl: must be a positive integer of milliseconds"
    );
}

#[test]
fn commands_declare_their_key_and_flags() {
    let s = Server::start();
    let mut c = s.con();
    for words in [
        vec![
            "COMMAND",
            "GETKEYS",
            "LOCK.ACQUIRE",
            "res:1",
            "me",
            "100",
            "WAIT",
            "0",
        ],
        vec!["COMMAND", "GETKEYS", "LOCK.RELEASE", "res:1", "me"],
        vec!["COMMAND", "GETKEYS", "LOCK.EXTEND", "res:1", "me", "100"],
        vec!["COMMAND", "GETKEYS", "LOCK.FENCE", "res:1"],
    ] {
        assert_eq!(
            ok(&mut c, &words),
            Value::Array(vec![Value::BulkString(b"res:1".to_vec())]),
            "{words:?}"
        );
    }
    let info = format!(
        "{:?}",
        ok(&mut c, &["COMMAND", "INFO", "LOCK.FENCE", "LOCK.RELEASE"])
    );
    assert!(info.contains("readonly"), "{info}");
    assert!(info.contains("write"), "{info}");
    assert_eq!(
        ok(&mut c, &["TYPE", "free"]),
        Value::SimpleString("none".into())
    );
    acquire(&mut c, "k", "a", 10_000).unwrap();
    assert_eq!(
        ok(&mut c, &["TYPE", "k"]),
        Value::SimpleString("redislock".into())
    );
}

#[test]
fn fence_checks_a_token() {
    let s = Server::start();
    let mut c = s.con();
    assert_eq!(
        int(&ok(&mut c, &["LOCK.FENCE", "k", "5"])),
        0,
        "free lock: no token is current"
    );
    let t = acquire(&mut c, "k", "a", 10_000).unwrap();
    assert_eq!(int(&ok(&mut c, &["LOCK.FENCE", "k", &t.to_string()])), 1);
    assert_eq!(
        int(&ok(&mut c, &["LOCK.FENCE", "k", &(t - 1).to_string()])),
        0
    );
    assert_eq!(
        int(&ok(&mut c, &["LOCK.FENCE", "k", &(t + 1).to_string()])),
        0
    );
}
