//! The fault-injection engine: many clients loop acquire (WAIT) -> read-modify-write a counter
//! in a fenced store -> release against a lock server, while a chaos thread injects faults; then
//! `check` verifies the recorded history:
//! - every write the store accepted carries a larger token than the one before it, and the
//!   accepted writes form an unbroken chain 1, 2, 3...: nothing lost, nothing applied twice;
//! - the store's final counter equals the number of accepted writes;
//! - no token was ever handed to two different acquisitions, and tokens never go backwards
//!   across server restarts.
//!
//! The store is a separate server running `lua/fenced_store.lua` (it is never faulted); the lock
//! server is. A scenario is a `Scenario` value: start from `Scenario::default()` and change what
//! the fault needs.

use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicBool, AtomicU16, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crate::cluster::Cluster;
use crate::*;

/// The fenced store's script.
pub const FENCED_STORE: &str = include_str!("../../lua/fenced_store.lua");
/// The lock every client of a scenario contends for.
pub const LOCK: &str = "stock-lock";
/// The counter the clients increment in the fenced store.
pub const COUNTER: &str = "stock";
/// The counter on the lock server itself, written only through `LOCK.GUARD` (same slot as
/// `LOCK`).
pub const GUARDED_COUNTER: &str = "{stock-lock}:value";

#[derive(Clone, Debug, PartialEq)]
pub enum Write {
    Accepted(i64),
    Stale,
    Skipped,
}

#[derive(Clone, Debug)]
pub struct Record {
    pub owner: String,
    pub token: i64,
    /// Restart epoch of the lock server when the grant was sent and received (same epoch).
    pub epoch: Option<usize>,
    pub write: Write,
    /// For a holder whose write was rejected: what LOCK.EXTEND answered right after.
    pub extended: Option<i64>,
    pub released: Option<i64>,
}

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

/// A connection to `port` with short timeouts (`None` if the server is down).
pub fn connect(port: u16) -> Option<Connection> {
    let client = redis::Client::open(format!("redis://127.0.0.1:{port}/")).ok()?;
    let con = client
        .get_connection_with_timeout(Duration::from_secs(1))
        .ok()?;
    con.set_read_timeout(Some(Duration::from_secs(10))).ok()?;
    Some(con)
}

/// Run the fenced store's `op` (GET or SET) under `token`.
pub fn fenced(
    store: &mut Connection,
    sha: &str,
    op: &str,
    token: i64,
    value: Option<String>,
) -> Result<Value, String> {
    let mut c = redis::cmd("EVALSHA");
    c.arg(sha).arg(1).arg(COUNTER).arg(op).arg(token);
    if let Some(v) = value {
        c.arg(v);
    }
    c.query::<Value>(store).map_err(|e| e.to_string())
}

/// What the fenced store's counter holds.
#[derive(Clone, Debug, PartialEq)]
enum Stored {
    /// A committed value (0: none yet).
    Committed(i64),
    /// The marker `pending <writer token> <committed value>` of a two-step write. It stays when
    /// its writer's lease ran out between marker and value (the store then refuses the value):
    /// the next writer starts again from the committed value, as a real application must.
    Pending { writer: i64, committed: i64 },
}

impl Stored {
    fn marker(writer: i64, committed: i64) -> String {
        format!("pending {writer} {committed}")
    }

    fn parse(reply: &Value) -> Self {
        let Value::BulkString(b) = reply else {
            return Self::Committed(0);
        };
        let text = String::from_utf8_lossy(b);
        let mut words = text.split(' ');
        let parsed = match (words.next(), words.next(), words.next()) {
            (Some("pending"), Some(w), Some(c)) => w.parse().ok().zip(c.parse().ok()),
            _ => None,
        };
        match parsed {
            Some((writer, committed)) => Self::Pending { writer, committed },
            None => Self::Committed(text.parse().unwrap_or(0)),
        }
    }

    fn committed(&self) -> i64 {
        match *self {
            Self::Committed(v) | Self::Pending { committed: v, .. } => v,
        }
    }
}

/// What a reader saw under its shared hold.
#[derive(Clone, Debug, PartialEq)]
pub enum Read {
    /// A committed value (0: none yet).
    Value(i64),
    /// A writer's "write in progress" marker. Allowed only when that writer's value was then
    /// refused (its lease ran out between marker and value, so the write was abandoned);
    /// otherwise a writer held the lock beside this reader.
    InProgress { writer: i64 },
    /// The store refused the read: a newer token had touched it (the reader's lease ran out).
    Stale,
}

#[derive(Clone, Debug)]
pub struct ReadRecord {
    pub owner: String,
    pub token: i64,
    pub read: Read,
}

