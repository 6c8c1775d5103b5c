//! Writes through LOCK.GUARD under faults: the counter lives on the lock server and is written
//! only through LOCK.GUARD; holders stall past their lease and the server is stopped with
//! SIGSTOP. The checker finds no lost and no stale write: every accepted write carries a larger
//! token than the one before, and the accepted writes form the unbroken chain 1, 2, 3...

use std::time::Duration;

use redis_lock_harness::scenario::*;

#[test]
#[ignore = "fault suite: make test-faults"]
fn guarded_writes_with_stalled_holders_and_a_stopped_server() {
    let outcome = Scenario {
        ttl_ms: 200,
        duration: Duration::from_secs(5),
        pause: pause_client_zero,
        guarded: true,
        ..Scenario::default()
    }
    .chaos(stop_server_repeatedly(
        3,
        Duration::from_millis(900),
        Duration::from_millis(500),
    ))
    .run();
    let (_, stale) = check_faults(&outcome, 3, 50);
    assert!(stale > 0, "the stalled holders' late writes were refused");
}
