//! Section 1, uncontended cycles: acquire + release of distinct keys, unpipelined and pipelined.
//! Pipelined, the variants take turns for three rounds and each keeps its best (as section 8
//! does): the bench's client threads share the machine's cores with the server, and one round
//! each moved the ratios by a tenth from run to run on a 2-core machine.

use std::time::{Duration, Instant};

use crate::charts::Series;
use crate::report::Report;
use crate::stats::{micros, process_cpu, quantile};
use redis_lock_harness::Server;

/// Compare-and-delete: the release script every `SET NX PX` lock ships.
pub const CAD_SCRIPT: &str =
    "if redis.call('get', KEYS[1]) == ARGV[1] then return redis.call('del', KEYS[1]) else return 0 end";

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Variant {
    Lock,
    LuaRelease,
    /// Valkey 9's native compare-and-delete.
    DelIfEq,
    UnsafeDel,
    Ping,
}

impl Variant {
    pub const ALL: [Variant; 4] = [
        Variant::Lock,
        Variant::LuaRelease,
        Variant::UnsafeDel,
        Variant::Ping,
    ];

    pub fn label(self) -> &'static str {
        match self {
            Variant::Lock => "LOCK.ACQUIRE + LOCK.RELEASE",
            Variant::LuaRelease => "SET NX PX + EVALSHA release",
            Variant::DelIfEq => "SET NX PX + DELIFEQ release",
            Variant::UnsafeDel => "SET NX PX + DEL (unsafe)",
            Variant::Ping => "PING + PING (server limit)",
        }
    }

    /// The two commands of one cycle on `key`.
    fn cycle(self, p: &mut redis::Pipeline, key: &str, owner: &str, sha: &str) {
        match self {
            Variant::Lock => {
                p.cmd("LOCK.ACQUIRE").arg(key).arg(owner).arg(30_000);
                p.cmd("LOCK.RELEASE").arg(key).arg(owner);
            }
            Variant::LuaRelease => {
                set_nx_px(p, key, owner);
                p.cmd("EVALSHA").arg(sha).arg(1).arg(key).arg(owner);
            }
            Variant::DelIfEq => {
                set_nx_px(p, key, owner);
                p.cmd("DELIFEQ").arg(key).arg(owner);
            }
            Variant::UnsafeDel => {
                set_nx_px(p, key, owner);
                p.cmd("DEL").arg(key);
            }
            Variant::Ping => {
                p.cmd("PING");
                p.cmd("PING");
            }
        }
    }
}

/// The acquire of the `SET NX PX` locks.
fn set_nx_px(p: &mut redis::Pipeline, key: &str, owner: &str) {
    p.cmd("SET")
        .arg(key)
        .arg(owner)
        .arg("NX")
        .arg("PX")
        .arg(30_000);
}

pub struct Result {
    pub cycles_per_sec: f64,
    /// The server's CPU time per cycle (user + system), µs.
    pub cpu_us: f64,
    pub p50_us: f64,
    pub p99_us: f64,
    /// Per-cycle latencies (µs) of the unpipelined run, for the CDF chart.
    pub samples: Vec<f64>,
}

/// Run `variant` on `threads` connections for `dur`, `pipeline` cycles per round trip.
pub fn run(
    server: &Server,
    variant: Variant,
    threads: usize,
    pipeline: usize,
    dur: Duration,
) -> Result {
    let sha: String = redis::cmd("SCRIPT")
        .arg("LOAD")
        .arg(CAD_SCRIPT)
        .query(&mut server.con())
        .expect("script load");
    let cons: Vec<_> = (0..threads)
        .map(|_| std::sync::Mutex::new(server.con()))
        .collect();
    let cons = std::sync::Arc::new(cons);
    let until = Instant::now() + dur;
    let cpu_before = process_cpu(server.pid());
    let started = Instant::now();
    let per_thread = crate::stats::for_threads(
        threads,
        move |t, until| {
            let mut con = cons[t].lock().expect("connection");
            let owner = format!("8d3e4f5a-0000-4000-8000-{t:012}");
            let mut latencies = Vec::new();
            let mut cycles = 0u64;
            let mut i = 0u64;
            while Instant::now() < until {
                let mut p = redis::pipe();
                for _ in 0..pipeline {
                    variant.cycle(&mut p, &format!("bench:{t}:{i}"), &owner, &sha);
                    i += 1;
                }
                let t0 = Instant::now();
                let _: redis::Value = p.query(&mut *con).expect("cycle");
                latencies.push(micros(t0.elapsed()) / pipeline as f64);
                cycles += pipeline as u64;
            }
            (cycles, latencies)
        },
        until,
    );
    let elapsed = started.elapsed().as_secs_f64();
    let cpu = process_cpu(server.pid()).saturating_sub(cpu_before);
    let cycles: u64 = per_thread.iter().map(|(c, _)| c).sum();
    let mut samples: Vec<f64> = per_thread.into_iter().flat_map(|(_, l)| l).collect();
    let p50 = quantile(&mut samples, 0.50);
    let p99 = quantile(&mut samples, 0.99);
    let _: () = redis::cmd("FLUSHALL")
        .query(&mut server.con())
        .expect("flush");
    Result {
        cycles_per_sec: cycles as f64 / elapsed,
        cpu_us: cpu.as_secs_f64() * 1e6 / cycles.max(1) as f64,
        p50_us: p50,
        p99_us: p99,
        samples: if pipeline == 1 { samples } else { Vec::new() },
    }
}

