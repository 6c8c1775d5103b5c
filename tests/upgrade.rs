//! Upgrades (`make test-upgrade`, which builds the previous build of the module into
//! `target/previous/` and names it in `LOCK_PREVIOUS_MODULE`): what a previous build saved and
//! replicated, this build reads; what this build writes, a previous replica refuses, which is
//! why replicas are upgraded first (`docs/deployment.md`, *Upgrading*).

use std::path::PathBuf;
use std::time::Duration;

use redis_lock_harness::*;

fn previous_module() -> PathBuf {
    let path = std::env::var("LOCK_PREVIOUS_MODULE")
        .expect("LOCK_PREVIOUS_MODULE names the previous build: run make test-upgrade");
    PathBuf::from(path)
}

/// An exclusive lock, two shared holds and a semaphore's permits, with their tokens.
fn hold_some(c: &mut Connection) -> Vec<(String, i64)> {
    let exclusive = acquire(c, "ex", "alice", 600_000).expect("ex");
    let shared = ["LOCK.ACQUIRE", "sh", "r1", "600000", "SHARED"];
    let r1 = token_of(cmd(c, &shared));
    let r2 = token_of(cmd(c, &["LOCK.ACQUIRE", "sh", "r2", "600000", "SHARED"]));
    let permits = [
        "LOCK.ACQUIRE",
        "sem",
        "w",
        "600000",
        "LIMIT",
        "3",
        "PERMITS",
        "2",
    ];
    let w = token_of(cmd(c, &permits));
    vec![
        ("ex".into(), exclusive),
        ("sh".into(), r1),
        ("sh".into(), r2),
        ("sem".into(), w),
    ]
}

/// The lease left of the first hold `LOCK.INFO` lists (any mode).
fn first_hold_left(c: &mut Connection, key: &str) -> i64 {
    let info = ok(c, &["LOCK.INFO", key]);
    let Some(Value::Array(holders)) = map_field(&info, "holders") else {
        panic!("{key}: {info:?}")
    };
    int(&map_field(&holders[0], "ttl").expect("ttl"))
}

/// Every hold of `held` is there with its token, and its lease still runs.
fn assert_held(c: &mut Connection, held: &[(String, i64)], on: &str) {
    for (key, token) in held {
        let live = ["LOCK.FENCE", key.as_str(), &token.to_string()];
        assert_eq!(
            cmd(c, &live),
            Ok(Value::Int(1)),
            "{on}: {key} token {token}"
        );
        let left = first_hold_left(c, key);
        assert!(left > 500_000, "{on}: {key} has {left} ms left");
    }
}

#[test]
#[ignore = "upgrade suite: make test-upgrade"]
fn this_build_loads_the_rdb_and_aof_of_the_previous_one() {
    for persistence in ["rdb", "aof"] {
        let args = match persistence {
            "aof" => ["--appendonly", "yes", "--appendfsync", "always"],
            _ => ["--appendonly", "no", "--appendfsync", "no"],
        };
        let mut s = Server::builder()
            .module(previous_module())
            .args(&args)
            .start();
        let mut c = s.con();
        let held = hold_some(&mut c);
        // The AOF gets commands after its base too: a release and another grant.
        let later = acquire(&mut c, "later", "carol", 600_000).unwrap();
        assert_eq!(release(&mut c, "later", "carol"), 1);
        let last = acquire(&mut c, "later", "dave", 600_000).unwrap();
        if persistence == "rdb" {
            ok(&mut c, &["SAVE"]);
        }
        s.restart_with_module(None);
        let mut c = s.con();
        assert_held(&mut c, &held, persistence);
        assert_eq!(
            acquire(&mut c, "ex", "bob", 1000),
            None,
            "ex is still alice's"
        );
        assert_eq!(
            fence(&mut c, "later"),
            Some(last),
            "{persistence}: dave holds later"
        );
        let next = acquire(&mut c, "fresh", "erin", 1000).unwrap();
        assert!(
            next > last && last > later,
            "{persistence}: tokens go on above"
        );
    }
}

#[test]
#[ignore = "upgrade suite: make test-upgrade"]
fn a_replica_of_this_build_follows_a_previous_master() {
    let master = Server::builder().module(previous_module()).start();
    let mut m = master.con();
    let held = hold_some(&mut m);
    let replica = Server::builder().replica_of(&master).start();
    let mut r = replica.con();
    wait_streaming(&mut m);
    assert_held(&mut r, &held, "replica after the full sync");
    // Then the stream: a release, a new grant, a semaphore's second holder.
    assert_eq!(release(&mut m, "ex", "alice"), 1);
    let bob = acquire(&mut m, "ex", "bob", 600_000).unwrap();
    let permits = [
        "LOCK.ACQUIRE",
        "sem",
        "v",
        "600000",
        "LIMIT",
        "3",
        "PERMITS",
        "1",
    ];
    let v = token_of(cmd(&mut m, &permits));
    wait_streaming(&mut m);
    assert_eq!(
        fence(&mut r, "ex"),
        Some(bob),
        "the replica has bob's grant"
    );
    let live = ["LOCK.FENCE", "sem", &v.to_string()];
    assert_eq!(cmd(&mut r, &live), Ok(Value::Int(1)));
    // Promoted, it grants above everything the old master issued.
    ok(&mut r, &["REPLICAOF", "NO", "ONE"]);
    let after = acquire(&mut r, "fresh", "erin", 1000).unwrap();
    assert!(
        after > v && after > bob,
        "a promoted replica goes on above: {after}"
    );
}

#[test]
#[ignore = "upgrade suite: make test-upgrade"]
fn a_previous_replica_refuses_this_builds_data_and_the_master_goes_on() {
    let master = Server::start();
    let mut m = master.con();
    let held = hold_some(&mut m);
    let port = master.port.to_string();
    let mut replica = Server::builder().module(previous_module()).start();
    ok(&mut replica.con(), &["REPLICAOF", "127.0.0.1", &port]);
    // It cannot read the new encoding: it never has the locks, and never says its link is up
    // with them (it refuses the sync, and may stop).
    std::thread::sleep(Duration::from_secs(3));
    if !replica.exited() {
        let mut r = replica.con();
        for (key, _) in &held {
            assert_eq!(fence(&mut r, key), None, "the old replica has no {key}");
        }
    }
    // Measured: it exits, after logging "refusing token data encoded by a newer redis-lock".
    eprintln!(
        "the previous build as a replica of this one: {}; its log ends with:\n{}",
        if replica.exited() {
            "exited"
        } else {
            "still up, without the data"
        },
        replica
            .log()
            .lines()
            .rev()
            .take(4)
            .collect::<Vec<_>>()
            .join("\n")
    );
    assert_held(&mut m, &held, "the master");
    assert_eq!(
        acquire(&mut m, "ex", "bob", 1000),
        None,
        "ex is still alice's"
    );
}
