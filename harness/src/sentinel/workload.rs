//! The workload the Sentinel fault tests run against a deployment: workers loop acquire
//! (`WAIT`) -> read-modify-write a counter in the fenced store -> release. A worker either
//! follows Sentinel (asks it for the master on every connect: "the majority side") or is pinned
//! to one node through that node's client path for as long as the node says it is master ("the
//! isolated side": the clients that still reach an old master across a cut). Every grant is
//! recorded with the node that made it and the client's times, so the checks (`history`) can
//! say who held what when.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use super::{connect_to, role, sentinel_master, Deployment, History};
use crate::scenario::LOCK;
use crate::store::{FencedStore, StoreServer, Write};
use crate::*;

/// Which clients a worker stands for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Side {
    /// Follows Sentinel: asks it for the master on every connect.
    Majority,
    /// Pinned to a node through its client path while that node says it is master (so it
    /// keeps using an old master across a cut); after that it follows Sentinel.
    Isolated,
}

/// One grant a worker received.
#[derive(Clone, Debug)]
pub struct Grant {
    pub owner: String,
    pub side: Side,
    /// The node that granted it.
    pub node: usize,
    pub token: i64,
    /// When the acquire was sent and its reply came (since the workload's start).
    pub sent: Duration,
    pub granted: Duration,
    /// A durable grant: when `WAIT` answered, and whether enough replicas had the grant (if
    /// not, the worker released it and did not use it).
    pub acked: Option<(Duration, bool)>,
    pub write: Write,
    /// When the release was sent, and what it answered (None: no answer).
    pub release_sent: Option<Duration>,
    pub released: Option<i64>,
}

impl Grant {
    /// Whether the worker used the hold (false for a durable grant that missed its replicas).
    pub fn used(&self) -> bool {
        self.acked.is_none_or(|(_, ok)| ok)
    }

    /// When the worker knew it held the lock: the grant's reply, or for a durable grant the
    /// `WAIT` that confirmed it.
    pub fn held_from(&self) -> Duration {
        self.acked.map_or(self.granted, |(at, _)| at)
    }

    /// Until when it used the lock by its own account: until it sent its release (whatever
    /// the answer, or none), or the end of the lease counted from when it asked, if earlier.
    pub fn held_until(&self, ttl: Duration) -> Duration {
        let lease = self.sent + ttl;
        self.release_sent.map_or(lease, |at| at.min(lease))
    }
}

/// An error reply a worker got.
#[derive(Clone, Debug)]
pub struct Refusal {
    pub at: Duration,
    pub node: usize,
    pub side: Side,
    pub error: String,
}

/// The workload against a deployment. `Workload::default()`: three workers on each side,
/// 500 ms leases, `WAIT 1000`, 10 ms of work under each hold, not durable.
#[derive(Clone, Debug)]
pub struct Workload {
    pub majority: usize,
    pub isolated: usize,
    /// The node the isolated workers are pinned to.
    pub pinned: usize,
    pub ttl_ms: i64,
    pub wait_ms: i64,
    pub hold_ms: u64,
    /// Durable grants: `WAIT n timeout-ms` after each grant; fewer than `n` replicas: released
    /// unused (the clients' `replicas=n`).
    pub durable: Option<(i64, i64)>,
    /// How long an isolated worker waits for a reply before it gives the connection up
    /// (None: as the others, `WAIT` plus a second). Long: they stay with a master that stopped,
    /// as pooled clients do.
    pub isolated_reply_timeout_ms: Option<u64>,
}

impl Default for Workload {
    fn default() -> Self {
        Self {
            majority: 3,
            isolated: 3,
            pinned: 0,
            ttl_ms: 500,
            wait_ms: 1000,
            hold_ms: 10,
            durable: None,
            isolated_reply_timeout_ms: None,
        }
    }
}

/// Where a worker sends lock commands.
#[derive(Clone)]
struct Map {
    nodes: Vec<(String, u16)>,
    pinned: (String, u16),
    sentinels: Vec<(String, u16)>,
}

impl Map {
    fn node(&self, host: &str, port: u16) -> Option<usize> {
        self.nodes.iter().position(|(h, p)| h == host && *p == port)
    }
}

