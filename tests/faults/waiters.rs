//! Waiters that are killed or time out while the queue moves.

use std::sync::atomic::Ordering;
use std::time::Duration;

use redis_lock_harness::scenario::*;
use redis_lock_harness::{blocked_ids, cmd};

#[test]
#[ignore = "fault suite: make test-faults"]
fn killed_waiters_never_wedge_the_queue() {
    let chaos = |ch: Chaos| {
        let mut con = ch.con().expect("chaos connection");
        while ch.running() {
            let ids = blocked_ids(&mut con);
            if let Some(id) = ids.get(ids.len() / 2) {
                if cmd(&mut con, &["CLIENT", "KILL", "ID", &id.to_string()]).is_ok() {
                    ch.injected.fetch_add(1, Ordering::Relaxed);
                }
            }
            ch.sleep(Duration::from_millis(25));
        }
    };
    let outcome = Scenario {
        clients: 8,
        ..Scenario::default()
    }
    .chaos(Box::new(chaos))
    .run();
    let (accepted, _) = check(&outcome);
    assert!(outcome.injected > 10, "waiters were killed");
    assert!(accepted > 100, "the queue kept moving: {accepted}");
}

/// Waiters give up (WAIT 3..10 ms) about as long as each holder keeps the lock (3 ms), so
/// timeouts race grants. No grant may go to a client that already timed out: at the end the lock
/// must be free, nobody blocked, and the history intact.
#[test]
#[ignore = "fault suite: make test-faults"]
fn waiters_time_out_exactly_as_the_lock_frees() {
    let outcome = Scenario {
        clients: 8,
        ttl_ms: 2_000,
        duration: Duration::from_secs(3),
        wait_ms: 3,
        hold_ms: 3,
        ..Scenario::default()
    }
    .run();
    let (accepted, _) = check(&outcome);
    assert!(accepted > 100);
    let orphans = outcome
        .records
        .iter()
        .filter(|r| r.released != Some(1))
        .count();
    assert_eq!(orphans, 0, "every granted client released its lock");
    assert_eq!(
        outcome.server_grants,
        Some(outcome.records.len() as i64),
        "every grant the server did not revoke reached a client"
    );
}
