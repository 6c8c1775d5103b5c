//! Shared (read-write) locks: readers together, writers alone, one fair FIFO queue where readers
//! batch and a waiting writer stops later readers, downgrade and upgrade, per-hold leases.

use std::time::Duration;

use redis_lock_harness::*;

fn shared(c: &mut Connection, key: &str, owner: &str, ttl: i64) -> Option<i64> {
    match ok(c, &["LOCK.ACQUIRE", key, owner, &ttl.to_string(), "SHARED"]) {
        Value::Int(t) => Some(t),
        Value::Nil => None,
        other => panic!("{other:?}"),
    }
}

fn mode(c: &mut Connection, key: &str) -> String {
    match map_field(&ok(c, &["LOCK.INFO", key]), "mode") {
        Some(Value::SimpleString(s)) => s,
        other => format!("{other:?}"),
    }
}

#[test]
fn readers_hold_together_each_with_its_own_token() {
    let s = Server::start();
    let mut c = s.con();
    let r1 = shared(&mut c, "doc", "r1", 60_000).unwrap();
    let r2 = shared(&mut c, "doc", "r2", 60_000).unwrap();
    assert!(r2 > r1);
    assert_eq!(mode(&mut c, "doc"), "shared");
    assert_eq!(
        (stat(&mut c, "shared_grants"), stat(&mut c, "shared_holds")),
        (2.0, 2.0)
    );
    assert_eq!(
        holder_tokens(&mut c, "doc"),
        [("r1".into(), r1), ("r2".into(), r2)]
    );
    assert_eq!(
        fence(&mut c, "doc"),
        None,
        "no exclusive holder to fence with"
    );
    for t in [r1, r2] {
        assert_eq!(int(&ok(&mut c, &["LOCK.FENCE", "doc", &t.to_string()])), 1);
    }
    // Re-acquiring in the same mode is the safe retry: same token.
    assert_eq!(shared(&mut c, "doc", "r1", 60_000), Some(r1));
    assert_eq!(
        acquire(&mut c, "doc", "w", 1_000),
        None,
        "a writer needs it free"
    );
    assert_eq!(release(&mut c, "doc", "r1"), 1);
    assert_eq!(release(&mut c, "doc", "r1"), 0, "released once");
    assert_eq!(release(&mut c, "doc", "r2"), 1);
    assert_eq!(
        int(&ok(&mut c, &["EXISTS", "doc"])),
        0,
        "free and nobody waits: no key"
    );
    assert_eq!(stat(&mut c, "shared_holds"), 0.0);
}

#[test]
fn a_writer_waits_for_every_reader_and_later_readers_wait_for_it() {
    let s = Server::start();
    let mut c = s.con();
    shared(&mut c, "doc", "r1", 60_000).unwrap();
    shared(&mut c, "doc", "r2", 60_000).unwrap();
    let writer = spawn_wait_with(&s, &["LOCK.ACQUIRE", "doc", "w", "60000", "WAIT", "0"]);
    wait_blocked(&mut c, 1);
    assert_eq!(
        shared(&mut c, "doc", "r3", 60_000),
        None,
        "no reader overtakes a waiting writer"
    );
    let reader = spawn_wait_with(
        &s,
        &["LOCK.ACQUIRE", "doc", "r3", "60000", "SHARED", "WAIT", "0"],
    );
    wait_blocked(&mut c, 2);
    assert_eq!(release(&mut c, "doc", "r1"), 1);
    std::thread::sleep(Duration::from_millis(50));
    assert_eq!(blocked_clients(&mut c), 2, "one reader still holds");
    assert_eq!(release(&mut c, "doc", "r2"), 1);
    let w = token_of(writer.join().unwrap());
    assert_eq!(fence(&mut c, "doc"), Some(w));
    assert_eq!(
        blocked_clients(&mut c),
        1,
        "the reader behind the writer waits for it"
    );
    assert_eq!(release(&mut c, "doc", "w"), 1);
    let r3 = token_of(reader.join().unwrap());
    assert!(r3 > w);
    assert_eq!(
        (
            stat(&mut c, "exclusive_waits"),
            stat(&mut c, "shared_waits")
        ),
        (1.0, 1.0)
    );
    assert_eq!(holder_tokens(&mut c, "doc"), [("r3".into(), r3)]);
}

