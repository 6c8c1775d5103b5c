//! Sentinel deployments: lock servers (a master and its replicas, each with the module) watched
//! by real Sentinels (`<server> sentinel.conf --sentinel`), on loopback or each process in a
//! network namespace of its own (`netns`), so a node can be cut off by a real partition.
//!
//! The workload the Sentinel fault tests run against a deployment is in `workload`, the checks
//! of what it recorded in `history`.

mod history;
mod workload;

use std::collections::HashMap;
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use crate::netns::Net;
use crate::*;

pub use history::{secs, History};
pub use workload::{Grant, Refusal, Running, Side, Workload};

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

/// A process of a deployment: a lock server or a Sentinel (`Proc::default()`: none).
#[derive(Default)]
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
    process: Process,
}

impl Proc {
    pub fn pid(&self) -> i32 {
        self.process.pid()
    }

    pub fn signal(&self, sig: i32) {
        self.process.signal(sig);
    }

    /// `kill -9` and reap.
    pub fn kill9(&mut self) {
        self.process.kill9();
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

/// A connection to a process of a deployment at `host:port` (300 ms to connect, 2 s to send)
/// whose replies may take `read_timeout`; `None` when it does not answer.
pub fn connect_to(host: &str, port: u16, read_timeout: Duration) -> Option<Connection> {
    let link = Link::to(host, port).connect_timeout(Duration::from_millis(300));
    let link = link.write_timeout(Duration::from_secs(2));
    link.read_timeout(read_timeout).open().ok()
}

/// A node's replication role as `ROLE` says: `Some(None)` master, `Some(Some((host, port)))`
/// a replica of that master, `None` no answer.
pub fn role(con: &mut Connection) -> Option<Option<(String, u16)>> {
    let Ok(Value::Array(items)) = cmd(con, &["ROLE"]) else {
        return None;
    };
    let word = |i: usize| match items.get(i) {
        Some(Value::Int(n)) => n.to_string(),
        Some(v) => text(v),
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
        Ok(Value::Array(a)) if a.len() == 2 => Some((text(&a[0]), text(&a[1]).parse().ok()?)),
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
                process: Process::default(),
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
                dir: fresh_memory_dir("sentinel"),
                slot: *slot,
                args: vec!["--sentinel".into()],
                env: Vec::new(),
                process: Process::default(),
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
        // Hellos every 2 s, the replica from the master's INFO: seconds when idle; 90 s for a
        // loaded machine (a Python twin of this wait once took more than 30 beside a soak).
        assert!(
            eventually(Duration::from_secs(90), || self.sentinels.iter().all(|s| {
                let Some(info) = s
                    .con()
                    .and_then(|mut c| cmd(&mut c, &["SENTINEL", "MASTER", MASTER_NAME]).ok())
                else {
                    return false;
                };
                let field = |f: &str| map_field(&info, f).map(|v| text(&v));
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
        p.process = Process::new(command.spawn().expect("spawn a server"));
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
        let mut node = std::mem::take(&mut self.nodes[i]);
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
