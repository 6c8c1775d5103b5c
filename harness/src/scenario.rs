//! The fault-injection engine: many clients loop acquire (WAIT) -> read-modify-write a counter
//! in a fenced store -> release against a lock server, while a chaos thread injects faults; then
//! `check` verifies the recorded history:
//! - every write the store accepted carries a larger token than the one before it, and the
//!   accepted writes form an unbroken chain 1, 2, 3...: nothing lost, nothing applied twice;
//! - the store's final counter equals the number of accepted writes;
//! - no token was ever handed to two different acquisitions, and tokens never go backwards
//!   across server restarts.
//!
//! The store is a separate server running `lua/fenced_store.lua` (`crate::store`; it is never
//! faulted); the lock server is. A scenario is a `Scenario` value: start from
//! `Scenario::default()` and change what the fault needs. Its clients are in `clients`, the
//! checks of its history in `check`.

mod check;
mod clients;

use std::sync::atomic::{AtomicBool, AtomicU16, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crate::cluster::Cluster;
use crate::*;

pub use crate::store::{fenced, FencedStore, Read, StoreServer, Write, COUNTER, FENCED_STORE};
pub use check::{check, check_faults, Outcome, ReadRecord, Record};
use clients::{read_loop, write_loop, Clients};

/// The lock every client of a scenario contends for.
pub const LOCK: &str = "stock-lock";
/// The counter on the lock server itself, written only through `LOCK.GUARD` (same slot as
/// `LOCK`).
pub const GUARDED_COUNTER: &str = "{stock-lock}:value";

/// A pause (like a GC or SIGSTOP) between a client's read and its write: `(client, op)`.
pub type Pause = fn(usize, usize) -> Option<Duration>;

/// A fault injector: runs in its own thread until the workload stops.
pub type ChaosFn = Box<dyn FnOnce(Chaos) + Send>;

/// Where the lock lives.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Topology {
    Single,
    WithReplica,
    Cluster,
}

/// One fault scenario. `Scenario::default()` is six clients on one server, 300 ms leases, 4 s,
/// no faults.
///
/// The workload runs for `duration`, and longer when the chaos thread is still at work then:
/// a fault injector that loops while `Chaos::running` stops at `duration`; one with a fixed
/// number of faults (`crash_loop`, `repeat_command`...) injects every one of them however long
/// restarts take on a loaded machine, and the workload goes on until a second after its last.
pub struct Scenario {
    /// Extra arguments of the lock server (and its replica).
    pub lock_args: Vec<String>,
    /// Extra environment of the lock server.
    pub lock_env: Vec<(String, String)>,
    pub topology: Topology,
    pub clients: usize,
    pub ttl_ms: i64,
    pub duration: Duration,
    /// How long clients wait in the queue (`WAIT`), plus `op % 7` ms.
    pub wait_ms: i64,
    /// How long each holder keeps the lock between its write and its release.
    pub hold_ms: u64,
    pub pause: Pause,
    pub chaos: Option<ChaosFn>,
    /// Reader clients beside the writers: they loop `SHARED` acquire -> fenced read -> release.
    /// With readers, each write is two steps (a "write in progress" marker, then the value), so
    /// a reader that ever overlaps a writer sees the marker of a write that then completes.
    pub readers: usize,
    /// Keep the counter on the lock server and write it only through `LOCK.GUARD` (instead of
    /// the fenced store on its own server).
    pub guarded: bool,
    /// No fault of this scenario may lose a grant or end a lease early (kill -9 with
    /// `appendfsync always`): a holder whose write is refused before its lease could have
    /// ended (a newer token got in meanwhile) fails the run.
    pub leases_kept: bool,
}

impl Default for Scenario {
    fn default() -> Self {
        Self {
            lock_args: Vec::new(),
            lock_env: Vec::new(),
            topology: Topology::Single,
            clients: 6,
            ttl_ms: 300,
            duration: Duration::from_secs(4),
            wait_ms: 1000,
            hold_ms: 0,
            pause: no_pause,
            chaos: None,
            readers: 0,
            guarded: false,
            leases_kept: false,
        }
    }
}

