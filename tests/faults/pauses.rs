//! Holders that stop past their lease: a paused client, a server stopped by DEBUG SLEEP, writes
//! paused by CLIENT PAUSE.

use std::time::Duration;

use redis_lock_harness::scenario::*;

#[test]
#[ignore = "fault suite: make test-faults"]
fn paused_holders_are_fenced_off() {
    let outcome = Scenario {
        ttl_ms: 150,
        pause: pause_client_zero,
        ..Scenario::default()
    }
    .run();
    let (accepted, stale) = check(&outcome);
    assert!(accepted > 50, "the others kept working");
    assert!(stale > 0, "the paused holder's late writes were rejected");
    let late: Vec<_> = outcome
        .records
        .iter()
        .filter(|r| r.write == Write::Stale)
        .collect();
    assert!(
        late.iter().all(|r| r.released == Some(0)),
        "a holder that outran its lease cannot release"
    );
    assert!(late.iter().all(|r| r.extended == Some(0)), "nor extend");
}

#[test]
#[ignore = "fault suite: make test-faults"]
fn debug_sleep_longer_than_the_lease() {
    let outcome = Scenario {
        ttl_ms: 200,
        pause: pause_client_zero,
        ..Scenario::default()
    }
    .chaos(repeat_command(
        2,
        Duration::from_millis(1000),
        &["DEBUG", "SLEEP", "0.6"],
    ))
    .run();
    check_faults(&outcome, 2, 30);
}

#[test]
#[ignore = "fault suite: make test-faults"]
fn client_pause_write_longer_than_the_lease() {
    let outcome = Scenario {
        ttl_ms: 200,
        pause: pause_client_zero,
        ..Scenario::default()
    }
    .chaos(repeat_command(
        3,
        Duration::from_millis(700),
        &["CLIENT", "PAUSE", "500", "WRITE"],
    ))
    .run();
    check_faults(&outcome, 3, 30);
}