pub struct Outcome {
    pub records: Vec<Record>,
    pub reads: Vec<ReadRecord>,
    pub final_counter: i64,
    pub injected: usize,
    /// Grants the lock server counted (INFO lock) and did not take back, if it still answers.
    pub server_grants: Option<i64>,
}

/// What every writer thread of a run shares.
#[derive(Clone)]
struct Workload {
    store_port: u16,
    sha: String,
    /// The lock server's port (a failover moves it).
    port: Arc<AtomicU16>,
    /// The chaos thread's restart epoch (odd while a fault is being injected).
    epoch: Arc<AtomicUsize>,
    ttl_ms: i64,
    wait_ms: i64,
    hold_ms: u64,
    pause: Pause,
    readers: usize,
    guarded: bool,
    leases_kept: bool,
    /// Set when the workload is to stop.
    done: Arc<AtomicBool>,
}

/// The servers of a run.
struct Servers {
    store: Server,
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
        let store = Server::start();
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
        let counter = if guarded {
            connect(self.port.load(Ordering::SeqCst))
                .and_then(|mut c| cmd(&mut c, &["GET", GUARDED_COUNTER]).ok())
        } else {
            Some(ok(&mut self.store.con(), &["HGET", COUNTER, "value"]))
        };
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
        let sha: String = redis::cmd("SCRIPT")
            .arg("LOAD")
            .arg(FENCED_STORE)
            .query(&mut servers.store.con())
            .unwrap();
        let work = Workload {
            store_port: servers.store.port,
            sha,
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

/// A writer client: acquire (WAIT) -> read-modify-write -> release, until the workload stops.
fn write_loop(c: usize, w: &Workload) -> Vec<Record> {
    let mut store = connect(w.store_port).expect("store");
    let mut lock: Option<Connection> = None;
    let mut records = Vec::new();
    let mut op = 0;
    while !w.done.load(Ordering::Relaxed) {
        op += 1;
        let Some(con) = lock.as_mut() else {
            lock = connect(w.port.load(Ordering::SeqCst));
            if lock.is_none() {
                std::thread::sleep(Duration::from_millis(20));
            }
            continue;
        };
        let owner = format!("client-{c}-{op}");
        let sent_epoch = w.epoch.load(Ordering::SeqCst);
        let asked = Instant::now();
        let reply = redis::cmd("LOCK.ACQUIRE")
            .arg(LOCK)
            .arg(&owner)
            .arg(w.ttl_ms)
            .arg("WAIT")
            .arg(w.wait_ms + (op % 7) as i64)
            .query::<Value>(con);
        let token = match reply {
            Ok(Value::Int(t)) => t,
            Ok(_) => continue, // timed out waiting
            Err(_) => {
                lock = None; // the server went away: reconnect
                continue;
            }
        };
        let got_epoch = w.epoch.load(Ordering::SeqCst);
        let epoch = (sent_epoch == got_epoch && got_epoch.is_multiple_of(2)).then_some(got_epoch);
        let (write, extended) = if w.guarded {
            let write = guarded_write(con, token, (w.pause)(c, op), w.hold_ms);
            (write, None)
        } else {
            let write = store_write(&mut store, w, token, (c, op));
            (
                write.clone(),
                extend_if_stale(con, &owner, w.ttl_ms, &write),
            )
        };
        if w.leases_kept {
            check_lease_kept(w, &owner, asked, &write);
        }
        let released = redis::cmd("LOCK.RELEASE")
            .arg(LOCK)
            .arg(&owner)
            .query::<i64>(con)
            .ok();
        if released.is_none() {
            lock = None;
        }
        records.push(Record {
            owner,
            token,
            epoch,
            write,
            extended,
            released,
        });
    }
    records
}

/// For `Scenario::leases_kept`: a holder whose write was refused must have outlived its lease.
/// The lock server counts the lease from its grant, after `asked`, so it ends no sooner than
/// `asked` + ttl (2 ms: rounding to the ms); the refusal came from a newer token, granted once
/// the lease ended unless a grant was lost. Only a refusal answered before then proves one
/// was: a holder descheduled past its lease is overtaken rightly.
fn check_lease_kept(w: &Workload, owner: &str, asked: Instant, write: &Write) {
    let refused = match write {
        Write::Stale => true,
        // Skipped: the store refused the read (guarded: the server went away, no refusal).
        Write::Skipped => !w.guarded,
        Write::Accepted(_) => false,
    };
    let lease_ends = asked + Duration::from_millis(w.ttl_ms as u64 - 2);
    assert!(
        !refused || Instant::now() >= lease_ends,
        "{owner}: its write was refused {:?} after it asked for a {} ms lease: a newer token \
         got in while its lease ran (a lost grant)",
        asked.elapsed(),
        w.ttl_ms
    );
}

/// A holder's read-modify-write of the counter in the fenced store. With readers: first a
/// "write in progress" marker (a negative value), held for a moment, then the value.
fn store_write(store: &mut Connection, w: &Workload, token: i64, (c, op): (usize, usize)) -> Write {
    let current = match fenced(store, &w.sha, "GET", token, None) {
        Ok(v) => Stored::parse(&v).committed(),
        Err(e) if e.contains("STALE") => return Write::Skipped,
        Err(e) => panic!("store: {e}"),
    };
    if let Some(p) = (w.pause)(c, op) {
        std::thread::sleep(p);
    }
    if w.hold_ms > 0 {
        std::thread::sleep(Duration::from_millis(w.hold_ms));
    }
    let marker = if w.readers > 0 {
        let m = fenced(
            store,
            &w.sha,
            "SET",
            token,
            Some(Stored::marker(token, current)),
        );
        std::thread::sleep(Duration::from_millis(1));
        m.map(|_| ())
    } else {
        Ok(())
    };
    match marker.and_then(|()| fenced(store, &w.sha, "SET", token, Some((current + 1).to_string())))
    {
        Ok(_) => Write::Accepted(current + 1),
        Err(e) if e.contains("STALE") => Write::Stale,
        Err(e) => panic!("store: {e}"),
    }
}

/// For a holder whose write the store refused: what LOCK.EXTEND answers right after.
fn extend_if_stale(con: &mut Connection, owner: &str, ttl_ms: i64, write: &Write) -> Option<i64> {
    (*write == Write::Stale)
        .then(|| {
            redis::cmd("LOCK.EXTEND")
                .arg(LOCK)
                .arg(owner)
                .arg(ttl_ms)
                .query::<i64>(con)
                .ok()
        })
        .flatten()
}

/// A holder's read-modify-write of the counter on the lock server: a plain read, then the write
/// through `LOCK.GUARD` (refused with STALE once `token` is no longer the live exclusive hold).
fn guarded_write(con: &mut Connection, token: i64, pause: Option<Duration>, hold_ms: u64) -> Write {
    let current: i64 = match cmd(con, &["GET", GUARDED_COUNTER]) {
        Ok(Value::BulkString(b)) => String::from_utf8_lossy(&b).parse().unwrap_or(0),
        Ok(_) => 0,
        Err(_) => return Write::Skipped,
    };
    if let Some(p) = pause {
        std::thread::sleep(p);
    }
    if hold_ms > 0 {
        std::thread::sleep(Duration::from_millis(hold_ms));
    }
    let next = (current + 1).to_string();
    match cmd(
        con,
        &[
            "LOCK.GUARD",
            LOCK,
            &token.to_string(),
            "SET",
            GUARDED_COUNTER,
            &next,
        ],
    ) {
        Ok(_) => Write::Accepted(current + 1),
        Err(e) if e.starts_with("STALE") => Write::Stale,
        // The server went away mid-write: whether it landed is unknown, so the checker must not
        // count on it; it never does for a write it did not see acknowledged.
        Err(_) => Write::Skipped,
    }
}

/// A reader client: shared acquire (WAIT) -> fenced read -> release, until the workload stops.
fn read_loop(r: usize, w: &Workload) -> Vec<ReadRecord> {
    let (sha, ttl_ms) = (w.sha.as_str(), w.ttl_ms);
    let mut store = connect(w.store_port).expect("store");
    let mut lock: Option<Connection> = None;
    let mut reads = Vec::new();
    let mut op = 0;
    while !w.done.load(Ordering::Relaxed) {
        op += 1;
        let Some(con) = lock.as_mut() else {
            lock = connect(w.port.load(Ordering::SeqCst));
            if lock.is_none() {
                std::thread::sleep(Duration::from_millis(20));
            }
            continue;
        };
        let owner = format!("reader-{r}-{op}");
        let reply = redis::cmd("LOCK.ACQUIRE")
            .arg(LOCK)
            .arg(&owner)
            .arg(ttl_ms)
            .arg("SHARED")
            .arg("WAIT")
            .arg(1000)
            .query::<Value>(con);
        let token = match reply {
            Ok(Value::Int(t)) => t,
            Ok(_) => continue,
            Err(_) => {
                lock = None;
                continue;
            }
        };
        let read = match fenced(&mut store, sha, "GET", token, None) {
            Ok(v) => match Stored::parse(&v) {
                Stored::Committed(v) => Read::Value(v),
                Stored::Pending { writer, .. } => Read::InProgress { writer },
            },
            Err(e) if e.contains("STALE") => Read::Stale,
            Err(e) => panic!("store: {e}"),
        };
        std::thread::sleep(Duration::from_millis(1));
        if redis::cmd("LOCK.RELEASE")
            .arg(LOCK)
            .arg(&owner)
            .query::<i64>(con)
            .is_err()
        {
            lock = None;
        }
        reads.push(ReadRecord { owner, token, read });
    }
    reads
}

/// `check`, and what nearly every fault test asserts besides: exactly `faults` faults were
/// injected and the workload went on (more than `min_accepted` accepted writes). The accepted
/// and stale counts, as `check` gives them.
pub fn check_faults(outcome: &Outcome, faults: usize, min_accepted: usize) -> (usize, usize) {
    let (accepted, stale) = check(outcome);
    assert_eq!(outcome.injected, faults, "faults injected");
    assert!(
        accepted > min_accepted,
        "writers kept working: {accepted} accepted writes"
    );
    (accepted, stale)
}

/// Check the properties the README promises; returns (accepted writes, stale rejections).
pub fn check(outcome: &Outcome) -> (usize, usize) {
    let accepted = check_writes(outcome);
    check_reads(outcome, &accepted);
    check_tokens_unique(outcome);
    check_epochs(outcome);
    let stale = outcome
        .records
        .iter()
        .filter(|r| matches!(r.write, Write::Stale | Write::Skipped))
        .count();
    let distinct: HashSet<_> = outcome.records.iter().map(|r| r.token).collect();
    let reads = if outcome.reads.is_empty() {
        String::new()
    } else {
        format!(", reads {}", outcome.reads.len())
    };
    eprintln!(
        "operations {}{reads}, distinct grants {}, accepted writes {}, stale rejected {}, faults injected {}",
        outcome.records.len(),
        distinct.len(),
        accepted.len(),
        stale,
        outcome.injected
    );
    (accepted.len(), stale)
}

/// The accepted writes form the chain 1..N with increasing tokens, and the counter is exact.
/// Returns them as (value, token), sorted.
fn check_writes(outcome: &Outcome) -> Vec<(i64, i64)> {
    let mut accepted: Vec<(i64, i64)> = outcome
        .records
        .iter()
        .filter_map(|r| match r.write {
            Write::Accepted(v) => Some((v, r.token)),
            _ => None,
        })
        .collect();
    accepted.sort_unstable();
    for (i, (value, _)) in accepted.iter().enumerate() {
        assert_eq!(
            *value,
            i as i64 + 1,
            "accepted writes must form the chain 1..N (lost or double update)"
        );
    }
    for pair in accepted.windows(2) {
        assert!(
            pair[1].1 > pair[0].1,
            "accepted write tokens must increase: {pair:?}"
        );
    }
    assert_eq!(
        outcome.final_counter,
        accepted.len() as i64,
        "the counter is exact"
    );
    accepted
}

/// No reader saw a write in progress (only abandoned ones), or a value no accepted write wrote.
fn check_reads(outcome: &Outcome, accepted: &[(i64, i64)]) {
    let refused: HashSet<i64> = outcome
        .records
        .iter()
        .filter(|r| r.write == Write::Stale)
        .map(|r| r.token)
        .collect();
    for read in &outcome.reads {
        if let Read::InProgress { writer } = read.read {
            assert!(
                refused.contains(&writer),
                "reader {} (token {}) saw the write in progress of token {writer}",
                read.owner,
                read.token
            );
        }
        if let Read::Value(v) = read.read {
            assert!(
                v == 0
                    || accepted
                        .binary_search_by_key(&v, |(value, _)| *value)
                        .is_ok(),
                "reader {} saw {v}, which no accepted write wrote",
                read.owner
            );
        }
    }
}

/// No token was handed to two different acquisitions.
fn check_tokens_unique(outcome: &Outcome) {
    let mut owner_of: HashMap<i64, &str> = HashMap::new();
    let grants = outcome
        .records
        .iter()
        .map(|r| (r.token, &r.owner))
        .chain(outcome.reads.iter().map(|r| (r.token, &r.owner)));
    for (token, owner) in grants {
        let previous = owner_of.insert(token, owner);
        assert!(
            previous.is_none_or(|o| o == owner),
            "token {token} granted twice: {previous:?} and {owner}"
        );
    }
}

/// Tokens never went backwards across the lock server's restarts.
fn check_epochs(outcome: &Outcome) {
    let mut by_epoch: HashMap<usize, (i64, i64)> = HashMap::new();
    for r in &outcome.records {
        if let Some(e) = r.epoch {
            let entry = by_epoch.entry(e).or_insert((i64::MAX, i64::MIN));
            entry.0 = entry.0.min(r.token);
            entry.1 = entry.1.max(r.token);
        }
    }
    let mut epochs: Vec<_> = by_epoch.into_iter().collect();
    epochs.sort_unstable();
    for pair in epochs.windows(2) {
        assert!(
            pair[1].1 .0 > pair[0].1 .1,
            "tokens went backwards across a restart: epoch {} max {} >= epoch {} min {}",
            pair[0].0,
            pair[0].1 .1,
            pair[1].0,
            pair[1].1 .0
        );
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
