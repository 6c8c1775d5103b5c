//! Section 6, the lock family under contention: a read-mostly read-write lock (32 clients, 90%
//! shared / 10% exclusive, 1 ms holds) against a Redisson-style Lua read-write lock, and a
//! semaphore of 10 permits with 64 clients against a Lua/ZSET semaphore. The Lua baselines have
//! no way to block, so their clients retry every millisecond, as hand-written loops do.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crate::report::Report;
use crate::stats::{jain, micros, poll, quantile};
use redis::Connection;
use redis_lock_harness::Server;

/// How long the Lua baselines' clients sleep between tries.
const RETRY: Duration = Duration::from_millis(1);

/// Redisson's read lock, simplified: readers join while the mode is `read`, even with writers
/// waiting (that is how its writers starve). KEYS[1] lock hash; ARGV ttl, owner.
const LUA_READ: &str = r"
local mode = redis.call('hget', KEYS[1], 'mode')
if mode == false or mode == 'read' then
  redis.call('hset', KEYS[1], 'mode', 'read')
  redis.call('hincrby', KEYS[1], ARGV[2], 1)
  redis.call('pexpire', KEYS[1], ARGV[1])
  return 1
end
return 0";

/// The write lock: only when nobody holds. KEYS[1] lock hash; ARGV ttl, owner.
const LUA_WRITE: &str = r"
if redis.call('exists', KEYS[1]) == 0 then
  redis.call('hset', KEYS[1], 'mode', 'write', ARGV[2], 1)
  redis.call('pexpire', KEYS[1], ARGV[1])
  return 1
end
return 0";

/// Release either kind. KEYS[1] lock hash; ARGV owner.
const LUA_RW_RELEASE: &str = r"
if redis.call('hexists', KEYS[1], ARGV[1]) == 0 then return 0 end
redis.call('hdel', KEYS[1], ARGV[1])
if redis.call('hlen', KEYS[1]) <= 1 then redis.call('del', KEYS[1]) end
return 1";

/// A ZSET semaphore: holders scored by their deadline; expired ones are dropped first.
/// KEYS[1] zset; ARGV limit, owner, now-ms, ttl-ms.
const LUA_SEM_ACQUIRE: &str = r"
redis.call('zremrangebyscore', KEYS[1], '-inf', ARGV[3])
if redis.call('zcard', KEYS[1]) < tonumber(ARGV[1]) then
  redis.call('zadd', KEYS[1], tonumber(ARGV[3]) + tonumber(ARGV[4]), ARGV[2])
  return 1
end
return 0";

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum Impl {
    Module,
    Lua,
}

impl Impl {
    pub fn label(self, what: &str) -> String {
        match self {
            Impl::Module => format!("LOCK.ACQUIRE {what} WAIT"),
            Impl::Lua => format!("Lua {what}, poll every 1 ms"),
        }
    }
}

pub struct RwResult {
    pub ops_per_sec: f64,
    pub reader_wait_p99_us: f64,
    pub writer_wait_p99_us: f64,
    pub writes: usize,
}

fn load(server: &Server, script: &str) -> String {
    redis::cmd("SCRIPT")
        .arg("LOAD")
        .arg(script)
        .query(&mut server.con())
        .expect("script load")
}

fn unix_ms() -> i64 {
    crate::stats::unix_us() / 1000
}

/// One client's waits (µs) as (is_write, wait).
type Waits = Vec<(bool, f64)>;

/// What every client of one read-write run shares.
struct ReadWrite {
    which: Impl,
    key: String,
    /// The Lua read, write and release scripts.
    scripts: (String, String, String),
}

impl ReadWrite {
    /// Client `c` until `until`: every tenth operation a write, each held 1 ms.
    fn client(&self, con: &mut Connection, c: usize, until: Instant) -> Waits {
        let mut waits = Vec::new();
        let mut op: u64 = 0;
        while Instant::now() < until {
            op += 1;
            // Every tenth operation of a client is a write, staggered across clients.
            let write = (op + c as u64).is_multiple_of(10);
            let owner = format!("c{c}-{op}");
            let asked = Instant::now();
            if !self.acquire(con, &owner, write, until) {
                continue;
            }
            waits.push((write, micros(asked.elapsed())));
            std::thread::sleep(Duration::from_millis(1));
            self.release(con, &owner);
        }
        waits
    }

    fn acquire(&self, con: &mut Connection, owner: &str, write: bool, until: Instant) -> bool {
        match self.which {
            Impl::Module => {
                let mut cmd = redis::cmd("LOCK.ACQUIRE");
                cmd.arg(&self.key).arg(owner).arg(10_000);
                if !write {
                    cmd.arg("SHARED");
                }
                let r: redis::Value = cmd.arg("WAIT").arg(5_000).query(con).expect("acquire");
                matches!(r, redis::Value::Int(_))
            }
            Impl::Lua => poll(RETRY, until + Duration::from_secs(2), || {
                let sha = if write {
                    &self.scripts.1
                } else {
                    &self.scripts.0
                };
                let got: i64 = redis::cmd("EVALSHA")
                    .arg(sha)
                    .arg(1)
                    .arg(&self.key)
                    .arg(10_000)
                    .arg(owner)
                    .query(con)
                    .expect("lua acquire");
                got == 1
            }),
        }
    }

