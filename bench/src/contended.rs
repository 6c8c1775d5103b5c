//! Section 2, contended handoff: K clients loop on ONE lock (acquire, hold, release), with
//! `LOCK.ACQUIRE ... WAIT` against the polling loops clients use today.

use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::charts::Series;
use crate::report::Report;
use crate::stats::{jain, micros, poll, process_cpu, quantile};
use crate::uncontended::CAD_SCRIPT;
use redis::Connection;
use redis_lock_harness::Server;
use std::collections::HashMap;

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Mode {
    /// `LOCK.ACQUIRE hot id ttl WAIT t` + `LOCK.RELEASE`.
    Wait,
    /// `SET hot id NX PX ttl`, sleeping this long between tries; EVALSHA release.
    Poll(Duration),
}

impl Mode {
    pub fn label(self) -> String {
        match self {
            Mode::Wait => "LOCK.ACQUIRE WAIT".to_string(),
            Mode::Poll(d) => format!("SET NX PX, poll every {} ms", d.as_millis()),
        }
    }
}

/// One grant as the client saw it.
#[derive(Clone, Copy)]
struct Grant {
    client: usize,
    asked: Instant,
    granted: Instant,
    released: Instant,
}

/// Section 2's runs by client loop, client count and hold (ms).
pub type Contended = HashMap<(Mode, usize, u64), Result>;

pub struct Result {
    pub grants_per_sec: f64,
    /// Σ hold / wall time (1.0 is the physical limit); only meaningful with a hold.
    pub utilization: f64,
    /// Share of grants that went to the client that held the lock just before.
    pub self_handoff: f64,
    /// Release sent → next (different) holder's grant received, µs.
    pub handoff_p50_us: f64,
    pub handoff_p99_us: f64,
    pub wait_p99_us: f64,
    pub jain: f64,
    pub server_cpu_us_per_grant: f64,
    pub handoff_samples: Vec<f64>,
}

fn hold_for(hold: Duration) {
    if !hold.is_zero() {
        std::thread::sleep(hold);
    }
}

/// What every client of one run shares: its loop, the lock's key, the release script for the
/// polling loops, and how long each grant is held.
struct Contention {
    mode: Mode,
    key: &'static str,
    sha: String,
    hold: Duration,
}

impl Contention {
    /// Client `c` until `until`: acquire, hold, release, recording each grant.
    fn client(&self, con: &mut Connection, c: usize, until: Instant) -> Vec<Grant> {
        let owner = format!("client-{c}");
        let mut grants = Vec::new();
        while Instant::now() < until {
            let asked = Instant::now();
            if !self.acquire(con, &owner, until) {
                continue;
            }
            let granted = Instant::now();
            hold_for(self.hold);
            let released = Instant::now();
            self.release(con, &owner);
            grants.push(Grant {
                client: c,
                asked,
                granted,
                released,
            });
        }
        grants
    }

    /// Whether `owner` got the lock: one blocking call, or tries until 2 s after `until`.
    fn acquire(&self, con: &mut Connection, owner: &str, until: Instant) -> bool {
        match self.mode {
            Mode::Wait => {
                let r: redis::Value = redis::cmd("LOCK.ACQUIRE")
                    .arg(self.key)
                    .arg(owner)
                    .arg(10_000)
                    .arg("WAIT")
                    .arg(5_000)
                    .query(con)
                    .expect("acquire");
                matches!(r, redis::Value::Int(_))
            }
            Mode::Poll(every) => poll(every, until + Duration::from_secs(2), || {
                let r: redis::Value = redis::cmd("SET")
                    .arg(self.key)
                    .arg(owner)
                    .arg("NX")
                    .arg("PX")
                    .arg(10_000)
                    .query(con)
                    .expect("set");
                matches!(r, redis::Value::Okay)
            }),
        }
    }

    fn release(&self, con: &mut Connection, owner: &str) {
        let _: redis::Value = match self.mode {
            Mode::Wait => redis::cmd("LOCK.RELEASE")
                .arg(self.key)
                .arg(owner)
                .query(con),
            Mode::Poll(_) => redis::cmd("EVALSHA")
                .arg(&self.sha)
                .arg(1)
                .arg(self.key)
                .arg(owner)
                .query(con),
        }
        .expect("release");
    }
}

pub fn run(server: &Server, mode: Mode, clients: usize, hold: Duration, dur: Duration) -> Result {
    let sha: String = redis::cmd("SCRIPT")
        .arg("LOAD")
        .arg(CAD_SCRIPT)
        .query(&mut server.con())
        .expect("script load");
    let key = "bench:hot";
    let cons: Arc<Vec<_>> = Arc::new(
        (0..clients)
            .map(|_| std::sync::Mutex::new(server.con()))
            .collect(),
    );
    let contention = Contention {
        mode,
        key,
        sha,
        hold,
    };
    let cpu_before = process_cpu(server.pid());
    let started = Instant::now();
    let until = started + dur;
    let per_client = crate::stats::for_threads(
        clients,
        move |c, until| {
            let mut con = cons[c].lock().expect("connection");
            contention.client(&mut con, c, until)
        },
        until,
    );
    let wall = started.elapsed();
    let cpu = process_cpu(server.pid()).saturating_sub(cpu_before);
    let result = summarize(per_client, wall, cpu);
    let _: () = redis::cmd("DEL")
        .arg(key)
        .query(&mut server.con())
        .expect("del");
    result
}

