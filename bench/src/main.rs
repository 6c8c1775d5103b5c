//! `make bench`: redis-lock measured against the `SET NX PX` + Lua baseline, the unsafe
//! `SET NX` + `DEL` floor, `PING`, and polling clients, in one run on one server. Prints the
//! ratios and raw figures, writes `results.md` and PNG charts into the output folder.
//!
//! Usage: redis-lock-bench [--out DIR] [--quick]
//!        redis-lock-bench --waiters N   (only the memory of N lock waiters vs N BLPOP waiters)
//!        redis-lock-bench --cost        (only section 8, the module's own cost)
//!        redis-lock-bench --go          (only section 9, the Go lock clients)
//!
//! With `LOCK_BASELINE_MODULE=/path/to/an/older/libredis_lock.so`, section 8b also counts the
//! acquire path of that module, so a change's cost shows before and after in one run.

mod charts;
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
mod words;

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

use contended::Mode;
use redis_lock_harness::Server;
use report::Report;
use uncontended::Variant;

/// Named sample sets for one chart.
type Series = Vec<(String, Vec<f64>)>;

/// The sections of a full run, in order, as their progress lines name them.
const SECTIONS: [&str; 9] = [
    "uncontended cycles",
    "contended handoff",
    "expiry handoff",
    "memory",
    "scale",
    "shared locks and semaphores",
    "Python lock clients",
    "the module's own cost",
    "Go lock clients",
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
        waiters_only(&server, n);
        return;
    }
    if args.iter().any(|a| a == "--go") {
        let mut report = Report::default();
        go_clients(&mut report, server.port, dur);
        println!("{}", report.markdown());
        return;
    }
    if args.iter().any(|a| a == "--cost") {
        let mut report = Report::default();
        module_cost(&mut report, &server, dur);
        module_cost_instructions(&mut report);
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
    let cycle_latencies = uncontended_cycles(&mut report, &server, dur);
    eprintln!("{}", progress(2));
    let handoff_latencies = contended_handoff(&mut report, &server, quick, dur);
    eprintln!("{}", progress(3));
    let expiry_latencies = expiry_handoff(&mut report, &server, quick);
    eprintln!("{}", progress(4));
    memory_use(&mut report, &server, quick);
    eprintln!("{}", progress(5));
    operation_scale(&mut report, &server, quick);
    eprintln!("{}", progress(6));
    lock_family(&mut report, &server, dur);
    // Section 7 only if the client's virtual environment is there (`make bench` makes it).
    let python = redis_lock_harness::workspace().join("target/pyvenv/bin/python");
    if python.exists() {
        eprintln!("{}", progress(7));
        python_clients(&mut report, &python, server.port, dur);
    } else {
        eprintln!(
            "{} skipped: no target/pyvenv (run make pyvenv)",
            progress(7)
        );
    }
    eprintln!("{}", progress(8));
    module_cost(&mut report, &server, dur);
    module_cost_instructions(&mut report);
    eprintln!("{}", progress(9));
    go_clients(&mut report, server.port, dur);
    draw_charts(&out, cycle_latencies, handoff_latencies, expiry_latencies);
    write_results(&report, &out);
}

/// `--waiters N`: only the memory of N lock waiters against N BLPOP waiters.
fn waiters_only(server: &Server, n: usize) {
    let w = memory::waiters(server, n);
    println!(
        "{} waiters on {}: {:.0} B each ({:.0} B the module's, {:.0} B the server's); a BLPOP waiter {:.0} B",
        n,
        redis_lock_harness::server_binary(),
        w.total,
        w.module,
        w.server(),
        w.blpop
    );
}