    fn release(&self, con: &mut Connection, owner: &str) {
        let _: redis::Value = match self.which {
            Impl::Module => redis::cmd("LOCK.RELEASE")
                .arg(&self.key)
                .arg(owner)
                .query(con)
                .expect("release"),
            Impl::Lua => redis::cmd("EVALSHA")
                .arg(&self.scripts.2)
                .arg(1)
                .arg(&self.key)
                .arg(owner)
                .query(con)
                .expect("lua release"),
        };
    }
}

pub fn read_write(server: &Server, which: Impl, clients: usize, dur: Duration) -> RwResult {
    let run = ReadWrite {
        which,
        key: format!("bench:rw:{which:?}"),
        scripts: (
            load(server, LUA_READ),
            load(server, LUA_WRITE),
            load(server, LUA_RW_RELEASE),
        ),
    };
    let cons = connections(server, clients);
    let started = Instant::now();
    let per_client: Vec<Waits> = crate::stats::for_threads(
        clients,
        move |c, until| {
            let mut con = cons[c].lock().expect("connection");
            run.client(&mut con, c, until)
        },
        started + dur,
    );
    let elapsed = started.elapsed().as_secs_f64();
    let all: Vec<(bool, f64)> = per_client.into_iter().flatten().collect();
    let mut reads: Vec<f64> = all.iter().filter(|(w, _)| !w).map(|(_, t)| *t).collect();
    let mut writes: Vec<f64> = all.iter().filter(|(w, _)| *w).map(|(_, t)| *t).collect();
    RwResult {
        ops_per_sec: all.len() as f64 / elapsed,
        reader_wait_p99_us: quantile(&mut reads, 0.99),
        writer_wait_p99_us: quantile(&mut writes, 0.99),
        writes: writes.len(),
    }
}

pub struct SemResult {
    pub grants_per_sec: f64,
    pub wait_p99_us: f64,
    pub jain: f64,
    /// The most permits seen held at once (sampled by the clients after each grant).
    pub max_in_use: i64,
}

/// What every client of one semaphore run shares.
struct Semaphore {
    which: Impl,
    key: String,
    permits: u32,
    /// The Lua/ZSET acquire script.
    acquire_sha: String,
}

impl Semaphore {
    /// Client `c` until `until`: its grant count and its waits (µs), each permit held 1 ms.
    fn client(&self, con: &mut Connection, c: usize, until: Instant) -> (u64, Vec<f64>) {
        let mut waits = Vec::new();
        let mut grants = 0;
        let mut op = 0u64;
        while Instant::now() < until {
            op += 1;
            let owner = format!("c{c}-{op}");
            let asked = Instant::now();
            if !self.acquire(con, &owner, until) {
                continue;
            }
            grants += 1;
            waits.push(micros(asked.elapsed()));
            std::thread::sleep(Duration::from_millis(1));
            self.release(con, &owner);
        }
        (grants, waits)
    }

    fn acquire(&self, con: &mut Connection, owner: &str, until: Instant) -> bool {
        match self.which {
            Impl::Module => {
                let r: redis::Value = redis::cmd("LOCK.ACQUIRE")
                    .arg(&self.key)
                    .arg(owner)
                    .arg(10_000)
                    .arg("LIMIT")
                    .arg(self.permits)
                    .arg("WAIT")
                    .arg(5_000)
                    .query(con)
                    .expect("acquire");
                matches!(r, redis::Value::Int(_))
            }
            Impl::Lua => poll(RETRY, until + Duration::from_secs(2), || {
                let got: i64 = redis::cmd("EVALSHA")
                    .arg(&self.acquire_sha)
                    .arg(1)
                    .arg(&self.key)
                    .arg(self.permits)
                    .arg(owner)
                    .arg(unix_ms())
                    .arg(10_000)
                    .query(con)
                    .expect("lua acquire");
                got == 1
            }),
        }
    }

    fn release(&self, con: &mut Connection, owner: &str) {
        let _: redis::Value = match self.which {
            Impl::Module => redis::cmd("LOCK.RELEASE")
                .arg(&self.key)
                .arg(owner)
                .query(con)
                .expect("release"),
            Impl::Lua => redis::cmd("ZREM")
                .arg(&self.key)
                .arg(owner)
                .query(con)
                .expect("zrem"),
        };
    }
}

