//! The Prometheus path of `docs/operations.md` ("Prometheus and Grafana") on real parts: the
//! module's server, Debian's `prometheus-redis-exporter` with `monitoring/redis-lock.lua` and
//! Debian's `prometheus` with the scrape config and rules, all on loopback ports of their own and
//! stopped by PID. Lock traffic, then Prometheus's HTTP API must show every metric the dashboard
//! and the rules use, moving as the traffic says. Ignored by default (it needs the two Debian
//! packages): `make test-prometheus-<server>` runs it.

use redis_lock_harness::*;
use serde_json::Value as Json;
use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// How long a scraped value may take to show: a 1 s scrape interval, a 1 s rule evaluation,
/// and a loaded machine (the soak keeps both cores busy) well within it.
const SCRAPED_WITHIN: Duration = Duration::from_secs(60);

/// A helper daemon (the exporter, Prometheus), stopped by PID when the test ends.
struct Daemon(Process);

impl Drop for Daemon {
    fn drop(&mut self) {
        self.0.terminate(Duration::from_secs(5));
    }
}

fn spawn(words: &[String], log: &Path) -> Daemon {
    let out = std::fs::File::create(log).expect("create a log file");
    let child = Command::new(&words[0])
        .args(&words[1..])
        .stdout(Stdio::from(out.try_clone().expect("clone the log")))
        .stderr(Stdio::from(out))
        .spawn()
        .unwrap_or_else(|e| panic!("start {}: {e}", words[0]));
    Daemon(Process::new(child))
}

/// The code block after `<!-- prometheus-test: NAME -->` in docs/operations.md.
fn doc_snippet(name: &str) -> String {
    let doc = std::fs::read_to_string(workspace().join("docs/operations.md")).expect("read docs");
    let marker = format!("<!-- prometheus-test: {name} -->\n");
    let at = doc.find(&marker).expect("the snippet's marker") + marker.len();
    let block = &doc[at..];
    let body = &block[block.find('\n').expect("a fence") + 1..];
    body[..body.find("```").expect("the closing fence")].to_string()
}

fn monitoring(file: &str) -> PathBuf {
    workspace().join("monitoring").join(file)
}

/// Percent-encode a query parameter.
fn encode(s: &str) -> String {
    s.bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => {
                (b as char).to_string()
            }
            _ => format!("%{b:02X}"),
        })
        .collect()
}

/// GET `path` from 127.0.0.1:`port`: the body, if the server answered.
fn http_get(port: u16, path: &str) -> Option<String> {
    let mut s = TcpStream::connect(("127.0.0.1", port)).ok()?;
    s.set_read_timeout(Some(Duration::from_secs(10))).ok()?;
    write!(s, "GET {path} HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n").ok()?;
    let mut answer = String::new();
    s.read_to_string(&mut answer).ok()?;
    let at = answer.find("\r\n\r\n")?;
    Some(answer[at + 4..].to_string())
}

struct Prometheus {
    port: u16,
}

impl Prometheus {
    /// The result of an instant query: each series' labels and value (`None`: the API failed).
    fn query(&self, expr: &str) -> Option<Vec<(Json, f64)>> {
        let body = http_get(self.port, &format!("/api/v1/query?query={}", encode(expr)))?;
        let json: Json = serde_json::from_str(&body).ok()?;
        if json["status"] != "success" {
            return None;
        }
        let rows = json["data"]["result"].as_array()?;
        Some(
            rows.iter()
                .map(|r| {
                    let v = r["value"][1].as_str().unwrap_or("NaN");
                    (r["metric"].clone(), v.parse().unwrap_or(f64::NAN))
                })
                .collect(),
        )
    }

    /// The one value of `expr` (summed over series), if it has any.
    fn value(&self, expr: &str) -> Option<f64> {
        let rows = self.query(expr)?;
        (!rows.is_empty()).then(|| rows.iter().map(|r| r.1).sum())
    }

    /// Wait until `expr` has a value that satisfies `ok`; the last value seen otherwise.
    fn until(&self, expr: &str, ok: impl Fn(f64) -> bool) -> f64 {
        let mut last = None;
        let seen = eventually(SCRAPED_WITHIN, || {
            last = self.value(expr);
            last.is_some_and(&ok)
        });
        assert!(seen, "{expr}: last value {last:?}");
        last.unwrap_or(f64::NAN)
    }
}

/// A directory removed when the test passed (dropped after the daemons that write in it).
struct Scratch(PathBuf);

impl Drop for Scratch {
    fn drop(&mut self) {
        if !std::thread::panicking() {
            let _ = std::fs::remove_dir_all(&self.0);
        }
    }
}