impl Scenario {
    /// Set the lock server's extra arguments.
    pub fn args(mut self, args: &[&str]) -> Self {
        self.lock_args = args.iter().map(|a| a.to_string()).collect();
        self
    }

    /// Inject faults with `chaos`.
    pub fn chaos(mut self, chaos: ChaosFn) -> Self {
        self.chaos = Some(chaos);
        self
    }
}

/// What a fault injector can do to the running system.
pub struct Chaos {
    server: Arc<Mutex<Server>>,
    /// A replica of the lock server, when the scenario asks for one.
    replica: Option<Arc<Mutex<Server>>>,
    /// The cluster serving the lock, when the scenario runs on one.
    cluster: Option<Arc<Mutex<Cluster>>>,
    /// Where clients send lock commands (changes when a replica is promoted).
    port: Arc<AtomicU16>,
    /// Bumped before and after a fault that may lose or reorder state (odd: in the middle).
    pub epoch: Arc<AtomicUsize>,
    stop: Arc<AtomicBool>,
    /// How many faults took effect.
    pub injected: Arc<AtomicUsize>,
}

impl Chaos {
    /// Whether the scenario's duration is not over yet.
    pub fn running(&self) -> bool {
        !self.stop.load(Ordering::Relaxed)
    }
    /// Sleep `d`, or until the scenario's duration is over.
    pub fn sleep(&self, d: Duration) {
        let until = Instant::now() + d;
        while self.running() && Instant::now() < until {
            std::thread::sleep(Duration::from_millis(5));
        }
    }
    pub fn con(&self) -> Option<Connection> {
        connect(self.port.load(Ordering::SeqCst))
    }
    /// Run one command on the lock server; count it as a fault if the server took it.
    pub fn inject(&self, words: &[&str]) {
        if let Some(mut con) = self.con() {
            if cmd(&mut con, words).is_ok() {
                self.injected.fetch_add(1, Ordering::Relaxed);
            }
        }
    }
    /// Stop the lock server with SIGSTOP for `d` (longer than a lease: every client's calls
    /// stall, leases run out meanwhile), then let it continue.
    pub fn stop_server_for(&self, d: Duration) {
        let server = self.server.lock().unwrap();
        server.signal(libc::SIGSTOP);
        std::thread::sleep(d);
        server.signal(libc::SIGCONT);
        self.injected.fetch_add(1, Ordering::Relaxed);
    }

    /// kill -9 the lock server and start it again from its files.
    pub fn crash_and_restart(&self) {
        let mut server = self.server.lock().unwrap();
        self.epoch.fetch_add(1, Ordering::SeqCst);
        server.restart();
        self.epoch.fetch_add(1, Ordering::SeqCst);
        self.injected.fetch_add(1, Ordering::Relaxed);
    }

    /// Fail over the cluster shard that serves the lock: `kill -9` its master (the cluster
    /// promotes the replica after the node timeout) or ask the replica to take over (CLUSTER
    /// FAILOVER). Clients move to the new master.
    pub fn fail_over_shard(&self, kill: bool) {
        let mut cluster = self.cluster.as_ref().expect("a cluster").lock().unwrap();
        let m = cluster.owner_of(LOCK).expect("the lock's master");
        self.epoch.fetch_add(1, Ordering::SeqCst);
        let new_master = if kill {
            cluster.nodes[m].kill9();
            let mut found = None;
            assert!(
                eventually(Duration::from_secs(40), || {
                    found = cluster.owner_of(LOCK).filter(|&n| n != m);
                    found.is_some()
                }),
                "the replica took over the dead master's slots"
            );
            found.unwrap()
        } else {
            cluster.manual_failover(m)
        };
        self.port
            .store(cluster.nodes[new_master].port, Ordering::SeqCst);
        self.epoch.fetch_add(1, Ordering::SeqCst);
        self.injected.fetch_add(1, Ordering::Relaxed);
    }

