//! Fencing epochs (`src/core/fencing.rs`): tokens that never repeat or go backwards across a
//! failover that lost grants, or a restart from an older snapshot, whatever the hosts' clocks
//! say. Skewed clocks use libfaketime, which runs Valkey's libc build, not a jemalloc one: on
//! those the skewed cases print SKIPPED and the real-clock cases still run.

use std::time::Duration;

use redis_lock_harness::*;

/// The scenario of the issue: one grant replicated, the replica stopped and its link cut, 55
/// grants on the master that never reach it, the master killed, the replica promoted at once.
/// Its next token is above every lost one, with the clocks `master_env` / `replica_env`.
fn lost_grants_then_promotion(master_env: &[(&str, &str)], replica_env: &[(&str, &str)]) {
    let mut master = Server::builder().env(master_env).start();
    let replica = Server::builder()
        .replica_of(&master)
        .env(replica_env)
        .start();
    let mut m = master.con();
    acquire(&mut m, "seen", "a", 60_000).unwrap();
    wait_replica_acked(&mut m);
    replica.signal(libc::SIGSTOP);
    ok(&mut m, &["CLIENT", "KILL", "TYPE", "replica"]);
    let lost: Vec<i64> = (0..55)
        .map(|i| acquire(&mut m, &format!("lost:{i}"), "a", 60_000).unwrap())
        .collect();
    master.kill9();
    replica.signal(libc::SIGCONT);
    let mut r = replica.con();
    assert_eq!(fence(&mut r, "lost:0"), None, "the replica missed these");
    ok(&mut r, &["REPLICAOF", "NO", "ONE"]);
    let next = acquire(&mut r, "lost:0", "b", 60_000).unwrap();
    let max_lost = *lost.iter().max().unwrap();
    assert!(next > max_lost, "{next} > {max_lost}");
    assert!(epoch_of(next) > epoch_of(max_lost), "a new epoch");
}

/// Promoted in the same instant as the last lost grant (no clock can tell them apart, the
/// flaky case of Redis 7.0's millisecond clock): still above.
#[test]
fn a_promotion_right_after_lost_grants_starts_above_them() {
    lost_grants_then_promotion(&[], &[]);
}

#[test]
fn a_promoted_replica_starts_above_lost_grants_whatever_the_clocks() {
    // (master's clock, replica's clock) offsets in seconds.
    for (master_offset, replica_offset) in [("+0", "-30"), ("+0", "-3600"), ("+3600", "+0")] {
        let master_clock = ClockFile::new("master", master_offset);
        let replica_clock = ClockFile::new("replica", replica_offset);
        let (Some(master_env), Some(replica_env)) = (master_clock.env(), replica_clock.env())
        else {
            eprintln!("SKIPPED on this server: libfaketime cannot start a jemalloc build");
            return;
        };
        lost_grants_then_promotion(&pairs(&master_env), &pairs(&replica_env));
    }
}

/// Restart from a snapshot older than the last grants (the AOF off, the RDB saved before
/// them), with the clock as it was (any server) and stepped back an hour (libfaketime): the
/// epoch file lifts the next token above every token issued before.
#[test]
fn a_restart_from_an_older_snapshot_starts_above_every_token_issued() {
    let clock = ClockFile::new("restart", "+0");
    let stepped = clock.env();
    let env: Vec<(String, String)> = stepped.clone().unwrap_or_default();
    let mut s = Server::builder().env(&pairs(&env)).start();
    let mut c = s.con();
    acquire(&mut c, "before", "a", 60_000).unwrap();
    ok(&mut c, &["SAVE"]);
    let last = (0..20)
        .map(|i| acquire(&mut c, &format!("after:{i}"), "a", 60_000).unwrap())
        .max()
        .unwrap();
    s.kill9();
    if stepped.is_some() {
        clock.set("-3600");
    }
    s.restart();
    let mut c = s.con();
    assert!(fence(&mut c, "before").is_some() && fence(&mut c, "after:0").is_none());
    let next = acquire(&mut c, "after:0", "b", 60_000).unwrap();
    assert!(next > last, "{next} > {last}");
    if stepped.is_none() {
        eprintln!("(the clock was not stepped back: libfaketime cannot start a jemalloc build)");
    }
}