/// The module's server, the exporter and Prometheus, as the docs start them.
struct Stack {
    server: Server,
    prometheus: Prometheus,
    _daemons: [Daemon; 2],
    _dir: Scratch,
}

fn start_stack() -> Stack {
    let server = Server::start();
    let (exporter_port, prometheus_port) = (free_port(), free_port());
    let dir = fresh_dir("prometheus");
    let command = doc_snippet("exporter")
        .replace("\\\n", " ")
        .replace("6379", &server.port.to_string())
        .replace("9121", &exporter_port.to_string())
        .replace(
            "/etc/prometheus/redis-lock.lua",
            &monitoring("redis-lock.lua").display().to_string(),
        );
    let words: Vec<String> = command.split_whitespace().map(String::from).collect();
    let exporter = spawn(&words, &dir.join("exporter.log"));

    let config = doc_snippet("scrape-config");
    assert_eq!(
        config,
        std::fs::read_to_string(monitoring("prometheus.yml")).expect("read prometheus.yml"),
        "docs/operations.md shows monitoring/prometheus.yml as it is"
    );
    let config = config
        .replace("15s", "1s")
        .replace("127.0.0.1:9121", &format!("127.0.0.1:{exporter_port}"))
        .replace(
            "/etc/prometheus/redis-lock-rules.yml",
            &monitoring("redis-lock-rules.yml").display().to_string(),
        );
    let config_file = dir.join("prometheus.yml");
    std::fs::write(&config_file, config).expect("write the config");
    let prometheus = spawn(
        &[
            "prometheus".to_string(),
            format!("--config.file={}", config_file.display()),
            format!("--storage.tsdb.path={}", dir.join("data").display()),
            format!("--web.listen-address=127.0.0.1:{prometheus_port}"),
        ],
        &dir.join("prometheus.log"),
    );
    let stack = Stack {
        server,
        prometheus: Prometheus {
            port: prometheus_port,
        },
        _daemons: [exporter, prometheus],
        _dir: Scratch(dir),
    };
    stack.prometheus.until("redis_lock_locks", |v| v == 0.0);
    stack
}

/// Every `redis_lock_*` metric an expression names.
fn metric_names(expr: &str) -> Vec<String> {
    let mut names = Vec::new();
    let mut rest = expr;
    while let Some(at) = rest.find("redis_lock_") {
        let tail = &rest[at..];
        let end = tail
            .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
            .unwrap_or(tail.len());
        names.push(tail[..end].to_string());
        rest = &tail[end..];
    }
    names
}

/// The dashboard's queries, as Grafana sends them for all instances and a 1 minute interval.
fn dashboard_queries() -> Vec<String> {
    let text = std::fs::read_to_string(monitoring("grafana-dashboard.json")).expect("read it");
    let dashboard: Json = serde_json::from_str(&text).expect("the dashboard is JSON");
    let panels = dashboard["panels"].as_array().expect("panels");
    let mut queries = Vec::new();
    for panel in panels {
        let targets = panel["targets"].as_array().expect("each panel has targets");
        assert!(!targets.is_empty(), "{} has no query", panel["title"]);
        for t in targets {
            let expr = t["expr"].as_str().expect("a PromQL expr");
            queries.push(
                expr.replace("$instance", ".*")
                    .replace("$__rate_interval", "1m"),
            );
        }
    }
    queries
}

/// The alert rules' expressions.
fn rule_queries() -> Vec<String> {
    let text = std::fs::read_to_string(monitoring("redis-lock-rules.yml")).expect("read rules");
    let mut queries = Vec::new();
    let mut lines = text.lines().peekable();
    while let Some(line) = lines.next() {
        let Some(expr) = line.trim().strip_prefix("expr:") else {
            continue;
        };
        let mut expr = expr.trim().trim_start_matches(">-").to_string();
        while let Some(next) = lines.peek() {
            if next.trim().is_empty() || next.trim_end().ends_with(':') || next.contains(": ") {
                break;
            }
            expr.push(' ');
            expr.push_str(next.trim());
            lines.next();
        }
        queries.push(expr.trim().to_string());
    }
    queries
}