/// Section 1: acquire + release cycles of distinct keys against the baselines, unpipelined and
/// pipelined. Returns the unpipelined cycle latencies of each variant, for a chart.
pub fn section(report: &mut Report, server: &Server, dur: Duration) -> Series {
    let threads = 8;
    let mut rows = Vec::new();
    let mut by = std::collections::HashMap::new();
    let mut cdf_series = Vec::new();
    let delifeq = crate::instructions::has_command(server, "DELIFEQ");
    let variants: Vec<Variant> = Variant::ALL
        .into_iter()
        .chain(delifeq.then_some(Variant::DelIfEq))
        .collect();
    for pipeline in [1, 32] {
        for (v, r) in measure(server, &variants, threads, pipeline, dur) {
            rows.push(format!(
                "| {} | {} | {:.0} | {:.2} | {:.1} | {:.1} |",
                v.label(),
                pipeline,
                r.cycles_per_sec,
                r.cpu_us,
                r.p50_us,
                r.p99_us
            ));
            if pipeline == 1 {
                cdf_series.push((v.label().to_string(), r.samples.clone()));
            }
            by.insert((v, pipeline), (r.cycles_per_sec, r.cpu_us));
        }
    }
    report.section(
        &format!("1. Uncontended acquire + release cycles ({threads} connections, distinct keys)"),
        "| variant | pipeline | cycles/s | server CPU µs/cycle | p50 µs/cycle | p99 µs/cycle |",
        rows,
    );
    for pipeline in [1, 32] {
        let lock = by[&(Variant::Lock, pipeline)].0;
        let lua = by[&(Variant::LuaRelease, pipeline)].0;
        let unsafe_del = by[&(Variant::UnsafeDel, pipeline)].0;
        let tag = if pipeline == 1 {
            "unpipelined"
        } else {
            "pipelined"
        };
        report.check(
            &format!("cycle throughput vs SET NX PX + EVALSHA ({tag})"),
            format!("{:.2}x", lock / lua),
            if pipeline == 1 { "report" } else { ">= 1.3x" },
            pipeline == 1 || lock / lua >= 1.3,
        );
        report.check(
            &format!("cycle throughput vs unsafe SET NX + DEL ({tag})"),
            format!("{:.2}x", lock / unsafe_del),
            ">= 0.9x",
            lock / unsafe_del >= 0.9,
        );
        if delifeq {
            let (native, native_cpu) = by[&(Variant::DelIfEq, pipeline)];
            let lock_cpu = by[&(Variant::Lock, pipeline)].1;
            report.check(
                &format!("cycle throughput vs SET NX PX + DELIFEQ ({tag})"),
                format!(
                    "{:.2}x; server CPU per cycle {:.2}x",
                    lock / native,
                    lock_cpu / native_cpu
                ),
                if pipeline == 1 { "report" } else { ">= 1.0x" },
                pipeline == 1 || lock / native >= 1.0,
            );
        }
    }
    cdf_series
}

/// Each variant's cycles: one round each unpipelined (its latencies are the chart's); pipelined,
/// three rounds taking turns, each variant keeping its best throughput and its least CPU.
fn measure(
    server: &Server,
    variants: &[Variant],
    threads: usize,
    pipeline: usize,
    dur: Duration,
) -> Vec<(Variant, Result)> {
    let rounds = if pipeline == 1 { 1 } else { 3 };
    let mut best: Vec<(Variant, Option<Result>)> = variants.iter().map(|&v| (v, None)).collect();
    for _ in 0..rounds {
        for (v, kept) in best.iter_mut() {
            let r = run(server, *v, threads, pipeline, dur);
            *kept = Some(match kept.take() {
                None => r,
                Some(k) => Result {
                    cycles_per_sec: k.cycles_per_sec.max(r.cycles_per_sec),
                    cpu_us: k.cpu_us.min(r.cpu_us),
                    ..k
                },
            });
        }
    }
    best.into_iter()
        .filter_map(|(v, r)| r.map(|r| (v, r)))
        .collect()
}