/// One run's figures from every client's grants, the run's wall time and the server's CPU time.
fn summarize(per_client: Vec<Vec<Grant>>, wall: Duration, cpu: Duration) -> Result {
    let counts: Vec<u64> = per_client.iter().map(|g| g.len() as u64).collect();
    let mut all: Vec<Grant> = per_client.into_iter().flatten().collect();
    all.sort_by_key(|g| g.granted);
    let total = all.len().max(1);
    let mut handoffs = Vec::new();
    let mut same = 0usize;
    for pair in all.windows(2) {
        if pair[1].client == pair[0].client {
            same += 1;
        } else if pair[1].granted >= pair[0].released {
            handoffs.push(micros(pair[1].granted - pair[0].released));
        }
    }
    let mut waits: Vec<f64> = all.iter().map(|g| micros(g.granted - g.asked)).collect();
    let held: f64 = all
        .iter()
        .map(|g| (g.released - g.granted).as_secs_f64())
        .sum();
    Result {
        grants_per_sec: all.len() as f64 / wall.as_secs_f64(),
        utilization: held / wall.as_secs_f64(),
        self_handoff: same as f64 / (total.saturating_sub(1)).max(1) as f64,
        handoff_p50_us: quantile(&mut handoffs, 0.50),
        handoff_p99_us: quantile(&mut handoffs, 0.99),
        wait_p99_us: quantile(&mut waits, 0.99),
        jain: jain(&counts),
        server_cpu_us_per_grant: micros(cpu) / total as f64,
        handoff_samples: handoffs,
    }
}

/// Section 2: K clients looping on one lock, blocking against polling. Returns the handoff
/// latencies of each client loop with 32 clients and 1 ms holds, for a chart.
pub fn section(report: &mut Report, server: &Server, quick: bool, dur: Duration) -> Series {
    let mut rows = Vec::new();
    let mut handoff_series = Vec::new();
    let mut at = Contended::new();
    let client_counts: &[usize] = if quick { &[8, 32] } else { &[8, 32, 128] };
    for &clients in client_counts {
        for hold_ms in [0u64, 1] {
            for mode in [
                Mode::Wait,
                Mode::Poll(Duration::from_millis(1)),
                Mode::Poll(Duration::from_millis(100)),
            ] {
                let hold = Duration::from_millis(hold_ms);
                let r = run(server, mode, clients, hold, dur);
                rows.push(format!(
                    "| {} | {} | {} | {:.0} | {} | {:.1}% | {:.0} | {:.0} | {:.0} | {:.3} | {:.1} |",
                    mode.label(),
                    clients,
                    hold_ms,
                    r.grants_per_sec,
                    if hold_ms > 0 { format!("{:.3}", r.utilization) } else { "-".into() },
                    r.self_handoff * 100.0,
                    r.handoff_p50_us,
                    r.handoff_p99_us,
                    r.wait_p99_us,
                    r.jain,
                    r.server_cpu_us_per_grant,
                ));
                if clients == 32 && hold_ms == 1 {
                    handoff_series.push((
                        format!("{} (32 clients, 1 ms hold)", mode.label()),
                        r.handoff_samples.clone(),
                    ));
                }
                at.insert((mode, clients, hold_ms), r);
            }
        }
    }
    report.section(
        "2. Contended handoff (K clients loop on one lock)",
        "| client loop | K | hold ms | grants/s | utilization | back to releaser | handoff p50 µs | handoff p99 µs | wait p99 µs | Jain | server CPU µs/grant |",
        rows,
    );
    checks(report, &at);
    handoff_series
}

/// Section 2's targets, on 32 clients.
fn checks(report: &mut Report, at: &Contended) {
    let wait32 = &at[&(Mode::Wait, 32, 1)];
    report.check(
        "32 clients, 1 ms hold: utilization",
        format!("{:.3}", wait32.utilization),
        ">= 0.85",
        wait32.utilization >= 0.85,
    );
    report.check(
        "32 clients, 1 ms hold: grants back to the releaser",
        format!("{:.1}%", wait32.self_handoff * 100.0),
        "0%",
        wait32.self_handoff == 0.0,
    );
    report.check(
        "32 clients, 1 ms hold: Jain fairness",
        format!("{:.4}", wait32.jain),
        ">= 0.99",
        wait32.jain >= 0.99,
    );
    report.check(
        "32 clients, 1 ms hold: cross-client handoff p99",
        format!("{:.0} µs", wait32.handoff_p99_us),
        "<= 1000 µs",
        wait32.handoff_p99_us <= 1000.0,
    );
    let bound = 1.5 * 32.0 * (1000.0 + wait32.handoff_p50_us);
    report.check(
        "32 clients, 1 ms hold: wait p99",
        format!("{:.0} µs", wait32.wait_p99_us),
        &format!("<= 1.5 x 32 x (hold + handoff) = {bound:.0} µs"),
        wait32.wait_p99_us <= bound,
    );
    let wait0 = at[&(Mode::Wait, 32, 0)].grants_per_sec;
    let poll0 = at[&(Mode::Poll(Duration::from_millis(1)), 32, 0)].grants_per_sec;
    report.check(
        "32 clients, no hold: grants/s vs 1 ms polling",
        format!("{:.1}x ({wait0:.0} vs {poll0:.0})", wait0 / poll0.max(1.0)),
        ">= 10x",
        wait0 / poll0.max(1.0) >= 10.0,
    );
}
