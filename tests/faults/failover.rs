//! Failovers: a replica promoted after it caught up or after it missed the last grants, and a
//! cluster shard whose master is killed or failed over under load.

use std::time::Duration;

use redis_lock_harness::scenario::*;

#[test]
#[ignore = "fault suite: make test-faults"]
fn replica_promotion_after_the_replica_caught_up() {
    let outcome = Scenario {
        topology: Topology::WithReplica,
        ..Scenario::default()
    }
    .chaos(single_fault(Duration::from_millis(1500), |ch| {
        ch.fail_over(false)
    }))
    .run();
    let (accepted, _) = check(&outcome);
    assert_eq!(outcome.injected, 1);
    assert!(accepted > 50);
}

#[test]
#[ignore = "fault suite: make test-faults"]
fn replica_promotion_with_lost_grants() {
    let outcome = Scenario {
        topology: Topology::WithReplica,
        ..Scenario::default()
    }
    .chaos(single_fault(Duration::from_millis(1500), |ch| {
        ch.fail_over(true)
    }))
    .run();
    let (accepted, _) = check(&outcome);
    assert_eq!(outcome.injected, 1);
    assert!(accepted > 50);
}

#[test]
#[ignore = "fault suite: make test-faults"]
fn cluster_shard_master_killed_under_load() {
    let outcome = Scenario {
        topology: Topology::Cluster,
        duration: Duration::from_secs(8),
        ..Scenario::default()
    }
    .chaos(single_fault(Duration::from_millis(1500), |ch| {
        ch.fail_over_shard(true)
    }))
    .run();
    let (accepted, _) = check(&outcome);
    assert_eq!(outcome.injected, 1);
    assert!(accepted > 50);
}

#[test]
#[ignore = "fault suite: make test-faults"]
fn cluster_failover_of_the_lock_shard_under_load() {
    let outcome = Scenario {
        topology: Topology::Cluster,
        duration: Duration::from_secs(6),
        pause: pause_client_zero,
        ..Scenario::default()
    }
    .chaos(single_fault(Duration::from_millis(1500), |ch| {
        ch.fail_over_shard(false)
    }))
    .run();
    let (accepted, _) = check(&outcome);
    assert_eq!(outcome.injected, 1);
    assert!(accepted > 50);
}