/// Section 1: acquire + release cycles of distinct keys against the baselines, unpipelined and
/// pipelined. Returns the unpipelined cycle latencies of each variant, for a chart.
fn uncontended_cycles(report: &mut Report, server: &Server, dur: Duration) -> Series {
    let threads = 8;
    let mut rows = Vec::new();
    let mut by = std::collections::HashMap::new();
    let mut cdf_series = Vec::new();
    for pipeline in [1, 32] {
        for v in Variant::ALL {
            let r = uncontended::run(server, v, threads, pipeline, dur);
            rows.push(format!(
                "| {} | {} | {:.0} | {:.1} | {:.1} |",
                v.label(),
                pipeline,
                r.cycles_per_sec,
                r.p50_us,
                r.p99_us
            ));
            if pipeline == 1 {
                cdf_series.push((v.label().to_string(), r.samples.clone()));
            }
            by.insert((v, pipeline), r.cycles_per_sec);
        }
    }
    report.section(
        &format!("1. Uncontended acquire + release cycles ({threads} connections, distinct keys)"),
        "| variant | pipeline | cycles/s | p50 µs/cycle | p99 µs/cycle |",
        rows,
    );
    for pipeline in [1, 32] {
        let lock = by[&(Variant::Lock, pipeline)];
        let lua = by[&(Variant::LuaRelease, pipeline)];
        let unsafe_del = by[&(Variant::UnsafeDel, pipeline)];
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
    }
    cdf_series
}

/// Section 2's runs by client loop, client count and hold (ms).
type Contended = HashMap<(Mode, usize, u64), contended::Result>;

/// Section 2: K clients looping on one lock, blocking against polling. Returns the handoff
/// latencies of each client loop with 32 clients and 1 ms holds, for a chart.
fn contended_handoff(report: &mut Report, server: &Server, quick: bool, dur: Duration) -> Series {
    let mut rows = Vec::new();
    let mut handoff_series = Vec::new();
    let mut at = Contended::new();
    let client_counts: &[usize] = if quick { &[8, 32] } else { &[8, 32, 128] };
    for &clients in client_counts {
        for hold_ms in [0u64, 1] {
            for mode in [
                Mode::Wait,
                Mode::Poll(Duration::from_millis(1)),
                Mode::Poll(Duration::from_millis(100)),
            ] {
                let hold = Duration::from_millis(hold_ms);
                let r = contended::run(server, mode, clients, hold, dur);
                rows.push(format!(
                    "| {} | {} | {} | {:.0} | {} | {:.1}% | {:.0} | {:.0} | {:.0} | {:.3} | {:.1} |",
                    mode.label(),
                    clients,
                    hold_ms,
                    r.grants_per_sec,
                    if hold_ms > 0 { format!("{:.3}", r.utilization) } else { "-".into() },
                    r.self_handoff * 100.0,
                    r.handoff_p50_us,
                    r.handoff_p99_us,
                    r.wait_p99_us,
                    r.jain,
                    r.server_cpu_us_per_grant,
                ));
                if clients == 32 && hold_ms == 1 {
                    handoff_series.push((
                        format!("{} (32 clients, 1 ms hold)", mode.label()),
                        r.handoff_samples.clone(),
                    ));
                }
                at.insert((mode, clients, hold_ms), r);
            }
        }
    }
    report.section(
        "2. Contended handoff (K clients loop on one lock)",
        "| client loop | K | hold ms | grants/s | utilization | back to releaser | handoff p50 µs | handoff p99 µs | wait p99 µs | Jain | server CPU µs/grant |",
        rows,
    );
    contended_checks(report, &at);
    handoff_series
}

/// Section 2's targets, on 32 clients.
fn contended_checks(report: &mut Report, at: &Contended) {
    let wait32 = &at[&(Mode::Wait, 32, 1)];
    report.check(
        "32 clients, 1 ms hold: utilization",
        format!("{:.3}", wait32.utilization),
        ">= 0.85",
        wait32.utilization >= 0.85,
    );
    report.check(
        "32 clients, 1 ms hold: grants back to the releaser",
        format!("{:.1}%", wait32.self_handoff * 100.0),
        "0%",
        wait32.self_handoff == 0.0,
    );
    report.check(
        "32 clients, 1 ms hold: Jain fairness",
        format!("{:.4}", wait32.jain),
        ">= 0.99",
        wait32.jain >= 0.99,
    );
    report.check(
        "32 clients, 1 ms hold: cross-client handoff p99",
        format!("{:.0} µs", wait32.handoff_p99_us),
        "<= 1000 µs",
        wait32.handoff_p99_us <= 1000.0,
    );
    let bound = 1.5 * 32.0 * (1000.0 + wait32.handoff_p50_us);
    report.check(
        "32 clients, 1 ms hold: wait p99",
        format!("{:.0} µs", wait32.wait_p99_us),
        &format!("<= 1.5 x 32 x (hold + handoff) = {bound:.0} µs"),
        wait32.wait_p99_us <= bound,
    );
    let wait0 = at[&(Mode::Wait, 32, 0)].grants_per_sec;
    let poll0 = at[&(Mode::Poll(Duration::from_millis(1)), 32, 0)].grants_per_sec;
    report.check(
        "32 clients, no hold: grants/s vs 1 ms polling",
        format!("{:.1}x ({wait0:.0} vs {poll0:.0})", wait0 / poll0.max(1.0)),
        ">= 10x",
        wait0 / poll0.max(1.0) >= 10.0,
    );
}

