//! Waiters that are killed or time out while the queue moves.

use std::sync::atomic::Ordering;
use std::time::Duration;

use redis_lock_harness::scenario::*;
use redis_lock_harness::{blocked_ids, cmd, eventually, stat, Connection};

/// Grants the lock server made so far.
fn grants(con: &mut Connection) -> f64 {
    stat(con, "acquired_immediately") + stat(con, "acquired_after_wait")
}

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
        // After all the kills the workload goes on (see `Scenario`), and the queue with it: a
        // wedged one grants nothing more, however long one waits.
        let before = grants(&mut con);
        assert!(
            eventually(Duration::from_secs(5), || grants(&mut con) > before),
            "no grant after the last kill: the queue is wedged"
        );
    };
    let outcome = Scenario {
        clients: 8,
        ..Scenario::default()
    }
    .chaos(Box::new(chaos))
    .run();
    let (accepted, _) = check(&outcome);
    assert!(outcome.injected > 10, "waiters were killed");
    // Thousands on an idle machine; the check above is the one about the end of the run.
    assert!(accepted > 20, "the queue kept moving: {accepted}");
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
    // Hundreds even on a loaded machine: the workload ran (the checks below are the point).
    assert!(accepted > 20, "writers kept working: {accepted}");
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
