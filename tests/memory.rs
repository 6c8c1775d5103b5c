//! A free lock is not a key: 100k locks released (or expired) leave nothing behind.

mod common;
use common::*;
use std::time::Duration;

fn used_memory(c: &mut Connection) -> i64 {
    info_field(c, "memory", "used_memory").parse().unwrap()
}

#[test]
fn memory_returns_after_100k_locks_are_released() {
    let s = Server::start();
    let mut c = s.con();
    let baseline = used_memory(&mut c);
    const N: usize = 100_000;
    for chunk in (0..N).collect::<Vec<_>>().chunks(5_000) {
        let mut p = redis::pipe();
        for i in chunk {
            p.cmd("LOCK.ACQUIRE")
                .arg(format!("order:{i}"))
                .arg("8d3e4f5a-1111-2222-3333-444455556666")
                .arg(600_000);
        }
        let tokens: Vec<i64> = p.query(&mut c).unwrap();
        assert!(tokens.iter().all(|t| *t > 0));
    }
    assert_eq!(int(&ok(&mut c, &["DBSIZE"])), N as i64);
    let peak = used_memory(&mut c);
    for chunk in (0..N).collect::<Vec<_>>().chunks(5_000) {
        let mut p = redis::pipe();
        for i in chunk {
            p.cmd("LOCK.RELEASE")
                .arg(format!("order:{i}"))
                .arg("8d3e4f5a-1111-2222-3333-444455556666");
        }
        let released: Vec<i64> = p.query(&mut c).unwrap();
        assert!(released.iter().all(|r| *r == 1));
    }
    assert_eq!(int(&ok(&mut c, &["DBSIZE"])), 0);
    // The keyspace's hash tables shrink in the background: allow the cron a few seconds.
    let grown = peak - baseline;
    assert!(grown > 5_000_000, "100k locks take real memory: {grown}");
    assert!(
        eventually(Duration::from_secs(20), || used_memory(&mut c) - baseline
            < grown / 20),
        "memory after release: {} (baseline {baseline}, peak {peak})",
        used_memory(&mut c)
    );
}

#[test]
fn expired_locks_leave_no_keys_behind() {
    let s = Server::start();
    let mut c = s.con();
    let mut p = redis::pipe();
    for i in 0..20_000 {
        p.cmd("LOCK.ACQUIRE")
            .arg(format!("job:{i}"))
            .arg("w")
            .arg(100);
    }
    let _: Vec<i64> = p.query(&mut c).unwrap();
    assert!(
        eventually(Duration::from_secs(60), || int(&ok(&mut c, &["DBSIZE"]))
            == 0),
        "expired locks were not removed: {} left",
        int(&ok(&mut c, &["DBSIZE"]))
    );
}