/// A master that restarts starts a new epoch before any grant, and its replica hears of it
/// however it resyncs: a full sync carries the epoch's marker in the RDB; here a partial
/// resync (a graceful restart keeps the replication id, and the server recreates its backlog
/// while loading), which carries the `LOCK.EPOCH` replicated at start-up. Killed before
/// granting anything, the master leaves a replica that starts above that epoch.
#[test]
fn a_restarted_masters_epoch_reaches_its_replica_before_any_grant() {
    let mut master = Server::builder().args(&["--save", "3600 1"]).start();
    let replica = Server::builder().replica_of(&master).start();
    let mut m = master.con();
    acquire(&mut m, "k", "a", 60_000).unwrap();
    wait_replica_acked(&mut m);
    let first = stored_epoch(&master);
    master.stop(); // SIGTERM: saves the RDB with the replication id and offset
    master.restart();
    let restarted = stored_epoch(&master);
    assert!(restarted > first, "{restarted} > {first}");
    let mut r = replica.con();
    wait_link_up(&mut r);
    assert!(
        replica
            .log()
            .contains("Successful partial resynchronization with"),
        "a partial resync (the path under test)"
    );
    // WAIT waits for the offset of its connection's last write: a fresh connection has none,
    // so write first (no grant), and the replica has everything up to it, `LOCK.EPOCH` too.
    let mut m = master.con();
    ok(&mut m, &["SET", "epoch:probe", "1"]);
    wait_replica_acked(&mut m);
    master.kill9();
    ok(&mut r, &["REPLICAOF", "NO", "ONE"]);
    let next = acquire(&mut r, "k2", "b", 60_000).unwrap();
    assert!(
        epoch_of(next) > restarted,
        "{} > {restarted}",
        epoch_of(next)
    );
}

/// Without a stored epoch nothing is granted: the error says so, the log says why, and grants
/// resume once the file can be written, in an epoch above the old one.
#[test]
fn an_epoch_that_cannot_be_stored_grants_nothing() {
    let s = Server::start();
    let mut c = s.con();
    let before = acquire(&mut c, "k", "a", 60_000).unwrap();
    let file = s.dir.join("dump.rdb.lock-epoch");
    std::fs::remove_file(&file).unwrap();
    std::fs::create_dir(&file).unwrap(); // reading it fails (EISDIR)
                                         // Demoted and promoted: the next grant needs a new epoch.
    ok(&mut c, &["REPLICAOF", "127.0.0.1", "1"]);
    ok(&mut c, &["REPLICAOF", "NO", "ONE"]);
    assert_eq!(
        cmd(&mut c, &["LOCK.ACQUIRE", "other", "a", "60000"]).unwrap_err(),
        "ERR redis-lock cannot store its fencing epoch, so it grants nothing (the server log says why)"
    );
    assert_eq!(
        ok(&mut c, &["EXISTS", "other"]),
        Value::Int(0),
        "nothing granted"
    );
    assert!(s
        .log()
        .contains("cannot read the epoch file dump.rdb.lock-epoch"));
    std::fs::remove_dir(&file).unwrap();
    let next = acquire(&mut c, "other", "a", 60_000).unwrap();
    assert!(epoch_of(next) > epoch_of(before));
    assert_eq!(stored_epoch(&s), epoch_of(next));
}

/// LOCK.EPOCH is internal: clients are refused; the AOF replays it, so a server restarted
/// from its AOF alone (no epoch file, no grant ever) still starts above the epoch it used.
#[test]
fn lock_epoch_is_accepted_only_from_the_master_link_or_the_aof() {
    let mut s = Server::builder()
        .args(&["--appendonly", "yes", "--appendfsync", "always"])
        .start();
    let mut c = s.con();
    assert_eq!(
        cmd(&mut c, &["LOCK.EPOCH", "5"]).unwrap_err(),
        "ERR LOCK.EPOCH is internal: it is accepted only from the master link or the AOF"
    );
    assert!(eventually(Duration::from_secs(5), || stored_epoch(&s) > 0));
    let first = stored_epoch(&s);
    wait_persistence_idle(&mut c);
    s.kill9();
    std::fs::remove_file(s.dir.join("dump.rdb.lock-epoch")).unwrap();
    s.restart();
    let token = acquire(&mut s.con(), "k", "b", 60_000).unwrap();
    assert!(epoch_of(token) > first, "{} > {first}", epoch_of(token));
}
