//! INFO lock moves as a scripted workload says it should; CONFIG RESETSTAT clears it.

use redis_lock_harness::*;
use std::time::Duration;

#[test]
fn counters_gauges_and_histograms_follow_a_scripted_workload() {
    let s = Server::start();
    let mut c = s.con();
    let info = info_field(&mut c, "lock", "lock_acquired_immediately");
    assert_eq!(info, "0", "INFO lock has the section");

    acquire(&mut c, "k", "a", 60_000).unwrap(); // acquired_immediately 1
    assert_eq!(acquire(&mut c, "k", "b", 60_000), None); // rejected 1
    assert_eq!(
        cmd(&mut c, &["LOCK.ACQUIRE", "k", "b", "1000", "WAIT", "50"]),
        Ok(Value::Nil)
    ); // timeout 1
    assert_eq!(release(&mut c, "k", "b"), 0); // release_not_owner 1
    assert_eq!(int(&ok(&mut c, &["LOCK.EXTEND", "k", "b", "10"])), 0); // extend_not_owner 1
    let w = spawn_wait(&s, "k", "c", 60_000, 0);
    wait_blocked(&mut c, 1);
    assert_eq!(stat(&mut c, "waiters"), 1.0);
    std::thread::sleep(Duration::from_millis(30));
    assert_eq!(release(&mut c, "k", "a"), 1); // releases 1, acquired_after_wait 1, hold 1
    w.join().unwrap().unwrap();
    assert_eq!(int(&ok(&mut c, &["LOCK.EXTEND", "k", "c", "60000"])), 1); // extends 1
    acquire(&mut c, "k", "c", 60_000).unwrap(); // renewed 1
    assert_eq!(int(&ok(&mut c, &["LOCK.FORCERELEASE", "k"])), 1); // releases_forced 1, hold 2
    acquire(&mut c, "x", "d", 60_000).unwrap(); // acquired_immediately 2, locks 1
    acquire(&mut c, "short", "e", 100).unwrap(); // acquired_immediately 3, locks 2
    assert!(
        eventually(Duration::from_secs(5), || stat(
            &mut c,
            "expired_while_held"
        ) == 1.0),
        "Redis expired the short lock and the module noticed"
    );

    let expect = [
        ("acquired_immediately", 3.0),
        ("acquired_after_wait", 1.0),
        ("renewed", 1.0),
        ("rejected", 1.0),
        ("wait_timeouts", 1.0),
        ("releases", 1.0),
        ("releases_forced", 1.0),
        ("release_not_owner", 1.0),
        ("extends", 1.0),
        ("extend_not_owner", 1.0),
        ("expired_while_held", 1.0),
        ("locks", 1.0),
        ("locks_peak", 2.0),
        ("waiters", 0.0),
        ("waiters_peak", 1.0),
        ("wait_time_count", 1.0),
        ("hold_time_count", 3.0),
    ];
    for (field, value) in expect {
        assert_eq!(stat(&mut c, field), value, "lock_{field}");
    }
    let wait_p50 = stat(&mut c, "wait_time_p50_ms");
    assert!(wait_p50 >= 15.0, "the waiter waited ~30 ms: p50 {wait_p50}");
    assert!(stat(&mut c, "wait_time_max_ms") >= wait_p50);
    assert!(
        stat(&mut c, "hold_time_max_ms") >= 90.0,
        "the short lock was held its full 100 ms lease"
    );

    ok(&mut c, &["CONFIG", "RESETSTAT"]);
    for (field, _) in expect {
        let expected = match field {
            "locks" | "locks_peak" => 1.0, // gauges keep their current value
            _ => 0.0,
        };
        assert_eq!(
            stat(&mut c, field),
            expected,
            "after RESETSTAT lock_{field}"
        );
    }
}

#[test]
fn disconnects_and_full_queues_are_counted() {
    let s = Server::start();
    let mut c = s.con();
    ok(&mut c, &["CONFIG", "SET", "lock.max-waiters", "1"]);
    acquire(&mut c, "k", "a", 60_000).unwrap();
    let w = spawn_wait(&s, "k", "b", 60_000, 0);
    wait_blocked(&mut c, 1);
    let err = cmd(&mut c, &["LOCK.ACQUIRE", "k", "c", "1000", "WAIT", "0"]).unwrap_err();
    assert_eq!(
        err,
        "ERR lock queue is full: lock.max-waiters clients already wait"
    );
    assert_eq!(stat(&mut c, "queue_full"), 1.0);
    let id = blocked_ids(&mut c)[0].to_string();
    ok(&mut c, &["CLIENT", "KILL", "ID", &id]);
    let _ = w.join();
    assert!(eventually(Duration::from_secs(5), || stat(
        &mut c,
        "waiters_disconnected"
    ) == 1.0));
    assert_eq!(stat(&mut c, "waiters"), 0.0);
}

