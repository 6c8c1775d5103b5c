//! Section 8b, deterministic: the instructions the server executes per request, from reading
//! it off the connection to buffering the reply (callgrind, `--toggle-collect` on
//! `processInputBuffer`: the event loop, cron and socket calls are left out). Wall-clock rates on a
//! shared 2-core machine move by several percent from run to run; instruction counts do not, so
//! they decide the small differences section 8 cannot (the module's cost on `GET`/`SET`).
//! Runs only where `valgrind` is installed.

use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use std::sync::LazyLock;

use redis_lock_harness::Server;

use crate::report::Report;
use crate::uncontended::CAD_SCRIPT;
use crate::words;

/// Requests per measurement: enough that the few setup commands do not show.
const REQUESTS: u64 = 20_000;

pub fn available() -> bool {
    Command::new("valgrind")
        .arg("--version")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

/// The words of request `i`.
pub type Words = fn(u64) -> Vec<String>;

/// A hit (`drive` sets the key first): a miss would add a `keymiss` event.
pub const GET: Words = |_| words::get("k");
pub const SET: Words = |_| words::set("k");
pub const SET_NX_PX: Words = |i| words::set_nx_px(&format!("a:{i}"));
pub const ACQUIRE: Words = |i| words::acquire(&format!("b:{i}"));
/// The words of a command on one key.
type OnKey = fn(&str) -> Vec<String>;

/// Request `i` of a cycle on fresh keys `prefix:j`: `2j` takes key j (`take`), `2j+1` gives it
/// back (`give`).
fn cycle(i: u64, prefix: &str, take: OnKey, give: OnKey) -> Vec<String> {
    let key = format!("{prefix}:{}", i / 2);
    if i.is_multiple_of(2) {
        take(&key)
    } else {
        give(&key)
    }
}

/// Acquire and release of fresh keys.
pub const CYCLE: Words = |i| cycle(i, "c", words::acquire, words::release);
/// `SET NX PX` and `DEL` of fresh keys.
pub const SET_DEL: Words = |i| cycle(i, "d", words::set_nx_px, words::del);
/// `SET NX PX` and the compare-and-delete script every such lock ships (`EVALSHA`).
pub const SET_EVALSHA: Words = |i| {
    cycle(i, "e", words::set_nx_px, |key| {
        words::evalsha_release(key, &CAD_SHA)
    })
};
/// `SET NX PX` and Valkey 9's native compare-and-delete (`DELIFEQ`).
pub const SET_DELIFEQ: Words = |i| cycle(i, "f", words::set_nx_px, words::delifeq);

/// The SHA1 of the compare-and-delete script, which `drive` loads first.
static CAD_SHA: LazyLock<String> =
    LazyLock::new(|| redis::Script::new(CAD_SCRIPT).get_hash().to_string());

/// Whether `server` has the command `name` (Valkey 9 has `DELIFEQ`, Redis 7.0 has not).
pub fn has_command(server: &Server, name: &str) -> bool {
    let info: redis::Value = redis::cmd("COMMAND")
        .arg("INFO")
        .arg(name)
        .query(&mut server.con())
        .unwrap_or(redis::Value::Nil);
    matches!(info, redis::Value::Array(v) if v.first().is_some_and(|c| *c != redis::Value::Nil))
}

/// Instructions per request of `words` on `server` (with `module` loaded, if any). `None` if
/// the run failed (reported, not fatal: this section is an extra).
pub fn per_request(server: &str, module: Option<&Path>, words: Words) -> Option<f64> {
    let port = TcpListener::bind("127.0.0.1:0")
        .ok()?
        .local_addr()
        .ok()?
        .port();
    let out: PathBuf = std::env::temp_dir().join(format!("redis-lock-bench-cg-{port}.out"));
    let mut cmd = Command::new("valgrind");
    cmd.args(["--tool=callgrind", "--toggle-collect=processInputBuffer"])
        .arg(format!("--callgrind-out-file={}", out.display()))
        .arg(server)
        .args([
            "--port",
            &port.to_string(),
            "--bind",
            "127.0.0.1",
            "--save",
            "",
        ])
        .args(["--appendonly", "no"]);
    if let Some(module) = module {
        cmd.arg("--loadmodule").arg(module);
    }
    let mut child = cmd
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .ok()?;
    let result = drive(port, words);
    let finished = stop(&mut child);
    let text = std::fs::read_to_string(&out).ok();
    let _ = std::fs::remove_file(&out);
    result?;
    finished.then_some(())?;
    let total: f64 = text?
        .lines()
        .find_map(|l| {
            l.strip_prefix("summary:")
                .or_else(|| l.strip_prefix("totals:"))
        })?
        .trim()
        .parse()
        .ok()?;
    Some(total / REQUESTS as f64)
}

/// Send the requests (pipelined by 1000) once the server answers.
fn drive(port: u16, words: Words) -> Option<()> {
    let client = redis::Client::open(format!("redis://127.0.0.1:{port}/")).ok()?;
    let deadline = Instant::now() + Duration::from_secs(120);
    let mut con = loop {
        if let Ok(mut con) = client.get_connection() {
            if redis::cmd("PING").query::<String>(&mut con).is_ok() {
                break con;
            }
        }
        if Instant::now() > deadline {
            return None;
        }
        std::thread::sleep(Duration::from_millis(200));
    };
    redis::cmd("SET")
        .arg("k")
        .arg("v")
        .query::<()>(&mut con)
        .ok()?;
    redis::cmd("SCRIPT")
        .arg("LOAD")
        .arg(CAD_SCRIPT)
        .query::<String>(&mut con)
        .ok()?;
    for start in (0..REQUESTS).step_by(1000) {
        let mut p = redis::pipe();
        for i in start..(start + 1000).min(REQUESTS) {
            let w = words(i);
            let cmd = p.cmd(&w[0]);
            for a in &w[1..] {
                cmd.arg(a);
            }
            cmd.ignore();
        }
        p.query::<()>(&mut con).ok()?;
    }
    let _ = redis::cmd("SHUTDOWN").arg("NOSAVE").query::<()>(&mut con);
    Some(())
}

/// Wait for the server to exit (callgrind writes its file then); kill it by PID after a minute.
fn stop(child: &mut Child) -> bool {
    let deadline = Instant::now() + Duration::from_secs(60);
    while Instant::now() < deadline {
        if let Ok(Some(_)) = child.try_wait() {
            return true;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    let _ = child.kill();
    let _ = child.wait();
    false
}

/// Section 8b: the same comparisons counted in instructions (callgrind), where valgrind is.
pub fn section(report: &mut Report, running: &Server) {
    if !available() {
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
        (
            "SET NX PX + EVALSHA release of fresh keys (per command)",
            m,
            SET_EVALSHA,
        ),
    ];
    let delifeq = has_command(running, "DELIFEQ");
    let runs: Vec<_> = runs
        .into_iter()
        .chain(delifeq.then_some((
            "SET NX PX + DELIFEQ of fresh keys (per command)",
            m,
            SET_DELIFEQ,
        )))
        .collect();
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
    ratios(report, &c, delifeq);
    if let Some(baseline) = std::env::var_os("LOCK_BASELINE_MODULE") {
        against_baseline(report, &server, std::path::Path::new(&baseline), c[5], c[7]);
    }
}

/// Section 8b's targets and ratios, from the counts in the order of `section`'s runs.
fn ratios(report: &mut Report, c: &[f64], delifeq: bool) {
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
    // The same work as the throughput cycles of section 1, counted exactly: the server's
    // cost of the lock users have today over ours (higher is better for the module).
    report.check(
        "cycle cost: SET NX PX + EVALSHA over acquire + release, instructions",
        format!("{:.2}x ({:.0} vs {:.0})", c[8] / c[7], c[8], c[7]),
        "report",
        true,
    );
    if delifeq {
        report.check(
            "cycle cost: SET NX PX + DELIFEQ over acquire + release, instructions",
            format!("{:.2}x ({:.0} vs {:.0})", c[9] / c[7], c[9], c[7]),
            "report",
            true,
        );
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
