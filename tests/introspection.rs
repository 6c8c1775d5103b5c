//! LOCK.INFO and LOCK.FORCERELEASE.

use redis_lock_harness::*;
use std::time::{Duration, Instant};

fn bulk(s: &str) -> Value {
    Value::BulkString(s.as_bytes().to_vec())
}

#[test]
fn info_shows_holder_lease_hold_time_and_queue() {
    let s = Server::start();
    let mut c = s.con();
    assert_eq!(
        ok(&mut c, &["LOCK.INFO", "k"]),
        Value::Nil,
        "a free lock answers nil"
    );
    let asked = Instant::now();
    let t = acquire(&mut c, "k", "alice", 10_000).unwrap();
    std::thread::sleep(Duration::from_millis(150));
    let waiters: Vec<_> = ["w1", "w2", "w3"]
        .iter()
        .enumerate()
        .map(|(i, w)| {
            let h = spawn_wait(&s, "k", w, 10_000, 0);
            wait_blocked(&mut c, i as i64 + 1);
            h
        })
        .collect();
    for (con, resp) in [(s.con(), 2), (s.con3(), 3)] {
        let mut con = con;
        let info = ok(&mut con, &["LOCK.INFO", "k", "COUNT", "2"]);
        // Granted after `asked` and at least 150 ms before this answer (2 ms: rounding to the ms).
        let since = asked.elapsed().as_millis() as i64;
        if resp == 3 {
            assert!(matches!(info, Value::Map(_)), "RESP3 map: {info:?}");
        } else {
            assert!(
                matches!(&info, Value::Array(a) if a.len() == 20),
                "RESP2 flat array: {info:?}"
            );
        }
        assert_eq!(map_field(&info, "owner"), Some(bulk("alice")));
        assert_eq!(map_field(&info, "token"), Some(Value::Int(t)));
        let ttl = int(&map_field(&info, "ttl").unwrap());
        assert!(
            (10_000 - since - 2..=10_000 - 148).contains(&ttl),
            "ttl {ttl}, {since} ms after the acquire was sent"
        );
        let held = int(&map_field(&info, "held").unwrap());
        assert!(
            (148..=since + 2).contains(&held),
            "held {held}, {since} ms after the acquire was sent"
        );
        assert_eq!(map_field(&info, "waiters"), Some(Value::Int(3)));
        assert_eq!(
            map_field(&info, "queue"),
            Some(Value::Array(vec![bulk("w1"), bulk("w2")]))
        );
    }
    let all = ok(&mut c, &["LOCK.INFO", "k"]);
    assert_eq!(
        map_field(&all, "queue"),
        Some(Value::Array(vec![bulk("w1"), bulk("w2"), bulk("w3")])),
        "default COUNT covers a short queue"
    );
    let none = ok(&mut c, &["LOCK.INFO", "k", "COUNT", "0"]);
    assert_eq!(map_field(&none, "queue"), Some(Value::Array(vec![])));
    let mut last_release = Instant::now();
    for (h, owner) in waiters.into_iter().zip(["alice", "w1", "w2"]) {
        last_release = Instant::now();
        assert_eq!(release(&mut c, "k", owner), 1);
        h.join().unwrap().unwrap();
    }
    let info = ok(&mut c, &["LOCK.INFO", "k"]);
    assert_eq!(map_field(&info, "owner"), Some(bulk("w3")));
    // w3 asked before the releases began; it was granted at the last one (2 ms: rounding).
    let held = int(&map_field(&info, "held").unwrap());
    let since = last_release.elapsed().as_millis() as i64;
    assert!(
        held <= since + 2,
        "held counts from the grant: {held} ms, the release that granted it {since} ms ago"
    );
}

#[test]
fn info_and_forcerelease_reject_bad_input() {
    let s = Server::start();
    let mut c = s.con();
    acquire(&mut c, "k", "a", 10_000).unwrap();
    ok(&mut c, &["RPUSH", "list", "x"]);
    let cases: [(&[&str], &str); 7] = [
        (
            &["LOCK.INFO"],
            "ERR wrong number of arguments for 'lock.info' command",
        ),
        (&["LOCK.INFO", "k", "COUNT"], "ERR syntax error"),
        (&["LOCK.INFO", "k", "LIMIT", "2"], "ERR syntax error"),
        (
            &["LOCK.INFO", "k", "COUNT", "-1"],
            "ERR COUNT must be zero or positive",
        ),
        (
            &["LOCK.INFO", "k", "COUNT", "x"],
            "ERR value is not an integer or out of range",
        ),
        (
            &["LOCK.FORCERELEASE", "k", "x"],
            "ERR wrong number of arguments for 'lock.forcerelease' command",
        ),
        (
            &["LOCK.FORCERELEASE", "list"],
            "WRONGTYPE Operation against a key holding the wrong kind of value",
        ),
    ];
    for (words, expected) in cases {
        assert_eq!(cmd(&mut c, words).unwrap_err(), expected, "{words:?}");
    }
    assert!(cmd(&mut c, &["LOCK.INFO", "list"])
        .unwrap_err()
        .starts_with("WRONGTYPE"));
    assert!(fence(&mut c, "k").is_some(), "nothing changed");
}

#[test]
fn forcerelease_hands_off_and_replicates() {
    let master = Server::start();
    let replica = Server::builder().replica_of(&master).start();
    let mut r = replica.con();
    let mut m = master.con();
    assert_eq!(
        int(&ok(&mut m, &["LOCK.FORCERELEASE", "k"])),
        0,
        "free lock"
    );
    let t0 = acquire(&mut m, "k", "stuck", 60_000).unwrap();
    let w = spawn_wait(&master, "k", "next", 60_000, 0);
    wait_blocked(&mut m, 1);
    assert_eq!(int(&ok(&mut m, &["LOCK.FORCERELEASE", "k"])), 1);
    let t = int(&w.join().unwrap().unwrap());
    assert!(t > t0);
    assert_eq!(release(&mut m, "k", "stuck"), 0, "the old holder lost it");
    assert_eq!(int(&ok(&mut m, &["WAIT", "1", "5000"])), 1);
    assert_eq!(
        fence(&mut r, "k"),
        Some(t),
        "the handoff reached the replica"
    );
    assert_eq!(int(&ok(&mut m, &["LOCK.FORCERELEASE", "k"])), 1);
    assert_eq!(
        int(&ok(&mut m, &["EXISTS", "k"])),
        0,
        "nobody waits: the lock is gone"
    );
    assert_eq!(int(&ok(&mut m, &["WAIT", "1", "5000"])), 1);
    assert_eq!(fence(&mut r, "k"), None);
}
