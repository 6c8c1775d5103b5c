//! `make bench`: redis-lock measured against the `SET NX PX` + Lua baseline, the unsafe
//! `SET NX` + `DEL` floor, `PING`, and polling clients, in one run on one server. Prints the
//! ratios and raw figures, writes `results.md` and PNG charts into the output folder.
//!
//! Usage: redis-lock-bench [--out DIR] [--quick]
//!        redis-lock-bench --waiters N   (only the memory of N lock waiters vs N BLPOP waiters)
//!        redis-lock-bench --cost        (only section 8, the module's own cost)
//!        redis-lock-bench --cycles      (only section 1, the uncontended cycles)
//!        redis-lock-bench --go          (only section 9, the Go lock clients)
//!        redis-lock-bench --watch       (only section 10, the watchers)
//!
//! With `LOCK_BASELINE_MODULE=/path/to/an/older/libredis_lock.so`, section 8b also counts the
//! acquire path of that module, so a change's cost shows before and after in one run.

mod charts;
mod clients;
mod contended;
mod expiry;
mod family;
mod instructions;
mod memory;
mod overhead;
mod report;
mod scale;
mod stats;
mod uncontended;
mod watch;
mod words;

use std::path::PathBuf;
use std::time::Duration;

use redis_lock_harness::Server;
use report::Report;

/// The sections of a full run, in order, as their progress lines name them.
const SECTIONS: [&str; 10] = [
    "uncontended cycles",
    "contended handoff",
    "expiry handoff",
    "memory",
    "scale",
    "shared locks and semaphores",
    "Python lock clients",
    "the module's own cost",
    "Go lock clients",
    "watchers",
];

/// The progress line of section `n` (from 1), such as "4/8 memory".
fn progress(n: usize) -> String {
    format!("{n}/{} {}", SECTIONS.len(), SECTIONS[n - 1])
}

/// The argument after `flag`, if given.
fn flag_value<'a>(args: &'a [String], flag: &str) -> Option<&'a String> {
    args.iter()
        .position(|a| a == flag)
        .and_then(|i| args.get(i + 1))
}

/// `--go`, `--watch`, `--cycles`, `--memory` or `--cost`: that section alone.
fn one_section(args: &[String], server: &Server, quick: bool, dur: Duration) -> Option<Report> {
    let flag = ["--go", "--watch", "--cycles", "--memory", "--cost"]
        .into_iter()
        .find(|flag| args.iter().any(|a| a == flag))?;
    let mut report = Report::default();
    match flag {
        "--go" => clients::go(&mut report, server.port, dur),
        "--watch" => watch::section(&mut report, server, quick),
        "--cycles" => {
            uncontended::section(&mut report, server, dur);
        }
        "--memory" => memory::section(&mut report, server, quick),
        _ => {
            overhead::section(&mut report, server, dur);
            instructions::section(&mut report, server);
        }
    }
    Some(report)
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let quick = args.iter().any(|a| a == "--quick");
    let out = flag_value(&args, "--out")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from("docs/bench"));
    std::fs::create_dir_all(&out).expect("output folder");
    let secs = if quick { 1 } else { 3 };
    let dur = Duration::from_secs(secs);

    let server = Server::builder().args(&["--maxclients", "20000"]).start();
    if let Some(n) = flag_value(&args, "--waiters").and_then(|n| n.parse::<usize>().ok()) {
        memory::waiters_only(&server, n);
        return;
    }
    if let Some(report) = one_section(&args, &server, quick, dur) {
        println!("{}", report.markdown());
        return;
    }
    eprintln!(
        "server {} on port {}, module {}",
        redis_lock_harness::server_binary(),
        server.port,
        redis_lock_harness::module_path().display()
    );
    let mut report = Report::default();
    eprintln!("{}", progress(1));
    let cycle_latencies = uncontended::section(&mut report, &server, dur);
    eprintln!("{}", progress(2));
    let handoff_latencies = contended::section(&mut report, &server, quick, dur);
    eprintln!("{}", progress(3));
    let expiry_latencies = expiry::section(&mut report, &server, quick);
    eprintln!("{}", progress(4));
    memory::section(&mut report, &server, quick);
    eprintln!("{}", progress(5));
    scale::section(&mut report, &server, quick);
    eprintln!("{}", progress(6));
    family::section(&mut report, &server, dur);
    // Section 7 only if the client's virtual environment is there (`make bench` makes it).
    let python = redis_lock_harness::workspace().join("target/pyvenv/bin/python");
    if python.exists() {
        eprintln!("{}", progress(7));
        clients::python(&mut report, &python, server.port, dur);
    } else {
        eprintln!(
            "{} skipped: no target/pyvenv (run make pyvenv)",
            progress(7)
        );
    }
    eprintln!("{}", progress(8));
    overhead::section(&mut report, &server, dur);
    instructions::section(&mut report, &server);
    eprintln!("{}", progress(9));
    clients::go(&mut report, server.port, dur);
    eprintln!("{}", progress(10));
    watch::section(&mut report, &server, quick);
    charts::draw(&out, cycle_latencies, handoff_latencies, expiry_latencies);
    report::write_results(&report, &out);
}
