//! Section 10, watchers: how soon a `LOCK.WATCH` watcher hears of a release, against a keyspace
//! notification subscriber hearing of the `DEL` that releases a `SET NX PX` lock (what users
//! watch with today); how long N watchers of one lock take to all hear of one release, against
//! N subscribers of its keyspace channel; and what a watcher costs in memory, against a client
//! blocked in BLPOP.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::{Duration, Instant};

use crate::memory::{blocked_cost, resp};
use crate::report::Report;
use crate::stats::{micros, quantile};
use redis_lock_harness::{eventually, info_field, Connection, Server};

/// The cursor of what stands under `key` now.
fn cursor(c: &mut Connection, key: &str) -> String {
    let reply: redis::Value = redis::cmd("LOCK.WATCH").arg(key).query(c).expect("watch");
    let redis::Value::Array(fields) = reply else {
        panic!("LOCK.WATCH: {reply:?}")
    };
    match &fields[1] {
        redis::Value::BulkString(b) => String::from_utf8_lossy(b).into_owned(),
        other => panic!("cursor: {other:?}"),
    }
}

fn acquire(c: &mut Connection, key: &str) {
    let _: i64 = redis::cmd("LOCK.ACQUIRE")
        .arg(key)
        .arg("holder")
        .arg(600_000)
        .query(c)
        .expect("acquire");
}

fn release(c: &mut Connection, key: &str) {
    let _: i64 = redis::cmd("LOCK.RELEASE")
        .arg(key)
        .arg("holder")
        .query(c)
        .expect("release");
}

fn watchers(c: &mut Connection) -> i64 {
    info_field(c, "lock", "lock_watchers").parse().unwrap_or(-1)
}

/// From just before the release to the watcher's news, `rounds` times (µs).
fn watch_latency(server: &Server, rounds: usize) -> Vec<f64> {
    let mut c = server.con();
    let mut samples = Vec::with_capacity(rounds);
    for i in 0..rounds {
        let key = format!("bench:watch:{i}");
        acquire(&mut c, &key);
        let after = cursor(&mut c, &key);
        let mut socks = connect_all(server, 1, &resp_watch(&key, &after));
        assert!(eventually(Duration::from_secs(10), || watchers(&mut c) == 1));
        let start = Instant::now();
        release(&mut c, &key);
        read_one(&mut socks[0]);
        samples.push(micros(start.elapsed()));
    }
    samples
}

/// From just before the `DEL` of a `SET NX PX` lock to its keyspace event (µs).
fn keyspace_latency(server: &Server, rounds: usize) -> Vec<f64> {
    let mut c = server.con();
    let _: () = redis::cmd("CONFIG")
        .arg("SET")
        .arg("notify-keyspace-events")
        .arg("Kg")
        .query(&mut c)
        .expect("config");
    let mut samples = Vec::with_capacity(rounds);
    for i in 0..rounds {
        let key = format!("bench:ks:{i}");
        let _: () = redis::cmd("SET")
            .arg(&key)
            .arg("holder")
            .arg("NX")
            .arg("PX")
            .arg(600_000)
            .query(&mut c)
            .expect("set");
        let mut socks = subscribers(server, &mut c, &key, 1);
        let start = Instant::now();
        let _: i64 = redis::cmd("DEL").arg(&key).query(&mut c).expect("del");
        read_one(&mut socks[0]);
        samples.push(micros(start.elapsed()));
    }
    samples
}

fn resp_watch(key: &str, after: &str) -> Vec<u8> {
    resp(&[
        b"LOCK.WATCH",
        key.as_bytes(),
        b"AFTER",
        after.as_bytes(),
        b"WAIT",
        b"0",
    ])
}

fn connect_all(server: &Server, n: usize, command: &[u8]) -> Vec<TcpStream> {
    (0..n)
        .map(|_| {
            let mut s = TcpStream::connect(("127.0.0.1", server.port)).expect("connect");
            s.set_read_timeout(Some(Duration::from_secs(30)))
                .expect("timeout");
            s.write_all(command).expect("send");
            s
        })
        .collect()
}

/// `n` clients subscribed to `key`'s keyspace channel (their confirmations read).
fn subscribers(server: &Server, c: &mut Connection, key: &str, n: usize) -> Vec<TcpStream> {
    let channel = format!("__keyspace@0__:{key}");
    let mut socks = connect_all(server, n, &resp(&[b"SUBSCRIBE", channel.as_bytes()]));
    for s in &mut socks {
        read_one(s);
    }
    let count = |c: &mut Connection| -> i64 {
        let reply: Vec<redis::Value> = redis::cmd("PUBSUB")
            .arg("NUMSUB")
            .arg(&channel)
            .query(c)
            .expect("numsub");
        match reply.get(1) {
            Some(redis::Value::Int(n)) => *n,
            _ => -1,
        }
    };
    assert!(eventually(Duration::from_secs(30), || count(c) == n as i64));
    socks
}

