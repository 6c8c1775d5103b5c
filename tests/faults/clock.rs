//! The lock server's wall clock jumps (libfaketime).

use std::sync::atomic::Ordering;
use std::time::Duration;

use redis_lock_harness::scenario::*;
use redis_lock_harness::server_binary;

const FAKETIME_LIB: &str = "/usr/lib/x86_64-linux-gnu/faketime/libfaketime.so.1";

/// The lock server's wall clock jumps an hour forward, then two hours back (libfaketime reads
/// the offset from a file on every clock read; monotonic clocks stay real) under the workload.
/// Leases run on the monotonic clock, so they neither end at the forward jump nor stretch at
/// the back one (`tests/leases.rs` times that); tokens must only grow, and the fenced store
/// must catch every stale write.
#[test]
#[ignore = "fault suite: make test-faults"]
fn server_clock_jumps_forward_and_back() {
    assert!(
        std::path::Path::new(FAKETIME_LIB).exists(),
        "install faketime (apt-get install faketime)"
    );
    let version = std::process::Command::new(server_binary())
        .arg("--version")
        .output()
        .unwrap();
    if String::from_utf8_lossy(&version.stdout).contains("malloc=jemalloc") {
        // libfaketime recurses into itself when jemalloc reads the clock during start-up.
        eprintln!(
            "SKIPPED on this server: libfaketime cannot start a jemalloc build (run on Valkey)"
        );
        return;
    }
    let offset_file = std::env::temp_dir().join(format!("lock-faketime-{}", std::process::id()));
    std::fs::write(&offset_file, "+0").unwrap();
    let file = offset_file.to_str().unwrap().to_string();
    let env = [
        ("LD_PRELOAD", FAKETIME_LIB),
        ("FAKETIME_TIMESTAMP_FILE", file.as_str()),
        ("FAKETIME_NO_CACHE", "1"),
        ("FAKETIME_DONT_FAKE_MONOTONIC", "1"),
    ];
    let jumps_file = offset_file.clone();
    let chaos = move |ch: Chaos| {
        // All three jumps, even past the scenario's duration (the workload then goes on).
        for offset in ["+1h", "-1h", "+0"] {
            std::thread::sleep(Duration::from_millis(1000));
            ch.epoch.fetch_add(1, Ordering::SeqCst);
            std::fs::write(&jumps_file, offset).unwrap();
            std::thread::sleep(Duration::from_millis(20));
            ch.epoch.fetch_add(1, Ordering::SeqCst);
            ch.injected.fetch_add(1, Ordering::Relaxed);
        }
    };
    let outcome = Scenario {
        lock_env: env
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect(),
        ..Scenario::default()
    }
    .chaos(Box::new(chaos))
    .run();
    let _ = std::fs::remove_file(&offset_file);
    check_faults(&outcome, 3, 50);
    // Tokens do not follow the clock (src/core/fencing.rs): across the jumps they go on one
    // past the last, neither an hour ahead nor behind.
    let max_of = |epoch: usize| {
        outcome
            .records
            .iter()
            .filter(|r| r.epoch == Some(epoch))
            .map(|r| r.token)
            .max()
    };
    let min_of = |epoch: usize| {
        outcome
            .records
            .iter()
            .filter(|r| r.epoch == Some(epoch))
            .map(|r| r.token)
            .min()
    };
    if let (Some(before), Some(after)) = (max_of(0), min_of(2)) {
        assert!(
            after > before && after - before < 1_000_000,
            "tokens went on one by one across the clock's jumps: {before} -> {after}"
        );
    }
}
