//! Keyspace notifications of the module class, in order.

use redis_lock_harness::*;
use std::time::Duration;

fn next_event(pubsub: &mut redis::PubSub<'_>) -> String {
    let msg = pubsub.get_message().expect("an event within the timeout");
    msg.get_payload::<String>().unwrap()
}

#[test]
fn acquire_extend_release_handoff_and_expiry_events_arrive_in_order() {
    let s = Server::start();
    let mut c = s.con();
    ok(&mut c, &["CONFIG", "SET", "notify-keyspace-events", "Kd"]);
    let mut sub = s.con();
    sub.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    let mut pubsub = sub.as_pubsub();
    pubsub.subscribe("__keyspace@0__:order:1").unwrap();

    acquire(&mut c, "order:1", "a", 60_000).unwrap();
    assert_eq!(
        int(&ok(&mut c, &["LOCK.EXTEND", "order:1", "a", "60000"])),
        1
    );
    let w = spawn_wait(&s, "order:1", "b", 300, 0);
    wait_blocked(&mut c, 1);
    release(&mut c, "order:1", "a");
    w.join().unwrap().unwrap();
    // b's 300 ms lease runs out with nobody waiting: Redis expires the key.
    let expected = [
        "lock.acquire",
        "lock.extend",
        "lock.release",
        "lock.handoff",
        "lock.expire",
    ];
    let got: Vec<String> = expected.iter().map(|_| next_event(&mut pubsub)).collect();
    assert_eq!(got, expected);

    // Expiry with a waiter: the timer hands over and both events come, expiry first. (The
    // lease is shortened once the waiter is queued.)
    acquire(&mut c, "order:1", "c", 60_000).unwrap();
    let w = spawn_wait(&s, "order:1", "d", 60_000, 0);
    wait_blocked(&mut c, 1);
    assert_eq!(int(&ok(&mut c, &["LOCK.EXTEND", "order:1", "c", "200"])), 1);
    w.join().unwrap().unwrap();
    release(&mut c, "order:1", "d");
    let expected = [
        "lock.acquire",
        "lock.extend",
        "lock.expire",
        "lock.handoff",
        "lock.release",
    ];
    let got: Vec<String> = expected.iter().map(|_| next_event(&mut pubsub)).collect();
    assert_eq!(got, expected);
}

#[test]
fn no_events_unless_the_module_class_is_enabled() {
    let s = Server::start();
    let mut c = s.con();
    ok(&mut c, &["CONFIG", "SET", "notify-keyspace-events", "Kg"]);
    let mut sub = s.con();
    sub.set_read_timeout(Some(Duration::from_millis(300)))
        .unwrap();
    let mut pubsub = sub.as_pubsub();
    pubsub.psubscribe("__keyspace@0__:*").unwrap();
    acquire(&mut c, "k", "a", 60_000).unwrap();
    release(&mut c, "k", "a");
    assert!(
        pubsub.get_message().is_err(),
        "lock events need the 'd' class"
    );
}

/// Shared holds and semaphore permits announce the same events, one per hold: each grant, each
/// release, and each lease that runs out (at its own deadline, while others still hold).
#[test]
fn shared_and_semaphore_holds_announce_each_grant_release_and_expiry() {
    let s = Server::start();
    let mut c = s.con();
    ok(&mut c, &["CONFIG", "SET", "notify-keyspace-events", "Kd"]);
    let mut sub = s.con();
    sub.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    let mut pubsub = sub.as_pubsub();
    pubsub.subscribe("__keyspace@0__:doc").unwrap();
    pubsub.subscribe("__keyspace@0__:pool").unwrap();

    ok(&mut c, &["LOCK.ACQUIRE", "doc", "r1", "60000", "SHARED"]);
    ok(&mut c, &["LOCK.ACQUIRE", "doc", "r2", "60000", "SHARED"]);
    assert_eq!(int(&ok(&mut c, &["LOCK.EXTEND", "doc", "r1", "200"])), 1);
    // r1's lease runs out while r2 still reads: its own expiry, at its deadline.
    let expected = ["lock.acquire", "lock.acquire", "lock.extend", "lock.expire"];
    let got: Vec<String> = expected.iter().map(|_| next_event(&mut pubsub)).collect();
    assert_eq!(got, expected);
    assert_eq!(release(&mut c, "doc", "r2"), 1);
    assert_eq!(next_event(&mut pubsub), "lock.release");

    ok(
        &mut c,
        &[
            "LOCK.ACQUIRE",
            "pool",
            "a",
            "60000",
            "LIMIT",
            "2",
            "PERMITS",
            "2",
        ],
    );
    let w = spawn_wait_with(
        &s,
        &[
            "LOCK.ACQUIRE",
            "pool",
            "b",
            "60000",
            "LIMIT",
            "2",
            "WAIT",
            "0",
        ],
    );
    wait_blocked(&mut c, 1);
    assert_eq!(release(&mut c, "pool", "a"), 1);
    w.join().unwrap().unwrap();
    let expected = ["lock.acquire", "lock.release", "lock.handoff"];
    let got: Vec<String> = expected.iter().map(|_| next_event(&mut pubsub)).collect();
    assert_eq!(got, expected);
}
