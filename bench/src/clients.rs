//! Sections 7 and 9: this repository's Python and Go clients next to their peers, from the
//! JSON lines their bench programs print.

use std::time::Duration;

use crate::report::Report;

/// Section 7: the Python client next to redis-py's Lock and python-redis-lock, 16 threads on one
/// lock with 1 ms holds, on the same server (bench/python/contended.py prints one JSON line each).
pub fn python(report: &mut Report, python: &std::path::Path, port: u16, dur: Duration) {
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
    section(
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
pub fn go(report: &mut Report, port: u16, dur: Duration) {
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
    section(
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
fn section(report: &mut Report, (title, unit, n): (&str, &str, usize), check: &str, out: &str) {
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