/// Read one reply's first bytes (enough to know it came).
fn read_one(s: &mut TcpStream) {
    let mut buf = [0u8; 512];
    let n = s.read(&mut buf).expect("a reply");
    assert!(n > 0, "the server closed the connection");
}

/// From just before the release until every one of `n` watchers has read its news.
fn wake_all_watchers(server: &Server, n: usize) -> Duration {
    let mut c = server.con();
    acquire(&mut c, "bench:hot");
    let after = cursor(&mut c, "bench:hot");
    let mut socks = connect_all(server, n, &resp_watch("bench:hot", &after));
    assert!(eventually(Duration::from_secs(60), || watchers(&mut c) == n as i64));
    let start = Instant::now();
    release(&mut c, "bench:hot");
    for s in &mut socks {
        read_one(s);
    }
    start.elapsed()
}

/// The same for `n` subscribers of a `SET NX PX` lock's keyspace channel and its `DEL`.
fn wake_all_subscribers(server: &Server, n: usize) -> Duration {
    let mut c = server.con();
    let _: () = redis::cmd("SET")
        .arg("bench:hot-string")
        .arg("holder")
        .query(&mut c)
        .expect("set");
    let mut socks = subscribers(server, &mut c, "bench:hot-string", n);
    let start = Instant::now();
    let _: i64 = redis::cmd("DEL")
        .arg("bench:hot-string")
        .query(&mut c)
        .expect("del");
    for s in &mut socks {
        read_one(s);
    }
    start.elapsed()
}

/// Section 10 (see the module comment).
pub fn section(report: &mut Report, server: &Server, quick: bool) {
    let rounds = if quick { 50 } else { 300 };
    let n = if quick { 1_000 } else { 10_000 };
    let mut watch = watch_latency(server, rounds);
    let mut keyspace = keyspace_latency(server, rounds);
    let p = |s: &mut Vec<f64>, q| quantile(s, q);
    let (w50, w99, k50, k99) = (
        p(&mut watch, 0.5),
        p(&mut watch, 0.99),
        p(&mut keyspace, 0.5),
        p(&mut keyspace, 0.99),
    );
    let all_watchers = wake_all_watchers(server, n);
    let all_subscribers = wake_all_subscribers(server, n);
    // On a server of its own: the temporary clients of blocked module clients go back to the
    // server's pool, which frees 50 of them per 100 ms, so a crowd that just left would still
    // be leaving. BLPOP first (it uses no module client). 1,000 clients, as section 4: with
    // 10,000 the server is still shrinking idle clients' buffers while it is measured.
    let fresh = Server::builder().args(&["--maxclients", "20000"]).start();
    let m = n.min(1_000);
    let (blpop_bytes, _) = blocked_cost(&fresh, m, |_| resp(&[b"BLPOP", b"bench:empty", b"0"]));
    let mut c = fresh.con();
    acquire(&mut c, "bench:mem");
    let after = cursor(&mut c, "bench:mem");
    let (watcher_bytes, watcher_module) =
        blocked_cost(&fresh, m, |_| resp_watch("bench:mem", &after));
    report.check(
        "a watcher hears of a release, p99",
        format!("{:.2} ms", w99 / 1000.0),
        "<= 5 ms",
        w99 <= 5000.0,
    );
    report.section(
        "10. Watchers (LOCK.WATCH) against keyspace notifications and BLPOP",
        "| measure | LOCK.WATCH | peer | peer is | ratio (peer / watch) |",
        vec![
            format!(
                "| one watcher hears of a release, p50 / p99 µs ({rounds} rounds) | {w50:.0} / {w99:.0} | {k50:.0} / {k99:.0} | a keyspace subscriber hearing the DEL of a SET NX PX lock | {:.2}x / {:.2}x |",
                k50 / w50,
                k99 / w99
            ),
            format!(
                "| {n} of one lock all hear of one release, ms | {:.1} | {:.1} | {n} subscribers of its keyspace channel | {:.2}x |",
                all_watchers.as_secs_f64() * 1e3,
                all_subscribers.as_secs_f64() * 1e3,
                all_subscribers.as_secs_f64() / all_watchers.as_secs_f64()
            ),
            format!(
                "| bytes per blocked client, beyond it idle ({m}) | {watcher_bytes:.0} (module {watcher_module:.0}) | {blpop_bytes:.0} | a client blocked in BLPOP | {:.2}x |",
                blpop_bytes / watcher_bytes
            ),
        ],
    );
}
