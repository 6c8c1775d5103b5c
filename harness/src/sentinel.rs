//! Sentinel deployments: lock servers (a master and its replicas, each with the module) watched
//! by real Sentinels (`<server> sentinel.conf --sentinel`), on loopback or each process in a
//! network namespace of its own (`netns`), so a node can be cut off by a real partition.
//!
//! Also the workload the Sentinel fault tests run against them, and its checks: workers loop
//! acquire (`WAIT`) -> read-modify-write a counter in the fenced store -> release. A worker
//! either follows Sentinel (asks it for the master on every connect: "the majority side") or
//! is pinned to one node through that node's client path for as long as the node says it is
//! master ("the isolated side": the clients that still reach an old master across a cut).
//! Every grant is recorded with the node that made it and the client's times, so the checks
//! can say who held what when.

use std::collections::HashMap;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::netns::Net;
use crate::scenario::{self, fenced, Outcome, Record, Write, COUNTER, FENCED_STORE, LOCK};
use crate::*;

/// The name the Sentinels monitor the lock servers under.
pub const MASTER_NAME: &str = "lockm";
/// The port of every node in a namespace (each namespace has its own ports).
const NODE_PORT: u16 = 7100;
/// The port of every Sentinel in a namespace.
const SENTINEL_PORT: u16 = 27100;

/// How to build a deployment. `Settings::default()`: one master, two replicas, three
/// Sentinels with quorum 2, a master declared down after 1 s, on loopback.
#[derive(Clone, Debug)]
pub struct Settings {
    pub replicas: usize,
    pub sentinels: usize,
    pub quorum: usize,
    /// `sentinel down-after-milliseconds`: how long a silent master takes to be down.
    pub down_after_ms: u64,
    /// `sentinel failover-timeout`.
    pub failover_timeout_ms: u64,
    /// Every process in a namespace of its own, nodes with a client path (see `netns`).
    pub netns: bool,
    /// `--option value` arguments of every node.
    pub node_args: Vec<String>,
    /// More arguments per node (index 0 is the first master).
    pub per_node_args: Vec<Vec<String>>,
    /// The environment per node (a skewed clock, say).
    pub per_node_env: Vec<Vec<(String, String)>>,
}

impl Default for Settings {
    fn default() -> Self {
        Self {
            replicas: 2,
            sentinels: 3,
            quorum: 2,
            down_after_ms: 1000,
            failover_timeout_ms: 3000,
            netns: false,
            node_args: Vec::new(),
            per_node_args: Vec::new(),
            per_node_env: Vec::new(),
        }
    }
}

/// A process of a deployment: a lock server or a Sentinel.
pub struct Proc {
    /// The address the other processes (and clients on the bridge) reach it at.
    pub host: String,
    pub port: u16,
    /// For a node in a namespace: the address of its client path.
    pub client_host: Option<String>,
    pub dir: PathBuf,
    /// Its place in the net (namespace index), if it runs in one.
    slot: Option<usize>,
    /// The server's arguments after the config file.
    args: Vec<String>,
    env: Vec<(String, String)>,
    child: Option<Child>,
}

impl Proc {
    pub fn pid(&self) -> i32 {
        self.child.as_ref().map_or(0, |c| c.id() as i32)
    }

    pub fn signal(&self, sig: i32) {
        signal_pid(self.pid(), sig);
    }

    /// `kill -9` and reap.
    pub fn kill9(&mut self) {
        kill_and_reap(&mut self.child);
    }

    /// A connection at its bridge address (or loopback).
    pub fn con(&self) -> Option<Connection> {
        connect_to(&self.host, self.port, Duration::from_secs(5))
    }

    /// A connection on its client path if it has one (works while it is cut off), else `con`.
    pub fn side_con(&self) -> Option<Connection> {
        let host = self.client_host.as_deref().unwrap_or(&self.host);
        connect_to(host, self.port, Duration::from_secs(5))
    }

    pub fn log(&self, file: &str) -> String {
        std::fs::read_to_string(self.dir.join(file)).unwrap_or_default()
    }
}

impl Drop for Proc {
    /// A process not (yet) in a deployment, say one that did not start, is killed too.
    fn drop(&mut self) {
        self.signal(libc::SIGCONT);
        self.kill9();
    }
}

