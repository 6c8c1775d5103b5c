//! The fault-injection safety suite (`make test-faults`): many clients loop acquire (WAIT) ->
//! read-modify-write a counter in a fenced store -> release, while faults are injected. A checker
//! then verifies the recorded history:
//! - every write the store accepted carries a larger token than the one before it, and the
//!   accepted writes form an unbroken chain 1, 2, 3...: nothing lost, nothing applied twice;
//! - the store's final counter equals the number of accepted writes;
//! - no token was ever handed to two different acquisitions, and tokens never go backwards
//!   across server restarts.
//!
//! The store is a separate server running `lua/fenced_store.lua` (it is never faulted); the lock
//! server is. Scenarios are `#[ignore]`d so `make test` stays quick; `make test-faults` runs them.

mod common;
use common::cluster::Cluster;
use common::*;

use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicBool, AtomicU16, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

const FENCED_STORE: &str = include_str!("../lua/fenced_store.lua");
const LOCK: &str = "stock-lock";
const COUNTER: &str = "stock";

#[derive(Clone, Debug, PartialEq)]
enum Write {
    Accepted(i64),
    Stale,
    Skipped,
}

#[derive(Clone, Debug)]
struct Record {
    owner: String,
    token: i64,
    /// Restart epoch of the lock server when the grant was sent and received (same epoch).
    epoch: Option<usize>,
    write: Write,
    /// For a holder whose write was rejected: what LOCK.EXTEND answered right after.
    extended: Option<i64>,
    released: Option<i64>,
}

/// What a scenario does to the running system.
struct Faults {
    /// Pause (like a GC or SIGSTOP) between the read and the write: `(client, op) -> duration`.
    pause: fn(usize, usize) -> Option<Duration>,
    /// Runs in its own thread until `stop`; may restart the lock server (bumping `epoch`).
    chaos: Option<Box<dyn FnOnce(Chaos) + Send>>,
}

/// How long clients wait in the queue (`WAIT`), per operation; 1 s unless a scenario races it.
static WAIT_MS: std::sync::atomic::AtomicI64 = std::sync::atomic::AtomicI64::new(1000);
static HOLD_MS: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);

struct Chaos {
    server: Arc<Mutex<Server>>,
    /// A replica of the lock server, when the scenario asks for one.
    replica: Option<Arc<Mutex<Server>>>,
    /// The cluster serving the lock, when the scenario runs on one.
    cluster: Option<Arc<Mutex<Cluster>>>,
    /// Where clients send lock commands (changes when a replica is promoted).
    port: Arc<AtomicU16>,
    epoch: Arc<AtomicUsize>,
    stop: Arc<AtomicBool>,
    injected: Arc<AtomicUsize>,
}

impl Chaos {
    fn running(&self) -> bool {
        !self.stop.load(Ordering::Relaxed)
    }
    fn sleep(&self, d: Duration) {
        let until = Instant::now() + d;
        while self.running() && Instant::now() < until {
            std::thread::sleep(Duration::from_millis(5));
        }
    }
    fn con(&self) -> Option<Connection> {
        connect(self.port.load(Ordering::SeqCst))
    }
    /// Run one command on the lock server; count it as a fault if the server took it.
    fn inject(&self, words: &[&str]) {
        if let Some(mut con) = self.con() {
            if cmd(&mut con, words).is_ok() {
                self.injected.fetch_add(1, Ordering::Relaxed);
            }
        }
    }
    /// kill -9 the lock server and start it again from its files.
    fn crash_and_restart(&self) {
        let mut server = self.server.lock().unwrap();
        self.epoch.fetch_add(1, Ordering::SeqCst);
        server.restart();
        self.epoch.fetch_add(1, Ordering::SeqCst);
        self.injected.fetch_add(1, Ordering::Relaxed);
    }