pub fn semaphore(
    server: &Server,
    which: Impl,
    permits: u32,
    clients: usize,
    dur: Duration,
) -> SemResult {
    let run = Semaphore {
        which,
        key: format!("bench:sem:{which:?}"),
        permits,
        acquire_sha: load(server, LUA_SEM_ACQUIRE),
    };
    let cons = connections(server, clients);
    let started = Instant::now();
    let per_client: Vec<(u64, Vec<f64>)> = crate::stats::for_threads(
        clients,
        move |c, until| {
            let mut con = cons[c].lock().expect("connection");
            run.client(&mut con, c, until)
        },
        started + dur,
    );
    let elapsed = started.elapsed().as_secs_f64();
    let counts: Vec<u64> = per_client.iter().map(|(g, _)| *g).collect();
    let mut waits: Vec<f64> = per_client.into_iter().flat_map(|(_, w)| w).collect();
    let max_in_use = match which {
        Impl::Module => peak_holds(server),
        Impl::Lua => -1,
    };
    SemResult {
        grants_per_sec: counts.iter().sum::<u64>() as f64 / elapsed,
        wait_p99_us: quantile(&mut waits, 0.99),
        jain: jain(&counts),
        max_in_use,
    }
}

/// One connection per client, each behind a lock so its thread can take it.
fn connections(server: &Server, clients: usize) -> Arc<Vec<Mutex<Connection>>> {
    Arc::new((0..clients).map(|_| Mutex::new(server.con())).collect())
}

/// The peak of `lock_semaphore_holds` (every hold takes one permit here).
fn peak_holds(server: &Server) -> i64 {
    let info: String = redis::cmd("INFO")
        .arg("lock")
        .query(&mut server.con())
        .unwrap_or_default();
    info.lines()
        .find_map(|l| l.strip_prefix("lock_semaphore_holds_peak:"))
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or(-1)
}

/// Section 6: the read-write lock and the semaphore against their Lua baselines.
pub fn section(report: &mut Report, server: &Server, dur: Duration) {
    let rw: Vec<_> = [Impl::Module, Impl::Lua]
        .into_iter()
        .map(|which| (which, read_write(server, which, 32, dur)))
        .collect();
    let sem: Vec<_> = [Impl::Module, Impl::Lua]
        .into_iter()
        .map(|which| (which, semaphore(server, which, 10, 64, dur)))
        .collect();
    report.section(
        "6a. Read-mostly read-write lock (90% shared, 10% exclusive, 1 ms holds)",
        "| client loop | clients | ops/s | reader wait p99 µs | writer wait p99 µs | writes |",
        rw.iter()
            .map(|(which, r)| {
                format!(
                    "| {} | 32 | {:.0} | {:.0} | {:.0} | {} |",
                    which.label("SHARED / exclusive"),
                    r.ops_per_sec,
                    r.reader_wait_p99_us,
                    r.writer_wait_p99_us,
                    r.writes
                )
            })
            .collect(),
    );
    report.section(
        "6b. Semaphore of 10 permits (1 ms holds)",
        "| client loop | clients | grants/s | wait p99 µs | Jain | most permits held at once |",
        sem.iter()
            .map(|(which, r)| {
                format!(
                    "| {} | 64 | {:.0} | {:.0} | {:.4} | {} |",
                    which.label("LIMIT 10"),
                    r.grants_per_sec,
                    r.wait_p99_us,
                    r.jain,
                    if r.max_in_use >= 0 {
                        r.max_in_use.to_string()
                    } else {
                        "-".into()
                    }
                )
            })
            .collect(),
    );
    checks(report, (&rw[0].1, &rw[1].1), (&sem[0].1, &sem[1].1));
}

/// Section 6's targets, each as (module, Lua).
fn checks(
    report: &mut Report,
    (module_rw, lua_rw): (&RwResult, &RwResult),
    (module_sem, lua_sem): (&SemResult, &SemResult),
) {
    report.check(
        "read-mostly RW lock: writers' wait p99 vs readers' p99",
        format!(
            "{:.2}x ({:.0} vs {:.0} µs)",
            module_rw.writer_wait_p99_us / module_rw.reader_wait_p99_us.max(1.0),
            module_rw.writer_wait_p99_us,
            module_rw.reader_wait_p99_us
        ),
        "<= 2x",
        module_rw.writer_wait_p99_us <= 2.0 * module_rw.reader_wait_p99_us.max(1.0),
    );
    report.check(
        "read-mostly RW lock: throughput vs the Lua RW lock",
        format!(
            "{:.2}x ({:.0} vs {:.0} ops/s)",
            module_rw.ops_per_sec / lua_rw.ops_per_sec.max(1.0),
            module_rw.ops_per_sec,
            lua_rw.ops_per_sec
        ),
        ">= 1x",
        module_rw.ops_per_sec >= lua_rw.ops_per_sec,
    );
    report.check(
        "semaphore, 10 permits, 64 clients: Jain fairness",
        format!("{:.4}", module_sem.jain),
        ">= 0.99",
        module_sem.jain >= 0.99,
    );
    report.check(
        "semaphore, 10 permits, 64 clients: grants/s vs Lua/ZSET",
        format!(
            "{:.2}x ({:.0} vs {:.0})",
            module_sem.grants_per_sec / lua_sem.grants_per_sec.max(1.0),
            module_sem.grants_per_sec,
            lua_sem.grants_per_sec
        ),
        "report",
        true,
    );
}