/// A connection to `host:port` (connect timeout 300 ms) whose replies may take `read_timeout`.
pub fn connect_to(host: &str, port: u16, read_timeout: Duration) -> Option<Connection> {
    let client = redis::Client::open(format!("redis://{host}:{port}/")).ok()?;
    let con = client
        .get_connection_with_timeout(Duration::from_millis(300))
        .ok()?;
    con.set_read_timeout(Some(read_timeout)).ok()?;
    con.set_write_timeout(Some(Duration::from_secs(2))).ok()?;
    Some(con)
}

/// A node's replication role as `ROLE` says: `Some(None)` master, `Some(Some((host, port)))`
/// a replica of that master, `None` no answer.
pub fn role(con: &mut Connection) -> Option<Option<(String, u16)>> {
    let Ok(Value::Array(items)) = cmd(con, &["ROLE"]) else {
        return None;
    };
    let word = |i: usize| match items.get(i) {
        Some(Value::Int(n)) => n.to_string(),
        Some(v) => cluster::text(v),
        None => String::new(),
    };
    match word(0).as_str() {
        "master" => Some(None),
        "slave" => Some(Some((word(1), word(2).parse().ok()?))),
        _ => None,
    }
}

/// What one Sentinel says the master's address is.
pub fn sentinel_master(host: &str, port: u16) -> Option<(String, u16)> {
    let mut con = connect_to(host, port, Duration::from_millis(500))?;
    match cmd(
        &mut con,
        &["SENTINEL", "get-master-addr-by-name", MASTER_NAME],
    ) {
        Ok(Value::Array(a)) if a.len() == 2 => {
            Some((cluster::text(&a[0]), cluster::text(&a[1]).parse().ok()?))
        }
        _ => None,
    }
}

/// A master and its replicas, and the Sentinels that watch them. Dropping it kills every
/// process (by pid) and then deletes the namespaces.
pub struct Deployment {
    pub nodes: Vec<Proc>,
    pub sentinels: Vec<Proc>,
    pub settings: Settings,
    /// Declared last: dropped after the processes are gone.
    net: Option<Net>,
}

/// Where a process listens: its address, port, the address of its client path (nodes in
/// namespaces), its namespace slot.
type Place = (String, u16, Option<String>, Option<usize>);

/// Where each node (the master first) and then each Sentinel of `settings` listens.
fn places(settings: &Settings, mut net: Option<&mut Net>) -> Vec<Place> {
    let count = 1 + settings.replicas;
    (0..count + settings.sentinels)
        .map(|i| match net.as_mut() {
            Some(net) => {
                let host = net.add_host(i < count);
                let port = if i < count { NODE_PORT } else { SENTINEL_PORT };
                let side = host.client_addr.map(|a| a.to_string());
                (host.addr.to_string(), port, side, Some(i))
            }
            None => ("127.0.0.1".into(), free_port(), None, None),
        })
        .collect()
}

impl Deployment {
    /// Start the nodes (node 0 the master), then the Sentinels, and return once every Sentinel
    /// knows every replica and the other Sentinels.
    pub fn start(settings: Settings) -> Self {
        let mut net = settings.netns.then(Net::new);
        let places = places(&settings, net.as_mut());
        let mut d = Deployment {
            nodes: Vec::new(),
            sentinels: Vec::new(),
            settings: settings.clone(),
            net,
        };
        let count = 1 + settings.replicas;
        d.start_nodes(&places[..count]);
        d.start_sentinels(&places[count..], &places[0]);
        d.wait_sentinels_ready();
        d
    }

    /// The master and its replicas, each replica synced before the next step.
    fn start_nodes(&mut self, places: &[Place]) {
        for (i, (host, port, client_host, slot)) in places.iter().enumerate() {
            let mut args = self.settings.node_args.clone();
            args.extend(
                self.settings
                    .per_node_args
                    .get(i)
                    .cloned()
                    .unwrap_or_default(),
            );
            let mut node = Proc {
                host: host.clone(),
                port: *port,
                client_host: client_host.clone(),
                dir: fresh_dir("sentinel-node"),
                slot: *slot,
                args,
                env: self
                    .settings
                    .per_node_env
                    .get(i)
                    .cloned()
                    .unwrap_or_default(),
                child: None,
            };
            let replica_of = (i > 0).then(|| (places[0].0.clone(), places[0].1));
            write_node_conf(&node, replica_of);
            self.launch_node(&mut node);
            self.nodes.push(node);
        }
        for node in &self.nodes[1..] {
            let mut con = node.con().expect("replica connection");
            wait_link_up(&mut con);
        }
    }

