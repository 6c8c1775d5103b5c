//! Counting semaphores (`LIMIT max [PERMITS n]`): never more than `max` permits held, big
//! requests never postponed by smaller ones, one lease and token per holder, double release
//! releases once, expiry returns permits.

use std::time::Duration;

use redis_lock_harness::*;

/// `LOCK.ACQUIRE key owner ttl LIMIT limit PERMITS n`: the token, or None when it does not fit.
fn take(c: &mut Connection, key: &str, owner: &str, ttl: i64, limit: u32, n: u32) -> Option<i64> {
    let (ttl, limit, n) = (ttl.to_string(), limit.to_string(), n.to_string());
    match ok(
        c,
        &[
            "LOCK.ACQUIRE",
            key,
            owner,
            &ttl,
            "LIMIT",
            &limit,
            "PERMITS",
            &n,
        ],
    ) {
        Value::Int(t) => Some(t),
        Value::Nil => None,
        other => panic!("{other:?}"),
    }
}

fn in_use(c: &mut Connection, key: &str) -> i64 {
    map_field(&ok(c, &["LOCK.INFO", key]), "permits").map_or(0, |v| int(&v))
}

#[test]
fn permits_are_never_over_granted() {
    let s = Server::start();
    let mut c = s.con();
    let a = take(&mut c, "pool", "a", 60_000, 3, 2).unwrap();
    let b = take(&mut c, "pool", "b", 60_000, 3, 1).unwrap();
    assert!(b > a);
    assert_eq!(
        take(&mut c, "pool", "c", 60_000, 3, 1),
        None,
        "all 3 permits are held"
    );
    let info = ok(&mut c, &["LOCK.INFO", "pool"]);
    assert_eq!(
        map_field(&info, "mode"),
        Some(Value::SimpleString("semaphore".into()))
    );
    assert_eq!(map_field(&info, "limit"), Some(Value::Int(3)));
    assert_eq!(map_field(&info, "permits"), Some(Value::Int(3)));
    assert_eq!(fence(&mut c, "pool"), None);
    assert_eq!(int(&ok(&mut c, &["LOCK.FENCE", "pool", &a.to_string()])), 1);
    // The owner's retry with the same permits is a renewal, with the same token.
    assert_eq!(take(&mut c, "pool", "a", 60_000, 3, 2), Some(a));
    let err = cmd(
        &mut c,
        &[
            "LOCK.ACQUIRE",
            "pool",
            "a",
            "1000",
            "LIMIT",
            "3",
            "PERMITS",
            "1",
        ],
    )
    .unwrap_err();
    assert!(err.contains("different number of permits"), "{err}");
}

#[test]
fn a_big_request_is_not_postponed_by_smaller_ones() {
    let s = Server::start();
    let mut c = s.con();
    take(&mut c, "pool", "a", 60_000, 3, 2).unwrap();
    let big = spawn_wait_with(
        &s,
        &[
            "LOCK.ACQUIRE",
            "pool",
            "big",
            "60000",
            "LIMIT",
            "3",
            "PERMITS",
            "3",
            "WAIT",
            "0",
        ],
    );
    wait_blocked(&mut c, 1);
    assert_eq!(
        take(&mut c, "pool", "small", 60_000, 3, 1),
        None,
        "one permit is free, but big waits first"
    );
    let small = spawn_wait_with(
        &s,
        &[
            "LOCK.ACQUIRE",
            "pool",
            "small",
            "60000",
            "LIMIT",
            "3",
            "WAIT",
            "0",
        ],
    );
    wait_blocked(&mut c, 2);
    assert_eq!(release(&mut c, "pool", "a"), 1);
    assert!(matches!(big.join().unwrap(), Ok(Value::Int(_))));
    assert_eq!(in_use(&mut c, "pool"), 3);
    assert_eq!(blocked_clients(&mut c), 1);
    assert_eq!(release(&mut c, "pool", "big"), 1);
    assert!(matches!(small.join().unwrap(), Ok(Value::Int(_))));
    assert_eq!(in_use(&mut c, "pool"), 1);
    assert_eq!(stat(&mut c, "semaphore_waits"), 2.0);
    assert_eq!(stat(&mut c, "semaphore_grants"), 3.0);
    assert_eq!(stat(&mut c, "semaphore_holds"), 1.0);
}

#[test]
fn releasing_twice_releases_once() {
    let s = Server::start();
    let mut c = s.con();
    take(&mut c, "pool", "a", 60_000, 2, 1).unwrap();
    take(&mut c, "pool", "b", 60_000, 2, 1).unwrap();
    assert_eq!(release(&mut c, "pool", "a"), 1);
    assert_eq!(
        release(&mut c, "pool", "a"),
        0,
        "no permit is minted by a duplicate release"
    );
    assert_eq!(in_use(&mut c, "pool"), 1);
    assert!(take(&mut c, "pool", "c", 60_000, 2, 1).is_some());
    assert_eq!(take(&mut c, "pool", "d", 60_000, 2, 1), None);
}

#[test]
fn an_expired_lease_returns_its_permits_and_the_queue_moves_on() {
    let s = Server::start();
    let mut c = s.con();
    take(&mut c, "pool", "crashed", 150, 3, 2).unwrap();
    take(&mut c, "pool", "alive", 60_000, 3, 1).unwrap();
    let waiter = spawn_wait_with(
        &s,
        &[
            "LOCK.ACQUIRE",
            "pool",
            "w",
            "60000",
            "LIMIT",
            "3",
            "PERMITS",
            "2",
            "WAIT",
            "5000",
        ],
    );
    assert!(
        matches!(waiter.join().unwrap(), Ok(Value::Int(_))),
        "served when the lease ran out"
    );
    assert_eq!(in_use(&mut c, "pool"), 3);
    assert_eq!(stat(&mut c, "expired_while_held"), 1.0);
}

#[test]
fn other_kinds_and_other_sizes_are_refused() {
    let s = Server::start();
    let mut c = s.con();
    take(&mut c, "pool", "a", 60_000, 3, 1).unwrap();
    for (words, wanted) in [
        (
            vec!["LOCK.ACQUIRE", "pool", "b", "1000", "LIMIT", "4"],
            "LIMIT differs",
        ),
        (
            vec!["LOCK.ACQUIRE", "pool", "b", "1000"],
            "another kind of lock",
        ),
        (
            vec!["LOCK.ACQUIRE", "pool", "b", "1000", "SHARED"],
            "another kind of lock",
        ),
        (
            vec![
                "LOCK.ACQUIRE",
                "pool",
                "b",
                "1000",
                "LIMIT",
                "3",
                "PERMITS",
                "4",
            ],
            "1 <= permits <= limit",
        ),
        (
            vec!["LOCK.ACQUIRE", "pool", "b", "1000", "LIMIT", "0"],
            "1 <= permits <= limit",
        ),
    ] {
        let err = cmd(&mut c, &words).unwrap_err();
        assert!(err.contains(wanted), "{words:?}: {err}");
    }
    assert_eq!(in_use(&mut c, "pool"), 1, "nothing changed");
    acquire(&mut c, "lock", "x", 60_000).unwrap();
    let err = cmd(&mut c, &["LOCK.ACQUIRE", "lock", "y", "1000", "LIMIT", "2"]).unwrap_err();
    assert!(err.contains("another kind of lock"), "{err}");
    std::thread::sleep(Duration::from_millis(1));
}