    /// Fail over the cluster shard that serves the lock: `kill -9` its master (the cluster
    /// promotes the replica after the node timeout) or ask the replica to take over (CLUSTER
    /// FAILOVER). Clients move to the new master.
    fn fail_over_shard(&self, kill: bool) {
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
    fn fail_over(&self, lose_writes: bool) {
        let replica = self.replica.as_ref().expect("a replica").lock().unwrap();
        let mut master = self.server.lock().unwrap();
        if lose_writes {
            replica.signal(libc::SIGSTOP);
            if let Some(mut m) = connect(master.port) {
                let _ = cmd(&mut m, &["CLIENT", "KILL", "TYPE", "replica"]);
            }
            self.sleep(Duration::from_millis(300)); // grants the replica never sees
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

fn connect(port: u16) -> Option<Connection> {
    let client = redis::Client::open(format!("redis://127.0.0.1:{port}/")).ok()?;
    let con = client
        .get_connection_with_timeout(Duration::from_secs(1))
        .ok()?;
    con.set_read_timeout(Some(Duration::from_secs(10))).ok()?;
    Some(con)
}

fn fenced(
    store: &mut Connection,
    sha: &str,
    op: &str,
    token: i64,
    value: Option<i64>,
) -> Result<Value, String> {
    let mut c = redis::cmd("EVALSHA");
    c.arg(sha).arg(1).arg(COUNTER).arg(op).arg(token);
    if let Some(v) = value {
        c.arg(v);
    }
    c.query::<Value>(store).map_err(|e| e.to_string())
}

struct Outcome {
    records: Vec<Record>,
    final_counter: i64,
    injected: usize,
    /// Grants the lock server counted (INFO lock) and did not take back, if it still answers.
    server_grants: Option<i64>,
}

fn run(lock_args: &[&str], clients: usize, ttl_ms: i64, dur: Duration, faults: Faults) -> Outcome {
    run_on(lock_args, false, clients, ttl_ms, dur, faults)
}

/// Where the lock lives.
#[derive(Clone, Copy, PartialEq)]
enum Topology {
    Single,
    WithReplica,
    Cluster,
}

fn run_on(
    lock_args: &[&str],
    with_replica: bool,
    clients: usize,
    ttl_ms: i64,
    dur: Duration,
    faults: Faults,
) -> Outcome {
    let topology = if with_replica {
        Topology::WithReplica
    } else {
        Topology::Single
    };
    run_full(lock_args, &[], topology, clients, ttl_ms, dur, faults)
}

#[allow(clippy::too_many_arguments)]
fn run_full(
    lock_args: &[&str],
    lock_env: &[(&str, &str)],
    topology: Topology,
    clients: usize,
    ttl_ms: i64,
    dur: Duration,
    faults: Faults,
) -> Outcome {
    let store = Server::start();
    let lock_server = Server::start_with_env(lock_env, lock_args);
    let port = Arc::new(AtomicU16::new(lock_server.port));
    let cluster = (topology == Topology::Cluster).then(|| {
        let cluster = Cluster::start();
        let owner = cluster.owner_of(LOCK).expect("the lock's master");
        port.store(cluster.nodes[owner].port, Ordering::SeqCst);
        Arc::new(Mutex::new(cluster))
    });
    let replica = (topology == Topology::WithReplica).then(|| {
        let master_port = lock_server.port.to_string();
        let mut args = vec!["--replicaof", "127.0.0.1", &master_port];
        args.extend_from_slice(lock_args);
        let replica = Server::start_with(&args);
        let mut r = replica.con();
        assert!(eventually(Duration::from_secs(20), || info_field(
            &mut r,
            "replication",
            "master_link_status"
        ) == "up"));
        Arc::new(Mutex::new(replica))
    });
    let server = Arc::new(Mutex::new(lock_server));
    let sha: String = redis::cmd("SCRIPT")
        .arg("LOAD")
        .arg(FENCED_STORE)
        .query(&mut store.con())
        .unwrap();
    let epoch = Arc::new(AtomicUsize::new(0));
    let stop = Arc::new(AtomicBool::new(false));
    let injected = Arc::new(AtomicUsize::new(0));
    let deadline = Instant::now() + dur;

    let chaos = faults.chaos.map(|f| {
        let chaos = Chaos {
            server: server.clone(),
            replica: replica.clone(),
            cluster: cluster.clone(),
            port: port.clone(),
            epoch: epoch.clone(),
            stop: stop.clone(),
            injected: injected.clone(),
        };
        std::thread::spawn(move || f(chaos))
    });

    let workers: Vec<_> = (0..clients)
        .map(|c| {
            let store_port = store.port;
            let sha = sha.clone();
            let epoch = epoch.clone();
            let pause = faults.pause;
            let port = port.clone();
            std::thread::spawn(move || {
                let mut store = connect(store_port).expect("store");
                let mut lock: Option<Connection> = None;
                let mut records = Vec::new();
                let mut op = 0;
                while Instant::now() < deadline {
                    op += 1;
                    let Some(con) = lock.as_mut() else {
                        lock = connect(port.load(Ordering::SeqCst));
                        if lock.is_none() {
                            std::thread::sleep(Duration::from_millis(20));
                        }
                        continue;
                    };
                    let owner = format!("client-{c}-{op}");
                    let sent_epoch = epoch.load(Ordering::SeqCst);
                    let reply = redis::cmd("LOCK.ACQUIRE")
                        .arg(LOCK)
                        .arg(&owner)
                        .arg(ttl_ms)
                        .arg("WAIT")
                        .arg(WAIT_MS.load(Ordering::Relaxed) + (op % 7) as i64)
                        .query::<Value>(con);
                    let token = match reply {
                        Ok(Value::Int(t)) => t,
                        Ok(_) => continue, // timed out waiting
                        Err(_) => {
                            lock = None; // the server went away: reconnect
                            continue;
                        }
                    };
                    let got_epoch = epoch.load(Ordering::SeqCst);
                    let epoch = (sent_epoch == got_epoch && got_epoch.is_multiple_of(2))
                        .then_some(got_epoch);
                    let write = match fenced(&mut store, &sha, "GET", token, None) {
                        Ok(v) => {
                            let current = match v {
                                Value::BulkString(b) => {
                                    String::from_utf8_lossy(&b).parse().unwrap_or(0)
                                }
                                _ => 0,
                            };
                            if let Some(p) = pause(c, op) {
                                std::thread::sleep(p);
                            }
                            let hold = HOLD_MS.load(Ordering::Relaxed);
                            if hold > 0 {
                                std::thread::sleep(Duration::from_millis(hold));
                            }
                            match fenced(&mut store, &sha, "SET", token, Some(current + 1)) {
                                Ok(_) => Write::Accepted(current + 1),
                                Err(e) if e.contains("STALE") => Write::Stale,
                                Err(e) => panic!("store: {e}"),
                            }
                        }
                        Err(e) if e.contains("STALE") => Write::Skipped,
                        Err(e) => panic!("store: {e}"),
                    };
                    let extended = (write == Write::Stale)
                        .then(|| {
                            redis::cmd("LOCK.EXTEND")
                                .arg(LOCK)
                                .arg(&owner)
                                .arg(ttl_ms)
                                .query::<i64>(con)
                                .ok()
                        })
                        .flatten();
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
            })
        })
        .collect();
    let records: Vec<Record> = workers
        .into_iter()
        .flat_map(|w| w.join().expect("worker"))
        .collect();
    stop.store(true, Ordering::Relaxed);
    if let Some(chaos) = chaos {
        chaos.join().expect("chaos thread");
    }
    let final_counter = match ok(&mut store.con(), &["HGET", COUNTER, "value"]) {
        Value::BulkString(b) => String::from_utf8_lossy(&b).parse().unwrap_or(0),
        _ => 0,
    };
    let server_grants = connect(port.load(Ordering::SeqCst)).map(|mut c| {
        let grants: i64 = ["acquired_immediately", "acquired_after_wait", "renewed"]
            .iter()
            .map(|f| stat(&mut c, f) as i64)
            .sum();
        grants - stat(&mut c, "grants_revoked") as i64
    });
    drop(server);
    drop(replica);
    drop(cluster);
    Outcome {
        server_grants,
        records,
        final_counter,
        injected: injected.load(Ordering::Relaxed),
    }
}

/// Check the properties the README promises; returns (accepted writes, stale rejections).
fn check(outcome: &Outcome) -> (usize, usize) {
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

    let mut owner_of: HashMap<i64, &str> = HashMap::new();
    for r in &outcome.records {
        let previous = owner_of.insert(r.token, &r.owner);
        assert!(
            previous.is_none_or(|o| o == r.owner),
            "token {} granted twice: {previous:?} and {}",
            r.token,
            r.owner
        );
    }
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
    let stale = outcome
        .records
        .iter()
        .filter(|r| matches!(r.write, Write::Stale | Write::Skipped))
        .count();
    let distinct: HashSet<_> = outcome.records.iter().map(|r| r.token).collect();
    eprintln!(
        "operations {}, distinct grants {}, accepted writes {}, stale rejected {}, faults injected {}",
        outcome.records.len(),
        distinct.len(),
        accepted.len(),
        stale,
        outcome.injected
    );
    (accepted.len(), stale)
}

fn no_pause(_: usize, _: usize) -> Option<Duration> {
    None
}

/// Client 0 stalls for three leases between its read and its write on every third operation.
fn pause_client_zero(c: usize, op: usize) -> Option<Duration> {
    (c == 0 && op.is_multiple_of(3)).then_some(Duration::from_millis(3 * 150))
}

#[test]
#[ignore = "fault suite: make test-faults"]
fn paused_holders_are_fenced_off() {
    let outcome = run(
        &[],
        6,
        150,
        Duration::from_secs(4),
        Faults {
            pause: pause_client_zero,
            chaos: None,
        },
    );
    let (accepted, stale) = check(&outcome);
    assert!(accepted > 50, "the others kept working");
    assert!(stale > 0, "the paused holder's late writes were rejected");
    let late: Vec<_> = outcome
        .records
        .iter()
        .filter(|r| r.write == Write::Stale)
        .collect();
    assert!(
        late.iter().all(|r| r.released == Some(0)),
        "a holder that outran its lease cannot release"
    );
    assert!(late.iter().all(|r| r.extended == Some(0)), "nor extend");
}

#[test]
#[ignore = "fault suite: make test-faults"]
fn killed_waiters_never_wedge_the_queue() {
    let chaos = |ch: Chaos| {
        let mut con = ch.con().expect("chaos connection");
        while ch.running() {
            let ids = blocked_ids(&mut con);
            if let Some(id) = ids.get(ids.len() / 2) {
                if cmd(&mut con, &["CLIENT", "KILL", "ID", &id.to_string()]).is_ok() {
                    ch.injected.fetch_add(1, Ordering::Relaxed);
                }
            }
            ch.sleep(Duration::from_millis(25));
        }
    };
    let outcome = run(
        &[],
        8,
        300,
        Duration::from_secs(4),
        Faults {
            pause: no_pause,
            chaos: Some(Box::new(chaos)),
        },
    );
    let (accepted, _) = check(&outcome);
    assert!(outcome.injected > 10, "waiters were killed");
    assert!(accepted > 100, "the queue kept moving: {accepted}");
}

/// The same command `times` times, `every` apart.
fn repeat_command(
    times: usize,
    every: Duration,
    words: &'static [&'static str],
) -> Box<dyn FnOnce(Chaos) + Send> {
    Box::new(move |ch: Chaos| {
        for _ in 0..times {
            ch.sleep(every);
            if !ch.running() {
                return;
            }
            ch.inject(words);
        }
    })
}

/// One fault, `after` the workload started.
fn single_fault(after: Duration, fault: fn(&Chaos)) -> Box<dyn FnOnce(Chaos) + Send> {
    Box::new(move |ch: Chaos| {
        ch.sleep(after);
        if ch.running() {
            fault(&ch);
        }
    })
}

fn crash_loop(times: usize, every: Duration) -> Box<dyn FnOnce(Chaos) + Send> {
    Box::new(move |ch: Chaos| {
        for _ in 0..times {
            ch.sleep(every);
            if !ch.running() {
                return;
            }
            ch.crash_and_restart();
        }
    })
}

#[test]
#[ignore = "fault suite: make test-faults"]
fn kill9_and_restart_from_aof_always() {
    let args = ["--appendonly", "yes", "--appendfsync", "always"];
    let outcome = run(
        &args,
        6,
        300,
        Duration::from_secs(5),
        Faults {
            pause: no_pause,
            chaos: Some(crash_loop(3, Duration::from_millis(1000))),
        },
    );
    let (accepted, stale) = check(&outcome);
    assert_eq!(outcome.injected, 3);
    assert!(accepted > 50);
    // Every acknowledged grant survived each crash, so no holder was ever overtaken and fenced.
    assert_eq!(
        stale, 0,
        "with appendfsync always, no acknowledged grant may be lost"
    );
}

#[test]
#[ignore = "fault suite: make test-faults"]
fn kill9_and_restart_from_aof_everysec() {
    let args = ["--appendonly", "yes", "--appendfsync", "everysec"];
    let outcome = run(
        &args,
        6,
        300,
        Duration::from_secs(5),
        Faults {
            pause: no_pause,
            chaos: Some(crash_loop(3, Duration::from_millis(1000))),
        },
    );
    let (accepted, _) = check(&outcome);
    assert_eq!(outcome.injected, 3);
    assert!(accepted > 50);
}

#[test]
#[ignore = "fault suite: make test-faults"]
fn kill9_and_restart_from_rdb() {
    let args = ["--save", "1 1"];
    let outcome = run(
        &args,
        6,
        300,
        Duration::from_secs(5),
        Faults {
            pause: no_pause,
            chaos: Some(crash_loop(3, Duration::from_millis(1200))),
        },
    );
    let (accepted, _) = check(&outcome);
    assert_eq!(outcome.injected, 3);
    assert!(accepted > 50);
}

#[test]
#[ignore = "fault suite: make test-faults"]
fn debug_sleep_longer_than_the_lease() {
    let chaos = repeat_command(2, Duration::from_millis(1000), &["DEBUG", "SLEEP", "0.6"]);
    let outcome = run(
        &[],
        6,
        200,
        Duration::from_secs(4),
        Faults {
            pause: pause_client_zero,
            chaos: Some(chaos),
        },
    );
    let (accepted, _) = check(&outcome);
    assert_eq!(outcome.injected, 2);
    assert!(accepted > 30);
}

/// Everything at once: paused holders, killed waiters, DEBUG SLEEP, CLIENT PAUSE WRITE and
/// kill -9 restarts.
#[test]
#[ignore = "fault suite: make test-faults"]
fn soak_with_every_fault_together() {
    let chaos = |ch: Chaos| {
        let mut round = 0;
        while ch.running() {
            ch.sleep(Duration::from_millis(400));
            if !ch.running() {
                return;
            }
            round += 1;
            match round % 4 {
                0 => ch.crash_and_restart(),
                3 => ch.inject(&["CLIENT", "PAUSE", "300", "WRITE"]),
                1 => ch.inject(&["DEBUG", "SLEEP", "0.4"]),
                _ => {
                    if let Some(mut con) = ch.con() {
                        for id in blocked_ids(&mut con).into_iter().take(2) {
                            if cmd(&mut con, &["CLIENT", "KILL", "ID", &id.to_string()]).is_ok() {
                                ch.injected.fetch_add(1, Ordering::Relaxed);
                            }
                        }
                    }
                }
            }
        }
    };
    let args = ["--appendonly", "yes", "--appendfsync", "always"];
    let outcome = run(
        &args,
        8,
        200,
        Duration::from_secs(8),
        Faults {
            pause: pause_client_zero,
            chaos: Some(Box::new(chaos)),
        },
    );
    let (accepted, _) = check(&outcome);
    assert!(
        outcome.injected >= 5,
        "faults injected: {}",
        outcome.injected
    );
    assert!(accepted > 50);
}

#[test]
#[ignore = "fault suite: make test-faults"]
fn client_pause_write_longer_than_the_lease() {
    let chaos = repeat_command(
        3,
        Duration::from_millis(700),
        &["CLIENT", "PAUSE", "500", "WRITE"],
    );
    let outcome = run(
        &[],
        6,
        200,
        Duration::from_secs(4),
        Faults {
            pause: pause_client_zero,
            chaos: Some(chaos),
        },
    );
    let (accepted, _) = check(&outcome);
    assert_eq!(outcome.injected, 3);
    assert!(accepted > 30);
}

#[test]
#[ignore = "fault suite: make test-faults"]
fn replica_promotion_after_the_replica_caught_up() {
    let chaos = single_fault(Duration::from_millis(1500), |ch| ch.fail_over(false));
    let outcome = run_on(
        &[],
        true,
        6,
        300,
        Duration::from_secs(4),
        Faults {
            pause: no_pause,
            chaos: Some(chaos),
        },
    );
    let (accepted, _) = check(&outcome);
    assert_eq!(outcome.injected, 1);
    assert!(accepted > 50);
}

#[test]
#[ignore = "fault suite: make test-faults"]
fn replica_promotion_with_lost_grants() {
    let chaos = single_fault(Duration::from_millis(1500), |ch| ch.fail_over(true));
    let outcome = run_on(
        &[],
        true,
        6,
        300,
        Duration::from_secs(4),
        Faults {
            pause: no_pause,
            chaos: Some(chaos),
        },
    );
    let (accepted, _) = check(&outcome);
    assert_eq!(outcome.injected, 1);
    assert!(accepted > 50);
}

const FAKETIME_LIB: &str = "/usr/lib/x86_64-linux-gnu/faketime/libfaketime.so.1";

/// The lock server's wall clock jumps an hour forward, then two hours back (libfaketime reads
/// the offset from a file on every clock read; monotonic clocks stay real). Leases break, as
/// documented; tokens must still only grow, and the fenced store must catch every stale write.
#[test]
#[ignore = "fault suite: make test-faults"]
fn server_clock_jumps_forward_and_back() {
    assert!(
        std::path::Path::new(FAKETIME_LIB).exists(),
        "install faketime (apt-get install faketime)"
    );
    let version = std::process::Command::new(server_binary())
        .arg("--version")
        .output()
        .unwrap();
    if String::from_utf8_lossy(&version.stdout).contains("malloc=jemalloc") {
        // libfaketime recurses into itself when jemalloc reads the clock during start-up.
        eprintln!(
            "SKIPPED on this server: libfaketime cannot start a jemalloc build (run on Valkey)"
        );
        return;
    }
    let offset_file = std::env::temp_dir().join(format!("lock-faketime-{}", std::process::id()));
    std::fs::write(&offset_file, "+0").unwrap();
    let file = offset_file.to_str().unwrap().to_string();
    let env = [
        ("LD_PRELOAD", FAKETIME_LIB),
        ("FAKETIME_TIMESTAMP_FILE", file.as_str()),
        ("FAKETIME_NO_CACHE", "1"),
        ("FAKETIME_DONT_FAKE_MONOTONIC", "1"),
    ];
    let jumps_file = offset_file.clone();
    let chaos = move |ch: Chaos| {
        for offset in ["+1h", "-1h", "+0"] {
            ch.sleep(Duration::from_millis(1000));
            if !ch.running() {
                return;
            }
            ch.epoch.fetch_add(1, Ordering::SeqCst);
            std::fs::write(&jumps_file, offset).unwrap();
            std::thread::sleep(Duration::from_millis(20));
            ch.epoch.fetch_add(1, Ordering::SeqCst);
            ch.injected.fetch_add(1, Ordering::Relaxed);
        }
    };
    let outcome = run_full(
        &[],
        &env,
        Topology::Single,
        6,
        300,
        Duration::from_secs(4),
        Faults {
            pause: no_pause,
            chaos: Some(Box::new(chaos)),
        },
    );
    let _ = std::fs::remove_file(&offset_file);
    let (accepted, _) = check(&outcome);
    assert_eq!(outcome.injected, 3);
    assert!(accepted > 50);
    // The jump really reached the module: tokens after it follow the clock an hour ahead, and
    // (checked above) those after the jump back still only grow.
    let max_of = |epoch: usize| {
        outcome
            .records
            .iter()
            .filter(|r| r.epoch == Some(epoch))
            .map(|r| r.token)
            .max()
    };
    let min_of = |epoch: usize| {
        outcome
            .records
            .iter()
            .filter(|r| r.epoch == Some(epoch))
            .map(|r| r.token)
            .min()
    };
    if let (Some(before), Some(after)) = (max_of(0), min_of(2)) {
        assert!(
            after - before > 3_000_000_000,
            "tokens jumped with the clock: {before} -> {after}"
        );
    }
}

/// Waiters give up (WAIT 3..10 ms) about as long as each holder keeps the lock (3 ms), so
/// timeouts race grants. No grant may go to a client that already timed out: at the end the lock
/// must be free, nobody blocked, and the history intact. Runs alone (the wait is process-wide).
#[test]
#[ignore = "fault suite: make test-faults"]
fn waiters_time_out_exactly_as_the_lock_frees() {
    WAIT_MS.store(3, Ordering::Relaxed);
    HOLD_MS.store(3, Ordering::Relaxed);
    let outcome = run(
        &[],
        8,
        2_000,
        Duration::from_secs(3),
        Faults {
            pause: no_pause,
            chaos: None,
        },
    );
    WAIT_MS.store(1000, Ordering::Relaxed);
    HOLD_MS.store(0, Ordering::Relaxed);
    let (accepted, _) = check(&outcome);
    assert!(accepted > 100);
    let orphans = outcome
        .records
        .iter()
        .filter(|r| r.released != Some(1))
        .count();
    assert_eq!(orphans, 0, "every granted client released its lock");
    assert_eq!(
        outcome.server_grants,
        Some(outcome.records.len() as i64),
        "every grant the server did not revoke reached a client"
    );
}

#[test]
#[ignore = "fault suite: make test-faults"]
fn cluster_shard_master_killed_under_load() {
    let chaos = single_fault(Duration::from_millis(1500), |ch| ch.fail_over_shard(true));
    let outcome = run_full(
        &[],
        &[],
        Topology::Cluster,
        6,
        300,
        Duration::from_secs(8),
        Faults {
            pause: no_pause,
            chaos: Some(chaos),
        },
    );
    let (accepted, _) = check(&outcome);
    assert_eq!(outcome.injected, 1);
    assert!(accepted > 50);
}

#[test]
#[ignore = "fault suite: make test-faults"]
fn cluster_failover_of_the_lock_shard_under_load() {
    let chaos = single_fault(Duration::from_millis(1500), |ch| ch.fail_over_shard(false));
    let outcome = run_full(
        &[],
        &[],
        Topology::Cluster,
        6,
        300,
        Duration::from_secs(6),
        Faults {
            pause: pause_client_zero,
            chaos: Some(chaos),
        },
    );
    let (accepted, _) = check(&outcome);
    assert_eq!(outcome.injected, 1);
    assert!(accepted > 50);
}

/// A client in a process of its own, for faults that need a real process: SIGSTOP and kill -9.
/// The parent test re-runs this test binary with `FAULT_HELPER` set; otherwise this does nothing.
#[test]
#[ignore = "helper process of the fault suite"]
fn fault_helper_process() {
    let Ok(role) = std::env::var("FAULT_HELPER") else {
        return;
    };
    let port: u16 = std::env::var("LOCK_PORT").unwrap().parse().unwrap();
    let mut lock = connect(port).unwrap();
    let say = |line: String| {
        use std::io::Write;
        println!("HELPER {line}");
        let _ = std::io::stdout().flush();
    };
    match role.as_str() {
        "holder" => {
            let store_port: u16 = std::env::var("STORE_PORT").unwrap().parse().unwrap();
            let sha = std::env::var("STORE_SHA").unwrap();
            let mut store = connect(store_port).unwrap();
            let token = int(&ok(
                &mut lock,
                &["LOCK.ACQUIRE", LOCK, "stopped-holder", "200"],
            ));
            let read = match fenced(&mut store, &sha, "GET", token, None).unwrap() {
                Value::BulkString(b) => String::from_utf8_lossy(&b).parse::<i64>().unwrap_or(0),
                _ => 0,
            };
            say(format!("TOKEN {token}"));
            // The parent stops this process here, for longer than the lease.
            std::thread::sleep(Duration::from_millis(300));
            let write = match fenced(&mut store, &sha, "SET", token, Some(read + 1)) {
                Ok(_) => "OK".to_string(),
                Err(e) if e.contains("STALE") => "STALE".to_string(),
                Err(e) => e,
            };
            say(format!("WRITE {write}"));
            say(format!(
                "EXTEND {}",
                int(&ok(
                    &mut lock,
                    &["LOCK.EXTEND", LOCK, "stopped-holder", "200"]
                ))
            ));
            say(format!(
                "RELEASE {}",
                int(&ok(&mut lock, &["LOCK.RELEASE", LOCK, "stopped-holder"]))
            ));
        }
        "waiter" => {
            say("WAITING".to_string());
            let reply = cmd(
                &mut lock,
                &["LOCK.ACQUIRE", LOCK, "killed-waiter", "60000", "WAIT", "0"],
            );
            say(format!("ANSWERED {reply:?}"));
        }
        other => panic!("unknown helper role {other}"),
    }
}

fn spawn_helper(role: &str, env: &[(&str, String)]) -> std::process::Child {
    std::process::Command::new(std::env::current_exe().unwrap())
        .args([
            "--exact",
            "fault_helper_process",
            "--ignored",
            "--nocapture",
            "--test-threads=1",
        ])
        .env("FAULT_HELPER", role)
        .envs(env.iter().map(|(k, v)| (*k, v.as_str())))
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null())
        .spawn()
        .expect("helper process")
}

/// Read the helper's `HELPER ...` lines until one starts with `prefix`.
fn helper_line(out: &mut impl std::io::BufRead, prefix: &str) -> String {
    let mut line = String::new();
    let mut seen = String::new();
    loop {
        line.clear();
        assert!(
            out.read_line(&mut line).unwrap() > 0,
            "helper ended before {prefix}; it said: {seen}"
        );
        seen.push_str(&line);
        // libtest prints "test name ... " on the same line as the first output.
        if let Some(at) = line.find("HELPER ") {
            let rest = line[at + "HELPER ".len()..].trim();
            if rest.starts_with(prefix) {
                return rest.to_string();
            }
        }
    }
}

/// A real holder process is stopped with SIGSTOP past its lease and resumed: another client
/// gets the lock and commits; the resumed holder's write is rejected, its EXTEND and RELEASE
/// answer 0.
#[test]
#[ignore = "fault suite: make test-faults"]
fn sigstopped_holder_process_is_fenced_off() {
    let store = Server::start();
    let lock = Server::start();
    let sha: String = redis::cmd("SCRIPT")
        .arg("LOAD")
        .arg(FENCED_STORE)
        .query(&mut store.con())
        .unwrap();
    let mut child = spawn_helper(
        "holder",
        &[
            ("LOCK_PORT", lock.port.to_string()),
            ("STORE_PORT", store.port.to_string()),
            ("STORE_SHA", sha.clone()),
        ],
    );
    let mut out = std::io::BufReader::new(child.stdout.take().unwrap());
    let stale_token: i64 = helper_line(&mut out, "TOKEN")
        .split(' ')
        .nth(1)
        .unwrap()
        .parse()
        .unwrap();
    // SAFETY: signalling our own child process.
    unsafe { libc::kill(child.id() as i32, libc::SIGSTOP) };
    let mut c = lock.con();
    let mut s = store.con();
    let next = int(&ok(
        &mut c,
        &["LOCK.ACQUIRE", LOCK, "next-holder", "5000", "WAIT", "2000"],
    ));
    assert!(next > stale_token);
    assert_eq!(fenced(&mut s, &sha, "GET", next, None), Ok(Value::Nil));
    assert!(fenced(&mut s, &sha, "SET", next, Some(1)).is_ok());
    // SAFETY: signalling our own child process.
    unsafe { libc::kill(child.id() as i32, libc::SIGCONT) };
    assert_eq!(helper_line(&mut out, "WRITE"), "WRITE STALE");
    assert_eq!(helper_line(&mut out, "EXTEND"), "EXTEND 0");
    assert_eq!(helper_line(&mut out, "RELEASE"), "RELEASE 0");
    child.wait().unwrap();
    assert_eq!(
        ok(&mut s, &["HGET", COUNTER, "value"]),
        Value::BulkString(b"1".to_vec())
    );
    assert_eq!(release(&mut c, LOCK, "next-holder"), 1);
    eprintln!("operations 2, faults injected 1 (SIGSTOP), stale rejected 1, anomalies 0");
}

/// A waiting client process is killed with kill -9: it leaves the queue, nothing dangles, and
/// the next release leaves the lock free.
#[test]
#[ignore = "fault suite: make test-faults"]
fn kill9_of_a_waiting_client_process() {
    let lock = Server::start();
    let mut c = lock.con();
    acquire(&mut c, LOCK, "holder", 60_000).unwrap();
    let mut child = spawn_helper("waiter", &[("LOCK_PORT", lock.port.to_string())]);
    let mut out = std::io::BufReader::new(child.stdout.take().unwrap());
    helper_line(&mut out, "WAITING");
    wait_blocked(&mut c, 1);
    child.kill().unwrap(); // SIGKILL
    child.wait().unwrap();
    assert!(eventually(Duration::from_secs(10), || blocked_clients(
        &mut c
    ) == 0));
    assert_eq!(stat(&mut c, "waiters_disconnected"), 1.0);
    assert_eq!(release(&mut c, LOCK, "holder"), 1);
    assert_eq!(
        int(&ok(&mut c, &["EXISTS", LOCK])),
        0,
        "the lock is free, not granted to the dead process"
    );
    eprintln!("operations 2, faults injected 1 (kill -9 of a client), anomalies 0");
}
