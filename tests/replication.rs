//! Replicas follow their master through deterministic effects; promotion continues above the
//! replicated tokens (after lost grants too: `tests/epochs.rs`); a demoted master's waiters are
//! answered.

use redis_lock_harness::*;
use std::time::{Duration, Instant};

#[test]
fn replica_follows_grants_extends_handoffs_expiry_and_releases() {
    let master = Server::start();
    let replica = Server::builder().replica_of(&master).start();
    let mut m = master.con();
    let mut r = replica.con();

    let t1 = acquire(&mut m, "a", "alice", 60_000).unwrap();
    let short = acquire(&mut m, "b", "bob", 60_000).unwrap();
    let w = spawn_wait(&master, "a", "carol", 60_000, 0);
    let wb = spawn_wait(&master, "b", "dave", 60_000, 0); // gets b when bob's lease runs out
    wait_blocked(&mut m, 2);
    assert_eq!(int(&ok(&mut m, &["LOCK.EXTEND", "b", "bob", "300"])), 1);
    assert_eq!(release(&mut m, "a", "alice"), 1);
    let t2 = int(&w.join().unwrap().unwrap());
    let t3 = int(&wb.join().unwrap().unwrap());
    assert!(t3 > short);
    assert_eq!(int(&ok(&mut m, &["LOCK.EXTEND", "a", "carol", "90000"])), 1);
    acquire(&mut m, "c", "erin", 60_000).unwrap();
    release(&mut m, "c", "erin");
    wait_replica_acked(&mut m);

    assert_eq!(fence(&mut r, "a"), Some(t2));
    assert_eq!(
        fence(&mut r, "b"),
        Some(t3),
        "the expiry handoff reached the replica"
    );
    assert_eq!(fence(&mut r, "c"), None);
    assert_eq!(int(&ok(&mut r, &["EXISTS", "c"])), 0);
    assert!(
        lease_left(&mut r, "a").unwrap() > 80_000,
        "extend replicated as the time left"
    );
    assert_eq!(
        ok(&mut r, &["DEBUG", "DIGEST"]),
        ok(&mut m, &["DEBUG", "DIGEST"])
    );
    for key in ["a", "b"] {
        assert_eq!(
            ok(&mut r, &["DEBUG", "DIGEST-VALUE", key]),
            ok(&mut m, &["DEBUG", "DIGEST-VALUE", key])
        );
    }
    // Replicas refuse writes and never grant on their own.
    let err = cmd(&mut r, &["LOCK.ACQUIRE", "z", "x", "100"]).unwrap_err();
    assert!(err.starts_with("READONLY"), "{err}");
    let err = cmd(&mut r, &["LOCK.RELEASE", "a", "carol"]).unwrap_err();
    assert!(err.starts_with("READONLY"), "{err}");
    assert!(t1 < t2);
}

#[test]
fn replica_aof_keeps_what_the_master_replicated() {
    let master = Server::start();
    let mut replica = Server::builder()
        .replica_of(&master)
        .args(&["--appendonly", "yes", "--appendfsync", "always"])
        .start();
    let mut m = master.con();
    // After the full sync the replica rewrites its AOF; let that finish first.
    wait_persistence_idle(&mut replica.con());
    let t = acquire(&mut m, "k", "alice", 60_000).unwrap();
    acquire(&mut m, "gone", "bob", 60_000).unwrap();
    release(&mut m, "gone", "bob");
    wait_replica_acked(&mut m);
    wait_persistence_idle(&mut replica.con());
    replica.restart_with(&["--appendonly", "yes"]); // standalone now, from its own AOF
    let mut r = replica.con();
    assert_eq!(fence(&mut r, "k"), Some(t));
    assert_eq!(fence(&mut r, "gone"), None);
}

/// The replica learns the counter from replicated grants: after promotion its tokens are
/// above every token the master issued, even ones far ahead of the clock.
#[test]
fn promoted_replica_continues_above_replicated_tokens() {
    let master = Server::start();
    let replica = Server::builder().replica_of(&master).start();
    let mut m = master.con();
    restore_lock_with_token(&mut m, "forged", future_token());
    let from_counter = acquire(&mut m, "k", "a", 60_000).unwrap();
    ok(&mut m, &["DEL", "forged", "k"]);
    wait_replica_acked(&mut m);
    let mut r = replica.con();
    ok(&mut r, &["REPLICAOF", "NO", "ONE"]);
    let next = acquire(&mut r, "k", "b", 60_000).unwrap();
    assert!(next > from_counter, "{next} > {from_counter}");
}

#[test]
fn waiters_of_a_demoted_master_get_an_error_at_once() {
    let other = Server::start();
    let old = Server::start();
    let mut c = old.con();
    acquire(&mut c, "k", "h", 60_000).unwrap();
    let w = spawn_wait(&old, "k", "w", 60_000, 0);
    wait_blocked(&mut c, 1);
    ok(&mut c, &["REPLICAOF", "127.0.0.1", &other.port.to_string()]);
    let err = w.join().unwrap().unwrap_err();
    assert!(err.starts_with("UNBLOCKED"), "{err}");
    assert_eq!(blocked_clients(&mut c), 0);
}