/// Only a CONFIG RESETSTAT the server really runs resets INFO lock: denied (NOPERM), queued and
/// discarded attempts change nothing; one run by EXEC, or twice in a row, resets.
#[test]
fn resetstat_resets_only_when_the_server_runs_it() {
    let s = Server::start();
    let mut c = s.con();
    let count_one = |c: &mut Connection| {
        assert_eq!(acquire(c, "k", "a", 60_000).map(|_| ()), Some(()));
        assert_eq!(release(c, "k", "a"), 1);
    };
    count_one(&mut c);
    ok(
        &mut c,
        &[
            "ACL", "SETUSER", "limited", "on", "nopass", "+@all", "-config",
        ],
    );
    let mut l = s.con();
    ok(&mut l, &["AUTH", "limited", "x"]);
    let denied = cmd(&mut l, &["CONFIG", "RESETSTAT"]);
    assert!(
        matches!(&denied, Err(e) if e.starts_with("NOPERM")),
        "{denied:?}"
    );
    assert_eq!(
        stat(&mut c, "releases"),
        1.0,
        "a denied RESETSTAT changes nothing"
    );

    ok(&mut c, &["MULTI"]);
    ok(&mut c, &["CONFIG", "RESETSTAT"]);
    ok(&mut c, &["DISCARD"]);
    assert_eq!(
        stat(&mut c, "releases"),
        1.0,
        "a discarded RESETSTAT changes nothing"
    );

    ok(&mut c, &["MULTI"]);
    ok(&mut c, &["CONFIG", "RESETSTAT"]);
    ok(&mut c, &["LOCK.ACQUIRE", "k", "a", "60000"]);
    ok(&mut c, &["LOCK.RELEASE", "k", "a"]);
    ok(&mut c, &["EXEC"]);
    // The reset is seen at the next read of the stats: what ran between the two (the queued
    // ACQUIRE and RELEASE) is reset with the rest (docs/operations.md, Metrics).
    assert_eq!(
        stat(&mut c, "releases"),
        0.0,
        "RESETSTAT inside EXEC resets"
    );
    assert_eq!(stat(&mut c, "acquired_immediately"), 0.0);

    count_one(&mut c);
    ok(&mut c, &["CONFIG", "RESETSTAT"]);
    assert_eq!(stat(&mut c, "releases"), 0.0);
    count_one(&mut c);
    ok(&mut c, &["CONFIG", "RESETSTAT"]);
    assert_eq!(
        stat(&mut c, "releases"),
        0.0,
        "a second RESETSTAT resets again"
    );
    ok(&mut c, &["CONFIG", "RESETSTAT"]);
    ok(&mut c, &["CONFIG", "RESETSTAT"]);
    assert_eq!(stat(&mut c, "releases"), 0.0);
}

#[test]
fn the_module_reports_its_version() {
    let s = Server::start();
    let mut c = s.con();
    let version = env!("CARGO_PKG_VERSION");
    assert_eq!(info_field(&mut c, "lock", "lock_version"), version);
    let Value::Array(modules) = ok(&mut c, &["MODULE", "LIST"]) else {
        panic!("MODULE LIST")
    };
    let listed = format!("{modules:?}");
    let parts: Vec<i64> = version.split('.').map(|p| p.parse().unwrap()).collect();
    let number = parts[0] * 10_000 + parts[1] * 100 + parts[2];
    assert!(
        listed.contains("\"lock\"") && listed.contains(&format!("int({number})")),
        "MODULE LIST shows lock {number}: {listed}"
    );
}

/// `LOCK.HOT`: binary names, most waited first, bounded by `lock.hot-names`, cleared by
/// `CONFIG RESETSTAT`.
#[test]
fn lock_hot_lists_the_most_waited_names() {
    let s = Server::start();
    let mut c = s.con();
    let name: &[u8] = b"bin\x00\xff";
    for (key, waits) in [(name, 3), (b"warm".as_slice(), 2), (b"cold".as_slice(), 1)] {
        run(&mut c, &[b"LOCK.ACQUIRE", key, b"holder", b"60000"]).expect("free");
        for _ in 0..waits {
            let reply = run(
                &mut c,
                &[b"LOCK.ACQUIRE", key, b"w", b"1000", b"WAIT", b"1"],
            );
            assert_eq!(reply, Ok(Value::Nil), "timed out in the queue");
        }
    }
    let row = |name: &[u8], n: i64| {
        Value::Array(vec![
            Value::BulkString(name.to_vec()),
            Value::Int(n),
            Value::Int(0),
        ])
    };
    assert_eq!(
        ok(&mut c, &["LOCK.HOT", "waits", "COUNT", "2"]),
        Value::Array(vec![row(name, 3), row(b"warm", 2)])
    );
    // A waiting lock set counts a wait on each of its keys.
    let reply = cmd(
        &mut c,
        &[
            "LOCK.MACQUIRE",
            "2",
            "cold",
            "free",
            "w",
            "1000",
            "WAIT",
            "1",
        ],
    );
    assert_eq!(reply, Ok(Value::Nil), "timed out in the queues");
    assert_eq!(
        ok(&mut c, &["LOCK.HOT", "WAITS", "COUNT", "4"]),
        Value::Array(vec![
            row(name, 3),
            row(b"cold", 2),
            row(b"warm", 2),
            row(b"free", 1)
        ])
    );
    ok(&mut c, &["CONFIG", "SET", "lock.hot-names", "1"]);
    assert_eq!(
        ok(&mut c, &["LOCK.HOT", "WAITS"]),
        Value::Array(vec![]),
        "cleared"
    );
    let reply = run(
        &mut c,
        &[b"LOCK.ACQUIRE", b"warm", b"w", b"1000", b"WAIT", b"1"],
    );
    assert_eq!(reply, Ok(Value::Nil));
    assert_eq!(
        ok(&mut c, &["LOCK.HOT", "WAITS"]),
        Value::Array(vec![row(b"warm", 1)])
    );
    ok(&mut c, &["CONFIG", "RESETSTAT"]);
    assert!(
        eventually(Duration::from_secs(5), || ok(
            &mut c,
            &["LOCK.HOT", "WAITS"]
        ) == Value::Array(vec![])),
        "CONFIG RESETSTAT clears it"
    );
    assert!(cmd(&mut c, &["LOCK.HOT", "HOLDS"]).is_err());
}