    /// kill -9 the master and promote its replica; clients move to the new master. With
    /// `lose_writes`, the replica is first stopped and cut off, so it misses the last grants.
    pub fn fail_over(&self, lose_writes: bool) {
        let replica = self.replica.as_ref().expect("a replica").lock().unwrap();
        let mut master = self.server.lock().unwrap();
        if lose_writes {
            replica.signal(libc::SIGSTOP);
            if let Some(mut m) = connect(master.port) {
                let _ = cmd(&mut m, &["CLIENT", "KILL", "TYPE", "replica"]);
            }
            std::thread::sleep(Duration::from_millis(300)); // grants the replica never sees
        } else if let Some(mut m) = connect(master.port) {
            let _ = cmd(&mut m, &["WAIT", "1", "2000"]);
        }
        self.epoch.fetch_add(1, Ordering::SeqCst);
        master.kill9();
        if lose_writes {
            replica.signal(libc::SIGCONT);
        }
        let mut r = connect(replica.port).expect("replica connection");
        ok(&mut r, &["REPLICAOF", "NO", "ONE"]);
        self.port.store(replica.port, Ordering::SeqCst);
        self.epoch.fetch_add(1, Ordering::SeqCst);
        self.injected.fetch_add(1, Ordering::Relaxed);
    }
}

/// The servers of a run.
struct Servers {
    store: StoreServer,
    server: Arc<Mutex<Server>>,
    replica: Option<Arc<Mutex<Server>>>,
    cluster: Option<Arc<Mutex<Cluster>>>,
    port: Arc<AtomicU16>,
}

impl Servers {
    fn start(topology: Topology, lock_args: &[String], lock_env: &[(String, String)]) -> Self {
        let lock_args: Vec<&str> = lock_args.iter().map(String::as_str).collect();
        let lock_env: Vec<(&str, &str)> = lock_env
            .iter()
            .map(|(k, v)| (k.as_str(), v.as_str()))
            .collect();
        let store = StoreServer::start();
        let lock_server = Server::builder().env(&lock_env).args(&lock_args).start();
        let port = Arc::new(AtomicU16::new(lock_server.port));
        let cluster = (topology == Topology::Cluster).then(|| {
            let cluster = Cluster::start();
            let owner = cluster.owner_of(LOCK).expect("the lock's master");
            port.store(cluster.nodes[owner].port, Ordering::SeqCst);
            Arc::new(Mutex::new(cluster))
        });
        let replica = (topology == Topology::WithReplica).then(|| {
            Arc::new(Mutex::new(
                Server::builder()
                    .replica_of(&lock_server)
                    .args(&lock_args)
                    .start(),
            ))
        });
        Servers {
            store,
            server: Arc::new(Mutex::new(lock_server)),
            replica,
            cluster,
            port,
        }
    }

    /// The counter at the end: in the fenced store, or on the lock server for guarded writes.
    fn final_counter(&self, guarded: bool) -> i64 {
        if !guarded {
            return self.store.counter();
        }
        let counter = connect(self.port.load(Ordering::SeqCst))
            .and_then(|mut c| cmd(&mut c, &["GET", GUARDED_COUNTER]).ok());
        match counter {
            Some(Value::BulkString(b)) => String::from_utf8_lossy(&b).parse().unwrap_or(0),
            _ => 0,
        }
    }

    /// Grants the lock server counted and did not take back, if it still answers.
    fn server_grants(&self) -> Option<i64> {
        connect(self.port.load(Ordering::SeqCst)).map(|mut c| {
            let grants: i64 = ["acquired_immediately", "acquired_after_wait", "renewed"]
                .iter()
                .map(|f| stat(&mut c, f) as i64)
                .sum();
            grants - stat(&mut c, "grants_revoked") as i64
        })
    }
}