/// A running workload; `stop` ends it and returns the history. Dropped without `stop` (a
/// panicking test), it stops its workers too.
pub struct Running {
    stop: Arc<AtomicBool>,
    workers: Vec<std::thread::JoinHandle<(Vec<Grant>, Vec<Refusal>)>>,
    store: StoreServer,
    pub t0: Instant,
    pub workload: Workload,
}

impl Workload {
    /// Start the workers (and the fenced store they write to, a server of its own in the root
    /// namespace that no fault touches).
    pub fn start(self, d: &Deployment) -> Running {
        let store = StoreServer::start();
        let pinned = &d.nodes[self.pinned];
        let map = Map {
            nodes: d.nodes.iter().map(|n| (n.host.clone(), n.port)).collect(),
            pinned: (
                pinned.client_host.clone().unwrap_or(pinned.host.clone()),
                pinned.port,
            ),
            sentinels: d.sentinel_addrs(),
        };
        let stop = Arc::new(AtomicBool::new(false));
        let t0 = Instant::now();
        let sides = std::iter::repeat_n(Side::Majority, self.majority)
            .chain(std::iter::repeat_n(Side::Isolated, self.isolated));
        let workers = sides
            .enumerate()
            .map(|(w, side)| {
                let worker = Worker {
                    w,
                    side,
                    map: map.clone(),
                    store_port: store.port(),
                    sha: store.sha.clone(),
                    load: self.clone(),
                    t0,
                    stop: stop.clone(),
                    pinned_node: self.pinned,
                };
                std::thread::spawn(move || worker.run())
            })
            .collect();
        Running {
            stop,
            workers,
            store,
            t0,
            workload: self,
        }
    }
}

impl Running {
    /// Time since the workload started (the scale of every recorded time).
    pub fn now(&self) -> Duration {
        self.t0.elapsed()
    }

    pub fn at(&self, instant: Instant) -> Duration {
        instant.saturating_duration_since(self.t0)
    }

    pub fn stop(mut self) -> History {
        self.stop.store(true, Ordering::Relaxed);
        let mut grants = Vec::new();
        let mut refusals = Vec::new();
        for w in self.workers.drain(..) {
            let (g, r) = w.join().expect("a worker panicked");
            grants.extend(g);
            refusals.extend(r);
        }
        History {
            grants,
            refusals,
            final_counter: self.store.counter(),
            ttl: Duration::from_millis(self.workload.ttl_ms as u64),
        }
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        for w in self.workers.drain(..) {
            let _ = w.join();
        }
    }
}

struct Worker {
    w: usize,
    side: Side,
    map: Map,
    store_port: u16,
    sha: String,
    load: Workload,
    t0: Instant,
    stop: Arc<AtomicBool>,
    pinned_node: usize,
}

impl Worker {
    /// A connection to the master: the pinned node while it says it is master, else the one
    /// a Sentinel names (checked with ROLE).
    fn connect(&self, pinned: &mut bool, read_timeout: Duration) -> Option<(Connection, usize)> {
        if *pinned {
            let (h, p) = &self.map.pinned;
            let mut con = connect_to(h, *p, read_timeout)?;
            return match role(&mut con) {
                Some(None) => Some((con, self.pinned_node)),
                Some(Some(_)) => {
                    *pinned = false; // demoted: from now on, follow Sentinel
                    None
                }
                None => None,
            };
        }
        let n = self.map.sentinels.len();
        for k in 0..n {
            let (sh, sp) = &self.map.sentinels[(self.w + k) % n];
            let Some((h, p)) = sentinel_master(sh, *sp) else {
                continue;
            };
            let Some(node) = self.map.node(&h, p) else {
                continue;
            };
            let Some(mut con) = connect_to(&h, p, read_timeout) else {
                continue;
            };
            if role(&mut con) == Some(None) {
                return Some((con, node));
            }
        }
        None
    }

    /// How long this worker waits for a reply before it takes the link for broken.
    fn read_timeout(&self) -> Duration {
        let load = &self.load;
        let durable_ms = load.durable.map_or(0, |(_, t)| t);
        Duration::from_millis(
            load.isolated_reply_timeout_ms
                .filter(|_| self.side == Side::Isolated)
                .unwrap_or((load.wait_ms.max(durable_ms) + 1000) as u64),
        )
    }