    /// The Sentinels, monitoring the master at `master`.
    fn start_sentinels(&mut self, places: &[Place], master: &Place) {
        let settings = &self.settings;
        for (host, port, _, slot) in places {
            let mut s = Proc {
                host: host.clone(),
                port: *port,
                client_host: None,
                dir: fresh_dir("sentinel"),
                slot: *slot,
                args: vec!["--sentinel".into()],
                env: Vec::new(),
                child: None,
            };
            let conf = format!(
                "port {port}\nbind {bind}\ndaemonize no\nprotected-mode no\ndir {dir}\n\
                 logfile sentinel.log\nsentinel monitor {MASTER_NAME} {mhost} {mport} {quorum}\n\
                 sentinel down-after-milliseconds {MASTER_NAME} {down}\n\
                 sentinel failover-timeout {MASTER_NAME} {timeout}\n\
                 sentinel parallel-syncs {MASTER_NAME} 2\n",
                bind = if settings.netns {
                    "0.0.0.0"
                } else {
                    "127.0.0.1"
                },
                dir = s.dir.display(),
                mhost = master.0,
                mport = master.1,
                quorum = settings.quorum,
                down = settings.down_after_ms,
                timeout = settings.failover_timeout_ms,
            );
            std::fs::write(s.dir.join("sentinel.conf"), conf).expect("write sentinel.conf");
            self.spawn(&mut s, "sentinel.conf");
            self.sentinels.push(s);
        }
    }

    /// Until every Sentinel answers and sees every replica and every other Sentinel.
    fn wait_sentinels_ready(&self) {
        for s in &self.sentinels {
            assert!(
                eventually(Duration::from_secs(10), || {
                    s.con().is_some_and(|mut c| cmd(&mut c, &["PING"]).is_ok())
                }),
                "a Sentinel did not start; log:\n{}",
                s.log("sentinel.log")
            );
        }
        let (replicas, others) = (self.settings.replicas, self.settings.sentinels - 1);
        assert!(
            eventually(Duration::from_secs(30), || self.sentinels.iter().all(|s| {
                let Some(info) = s
                    .con()
                    .and_then(|mut c| cmd(&mut c, &["SENTINEL", "MASTER", MASTER_NAME]).ok())
                else {
                    return false;
                };
                let field = |f: &str| map_field(&info, f).map(|v| cluster::text(&v));
                field("num-slaves") == Some(replicas.to_string())
                    && field("num-other-sentinels") == Some(others.to_string())
                    && field("flags") == Some("master".into())
            })),
            "the Sentinels never all saw {replicas} replicas and {others} other Sentinels"
        );
    }

