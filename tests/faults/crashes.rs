//! The lock server killed with kill -9 and restarted from its AOF or RDB, alone and together with
//! every other fault.

use std::sync::atomic::Ordering;
use std::time::Duration;

use redis_lock_harness::scenario::*;
use redis_lock_harness::{blocked_ids, cmd};

#[test]
#[ignore = "fault suite: make test-faults"]
fn kill9_and_restart_from_aof_always() {
    // Every acknowledged grant survives each crash, so no holder is overtaken and fenced off
    // before its lease could have ended (`leases_kept`; one descheduled past its 300 ms lease
    // may be, rightly).
    let outcome = Scenario {
        duration: Duration::from_secs(5),
        leases_kept: true,
        ..Scenario::default()
    }
    .args(&["--appendonly", "yes", "--appendfsync", "always"])
    .chaos(crash_loop(3, Duration::from_millis(1000)))
    .run();
    check_faults(&outcome, 3, 50);
}

#[test]
#[ignore = "fault suite: make test-faults"]
fn kill9_and_restart_from_aof_everysec() {
    let outcome = Scenario {
        duration: Duration::from_secs(5),
        ..Scenario::default()
    }
    .args(&["--appendonly", "yes", "--appendfsync", "everysec"])
    .chaos(crash_loop(3, Duration::from_millis(1000)))
    .run();
    check_faults(&outcome, 3, 50);
}

#[test]
#[ignore = "fault suite: make test-faults"]
fn kill9_and_restart_from_rdb() {
    let outcome = Scenario {
        duration: Duration::from_secs(5),
        ..Scenario::default()
    }
    .args(&["--save", "1 1"])
    .chaos(crash_loop(3, Duration::from_millis(1200)))
    .run();
    check_faults(&outcome, 3, 50);
}

/// Everything at once: paused holders, killed waiters, DEBUG SLEEP, CLIENT PAUSE WRITE and
/// kill -9 restarts.
#[test]
#[ignore = "fault suite: make test-faults"]
fn soak_with_every_fault_together() {
    let chaos = |ch: Chaos| {
        let mut round = 0;
        while ch.running() {
            ch.sleep(Duration::from_millis(400));
            if !ch.running() {
                return;
            }
            round += 1;
            match round % 4 {
                0 => ch.crash_and_restart(),
                3 => ch.inject(&["CLIENT", "PAUSE", "300", "WRITE"]),
                1 => ch.inject(&["DEBUG", "SLEEP", "0.4"]),
                _ => {
                    if let Some(mut con) = ch.con() {
                        for id in blocked_ids(&mut con).into_iter().take(2) {
                            if cmd(&mut con, &["CLIENT", "KILL", "ID", &id.to_string()]).is_ok() {
                                ch.injected.fetch_add(1, Ordering::Relaxed);
                            }
                        }
                    }
                }
            }
        }
    };
    let outcome = Scenario {
        clients: 8,
        ttl_ms: 200,
        duration: Duration::from_secs(8),
        pause: pause_client_zero,
        ..Scenario::default()
    }
    .args(&["--appendonly", "yes", "--appendfsync", "always"])
    .chaos(Box::new(chaos))
    .run();
    let (accepted, _) = check(&outcome);
    assert!(
        outcome.injected >= 5,
        "faults injected: {}",
        outcome.injected
    );
    assert!(accepted > 50);
}
