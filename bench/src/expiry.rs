//! Section 3, expiry handoff: a holder that never releases, one waiter: from the deadline to the grant.

use std::time::Duration;

use crate::report::Report;
use crate::stats::{quantile, unix_us};
use redis_lock_harness::Server;

pub struct Result {
    pub p50_us: f64,
    pub p99_us: f64,
    pub samples: Vec<f64>,
}

pub fn run(server: &Server, rounds: usize) -> Result {
    const TTL_MS: i64 = 30;
    let mut holder = server.con();
    let mut samples = Vec::new();
    let mut i = 0;
    while samples.len() < rounds && i < rounds * 3 {
        i += 1;
        let key = format!("bench:exp:{i}");
        let sent = unix_us();
        let _: i64 = redis::cmd("LOCK.ACQUIRE")
            .arg(&key)
            .arg("crashed")
            .arg(TTL_MS)
            .query(&mut holder)
            .expect("acquire");
        let received = unix_us();
        // The server read its clock (whole ms) between `sent` and `received`: when both fall in
        // the same millisecond, the deadline is known exactly; otherwise try again.
        if sent / 1000 != received / 1000 {
            continue;
        }
        let deadline_us = (sent / 1000 + TTL_MS) * 1000;
        let mut waiter = server.con();
        let waiting = std::thread::spawn(move || {
            let _: i64 = redis::cmd("LOCK.ACQUIRE")
                .arg(&key)
                .arg("next")
                .arg(1000)
                .arg("WAIT")
                .arg(2000)
                .query(&mut waiter)
                .expect("waiter");
            unix_us()
        });
        let granted_us = waiting.join().expect("waiter thread");
        samples.push((granted_us - deadline_us) as f64);
        std::thread::sleep(Duration::from_millis(2));
    }
    let mut sorted = samples.clone();
    Result {
        p50_us: quantile(&mut sorted, 0.50),
        p99_us: quantile(&mut sorted, 0.99),
        samples,
    }
}

/// Section 3: how soon after an abandoned lease's deadline its waiter is granted. Returns those
/// latencies, for a chart.
pub fn section(report: &mut Report, server: &Server, quick: bool) -> Vec<f64> {
    let e = run(server, if quick { 30 } else { 100 });
    report.section(
        "3. Expiry handoff (holder never releases, one waiter)",
        "| samples | p50 µs after the deadline | p99 µs after the deadline |",
        vec![format!(
            "| {} | {:.0} | {:.0} |",
            e.samples.len(),
            e.p50_us,
            e.p99_us
        )],
    );
    report.check(
        "expiry handoff p99",
        format!("{:.2} ms", e.p99_us / 1000.0),
        "<= 5 ms",
        e.p99_us <= 5000.0,
    );
    e.samples
}