/// `[S1, S2, X, S3]` queued behind an exclusive holder: S1 and S2 are granted together, X next,
/// S3 after X.
#[test]
fn readers_at_the_head_are_granted_together_and_stop_at_a_writer() {
    let s = Server::start();
    let mut c = s.con();
    acquire(&mut c, "doc", "holder", 60_000).unwrap();
    let mut handles = Vec::new();
    for (i, (owner, shared)) in [("s1", true), ("s2", true), ("x", false), ("s3", true)]
        .into_iter()
        .enumerate()
    {
        let mut words = vec!["LOCK.ACQUIRE", "doc", owner, "60000", "WAIT", "0"];
        if shared {
            words.push("SHARED");
        }
        handles.push(spawn_wait_with(&s, &words));
        wait_blocked(&mut c, i as i64 + 1);
    }
    let mut handles = handles.into_iter();
    assert_eq!(release(&mut c, "doc", "holder"), 1);
    let s1 = token_of(handles.next().unwrap().join().unwrap());
    let s2 = token_of(handles.next().unwrap().join().unwrap());
    assert_eq!(
        holder_tokens(&mut c, "doc"),
        [("s1".into(), s1), ("s2".into(), s2)]
    );
    wait_blocked(&mut c, 2);
    release(&mut c, "doc", "s1");
    release(&mut c, "doc", "s2");
    let x = token_of(handles.next().unwrap().join().unwrap());
    assert_eq!(fence(&mut c, "doc"), Some(x));
    wait_blocked(&mut c, 1);
    release(&mut c, "doc", "x");
    let s3 = token_of(handles.next().unwrap().join().unwrap());
    assert!(s1 < s2 && s2 < x && x < s3, "tokens in grant order");
}

#[test]
fn the_exclusive_holder_downgrades_in_place_and_readers_join() {
    let s = Server::start();
    let mut c = s.con();
    let t = acquire(&mut c, "doc", "a", 60_000).unwrap();
    let r = spawn_wait_with(
        &s,
        &["LOCK.ACQUIRE", "doc", "r", "60000", "SHARED", "WAIT", "0"],
    );
    wait_blocked(&mut c, 1);
    assert_eq!(shared(&mut c, "doc", "a", 30_000), Some(t), "same token");
    let rt = token_of(r.join().unwrap());
    assert_eq!(
        holder_tokens(&mut c, "doc"),
        [("a".into(), t), ("r".into(), rt)]
    );
    assert_eq!(mode(&mut c, "doc"), "shared");
}

#[test]
fn only_a_sole_reader_upgrades_and_two_would_deadlock() {
    let s = Server::start();
    let mut c = s.con();
    let r1 = shared(&mut c, "doc", "r1", 60_000).unwrap();
    let r2 = shared(&mut c, "doc", "r2", 60_000).unwrap();
    let err = cmd(&mut c, &["LOCK.ACQUIRE", "doc", "r1", "60000"]).unwrap_err();
    assert!(err.starts_with("DEADLOCK"), "{err}");
    assert_eq!(stat(&mut c, "deadlocks"), 1.0);
    assert_eq!(
        holder_tokens(&mut c, "doc"),
        [("r1".into(), r1), ("r2".into(), r2)],
        "nothing changed"
    );
    release(&mut c, "doc", "r2");
    let up = acquire(&mut c, "doc", "r1", 60_000).unwrap();
    assert!(up > r2, "an upgrade is a new grant: a fresh token");
    assert_eq!(fence(&mut c, "doc"), Some(up));
    assert_eq!(mode(&mut c, "doc"), "exclusive");
}

#[test]
fn each_read_lease_ends_on_its_own() {
    let s = Server::builder()
        .args(&["--notify-keyspace-events", "KEA"])
        .start();
    let mut c = s.con();
    shared(&mut c, "doc", "short", 150).unwrap();
    let long = shared(&mut c, "doc", "long", 60_000).unwrap();
    assert!(eventually(Duration::from_secs(5), || holder_tokens(
        &mut c, "doc"
    )
    .len()
        == 1));
    assert_eq!(holder_tokens(&mut c, "doc"), [("long".into(), long)]);
    // LOCK.INFO stops listing a hold at its deadline; the timer that drops it (and counts the
    // expiry) fires a moment later.
    assert!(eventually(Duration::from_secs(5), || stat(
        &mut c,
        "expired_while_held"
    ) == 1.0));
    assert_eq!(release(&mut c, "doc", "short"), 0, "that lease ran out");
    // A writer waiting behind both is served when the last one leaves.
    let w = spawn_wait_with(&s, &["LOCK.ACQUIRE", "doc", "w", "1000", "WAIT", "0"]);
    wait_blocked(&mut c, 1);
    release(&mut c, "doc", "long");
    assert!(token_of(w.join().unwrap()) > long);
}

