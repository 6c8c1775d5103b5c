//! Shared locks under faults: readers and fenced writers on one lock while writers stall past
//! their lease, the lock server is stopped with SIGSTOP, or killed with kill -9 and restarted.
//! Beyond the writers' history, the checker asserts that no reader ever saw a write in progress
//! and that every value a reader saw was committed by an accepted write.

use std::time::Duration;

use redis_lock_harness::scenario::*;

#[test]
#[ignore = "fault suite: make test-faults"]
fn readers_and_stalled_writers_with_kill9_restarts() {
    let outcome = Scenario {
        clients: 3,
        readers: 5,
        ttl_ms: 200,
        duration: Duration::from_secs(5),
        pause: pause_client_zero,
        ..Scenario::default()
    }
    .args(&["--appendonly", "yes", "--appendfsync", "always"])
    .chaos(crash_loop(3, Duration::from_millis(1200)))
    .run();
    let (_, stale) = check_faults(&outcome, 3, 20);
    assert!(
        outcome.reads.len() > 100,
        "readers kept reading: {}",
        outcome.reads.len()
    );
    assert!(stale > 0, "the stalled writer's late writes were rejected");
}

#[test]
#[ignore = "fault suite: make test-faults"]
fn readers_and_writers_while_the_server_is_sigstopped() {
    let outcome = Scenario {
        clients: 3,
        readers: 5,
        ttl_ms: 200,
        duration: Duration::from_secs(5),
        pause: pause_client_zero,
        ..Scenario::default()
    }
    .chaos(stop_server_repeatedly(
        3,
        Duration::from_millis(900),
        Duration::from_millis(500),
    ))
    .run();
    check_faults(&outcome, 3, 20);
    assert!(
        outcome.reads.len() > 100,
        "readers kept reading: {}",
        outcome.reads.len()
    );
}