/// Section 3: how soon after an abandoned lease's deadline its waiter is granted. Returns those
/// latencies, for a chart.
fn expiry_handoff(report: &mut Report, server: &Server, quick: bool) -> Vec<f64> {
    let e = expiry::run(server, if quick { 30 } else { 100 });
    report.section(
        "3. Expiry handoff (holder never releases, one waiter)",
        "| samples | p50 µs after the deadline | p99 µs after the deadline |",
        vec![format!(
            "| {} | {:.0} | {:.0} |",
            e.samples.len(),
            e.p50_us,
            e.p99_us
        )],
    );
    report.check(
        "expiry handoff p99",
        format!("{:.2} ms", e.p99_us / 1000.0),
        "<= 5 ms",
        e.p99_us <= 5000.0,
    );
    e.samples
}

/// Section 4: the memory of held locks against SET NX PX strings, and of waiters.
fn memory_use(report: &mut Report, server: &Server, quick: bool) {
    let m = memory::run(server, if quick { 20_000 } else { 100_000 }, 1000);
    report.section(
        "4. Memory (used_memory deltas; owners as values of the SET NX PX strings)",
        "| measure | bytes |",
        memory_rows(&m),
    );
    for (shape, lock, string) in &m.shapes {
        report.check(
            &format!("memory per held lock vs SET NX PX string, owner {shape}"),
            format!("{:.2}x ({lock:.0} vs {string:.0} B)", lock / string),
            "<= 1.10x",
            *lock <= 1.10 * string,
        );
    }
    report.check(
        "memory per waiter held by the module",
        format!("{:.0} B", m.waiter.module),
        "<= 256 B",
        m.waiter.module <= 256.0,
    );
    report.check(
        "memory per waiter beyond a BLPOP-blocked connection (the server's module-blocking cost)",
        format!("{:.0} B", m.waiter.total - m.waiter.blpop),
        "report",
        true,
    );
    report.check(
        "memory after release returns to baseline",
        format!("{:+} B", m.after_release - m.baseline),
        "within 64 KiB",
        (m.after_release - m.baseline).abs() <= 65_536,
    );
}

/// Section 4's table rows.
fn memory_rows(m: &memory::Result) -> Vec<String> {
    vec![
        format!("| per held lock | {:.1} |", m.bytes_per_lock),
        format!(
            "| per SET NX PX string (same key and value) | {:.1} |",
            m.bytes_per_string
        ),
        m.shapes
            .iter()
            .map(|(shape, lock, string)| {
                format!("| per held lock / per string, owner {shape} | {lock:.1} / {string:.1} |")
            })
            .collect::<Vec<_>>()
            .join("\n"),
        format!(
            "| per waiter (LOCK.ACQUIRE WAIT-blocked connection with a timeout, beyond idle) | {:.1} |",
            m.waiter.total
        ),
        format!(
            "| of that, held by the module (queue entry, index entry) | {:.1} |",
            m.waiter.module
        ),
        format!(
            "| of that, held by the server (blocked-client record, two temporary clients, timer) | {:.1} |",
            m.waiter.server()
        ),
        format!(
            "| per BLPOP-blocked connection, beyond idle (yardstick) | {:.1} |",
            m.waiter.blpop
        ),
        format!(
            "| used_memory at start / after everything was released | {} / {} |",
            m.baseline, m.after_release
        ),
    ]
}

