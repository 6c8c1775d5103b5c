//! What a RESTORE may bring in: tokens outside 1..=2^53-1 never (they would poison the token
//! source for every key), and a restored lock must respect lock.max-ttl and
//! lock.max-owner-length like a grant. A token source at its end refuses grants rather than
//! repeat a token.

use redis_lock_harness::*;

const MAX_TOKEN: i64 = (1 << 53) - 1;

/// A DUMP payload of a fresh lock, and where its token starts in it.
fn payload_and_token_at(c: &mut Connection, owner: &str) -> (Vec<u8>, usize) {
    let tmp = "restore:tmp";
    let token = acquire(c, tmp, owner, 600_000).expect("tmp lock");
    let payload = dump(c, tmp);
    assert_eq!(release(c, tmp, owner), 1);
    let at = payload
        .windows(8)
        .position(|w| w == token.to_be_bytes())
        .expect("the token is in the payload");
    (payload, at)
}

/// The payload with the 8 bytes at `at` replaced (CRC fixed).
fn edited(payload: &[u8], at: usize, value: u64) -> Vec<u8> {
    let mut p = payload.to_vec();
    p[at..at + 8].copy_from_slice(&value.to_be_bytes());
    reseal(p)
}

fn restore(c: &mut Connection, key: &str, payload: &[u8]) -> Result<Value, String> {
    run(c, &[b"RESTORE", key.as_bytes(), b"0", payload, b"REPLACE"])
}

#[test]
fn tokens_beyond_two_to_the_53_are_refused_and_change_nothing() {
    let s = Server::start();
    let mut c = s.con();
    let (payload, at) = payload_and_token_at(&mut c, "forged");
    for bad in [u64::MAX, i64::MAX as u64, (1 << 53) + 1, 0] {
        let r = restore(&mut c, "poison", &edited(&payload, at, bad));
        assert!(
            matches!(&r, Err(e) if e.starts_with("ERR")),
            "token {bad}: {r:?}"
        );
        assert_eq!(int(&ok(&mut c, &["EXISTS", "poison"])), 0);
    }
    let t1 = acquire(&mut c, "a", "o", 1_000).unwrap();
    let t2 = acquire(&mut c, "b", "o", 1_000).unwrap();
    assert!(
        t2 > t1 && t2 <= MAX_TOKEN,
        "tokens are still issued in order: {t1} {t2}"
    );
    assert!(
        s.log().contains("token is outside"),
        "the refusal is logged"
    );
}

#[test]
fn the_last_token_refuses_grants_instead_of_repeating() {
    let s = Server::start();
    let mut c = s.con();
    let (payload, at) = payload_and_token_at(&mut c, "forged");
    assert_eq!(
        restore(&mut c, "last", &edited(&payload, at, MAX_TOKEN as u64)),
        Ok(Value::Okay)
    );
    assert_eq!(fence(&mut c, "last"), Some(MAX_TOKEN));
    let err = cmd(&mut c, &["LOCK.ACQUIRE", "other", "o", "1000"]).unwrap_err();
    assert!(err.starts_with("ERR fencing tokens exhausted"), "{err}");
    assert_eq!(
        int(&ok(&mut c, &["EXISTS", "other"])),
        0,
        "nothing was granted"
    );
    // The holder of the last token keeps working with it.
    assert_eq!(
        int(&ok(&mut c, &["LOCK.EXTEND", "last", "forged", "1000"])),
        1
    );
    assert_eq!(release(&mut c, "last", "forged"), 1);
}

#[test]
fn restored_leases_and_owners_respect_the_limits() {
    let s = Server::start();
    let mut c = s.con();
    let (payload, at) = payload_and_token_at(&mut c, "forged");
    let token = u64::from_be_bytes(payload[at..at + 8].try_into().unwrap());
    // An exclusive hold of `forged` with `left` ms left (encoding version 4).
    let with_time_left = |left: u64| {
        use RdbField::{Str, Uint};
        let hold = [Str(b"forged"), Uint(token), Uint(left), Uint(0), Uint(1)];
        let fields: Vec<RdbField> = [Uint(0), Uint(0), Uint(1)]
            .into_iter()
            .chain(hold)
            .collect();
        lock_payload(&payload, 4, &fields)
    };
    let forever = with_time_left(i64::MAX as u64);
    assert!(
        restore(&mut c, "forever", &forever).is_err(),
        "a lease beyond lock.max-ttl"
    );
    let five_seconds = with_time_left(5_000);
    assert_eq!(restore(&mut c, "five", &five_seconds), Ok(Value::Okay));
    let left = lease_left(&mut c, "five").unwrap();
    assert!(
        (4_000..=5_000).contains(&left),
        "the time left counts from the RESTORE: {left}"
    );
    assert_eq!(int(&ok(&mut c, &["EXISTS", "forever"])), 0);
    assert_eq!(
        restore(&mut c, "fine", &payload),
        Ok(Value::Okay),
        "within the limits"
    );
    assert!(s.log().contains("lock.max-ttl"), "the refusal says why");

    // A 1 MB owner, taken while the limit allowed it, cannot be restored under a 1 KB limit.
    ok(
        &mut c,
        &["CONFIG", "SET", "lock.max-owner-length", "1048576"],
    );
    let big = "o".repeat(1 << 20);
    acquire(&mut c, "big", &big, 600_000).unwrap();
    let big_payload = dump(&mut c, "big");
    ok(&mut c, &["CONFIG", "SET", "lock.max-owner-length", "1024"]);
    assert!(restore(&mut c, "big2", &big_payload).is_err());
    assert_eq!(int(&ok(&mut c, &["EXISTS", "big2"])), 0);
    // The server's own data keeps its lease: DEBUG RELOAD loads the big owner back.
    ok(&mut c, &["DEBUG", "RELOAD"]);
    assert!(
        fence(&mut c, "big").is_some(),
        "loaded by the server itself"
    );
    assert_eq!(
        cmd(&mut c, &["PING"]),
        Ok(Value::SimpleString("PONG".into()))
    );
}