    /// Spawn `p` (in its namespace, if any) with its config file, not waiting for it.
    fn spawn(&self, p: &mut Proc, conf: &str) {
        let binary = server_binary();
        let mut command = match (&self.net, p.slot) {
            (Some(net), Some(slot)) => net.command(slot, &p.env, &binary),
            _ => {
                let mut c = Command::new(&binary);
                c.envs(p.env.iter().map(|(k, v)| (k, v)));
                c
            }
        };
        command
            .arg(p.dir.join(conf))
            .args(&p.args)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null());
        p.child = Some(command.spawn().expect("spawn a server"));
    }

    fn launch_node(&self, node: &mut Proc) {
        self.spawn(node, "node.conf");
        let ready = eventually(Duration::from_secs(20), || {
            node.side_con().is_some_and(|mut c| {
                cmd(&mut c, &["PING"]) == Ok(Value::SimpleString("PONG".into()))
            })
        });
        assert!(
            ready,
            "a node did not start; log:\n{}",
            node.log("server.log")
        );
    }

    /// Start node `i` again from its directory (after `kill9`), with its config file as the
    /// server last rewrote it.
    pub fn restart_node(&mut self, i: usize) {
        let mut node = std::mem::replace(&mut self.nodes[i], placeholder());
        node.kill9();
        self.launch_node(&mut node);
        self.nodes[i] = node;
    }

    /// The index of the node at `host:port`.
    pub fn node_at(&self, host: &str, port: u16) -> Option<usize> {
        self.nodes
            .iter()
            .position(|n| n.host == host && n.port == port)
    }

    /// Cut node `i` off the bridge (a netns deployment only): see `Net::cut`.
    pub fn cut(&self, i: usize) {
        let slot = self.nodes[i].slot.expect("a node in a namespace");
        self.net.as_ref().expect("a netns deployment").cut(slot);
    }

    pub fn heal(&self, i: usize) {
        let slot = self.nodes[i].slot.expect("a node in a namespace");
        self.net.as_ref().expect("a netns deployment").heal(slot);
    }

    /// The master as most Sentinels that answer name it, mapped to a node index.
    pub fn sentinel_master(&self) -> Option<usize> {
        let mut votes: HashMap<usize, usize> = HashMap::new();
        for s in &self.sentinels {
            if let Some((h, p)) = sentinel_master(&s.host, s.port) {
                if let Some(i) = self.node_at(&h, p) {
                    *votes.entry(i).or_default() += 1;
                }
            }
        }
        votes.into_iter().max_by_key(|(_, n)| *n).map(|(i, _)| i)
    }

    /// Wait until a Sentinel names a master other than `old`: that node, and when (polled
    /// every 20 ms), or `None` after `timeout`.
    pub fn wait_promoted(&self, old: usize, timeout: Duration) -> Option<(usize, Instant)> {
        let deadline = Instant::now() + timeout;
        while Instant::now() < deadline {
            for s in &self.sentinels {
                if let Some((h, p)) = sentinel_master(&s.host, s.port) {
                    match self.node_at(&h, p) {
                        Some(i) if i != old => return Some((i, Instant::now())),
                        _ => {}
                    }
                }
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        None
    }

    /// Wait until node `i` is a replica, with its link up, of the master the Sentinels name
    /// (asked on its client path, so also while it is cut off; the master named then, which
    /// is not always the first one promoted: a Sentinel may fail over again); when and which,
    /// or `None` after `timeout`.
    pub fn wait_replica_of_master(&self, i: usize, timeout: Duration) -> Option<(Instant, usize)> {
        let mut found = None;
        let ok = eventually(timeout, || {
            let Some(m) = self.sentinel_master().filter(|&m| m != i) else {
                return false;
            };
            let want = Some(Some((self.nodes[m].host.clone(), self.nodes[m].port)));
            found = Some(m);
            self.nodes[i].side_con().is_some_and(|mut c| {
                role(&mut c) == want
                    && info_field(&mut c, "replication", "master_link_status") == "up"
            })
        });
        ok.then(|| found.map(|m| (Instant::now(), m))).flatten()
    }

    /// Where clients on the bridge find the Sentinels.
    pub fn sentinel_addrs(&self) -> Vec<(String, u16)> {
        self.sentinels
            .iter()
            .map(|s| (s.host.clone(), s.port))
            .collect()
    }

    /// What went on, for a failing test: each process's log tail.
    pub fn logs(&self) -> String {
        let tail = |text: String| {
            let lines: Vec<&str> = text.lines().collect();
            lines[lines.len().saturating_sub(40)..].join("\n")
        };
        let mut out = String::new();
        for (i, n) in self.nodes.iter().enumerate() {
            out += &format!(
                "--- node {i} ({}:{})\n{}\n",
                n.host,
                n.port,
                tail(n.log("server.log"))
            );
        }
        for (i, s) in self.sentinels.iter().enumerate() {
            out += &format!("--- sentinel {i}\n{}\n", tail(s.log("sentinel.log")));
        }
        out
    }
}

impl Drop for Deployment {
    fn drop(&mut self) {
        for p in self.nodes.iter_mut().chain(self.sentinels.iter_mut()) {
            // SIGKILL ends a stopped process too; SIGCONT first all the same.
            p.signal(libc::SIGCONT);
            p.kill9();
            if !std::thread::panicking() {
                let _ = std::fs::remove_dir_all(&p.dir);
            }
        }
        // Then `net` drops: namespaces, links and bridge go.
    }
}

fn placeholder() -> Proc {
    Proc {
        host: String::new(),
        port: 0,
        client_host: None,
        dir: PathBuf::new(),
        slot: None,
        args: Vec::new(),
        env: Vec::new(),
        child: None,
    }
}

/// A node's config file (the server rewrites it when Sentinel reconfigures the node).
fn write_node_conf(node: &Proc, replica_of: Option<(String, u16)>) {
    let bind = if node.slot.is_some() {
        "0.0.0.0"
    } else {
        "127.0.0.1"
    };
    let mut conf = format!(
        "port {}\nbind {bind}\ndaemonize no\nprotected-mode no\ndir {}\nlogfile server.log\n\
         save \"\"\nappendonly no\nenable-debug-command yes\nrepl-diskless-sync-delay 0\n\
         loadmodule {}\n",
        node.port,
        node.dir.display(),
        module_path().display()
    );
    if let Some((host, port)) = replica_of {
        conf += &format!("replicaof {host} {port}\n");
    }
    std::fs::write(node.dir.join("node.conf"), conf).expect("write node.conf");
}

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
    store: Server,
    pub t0: Instant,
    pub workload: Workload,
}