#[test]
fn kinds_do_not_mix_and_holders_are_bounded() {
    let s = Server::start();
    let mut c = s.con();
    shared(&mut c, "doc", "r1", 60_000).unwrap();
    let err = cmd(&mut c, &["LOCK.ACQUIRE", "doc", "x", "1000", "LIMIT", "3"]).unwrap_err();
    assert!(err.contains("another kind of lock"), "{err}");
    ok(&mut c, &["CONFIG", "SET", "lock.max-holders", "2"]);
    shared(&mut c, "doc", "r2", 60_000).unwrap();
    let err = cmd(&mut c, &["LOCK.ACQUIRE", "doc", "r3", "1000", "SHARED"]).unwrap_err();
    assert!(err.contains("lock.max-holders"), "{err}");
    assert_eq!(holder_tokens(&mut c, "doc").len(), 2);
    for bad in [
        vec!["LOCK.ACQUIRE", "doc", "r", "1000", "SHARED", "SHARED"],
        vec!["LOCK.ACQUIRE", "doc", "r", "1000", "SHARED", "LIMIT", "2"],
    ] {
        assert_eq!(cmd(&mut c, &bad).unwrap_err(), "ERR syntax error");
    }
}

/// Shared holds and semaphore permits reach replicas, the AOF, RDB and DUMP/RESTORE exactly.
#[test]
fn mixed_holds_survive_replication_and_persistence() {
    let mut m = Server::builder()
        .args(&["--appendonly", "yes", "--appendfsync", "always"])
        .start();
    let r = Server::builder().replica_of(&m).start();
    let mut mc = m.con();
    let mut rc = r.con();
    shared(&mut mc, "doc", "r1", 60_000).unwrap();
    shared(&mut mc, "doc", "r2", 60_000).unwrap();
    ok(
        &mut mc,
        &[
            "LOCK.ACQUIRE",
            "pool",
            "a",
            "60000",
            "LIMIT",
            "5",
            "PERMITS",
            "2",
        ],
    );
    ok(
        &mut mc,
        &[
            "LOCK.ACQUIRE",
            "pool",
            "b",
            "60000",
            "LIMIT",
            "5",
            "PERMITS",
            "3",
        ],
    );
    release(&mut mc, "doc", "r1");
    let expected_doc = holder_tokens(&mut mc, "doc");
    let expected_pool = holder_tokens(&mut mc, "pool");
    assert_eq!(expected_doc.len(), 1);
    assert_eq!(expected_pool.len(), 2);
    ok(&mut mc, &["WAIT", "1", "5000"]);
    for key in ["doc", "pool"] {
        assert_eq!(
            ok(&mut rc, &["DEBUG", "DIGEST-VALUE", key]),
            ok(&mut mc, &["DEBUG", "DIGEST-VALUE", key]),
            "{key}: the replica holds exactly the master's state"
        );
    }
    assert_eq!(holder_tokens(&mut rc, "doc"), expected_doc);
    // DUMP/RESTORE
    let payload = dump(&mut mc, "pool");
    assert_eq!(
        run(&mut mc, &[b"RESTORE", b"pool2", b"0", &payload]),
        Ok(Value::Okay)
    );
    assert_eq!(holder_tokens(&mut mc, "pool2"), expected_pool);
    // RDB (DEBUG RELOAD) and the AOF (restart)
    ok(&mut mc, &["DEBUG", "RELOAD"]);
    assert_eq!(holder_tokens(&mut mc, "doc"), expected_doc);
    assert_eq!(holder_tokens(&mut mc, "pool"), expected_pool);
    ok(&mut mc, &["BGREWRITEAOF"]);
    wait_persistence_idle(&mut mc);
    release(&mut mc, "pool", "a");
    let after_release = holder_tokens(&mut mc, "pool");
    m.restart();
    let mut mc = m.con();
    assert_eq!(holder_tokens(&mut mc, "doc"), expected_doc);
    assert_eq!(holder_tokens(&mut mc, "pool"), after_release);
    assert_eq!(
        int(&map_field(&ok(&mut mc, &["LOCK.INFO", "pool"]), "permits").unwrap()),
        3
    );
}

/// A writer at the head of the queue gives up: the readers behind it, which it held back, are
/// served at once beside the current readers.
#[test]
fn readers_behind_a_writer_that_gives_up_are_served() {
    let s = Server::start();
    let mut c = s.con();
    let r1 = shared(&mut c, "doc", "r1", 60_000).unwrap();
    // The writer gives up after 1.5 s: the reader queues behind it well before that.
    let writer = spawn_wait_with(&s, &["LOCK.ACQUIRE", "doc", "w", "60000", "WAIT", "1500"]);
    wait_blocked(&mut c, 1);
    let reader = spawn_wait_with(
        &s,
        &[
            "LOCK.ACQUIRE",
            "doc",
            "r2",
            "60000",
            "SHARED",
            "WAIT",
            "10000",
        ],
    );
    wait_blocked(&mut c, 2);
    assert_eq!(
        writer.join().unwrap(),
        Ok(Value::Nil),
        "the writer timed out"
    );
    let r2 = token_of(reader.join().unwrap());
    assert_eq!(
        holder_tokens(&mut c, "doc"),
        [("r1".into(), r1), ("r2".into(), r2)]
    );
}