/// Section 5: one operation's round trip with many locks held, and a release's handoff with
/// many waiters queued.
fn operation_scale(report: &mut Report, server: &Server, quick: bool) {
    let held_sizes: &[usize] = if quick {
        &[1_000, 100_000]
    } else {
        &[1_000, 100_000, 1_000_000]
    };
    let held = scale::locks_held(server, held_sizes, 2000);
    let waiter_sizes: &[usize] = if quick {
        &[10, 1_000]
    } else {
        &[10, 1_000, 10_000]
    };
    let queued = scale::waiters(server, waiter_sizes, 200);
    let mut rows: Vec<String> = held
        .iter()
        .map(|p| {
            format!(
                "| acquire or release, {} locks held | {:.1} | {:.1} |",
                p.size, p.p50_us, p.p99_us
            )
        })
        .collect();
    rows.extend(queued.iter().map(|p| {
        format!(
            "| release with handoff, {} waiters | {:.1} | {:.1} |",
            p.size, p.p50_us, p.p99_us
        )
    }));
    report.section(
        "5. Scale (per-operation round trip)",
        "| operation | p50 µs | p99 µs |",
        rows,
    );
    if let (Some(small), Some(big)) = (queued.first(), queued.last()) {
        report.check(
            &format!(
                "release with handoff p99, {} vs {} waiters",
                big.size, small.size
            ),
            format!(
                "{:.2}x ({:.0} vs {:.0} µs)",
                big.p99_us / small.p99_us.max(1.0),
                big.p99_us,
                small.p99_us
            ),
            "<= 2x",
            big.p99_us <= 2.0 * small.p99_us.max(1.0),
        );
    }
}

/// Section 6: the read-write lock and the semaphore against their Lua baselines.
fn lock_family(report: &mut Report, server: &Server, dur: Duration) {
    let rw: Vec<_> = [family::Impl::Module, family::Impl::Lua]
        .into_iter()
        .map(|which| (which, family::read_write(server, which, 32, dur)))
        .collect();
    let sem: Vec<_> = [family::Impl::Module, family::Impl::Lua]
        .into_iter()
        .map(|which| (which, family::semaphore(server, which, 10, 64, dur)))
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
    lock_family_checks(report, (&rw[0].1, &rw[1].1), (&sem[0].1, &sem[1].1));
}