/// What a workload did.
pub struct History {
    pub grants: Vec<Grant>,
    pub refusals: Vec<Refusal>,
    pub final_counter: i64,
    pub ttl: Duration,
}

impl Workload {
    /// Start the workers (and the fenced store they write to, a server of its own in the root
    /// namespace that no fault touches).
    pub fn start(self, d: &Deployment) -> Running {
        let store = Server::start();
        let sha: String = redis::cmd("SCRIPT")
            .arg("LOAD")
            .arg(FENCED_STORE)
            .query(&mut store.con())
            .expect("load the fenced store");
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
                    store_port: store.port,
                    sha: sha.clone(),
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
        let final_counter = match cmd(&mut self.store.con(), &["HGET", COUNTER, "value"]) {
            Ok(Value::BulkString(b)) => String::from_utf8_lossy(&b).parse().unwrap_or(0),
            _ => 0,
        };
        History {
            grants,
            refusals,
            final_counter,
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
        let mut store = scenario::connect(self.store_port).expect("the fenced store");
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
        store: &mut Connection,
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
    fn write(&self, store: &mut Connection, token: i64) -> Write {
        if self.load.hold_ms > 0 {
            std::thread::sleep(Duration::from_millis(self.load.hold_ms));
        }
        match fenced(store, &self.sha, "GET", token, None) {
            Ok(v) => {
                let current = match v {
                    Value::BulkString(b) => String::from_utf8_lossy(&b).parse().unwrap_or(0),
                    _ => 0,
                };
                match fenced(
                    store,
                    &self.sha,
                    "SET",
                    token,
                    Some((current + 1).to_string()),
                ) {
                    Ok(_) => Write::Accepted(current + 1),
                    Err(e) if e.contains("STALE") => Write::Stale,
                    Err(e) => panic!("store: {e}"),
                }
            }
            Err(e) if e.contains("STALE") => Write::Skipped,
            Err(e) => panic!("store: {e}"),
        }
    }
}

/// A time as seconds, for messages.
pub fn secs(d: Duration) -> String {
    format!("{:.3} s", d.as_secs_f64())
}

impl History {
    /// The fenced store's checks (`scenario::check`): the accepted writes form the chain
    /// 1, 2, 3... with increasing tokens (no write that should have been refused got in),
    /// the counter is exact, and no token went to two owners (every grant, used or not).
    /// Returns (accepted writes, refused writes).
    pub fn check_store(&self) -> (usize, usize) {
        let records = self
            .grants
            .iter()
            .map(|g| Record {
                owner: g.owner.clone(),
                token: g.token,
                epoch: None,
                write: g.write.clone(),
                extended: None,
                released: g.released,
            })
            .collect();
        scenario::check(&Outcome {
            records,
            reads: Vec::new(),
            final_counter: self.final_counter,
            injected: 1,
            server_grants: None,
        })
    }

    /// The nodes that granted, in the order of their first grants.
    pub fn masters(&self) -> Vec<usize> {
        let mut first: HashMap<usize, Duration> = HashMap::new();
        for g in &self.grants {
            let t = first.entry(g.node).or_insert(g.granted);
            *t = (*t).min(g.granted);
        }
        let mut nodes: Vec<(usize, Duration)> = first.into_iter().collect();
        nodes.sort_by_key(|(_, t)| *t);
        nodes.into_iter().map(|(n, _)| n).collect()
    }

    /// Tokens and masters: on each node a grant answered before another was asked has the
    /// smaller token; and every token of a master is above every token of each master that
    /// granted before it did (ever: before, during and after a cut, also while both granted at
    /// once): each promotion starts an epoch above what the promoted replica has seen.
    pub fn check_epochs(&self) {
        let mut by_node: HashMap<usize, Vec<&Grant>> = HashMap::new();
        for g in &self.grants {
            by_node.entry(g.node).or_default().push(g);
        }
        for (node, grants) in &mut by_node {
            grants.sort_by_key(|g| g.granted);
            let mut highest: Option<&Grant> = None;
            // Sweep by send time: every grant answered before `g` was sent must be below it.
            let mut by_sent = grants.clone();
            by_sent.sort_by_key(|g| g.sent);
            let mut i = 0;
            for g in by_sent {
                while i < grants.len() && grants[i].granted < g.sent {
                    if highest.is_none_or(|h| grants[i].token > h.token) {
                        highest = Some(grants[i]);
                    }
                    i += 1;
                }
                if let Some(h) = highest {
                    assert!(
                        g.token > h.token,
                        "node {node} went backwards: {} got {} at {}, after {} got {} at {}",
                        g.owner,
                        g.token,
                        secs(g.granted),
                        h.owner,
                        h.token,
                        secs(h.granted)
                    );
                }
            }
        }
        let masters = self.masters();
        for (k, &new) in masters.iter().enumerate() {
            for &old in &masters[..k] {
                let max_old = self
                    .grants
                    .iter()
                    .filter(|g| g.node == old)
                    .max_by_key(|g| g.token);
                let min_new = self
                    .grants
                    .iter()
                    .filter(|g| g.node == new)
                    .min_by_key(|g| g.token);
                if let (Some(o), Some(n)) = (max_old, min_new) {
                    assert!(
                        n.token > o.token,
                        "node {new}'s smallest token {} ({} at {}) is not above the largest of \
                         node {old}, which granted before it: {} ({} at {})",
                        n.token,
                        n.owner,
                        secs(n.granted),
                        o.token,
                        o.owner,
                        secs(o.granted)
                    );
                }
            }
        }
    }

    /// Pairs of grants to different owners, both used, that held the lock at once by their
    /// own accounts (`Grant::held_from` .. `held_until`), among the grants `which` picks.
    pub fn overlaps(&self, which: impl Fn(&Grant) -> bool) -> Vec<(&Grant, &Grant)> {
        let mut picked: Vec<&Grant> = self
            .grants
            .iter()
            .filter(|g| g.used() && which(g))
            .collect();
        picked.sort_by_key(|g| g.held_from());
        let mut found = Vec::new();
        for (i, a) in picked.iter().enumerate() {
            let until = a.held_until(self.ttl);
            for b in &picked[i + 1..] {
                if b.held_from() >= until {
                    break;
                }
                if b.owner != a.owner && b.held_from() < b.held_until(self.ttl) {
                    found.push((*a, *b));
                }
            }
        }
        found
    }

    /// The first grant `node` made at or after `after`.
    pub fn first_grant(&self, node: usize, after: Duration) -> Option<&Grant> {
        self.grants
            .iter()
            .filter(|g| g.node == node && g.granted >= after)
            .min_by_key(|g| g.granted)
    }

    /// Grants `which` picks.
    pub fn count(&self, which: impl Fn(&Grant) -> bool) -> usize {
        self.grants.iter().filter(|g| which(g)).count()
    }

    /// Accepted writes of grants `which` picks.
    pub fn accepted(&self, which: impl Fn(&Grant) -> bool) -> usize {
        self.grants
            .iter()
            .filter(|g| matches!(g.write, Write::Accepted(_)) && which(g))
            .count()
    }

    /// When the first and the last refusal containing `code` came from `node`.
    pub fn refused(&self, node: usize, code: &str) -> Option<(Duration, Duration, usize)> {
        let times: Vec<Duration> = self
            .refusals
            .iter()
            .filter(|r| r.node == node && r.error.contains(code))
            .map(|r| r.at)
            .collect();
        Some((*times.iter().min()?, *times.iter().max()?, times.len()))
    }
}

/// A file that sets a server's clock offset for libfaketime, removed when dropped.
pub struct ClockFile(pub PathBuf);

impl ClockFile {
    pub fn new(tag: &str, offset: &str) -> Self {
        let path = std::env::temp_dir().join(format!(
            "lock-sentinel-{tag}-{}-{:?}",
            std::process::id(),
            std::thread::current().id()
        ));
        std::fs::write(&path, offset).expect("write the clock file");
        Self(path)
    }

    /// The environment of a server with this clock, or `None` where libfaketime cannot run
    /// (a jemalloc build, or no libfaketime).
    pub fn env(&self) -> Option<Vec<(String, String)>> {
        faketime_env(&self.0)
    }
}

impl Drop for ClockFile {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}