fn hold_and_make_wait(stack: &Stack, c: &mut Connection) -> (f64, f64) {
    acquire(c, "hot:queue", "holder", 60_000).expect("free");
    let started = Instant::now();
    let waiter = spawn_wait(&stack.server, "hot:queue", "waiter", 60_000, 0);
    wait_blocked(c, 1);
    let blocked = Instant::now();
    stack.prometheus.until("redis_lock_waiters", |v| v == 1.0);
    // The waiter waited at least from when it was seen blocked to the release below, and at
    // most from before it was started to after its reply came.
    let least = blocked.elapsed().as_secs_f64();
    assert_eq!(release(c, "hot:queue", "holder"), 1);
    waiter.join().expect("waiter").expect("granted");
    (least, started.elapsed().as_secs_f64())
}

/// The other traffic the dashboard shows: refusals, lost holds, forced releases, sessions.
fn drive_the_rest(stack: &Stack, c: &mut Connection) {
    assert_eq!(acquire(c, "hot:queue", "other", 1000), None); // rejected
    assert_eq!(
        cmd(
            c,
            &["LOCK.ACQUIRE", "hot:queue", "other", "1000", "WAIT", "20"]
        ),
        Ok(Value::Nil)
    ); // wait_timeouts
    assert_eq!(release(c, "hot:queue", "other"), 0); // release_not_owner
    assert_eq!(int(&ok(c, &["LOCK.EXTEND", "hot:queue", "other", "10"])), 0);
    assert_eq!(int(&ok(c, &["LOCK.FORCERELEASE", "hot:queue"])), 1);
    let mut session = stack.server.con();
    ok(
        &mut session,
        &["LOCK.ACQUIRE", "s", "o", "60000", "SESSION"],
    );
    drop(session); // session_releases
    ok(c, &["LOCK.ACQUIRE", "shared", "r", "60000", "SHARED"]);
    ok(c, &["LOCK.ACQUIRE", "sem", "p", "60000", "LIMIT", "2"]);
}

/// The one wait, of `least` to `most` seconds, is in every bucket above `most` and in none
/// below `least` (a bound in between may go either way).
fn assert_wait_buckets(p: &Prometheus, least: f64, most: f64) {
    for le in [
        "0.001024", "0.004096", "0.016384", "0.065536", "0.262144", "1.048576",
    ] {
        let bound: f64 = le.parse().expect("a bound");
        let expected = if bound < least {
            0.0
        } else if bound >= most {
            1.0
        } else {
            continue; // the wait may fall on either side of this bound
        };
        let expr = format!("redis_lock_wait_time_seconds_bucket{{le=\"{le}\"}}");
        assert_eq!(
            p.value(&expr),
            Some(expected),
            "{expr}: waited {least}..{most} s"
        );
    }
    let max_ms = p.until("redis_lock_wait_time_max_ms", |v| v > 0.0);
    assert!(
        max_ms >= least * 1000.0 && max_ms <= most * 1000.0,
        "max {max_ms} ms, waited {least}..{most} s"
    );
}

#[test]
#[ignore = "needs Debian's prometheus and prometheus-redis-exporter: make test-prometheus"]
fn exporter_and_prometheus_see_what_the_locks_do() {
    let stack = start_stack();
    let p = &stack.prometheus;
    let mut c = stack.server.con();

    // A client waits: the wait-time histogram and its quantile gauges rise.
    let (least, most) = hold_and_make_wait(&stack, &mut c);
    p.until("redis_lock_wait_time_seconds_count", |v| v == 1.0);
    p.until("redis_lock_acquired_after_wait_total", |v| v == 1.0);
    assert_wait_buckets(p, least, most);

    // A lease runs out while held, under a binary name: the counter, LOCK.HOT, the alert.
    run(&mut c, &[b"LOCK.ACQUIRE", b"exp\xff\\:1", b"o", b"100"]).expect("granted");
    p.until("redis_lock_expired_while_held_total", |v| v == 1.0);
    p.until(
        r#"redis_lock_hot_expired{lock_name="exp\\xff\\x5c:1"}"#,
        |v| v == 1.0,
    );
    p.until(r#"redis_lock_hot_waits{lock_name="hot:queue"}"#, |v| {
        v == 1.0
    });
    p.until(
        r#"ALERTS{alertname="LockExpiredWhileHeld",alertstate="firing"}"#,
        |v| v == 1.0,
    );

    drive_the_rest(&stack, &mut c);
    for (metric, least) in [
        ("redis_lock_rejected_total", 1.0),
        ("redis_lock_wait_timeouts_total", 1.0),
        ("redis_lock_release_not_owner_total", 1.0),
        ("redis_lock_extend_not_owner_total", 1.0),
        ("redis_lock_releases_forced_total", 1.0),
        ("redis_lock_session_releases_total", 1.0),
        ("redis_lock_shared_holds", 1.0),
        ("redis_lock_semaphore_holds", 1.0),
        ("redis_lock_hold_time_seconds_count", 3.0),
    ] {
        p.until(metric, |v| v >= least);
    }
    assert_eq!(p.value("redis_lock_panics_total"), Some(0.0));

    // Every metric the dashboard and the rules name is scraped, and every query runs.
    let queries: Vec<String> = dashboard_queries()
        .into_iter()
        .chain(rule_queries())
        .collect();
    assert!(queries.len() >= 20, "found {} queries", queries.len());
    for expr in &queries {
        for name in metric_names(expr) {
            let series = p.query(&format!("count({{__name__=\"{name}\"}})"));
            assert!(
                series.is_some_and(|s| !s.is_empty()),
                "{name} (in {expr}) is not scraped"
            );
        }
        assert!(p.query(expr).is_some(), "Prometheus refused {expr}");
    }
    metrics_missing_is_told(&stack, &mut c);
}