/// Section 6's targets, each as (module, Lua).
fn lock_family_checks(
    report: &mut Report,
    (module_rw, lua_rw): (&family::RwResult, &family::RwResult),
    (module_sem, lua_sem): (&family::SemResult, &family::SemResult),
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

/// The CDF charts of sections 1, 2 and 3 into `out`, if the charts' font is there.
fn draw_charts(out: &Path, cycles: Series, handoffs: Series, expiry: Vec<f64>) {
    if let Err(err) = charts::init() {
        eprintln!("charts skipped: {err}");
        return;
    }
    let charts: [(&str, &str, Series); 3] = [
        (
            "uncontended-latency.png",
            "Uncontended acquire + release cycle latency (CDF)",
            cycles,
        ),
        (
            "handoff-latency.png",
            "Handoff latency between clients, 32 clients, 1 ms hold (CDF)",
            handoffs,
        ),
        (
            "expiry-handoff.png",
            "Expiry handoff: deadline to the waiter's grant (CDF)",
            vec![("LOCK.ACQUIRE WAIT".into(), expiry)],
        ),
    ];
    for (file, title, series) in charts {
        if let Err(err) = charts::cdf(&out.join(file), title, &series) {
            eprintln!("chart {file}: {err}");
        }
    }
}

/// The report on stdout and into `out/results.md`, and the tally of targets on stderr.
fn write_results(report: &Report, out: &Path) {
    let md = report.markdown();
    println!("{md}");
    std::fs::write(out.join("results.md"), &md).expect("write results.md");
    let short = report.checks.iter().filter(|c| !c.pass).count();
    eprintln!(
        "{} targets, {} pass, {} short; results in {}",
        report.checks.len(),
        report.checks.len() - short,
        short,
        out.display()
    );
}

/// Section 8: GET and SET on the same server binary without the module and with it (its
/// command filter sees every command), and LOCK.ACQUIRE of fresh keys against SET NX PX.
fn module_cost(report: &mut Report, server: &redis_lock_harness::Server, dur: Duration) {
    use overhead::{ACQUIRE, GET, SET, SET_NX_PX};
    let plain = redis_lock_harness::Server::builder()
        .without_module()
        .start();
    let r = overhead::compare(
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
    let row = |what: &str, rate: overhead::Rate| {
        format!("| {what} | {:.0} | {:.2} |", rate.per_sec, rate.cpu_us)
    };
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

/// Section 8b: the same comparisons counted in instructions (callgrind), where valgrind is.
fn module_cost_instructions(report: &mut Report) {
    use instructions::{per_request, ACQUIRE, CYCLE, GET, SET, SET_DEL, SET_NX_PX};
    if !instructions::available() {
        eprintln!("8b. instruction counts skipped: no valgrind");
        return;
    }
    let server = redis_lock_harness::server_binary();
    let module = redis_lock_harness::module_path();
    let m = Some(module.as_path());
    let runs = [
        ("GET, server without the module", None, GET),
        ("GET, with the module loaded", m, GET),
        ("SET, server without the module", None, SET),
        ("SET, with the module loaded", m, SET),
        ("SET NX PX of fresh keys", m, SET_NX_PX),
        ("LOCK.ACQUIRE of fresh keys", m, ACQUIRE),
        ("SET NX PX + DEL of fresh keys (per command)", m, SET_DEL),
        (
            "LOCK.ACQUIRE + LOCK.RELEASE of fresh keys (per command)",
            m,
            CYCLE,
        ),
    ];
    let counts: Vec<Option<f64>> = runs
        .iter()
        .map(|&(_, module, words)| per_request(&server, module, words))
        .collect();
    let Some(c) = counts.iter().copied().collect::<Option<Vec<f64>>>() else {
        eprintln!("8b. instruction counts skipped: a callgrind run failed");
        return;
    };
    report.section(
        "8b. Instructions per request, reading it to buffering its reply (callgrind; deterministic)",
        "| load | instructions/request |",
        runs.iter()
            .zip(&c)
            .map(|((what, _, _), n)| format!("| {what} | {n:.0} |"))
            .collect(),
    );
    for (name, without, with) in [("GET", c[0], c[1]), ("SET", c[2], c[3])] {
        report.check(
            &format!("{name}: instructions added by loading the module"),
            format!(
                "{:+.1}% ({without:.0} -> {with:.0})",
                (with / without - 1.0) * 100.0
            ),
            "<= 2%",
            with <= 1.02 * without,
        );
    }
    report.check(
        "LOCK.ACQUIRE vs SET NX PX, instructions per request (fresh keys)",
        format!("{:.2}x ({:.0} vs {:.0})", c[5] / c[4], c[5], c[4]),
        "report",
        true,
    );
    report.check(
        "acquire + release vs SET NX PX + DEL, instructions per command",
        format!("{:.2}x ({:.0} vs {:.0})", c[7] / c[6], c[7], c[6]),
        "report",
        true,
    );
    if let Some(baseline) = std::env::var_os("LOCK_BASELINE_MODULE") {
        against_baseline(report, &server, std::path::Path::new(&baseline), c[5], c[7]);
    }
}

/// Section 8b's acquire path counted on `baseline` (an older build of the module), next to
/// this build's `acquire` and `cycle` counts.
fn against_baseline(
    report: &mut Report,
    server: &str,
    baseline: &std::path::Path,
    acquire: f64,
    cycle: f64,
) {
    use instructions::{per_request, ACQUIRE, CYCLE};
    let (Some(before_acquire), Some(before_cycle)) = (
        per_request(server, Some(baseline), ACQUIRE),
        per_request(server, Some(baseline), CYCLE),
    ) else {
        eprintln!("8b. baseline skipped: a callgrind run failed");
        return;
    };
    for (what, before, after) in [
        ("LOCK.ACQUIRE of fresh keys", before_acquire, acquire),
        (
            "LOCK.ACQUIRE + LOCK.RELEASE (per command)",
            before_cycle,
            cycle,
        ),
    ] {
        report.check(
            &format!("{what}: instructions, baseline module -> this build"),
            format!(
                "{:+.1}% ({before:.0} -> {after:.0})",
                (after / before - 1.0) * 100.0
            ),
            "report",
            true,
        );
    }
}

/// Section 7: the Python client next to redis-py's Lock and python-redis-lock, 16 threads on one
/// lock with 1 ms holds, on the same server (bench/python/contended.py prints one JSON line each).
fn python_clients(report: &mut Report, python: &std::path::Path, port: u16, dur: Duration) {
    let script = redis_lock_harness::workspace().join("bench/python/contended.py");
    let out = std::process::Command::new(python)
        .arg(&script)
        .args([
            port.to_string(),
            dur.as_secs_f64().to_string(),
            "16".into(),
            "1".into(),
        ])
        .output();
    let Ok(out) = out else {
        eprintln!("python clients: could not run {}", script.display());
        return;
    };
    client_section(
        report,
        (
            "7. Python lock clients (16 threads, one lock, 1 ms holds)",
            "threads",
            16,
        ),
        "Python client: grants/s vs the best other Python lock, and Jain",
        &String::from_utf8_lossy(&out.stdout),
    );
}

/// Section 9: the Go client next to redsync (one pool) and bsm/redislock, 32 goroutines on one
/// lock with 1 ms holds, on the same server: target/go/lock-bench (`make bench` builds it from
/// clients/go/bench) prints one JSON line each. Skipped without it (no Go on the machine).
fn go_clients(report: &mut Report, port: u16, dur: Duration) {
    let bench = redis_lock_harness::workspace().join("target/go/lock-bench");
    let out = std::process::Command::new(&bench)
        .args([
            "-addr".to_string(),
            format!("127.0.0.1:{port}"),
            "-seconds".into(),
            dur.as_secs_f64().to_string(),
            "-clients".into(),
            "32".into(),
            "-hold".into(),
            "1ms".into(),
            "-json".into(),
        ])
        .output();
    let Ok(out) = out else {
        eprintln!(
            "go clients skipped: no {} (make bench builds it with Go)",
            bench.display()
        );
        return;
    };
    client_section(
        report,
        (
            "9. Go lock clients (32 goroutines, one lock, 1 ms holds)",
            "goroutines",
            32,
        ),
        "Go client: grants/s vs the best other Go lock, and Jain",
        &String::from_utf8_lossy(&out.stdout),
    );
}

/// A section of lock clients from their JSON lines (`client`, `grants_per_sec`, `jain`,
/// `wait_p99_ms`; this repository's client first), and the check of the first against the
/// fastest other.
fn client_section(
    report: &mut Report,
    (title, unit, n): (&str, &str, usize),
    check: &str,
    out: &str,
) {
    let mut rows = Vec::new();
    let mut results: Vec<(String, f64, f64, f64)> = Vec::new();
    for line in out.lines() {
        let field = |name: &str| -> Option<String> {
            let at = line.find(&format!("\"{name}\":"))? + name.len() + 3;
            let rest = line[at..].trim_start();
            if let Some(text) = rest.strip_prefix('"') {
                return Some(text[..text.find('"')?].to_string());
            }
            let end = rest.find([',', '}']).unwrap_or(rest.len());
            Some(rest[..end].trim().to_string())
        };
        let (Some(client), Some(rate), Some(jain), Some(p99)) = (
            field("client"),
            field("grants_per_sec").and_then(|v| v.parse::<f64>().ok()),
            field("jain").and_then(|v| v.parse::<f64>().ok()),
            field("wait_p99_ms").and_then(|v| v.parse::<f64>().ok()),
        ) else {
            continue;
        };
        rows.push(format!(
            "| {client} | {n} | {rate:.0} | {jain:.4} | {p99:.1} |"
        ));
        results.push((client, rate, jain, p99));
    }
    report.section(
        title,
        &format!("| client | {unit} | grants/s | Jain | wait p99 ms |"),
        rows,
    );
    if let Some((_, ours, jain, p99)) = results.first().cloned() {
        let (best_other, best_p99) = results[1..]
            .iter()
            .map(|(_, rate, _, p99)| (*rate, *p99))
            .fold((0.0, 0.0), |best, r| if r.0 > best.0 { r } else { best });
        report.check(
            check,
            format!(
                "{:.2}x ({ours:.0} vs {best_other:.0}), Jain {jain:.4}, wait p99 {p99:.1} vs {best_p99:.1} ms",
                ours / best_other.max(1.0)
            ),
            ">= 1x with Jain >= 0.99",
            ours >= best_other && jain >= 0.99,
        );
    }
}
