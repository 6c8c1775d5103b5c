//! Section 4, memory: bytes per held lock against the `SET NX PX` string it replaces, bytes per
//! waiter, and memory after everything is released.

use std::io::Write;
use std::net::TcpStream;
use std::time::Duration;

use crate::common::{blocked_clients, eventually, info_field, Connection, Server};

pub struct Result {
    pub bytes_per_lock: f64,
    pub bytes_per_string: f64,
    pub bytes_per_waiter: f64,
    pub baseline: i64,
    pub after_release: i64,
}

pub fn used_memory(c: &mut Connection) -> i64 {
    info_field(c, "memory", "used_memory").parse().unwrap_or(0)
}

/// Encode one command in RESP.
pub fn resp(args: &[&[u8]]) -> Vec<u8> {
    let mut out = format!("*{}\r\n", args.len()).into_bytes();
    for a in args {
        out.extend_from_slice(format!("${}\r\n", a.len()).as_bytes());
        out.extend_from_slice(a);
        out.extend_from_slice(b"\r\n");
    }
    out
}

/// Open `n` raw connections that each block in `LOCK.ACQUIRE key w<i> ttl WAIT 0`.
pub fn block_waiters(server: &Server, key: &str, n: usize) -> Vec<TcpStream> {
    let mut c = server.con();
    let before = blocked_clients(&mut c);
    let socks: Vec<TcpStream> = (0..n)
        .map(|i| {
            let mut s = TcpStream::connect(("127.0.0.1", server.port)).expect("connect");
            let owner = format!("waiter-{i:06}");
            s.write_all(&resp(&[
                b"LOCK.ACQUIRE",
                key.as_bytes(),
                owner.as_bytes(),
                b"60000",
                b"WAIT",
                b"0",
            ]))
            .expect("send");
            s
        })
        .collect();
    assert!(
        eventually(Duration::from_secs(60), || blocked_clients(&mut c)
            == before + n as i64),
        "waiters did not block"
    );
    socks
}

fn settle(c: &mut Connection) -> i64 {
    // The keyspace shrinks its tables in the background: give the cron a moment.
    std::thread::sleep(Duration::from_millis(1500));
    used_memory(c)
}

fn fill(c: &mut Connection, n: usize, lock: bool) {
    const OWNER: &str = "8d3e4f5a-1111-4222-8333-444455556666";
    for start in (0..n).step_by(10_000) {
        let mut p = redis::pipe();
        for i in start..(start + 10_000).min(n) {
            let key = format!("order:{i:08}");
            if lock {
                p.cmd("LOCK.ACQUIRE").arg(key).arg(OWNER).arg(600_000);
            } else {
                p.cmd("SET")
                    .arg(key)
                    .arg(OWNER)
                    .arg("NX")
                    .arg("PX")
                    .arg(600_000);
            }
        }
        let _: redis::Value = p.query(c).expect("fill");
    }
}

pub fn run(server: &Server, n: usize, waiters: usize) -> Result {
    let mut c = server.con();
    let _: () = redis::cmd("FLUSHALL").query(&mut c).expect("flush");
    let baseline = settle(&mut c);

    fill(&mut c, n, true);
    let with_locks = used_memory(&mut c);
    let _: () = redis::cmd("FLUSHALL").query(&mut c).expect("flush");
    let base2 = settle(&mut c);
    fill(&mut c, n, false);
    let with_strings = used_memory(&mut c);
    let _: () = redis::cmd("FLUSHALL").query(&mut c).expect("flush");

    // Waiters: connections first (their buffers are not the waiter's cost), then block them.
    let _: i64 = redis::cmd("LOCK.ACQUIRE")
        .arg("bench:w")
        .arg("holder")
        .arg(600_000)
        .query(&mut c)
        .expect("hold");
    let socks: Vec<TcpStream> = (0..waiters)
        .map(|_| TcpStream::connect(("127.0.0.1", server.port)).expect("connect"))
        .collect();
    let before_block = settle(&mut c);
    for (i, mut s) in socks.iter().enumerate() {
        let owner = format!("waiter-{i:06}");
        s.write_all(&resp(&[
            b"LOCK.ACQUIRE",
            b"bench:w",
            owner.as_bytes(),
            b"60000",
            b"WAIT",
            b"0",
        ]))
        .expect("send");
    }
    assert!(eventually(Duration::from_secs(30), || blocked_clients(
        &mut c
    ) == waiters as i64));
    let with_waiters = used_memory(&mut c);
    drop(socks);
    assert!(eventually(Duration::from_secs(30), || blocked_clients(
        &mut c
    ) == 0));
    let _: () = redis::cmd("FLUSHALL").query(&mut c).expect("flush");
    let after_release = settle(&mut c);
    Result {
        bytes_per_lock: (with_locks - baseline) as f64 / n as f64,
        bytes_per_string: (with_strings - base2) as f64 / n as f64,
        bytes_per_waiter: (with_waiters - before_block) as f64 / waiters as f64,
        baseline,
        after_release,
    }
}