/// `LockMetricsMissing`'s condition: quiet while the script's metrics arrive, met once the
/// exporter's user may no longer run the script.
fn metrics_missing_is_told(stack: &Stack, c: &mut Connection) {
    let rules = rule_queries();
    let expr = rules
        .iter()
        .find(|e| e.contains("redis_up"))
        .expect("the LockMetricsMissing rule");
    assert_eq!(stack.prometheus.query(expr).map(|r| r.len()), Some(0));
    ok(c, &["ACL", "SETUSER", "default", "-eval"]);
    stack
        .prometheus
        .until(&format!("count({expr})"), |v| v == 1.0);
}

/// Without Prometheus: the script's names on a live server, as the scrape config renames them
/// (`redis_` + the key up to `;`), cover every metric the dashboard and the rules name.
/// The docs' install lines, as written but for the directory (`/etc/prometheus/` is the
/// system's), from the repository's root as the docs run them.
#[test]
#[ignore = "needs Debian's prometheus (promtool): make test-prometheus"]
fn the_rules_install_snippet_runs_as_written() {
    let dir = fresh_dir("prometheus-rules");
    let script =
        doc_snippet("install-rules").replace("/etc/prometheus/", &format!("{}/", dir.display()));
    let out = Command::new("sh")
        .args(["-ec", &script])
        .current_dir(workspace())
        .output()
        .expect("run sh");
    assert!(
        out.status.success(),
        "{script}\n{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(dir.join("redis-lock.lua").exists() && dir.join("redis-lock-rules.yml").exists());
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn the_dashboard_and_the_rules_name_what_the_script_exports() {
    let s = Server::start();
    let mut c = s.con();
    acquire(&mut c, "q", "a", 60_000).expect("free");
    let waiter = spawn_wait(&s, "q", "b", 60_000, 0);
    wait_blocked(&mut c, 1);
    assert_eq!(release(&mut c, "q", "a"), 1);
    waiter.join().expect("waiter").expect("granted");
    acquire(&mut c, "short", "a", 10).expect("free");
    assert!(eventually(Duration::from_secs(10), || stat(
        &mut c,
        "expired_while_held"
    ) == 1.0));

    let script = std::fs::read_to_string(monitoring("redis-lock.lua")).expect("read the script");
    let Value::Array(pairs) = ok(&mut c, &["EVAL", &script, "0"]) else {
        panic!("the script returns name/value pairs");
    };
    let exported: Vec<String> = pairs
        .chunks(2)
        .map(|pair| {
            let key = text(&pair[0]);
            let value = text(&pair[1]);
            assert!(
                value.parse::<f64>().is_ok(),
                "{key}: {value:?} is not a number"
            );
            format!("redis_{}", key.split(';').next().unwrap_or_default())
        })
        .collect();
    // It declares no writes, so a server out of memory still answers it.
    ok(&mut c, &["CONFIG", "SET", "maxmemory", "1"]);
    assert!(cmd(&mut c, &["SET", "x", "y"]).is_err(), "out of memory");
    assert!(cmd(&mut c, &["EVAL", &script, "0"]).is_ok());
    ok(&mut c, &["CONFIG", "SET", "maxmemory", "0"]);

    let queries: Vec<String> = dashboard_queries()
        .into_iter()
        .chain(rule_queries())
        .collect();
    assert!(rule_queries().len() >= 5, "every alert's expr is read");
    for expr in &queries {
        let names = metric_names(expr);
        assert!(!names.is_empty(), "{expr} names no redis_lock_ metric");
        for name in names {
            assert!(
                exported.contains(&name),
                "{name} (in {expr}) is not exported"
            );
        }
    }
}