impl Scenario {
    /// Run the workload with its faults and return what happened (check it with `check`).
    pub fn run(self) -> Outcome {
        let servers = Servers::start(self.topology, &self.lock_args, &self.lock_env);
        let work = Clients {
            store_port: servers.store.port(),
            sha: servers.store.sha.clone(),
            port: servers.port.clone(),
            epoch: Arc::new(AtomicUsize::new(0)),
            ttl_ms: self.ttl_ms,
            wait_ms: self.wait_ms,
            hold_ms: self.hold_ms,
            pause: self.pause,
            readers: self.readers,
            guarded: self.guarded,
            leases_kept: self.leases_kept,
            done: Arc::new(AtomicBool::new(false)),
        };
        let deadline = Instant::now() + self.duration;
        let stop = Arc::new(AtomicBool::new(false));
        let injected = Arc::new(AtomicUsize::new(0));
        let chaos = self.chaos.map(|f| {
            let chaos = Chaos {
                server: servers.server.clone(),
                replica: servers.replica.clone(),
                cluster: servers.cluster.clone(),
                port: servers.port.clone(),
                epoch: work.epoch.clone(),
                stop: stop.clone(),
                injected: injected.clone(),
            };
            std::thread::spawn(move || {
                f(chaos);
                Instant::now()
            })
        });
        let reader_threads: Vec<_> = (0..self.readers)
            .map(|r| {
                let w = work.clone();
                std::thread::spawn(move || read_loop(r, &w))
            })
            .collect();
        let workers: Vec<_> = (0..self.clients)
            .map(|c| {
                let w = work.clone();
                std::thread::spawn(move || write_loop(c, &w))
            })
            .collect();
        std::thread::sleep(deadline.saturating_duration_since(Instant::now()));
        stop.store(true, Ordering::Relaxed);
        if let Some(chaos) = chaos {
            // A second of the workload after the last fault.
            let ended = chaos.join().expect("chaos thread");
            let until = ended + Duration::from_secs(1);
            std::thread::sleep(until.saturating_duration_since(Instant::now()));
        }
        work.done.store(true, Ordering::Relaxed);
        let records: Vec<Record> = workers
            .into_iter()
            .flat_map(|w| w.join().expect("worker"))
            .collect();
        let reads: Vec<ReadRecord> = reader_threads
            .into_iter()
            .flat_map(|r| r.join().expect("reader"))
            .collect();
        Outcome {
            server_grants: servers.server_grants(),
            final_counter: servers.final_counter(self.guarded),
            records,
            reads,
            injected: injected.load(Ordering::Relaxed),
        }
    }
}

/// No pauses.
pub fn no_pause(_: usize, _: usize) -> Option<Duration> {
    None
}

/// Client 0 stalls for three leases between its read and its write on every third operation.
pub fn pause_client_zero(c: usize, op: usize) -> Option<Duration> {
    (c == 0 && op.is_multiple_of(3)).then_some(Duration::from_millis(3 * 150))
}

/// The same command `times` times, `every` apart (all of them: see `Scenario`).
pub fn repeat_command(times: usize, every: Duration, words: &'static [&'static str]) -> ChaosFn {
    Box::new(move |ch: Chaos| {
        for _ in 0..times {
            std::thread::sleep(every);
            ch.inject(words);
        }
    })
}

/// One fault, `after` the workload started (also if that is past its duration).
pub fn single_fault(after: Duration, fault: fn(&Chaos)) -> ChaosFn {
    Box::new(move |ch: Chaos| {
        std::thread::sleep(after);
        fault(&ch);
    })
}

/// Stop the lock server with SIGSTOP for `stopped`, `times` times, `every` apart (all of them:
/// see `Scenario`).
pub fn stop_server_repeatedly(times: usize, every: Duration, stopped: Duration) -> ChaosFn {
    Box::new(move |ch: Chaos| {
        for _ in 0..times {
            std::thread::sleep(every);
            ch.stop_server_for(stopped);
        }
    })
}

/// kill -9 and restart the lock server `times` times, `every` apart (all of them: see
/// `Scenario`).
pub fn crash_loop(times: usize, every: Duration) -> ChaosFn {
    Box::new(move |ch: Chaos| {
        for _ in 0..times {
            std::thread::sleep(every);
            ch.crash_and_restart();
        }
    })
}
