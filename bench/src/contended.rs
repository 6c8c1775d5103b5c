//! Section 2, contended handoff: K clients loop on ONE lock (acquire, hold, release), with
//! `LOCK.ACQUIRE ... WAIT` against the polling loops clients use today.

use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::stats::{jain, micros, poll, process_cpu, quantile};
use crate::uncontended::CAD_SCRIPT;
use redis::Connection;
use redis_lock_harness::Server;

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