/// A grant acknowledged together with `WAIT 1` survives a failover with its owner and token.
#[test]
fn grants_acknowledged_with_wait_survive_failover() {
    let mut master = Server::start();
    let replica = Server::builder().replica_of(&master).start();
    let mut m = master.con();
    let t = acquire(&mut m, "order:9", "alice", 60_000).unwrap();
    assert_eq!(
        int(&ok(&mut m, &["WAIT", "1", "5000"])),
        1,
        "one replica has the grant"
    );
    master.kill9();
    let mut r = replica.con();
    ok(&mut r, &["REPLICAOF", "NO", "ONE"]);
    assert_eq!(fence(&mut r, "order:9"), Some(t), "token survived");
    assert_eq!(
        acquire(&mut r, "order:9", "bob", 1_000),
        None,
        "still held by alice"
    );
    assert_eq!(release(&mut r, "order:9", "alice"), 1, "owner survived");
    assert!(acquire(&mut r, "order:9", "bob", 1_000).unwrap() > t);
}

/// A replica configured writable still refuses lock writes: grants come from the master only
/// (and creating a lock over one the replica keeps expired would trip Redis's assertions).
#[test]
fn a_writable_replica_refuses_lock_writes() {
    let master = Server::start();
    let replica = Server::builder()
        .replica_of(&master)
        .args(&["--replica-read-only", "no"])
        .start();
    let mut m = master.con();
    acquire(&mut m, "k", "a", 200).unwrap();
    wait_replica_acked(&mut m);
    std::thread::sleep(Duration::from_millis(300)); // expired on the replica's clock too
    let mut r = replica.con();
    for words in [
        vec!["LOCK.ACQUIRE", "k", "b", "1000"],
        vec!["LOCK.RELEASE", "k", "a"],
        vec!["LOCK.EXTEND", "k", "a", "1000"],
        vec!["LOCK.FORCERELEASE", "k"],
    ] {
        let err = cmd(&mut r, &words).unwrap_err();
        assert!(err.starts_with("READONLY"), "{words:?}: {err}");
    }
    assert_eq!(ok(&mut r, &["PING"]), Value::SimpleString("PONG".into()));
    assert_eq!(fence(&mut r, "k"), None);
}

/// The coordinated `FAILOVER` command: the master pauses writes, hands over to its replica and
/// becomes a replica itself. Grants survive, its waiters are answered at once, tokens go on up.
#[test]
fn coordinated_failover_command() {
    let master = Server::start();
    let replica = Server::builder().replica_of(&master).start();
    let mut m = master.con();
    let t = acquire(&mut m, "k", "alice", 60_000).unwrap();
    let w = spawn_wait(&master, "k", "bob", 60_000, 0);
    wait_blocked(&mut m, 1);
    ok(&mut m, &["FAILOVER", "TIMEOUT", "5000"]);
    let answer = w.join().unwrap();
    assert!(
        answer.as_ref().is_err_and(|e| e.starts_with("UNBLOCKED")),
        "{answer:?}"
    );
    let mut r = replica.con();
    assert!(eventually(Duration::from_secs(10), || info_field(
        &mut r,
        "replication",
        "role"
    ) == "master"));
    assert_eq!(info_field(&mut m, "replication", "role"), "slave");
    assert_eq!(fence(&mut r, "k"), Some(t));
    assert_eq!(release(&mut r, "k", "alice"), 1);
    assert!(acquire(&mut r, "k", "bob", 1_000).unwrap() > t);
}

/// With `min-replicas-to-write`, a master cut off from its replicas refuses clients' writes
/// (NOREPLICAS); it must not hand a lock over on its own either (a lease that ends, a timer),
/// or the far side of a partition hands out a lock that a promoted replica hands out too.
#[test]
fn a_master_without_its_replicas_hands_nothing_over() {
    let master = Server::builder()
        .args(&[
            "--min-replicas-to-write",
            "1",
            "--min-replicas-max-lag",
            "1",
        ])
        .start();
    let mut replica = Server::builder().replica_of(&master).start();
    let mut m = master.con();
    let writable = |m: &mut Connection| cmd(m, &["SET", "probe", "x"]).is_ok();
    assert!(
        eventually(Duration::from_secs(5), || writable(&mut m)),
        "the replica counts"
    );
    let started = Instant::now();
    acquire(&mut m, "k", "holder", 4_000).unwrap();
    let waiter = spawn_wait(&master, "k", "waiter", 60_000, 6_000);
    wait_blocked(&mut m, 1);
    replica.kill9();
    let refused = eventually(Duration::from_secs(3), || {
        cmd(&mut m, &["SET", "probe", "x"]).is_err_and(|e| e.starts_with("NOREPLICAS"))
    });
    assert!(refused, "the master noticed its replica is gone");
    assert!(
        started.elapsed() < Duration::from_millis(3_800),
        "inconclusive: the lease ended before the master refused writes"
    );
    // The holder's lease ends at 4 s; nobody is handed the lock; the WAIT ends at 6 s.
    assert_eq!(
        waiter.join().unwrap(),
        Ok(Value::Nil),
        "no grant without replicas"
    );
    // Replicas back: grants again.
    replica.restart();
    wait_link_up(&mut replica.con());
    assert!(eventually(Duration::from_secs(5), || writable(&mut m)));
    assert!(acquire(&mut m, "k", "next", 1_000).is_some());
}
