//! The lock server's wall clock jumps (libfaketime).

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use redis_lock_harness::scenario::*;
use redis_lock_harness::{ClockFile, FAKETIME_LIB};

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
    let clock = Arc::new(ClockFile::new("jumps", "+0"));
    let Some(env) = clock.env() else {
        // libfaketime recurses into itself when jemalloc reads the clock during start-up.
        eprintln!(
            "SKIPPED on this server: libfaketime cannot start a jemalloc build (run on Valkey)"
        );
        return;
    };
    let jumps = clock.clone();
    let chaos = move |ch: Chaos| {
        // All three jumps, even past the scenario's duration (the workload then goes on).
        for offset in ["+1h", "-1h", "+0"] {
            std::thread::sleep(Duration::from_millis(1000));
            ch.epoch.fetch_add(1, Ordering::SeqCst);
            jumps.set(offset);
            std::thread::sleep(Duration::from_millis(20));
            ch.epoch.fetch_add(1, Ordering::SeqCst);
            ch.injected.fetch_add(1, Ordering::Relaxed);
        }
    };
    let outcome = Scenario {
        lock_env: env,
        ..Scenario::default()
    }
    .chaos(Box::new(chaos))
    .run();
    check_faults(&outcome, 3, 50);
    // Tokens do not follow the clock (src/core/fencing.rs): across the jumps they go on one
    // past the last, neither an hour ahead nor behind.
    let tokens_of = |epoch: usize| {
        outcome
            .records
            .iter()
            .filter(move |r| r.epoch == Some(epoch))
            .map(|r| r.token)
    };
    if let (Some(before), Some(after)) = (tokens_of(0).max(), tokens_of(2).min()) {
        assert!(
            after > before && after - before < 1_000_000,
            "tokens went on one by one across the clock's jumps: {before} -> {after}"
        );
    }
}