    /// Note an error reply of `node` (a broken link is not a refusal).
    fn note_refusal(&self, refusals: &mut Vec<Refusal>, node: usize, error: String) {
        if !error.starts_with("IO") {
            refusals.push(Refusal {
                at: self.t0.elapsed(),
                node,
                side: self.side,
                error,
            });
        }
    }

    fn run(self) -> (Vec<Grant>, Vec<Refusal>) {
        let mut store = FencedStore::connect(self.store_port, &self.sha);
        let mut pinned = self.side == Side::Isolated;
        let mut lock: Option<(Connection, usize)> = None;
        let mut grants = Vec::new();
        let mut refusals = Vec::new();
        let read_timeout = self.read_timeout();
        let tag = match self.side {
            Side::Majority => "m",
            Side::Isolated => "i",
        };
        let mut op = 0;
        while !self.stop.load(Ordering::Relaxed) {
            op += 1;
            let Some((con, node)) = lock.as_mut() else {
                lock = self.connect(&mut pinned, read_timeout);
                if lock.is_none() {
                    std::thread::sleep(Duration::from_millis(50));
                }
                continue;
            };
            let node = *node;
            let owner = format!("{tag}{}-{op}", self.w);
            let sent = self.t0.elapsed();
            let wait = (self.load.wait_ms + (op % 7) as i64).to_string();
            let ttl = self.load.ttl_ms.to_string();
            let token = match cmd(con, &["LOCK.ACQUIRE", LOCK, &owner, &ttl, "WAIT", &wait]) {
                Ok(Value::Int(t)) => t,
                Ok(_) => continue, // timed out waiting
                Err(e) => {
                    let refused = !e.starts_with("IO");
                    self.note_refusal(&mut refusals, node, e);
                    if refused {
                        std::thread::sleep(Duration::from_millis(20));
                    }
                    lock = None; // reconnect, asking who is master now
                    continue;
                }
            };
            let mut grant = self.use_grant(con, &mut store, (owner, node, token, sent));
            if !self.release(con, &mut grant, &mut refusals) {
                lock = None;
            }
            grants.push(grant);
        }
        (grants, refusals)
    }

    /// A grant just answered: wait for replicas if the load is durable, write if it may.
    fn use_grant(
        &self,
        con: &mut Connection,
        store: &mut FencedStore,
        (owner, node, token, sent): (String, usize, i64, Duration),
    ) -> Grant {
        let granted = self.t0.elapsed();
        let acked = self.load.durable.map(|(n, timeout)| {
            let acked = cmd(con, &["WAIT", &n.to_string(), &timeout.to_string()]);
            let ok = matches!(acked, Ok(Value::Int(k)) if k >= n);
            (self.t0.elapsed(), ok)
        });
        let mut grant = Grant {
            owner,
            side: self.side,
            node,
            token,
            sent,
            granted,
            acked,
            write: Write::Skipped,
            release_sent: None,
            released: None,
        };
        if grant.used() {
            grant.write = self.write(store, token);
        }
        grant
    }

    /// Release `grant` (with its token); false when the link is to be dropped.
    fn release(
        &self,
        con: &mut Connection,
        grant: &mut Grant,
        refusals: &mut Vec<Refusal>,
    ) -> bool {
        grant.release_sent = Some(self.t0.elapsed());
        let token = grant.token.to_string();
        match cmd(con, &["LOCK.RELEASE", LOCK, &grant.owner, "TOKEN", &token]) {
            Ok(Value::Int(r)) => {
                grant.released = Some(r);
                true
            }
            Ok(_) => false,
            Err(e) => {
                self.note_refusal(refusals, grant.node, e);
                false
            }
        }
    }

    /// The fenced read-modify-write of the counter under `token`, after `hold_ms` of work
    /// under the lock (also when the store then refuses it, so a refused side does not spin).
    fn write(&self, store: &mut FencedStore, token: i64) -> Write {
        if self.load.hold_ms > 0 {
            std::thread::sleep(Duration::from_millis(self.load.hold_ms));
        }
        store.increment(token, false, || {})
    }
}
