//! Failovers: a replica promoted after it caught up or after it missed the last grants, and a
//! cluster shard whose master is killed or failed over under load.

use std::time::Duration;

use redis_lock_harness::scenario::*;

/// `scenario` with `fault` done 1.5 s in: every check, the fault injected once, the writers
/// going on.
fn survives_one_fault(scenario: Scenario, fault: fn(&Chaos)) {
    let outcome = scenario
        .chaos(single_fault(Duration::from_millis(1500), fault))
        .run();
    check_faults(&outcome, 1, 50);
}

#[test]
#[ignore = "fault suite: make test-faults"]
fn replica_promotion_after_the_replica_caught_up() {
    survives_one_fault(
        Scenario {
            topology: Topology::WithReplica,
            ..Scenario::default()
        },
        |ch| ch.fail_over(false),
    );
}

#[test]
#[ignore = "fault suite: make test-faults"]
fn replica_promotion_with_lost_grants() {
    survives_one_fault(
        Scenario {
            topology: Topology::WithReplica,
            ..Scenario::default()
        },
        |ch| ch.fail_over(true),
    );
}

#[test]
#[ignore = "fault suite: make test-faults"]
fn cluster_shard_master_killed_under_load() {
    survives_one_fault(
        Scenario {
            topology: Topology::Cluster,
            duration: Duration::from_secs(8),
            ..Scenario::default()
        },
        |ch| ch.fail_over_shard(true),
    );
}

#[test]
#[ignore = "fault suite: make test-faults"]
fn cluster_failover_of_the_lock_shard_under_load() {
    survives_one_fault(
        Scenario {
            topology: Topology::Cluster,
            duration: Duration::from_secs(6),
            pause: pause_client_zero,
            ..Scenario::default()
        },
        |ch| ch.fail_over_shard(false),
    );
}
