//! Section 8, what the module itself costs the server: `GET` and `SET` with and without the
//! module loaded (its command filter sees every command on the server), and `LOCK.ACQUIRE` alone
//! against the `SET NX PX` it replaces. Each as requests/s and as the server's CPU per request
//! (user + system, from /proc), pipelined on 8 connections; the servers take turns for three
//! rounds and each keeps its best round, because the client threads share the machine's cores.

use std::time::{Duration, Instant};

use redis_lock_harness::Server;

use crate::report::Report;
use crate::stats::process_cpu;
use crate::words;

/// One load: requests/s and server CPU µs per request.
#[derive(Clone, Copy, Debug, Default)]
pub struct Rate {
    pub per_sec: f64,
    pub cpu_us: f64,
}

impl Rate {
    fn best(self, other: Rate) -> Rate {
        Rate {
            per_sec: self.per_sec.max(other.per_sec),
            cpu_us: if self.cpu_us == 0.0 {
                other.cpu_us
            } else {
                self.cpu_us.min(other.cpu_us)
            },
        }
    }
}

/// The commands of one load: `(thread, i)` to the command's words.
type Words = fn(usize, u64) -> Vec<String>;

pub const GET: Words = |_, i| words::get(&format!("k:{}", i % 10_000));
pub const SET: Words = |_, i| words::set(&format!("k:{}", i % 10_000));
pub const SET_NX_PX: Words = |t, i| words::set_nx_px(&format!("a:{t}:{i}"));
pub const ACQUIRE: Words = |t, i| words::acquire(&format!("b:{t}:{i}"));

fn load(server: &Server, words: Words, dur: Duration) -> Rate {
    const THREADS: usize = 8;
    const PIPELINE: usize = 32;
    let port = server.port;
    let cpu_before = process_cpu(server.pid());
    let started = Instant::now();
    let counts = crate::stats::for_threads(
        THREADS,
        move |t, until| {
            let client = redis::Client::open(format!("redis://127.0.0.1:{port}/")).expect("url");
            let mut con = client.get_connection().expect("connect");
            let mut i = 0u64;
            let mut done = 0u64;
            while Instant::now() < until {
                let mut p = redis::pipe();
                for _ in 0..PIPELINE {
                    let cmd = p.cmd(&words(t, i)[0]);
                    for w in &words(t, i)[1..] {
                        cmd.arg(w);
                    }
                    i += 1;
                }
                let _: redis::Value = p.query(&mut con).expect("load");
                done += PIPELINE as u64;
            }
            done
        },
        Instant::now() + dur,
    );
    let elapsed = started.elapsed().as_secs_f64();
    let cpu = process_cpu(server.pid()).saturating_sub(cpu_before);
    let requests: u64 = counts.iter().sum();
    let _: () = redis::cmd("FLUSHALL")
        .query(&mut server.con())
        .expect("flush");
    Rate {
        per_sec: requests as f64 / elapsed,
        cpu_us: cpu.as_secs_f64() * 1e6 / requests.max(1) as f64,
    }
}

/// The best of three alternating rounds of each `(server, words)` load.
pub fn compare(loads: &[(&Server, Words)], dur: Duration) -> Vec<Rate> {
    let mut best = vec![Rate::default(); loads.len()];
    for _round in 0..3 {
        for (slot, &(server, words)) in best.iter_mut().zip(loads) {
            if std::ptr::fn_addr_eq(words, GET) {
                fill(server);
            }
            *slot = slot.best(load(server, words, dur));
        }
    }
    best
}

/// The keys `GET` reads.
fn fill(server: &Server) {
    let mut p = redis::pipe();
    for i in 0..10_000 {
        p.cmd("SET").arg(format!("k:{i}")).arg("v").ignore();
    }
    let _: () = p.query(&mut server.con()).expect("fill");
}

/// Section 8: GET and SET on the same server binary without the module and with it (its
/// command filter sees every command), and LOCK.ACQUIRE of fresh keys against SET NX PX.
pub fn section(report: &mut Report, server: &redis_lock_harness::Server, dur: Duration) {
    let plain = redis_lock_harness::Server::builder()
        .without_module()
        .start();
    let r = compare(
        &[
            (&plain, GET),
            (server, GET),
            (&plain, SET),
            (server, SET),
            (server, SET_NX_PX),
            (server, ACQUIRE),
        ],
        dur,
    );
    let row =
        |what: &str, rate: Rate| format!("| {what} | {:.0} | {:.2} |", rate.per_sec, rate.cpu_us);
    report.section(
        "8. The module's own cost (pipelined by 32, 8 connections; best of 3 alternating rounds)",
        "| load | requests/s | server CPU µs/request |",
        vec![
            row("GET, server without the module", r[0]),
            row("GET, with the module loaded", r[1]),
            row("SET, server without the module", r[2]),
            row("SET, with the module loaded", r[3]),
            row("SET NX PX of fresh keys", r[4]),
            row("LOCK.ACQUIRE of fresh keys", r[5]),
        ],
    );
    for (name, without, with) in [("GET", r[0], r[1]), ("SET", r[2], r[3])] {
        let cost = 1.0 - with.per_sec / without.per_sec;
        report.check(
            &format!("{name} throughput lost by loading the module"),
            format!(
                "{:.1}% (server CPU per request {:+.1}%)",
                cost * 100.0,
                (with.cpu_us / without.cpu_us - 1.0) * 100.0
            ),
            "<= 2%",
            cost <= 0.02,
        );
    }
    report.check(
        "LOCK.ACQUIRE vs SET NX PX (pipelined, fresh keys)",
        format!(
            "{:.2}x requests/s; server CPU per request {:.2}x",
            r[5].per_sec / r[4].per_sec,
            r[5].cpu_us / r[4].cpu_us
        ),
        ">= 0.9x",
        r[5].per_sec >= 0.9 * r[4].per_sec,
    );
}
