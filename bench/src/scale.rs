//! Section 5, scale: acquire/release latency with 1k / 100k / 1M locks held, and
//! release-with-handoff with 10 / 1k / 10k waiters on one lock.

use std::time::Instant;

use crate::memory::block_waiters;
use crate::report::Report;
use crate::stats::{micros, quantile};
use redis_lock_harness::Server;

pub struct Point {
    pub size: usize,
    pub p50_us: f64,
    pub p99_us: f64,
}

/// Per-operation latency of acquire and release on fresh keys with `sizes` locks held.
pub fn locks_held(server: &Server, sizes: &[usize], probes: usize) -> Vec<Point> {
    let mut c = server.con();
    let _: () = redis::cmd("FLUSHALL").query(&mut c).expect("flush");
    let mut held = 0;
    let mut points = Vec::new();
    for &size in sizes {
        while held < size {
            let mut p = redis::pipe();
            for i in held..(held + 10_000).min(size) {
                p.cmd("LOCK.ACQUIRE")
                    .arg(format!("held:{i:08}"))
                    .arg("filler")
                    .arg(600_000);
            }
            let _: redis::Value = p.query(&mut c).expect("fill");
            held = (held + 10_000).min(size);
        }
        let mut ops = Vec::new();
        for j in 0..probes {
            let key = format!("probe:{size}:{j}");
            let t0 = Instant::now();
            let _: i64 = redis::cmd("LOCK.ACQUIRE")
                .arg(&key)
                .arg("p")
                .arg(10_000)
                .query(&mut c)
                .expect("acquire");
            let t1 = Instant::now();
            let _: i64 = redis::cmd("LOCK.RELEASE")
                .arg(&key)
                .arg("p")
                .query(&mut c)
                .expect("release");
            ops.push(micros(t1 - t0));
            ops.push(micros(t1.elapsed()));
        }
        points.push(Point {
            size,
            p50_us: quantile(&mut ops, 0.50),
            p99_us: quantile(&mut ops, 0.99),
        });
    }
    let _: () = redis::cmd("FLUSHALL").query(&mut c).expect("flush");
    points
}

/// Round trip of a release that hands the lock to the head of a queue of `n` waiters.
pub fn waiters(server: &Server, sizes: &[usize], probes: usize) -> Vec<Point> {
    let mut c = server.con();
    let mut points = Vec::new();
    for &n in sizes {
        let key = format!("big:{n}");
        let _: i64 = redis::cmd("LOCK.ACQUIRE")
            .arg(&key)
            .arg("holder")
            .arg(600_000)
            .query(&mut c)
            .expect("hold");
        let socks = block_waiters(server, &key, n);
        let mut ops = Vec::new();
        for _ in 0..probes.min(n) {
            let t0 = Instant::now();
            let released: i64 = redis::cmd("LOCK.FORCERELEASE")
                .arg(&key)
                .query(&mut c)
                .expect("release");
            ops.push(micros(t0.elapsed()));
            assert_eq!(released, 1);
        }
        points.push(Point {
            size: n,
            p50_us: quantile(&mut ops, 0.50),
            p99_us: quantile(&mut ops, 0.99),
        });
        drop(socks);
        let mut probe = server.con();
        assert!(redis_lock_harness::eventually(
            std::time::Duration::from_secs(60),
            || { redis_lock_harness::blocked_clients(&mut probe) == 0 }
        ));
        let _: () = redis::cmd("FLUSHALL").query(&mut c).expect("flush");
    }
    points
}

/// Section 5: one operation's round trip with many locks held, and a release's handoff with
/// many waiters queued.
pub fn section(report: &mut Report, server: &Server, quick: bool) {
    let held_sizes: &[usize] = if quick {
        &[1_000, 100_000]
    } else {
        &[1_000, 100_000, 1_000_000]
    };
    let held = locks_held(server, held_sizes, 2000);
    let waiter_sizes: &[usize] = if quick {
        &[10, 1_000]
    } else {
        &[10, 1_000, 10_000]
    };
    let queued = waiters(server, waiter_sizes, 200);
    let mut rows: Vec<String> = held
        .iter()
        .map(|p| {
            format!(
                "| acquire or release, {} locks held | {:.1} | {:.1} |",
                p.size, p.p50_us, p.p99_us
            )
        })
        .collect();
    rows.extend(queued.iter().map(|p| {
        format!(
            "| release with handoff, {} waiters | {:.1} | {:.1} |",
            p.size, p.p50_us, p.p99_us
        )
    }));
    report.section(
        "5. Scale (per-operation round trip)",
        "| operation | p50 µs | p99 µs |",
        rows,
    );
    if let (Some(small), Some(big)) = (queued.first(), queued.last()) {
        report.check(
            &format!(
                "release with handoff p99, {} vs {} waiters",
                big.size, small.size
            ),
            format!(
                "{:.2}x ({:.0} vs {:.0} µs)",
                big.p99_us / small.p99_us.max(1.0),
                big.p99_us,
                small.p99_us
            ),
            "<= 2x",
            big.p99_us <= 2.0 * small.p99_us.max(1.0),
        );
    }
}
