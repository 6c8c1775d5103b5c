//! Leases on the lease clock (`src/ffi/clock.rs`): a lock key has no Redis TTL, the module ends
//! each lease `ttl` after its grant in real elapsed time, wherever the lock moved, whatever the
//! wall clock does, and a replica counts the time left on its own clock. Stepped and skewed
//! clocks use libfaketime, which runs Valkey's libc build, not a jemalloc one: on those the
//! clock cases print SKIPPED and the others still run.

use std::time::{Duration, Instant};

use redis_lock_harness::*;

fn exists(c: &mut Connection, key: &str) -> bool {
    int(&ok(c, &["EXISTS", key])) == 1
}

/// `key` stops being a key within `within` (its last lease ended and the module deleted it).
fn gone_within(c: &mut Connection, key: &str, within: Duration) -> bool {
    eventually(within, || !exists(c, key))
}

#[test]
fn a_lock_key_has_no_ttl_and_goes_when_its_lease_ends() {
    let s = Server::start();
    let mut c = s.con();
    ok(&mut c, &["CONFIG", "SET", "notify-keyspace-events", "KExd"]);
    let mut sub = s.con();
    sub.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    let mut pubsub = sub.as_pubsub();
    pubsub.subscribe("__keyspace@0__:k").unwrap();
    pubsub.subscribe("__keyevent@0__:expired").unwrap();
    let t0 = Instant::now();
    acquire(&mut c, "k", "a", 300).unwrap();
    assert_eq!(
        int(&ok(&mut c, &["PTTL", "k"])),
        -1,
        "no TTL of Redis's own"
    );
    let left = lease_left(&mut c, "k").unwrap();
    assert!(
        (1..=300).contains(&left),
        "LOCK.INFO tells the time left: {left}"
    );
    let mut seen = Vec::new();
    while seen.len() < 4 {
        let msg = pubsub.get_message().expect("events within 5 s");
        seen.push((
            msg.get_channel_name().to_string(),
            msg.get_payload::<String>().unwrap(),
        ));
    }
    let elapsed = t0.elapsed();
    assert_eq!(
        seen,
        [
            ("__keyspace@0__:k".into(), "lock.acquire".into()),
            ("__keyspace@0__:k".into(), "lock.expire".into()),
            ("__keyspace@0__:k".into(), "expired".into()),
            ("__keyevent@0__:expired".into(), "k".into()),
        ],
        "the module's expiry, then the server's own expired event, as for a key with a TTL"
    );
    // Not before the lease (sent after `t0`) ended (10 ms: ms rounding); the margin of 2 s
    // covers descheduled threads on a loaded machine.
    assert!(
        elapsed >= Duration::from_millis(290) && elapsed < Duration::from_millis(2_300),
        "ended on time: {elapsed:?}"
    );
    assert!(!exists(&mut c, "k"));
    assert_eq!(stat(&mut c, "expired_while_held"), 1.0);
}

/// RENAME (also in MULTI and in a script), MOVE, COPY, RESTORE and SWAPDB put a lock under
/// another name or db: its lease still ends there, on time.
#[test]
fn a_lock_moved_to_another_name_or_db_still_ends_on_time() {
    let s = Server::start();
    let mut c = s.con();
    let lease = 400;
    let within = Duration::from_millis(1_500);

    acquire(&mut c, "a", "o", lease).unwrap();
    ok(&mut c, &["RENAME", "a", "renamed"]);
    acquire(&mut c, "b", "o", lease).unwrap();
    ok(&mut c, &["RENAMENX", "b", "renamed-nx"]);
    acquire(&mut c, "c", "o", lease).unwrap();
    ok(&mut c, &["COPY", "c", "copied"]);
    acquire(&mut c, "d", "o", lease).unwrap();
    let payload = dump(&mut c, "d");
    assert_eq!(
        run(&mut c, &[b"RESTORE", b"restored", b"0", &payload]),
        Ok(Value::Okay)
    );
    acquire(&mut c, "e", "o", lease).unwrap();
    assert_eq!(int(&ok(&mut c, &["MOVE", "e", "1"])), 1);
    acquire(&mut c, "f", "o", lease).unwrap();
    ok(&mut c, &["MULTI"]);
    cmd(&mut c, &["RENAME", "f", "renamed-in-multi"]).unwrap();
    assert!(matches!(cmd(&mut c, &["EXEC"]), Ok(Value::Array(_))));
    acquire(&mut c, "g", "o", lease).unwrap();
    ok(
        &mut c,
        &[
            "EVAL",
            "return redis.call('RENAME', KEYS[1], KEYS[2])",
            "2",
            "g",
            "renamed-by-script",
        ],
    );
    ok(&mut c, &["SELECT", "2"]);
    acquire(&mut c, "swapped", "o", lease).unwrap();
    ok(&mut c, &["SWAPDB", "2", "3"]);

    ok(&mut c, &["SELECT", "0"]);
    for key in [
        "renamed",
        "renamed-nx",
        "c",
        "copied",
        "d",
        "restored",
        "renamed-in-multi",
        "renamed-by-script",
    ] {
        assert!(gone_within(&mut c, key, within), "{key} outlived its lease");
    }
    ok(&mut c, &["SELECT", "1"]);
    assert!(
        gone_within(&mut c, "e", within),
        "the moved lock outlived its lease"
    );
    ok(&mut c, &["SELECT", "3"]);
    assert!(
        gone_within(&mut c, "swapped", within),
        "the swapped lock outlived its lease"
    );
}

/// A lock value the server frees without its unlink hook (a RESTORE whose ABSTTL is already
/// past: loaded, so watched in the lease heap, then dropped) leaves the heap safely: the heap
/// lets go of it on the main thread, never reads its memory after, so the locks made next,
/// likely at the same addresses, all end on time, each once.
#[test]
fn a_lock_value_freed_without_its_unlink_leaves_the_lease_heap_safely() {
    let s = Server::start();
    let mut c = s.con();
    acquire(&mut c, "d", "o", 60_000).unwrap();
    let payload = dump(&mut c, "d");
    let mut live = Vec::new();
    for round in 0..40 {
        for i in 0..20 {
            let name = format!("gone-{round}-{i}");
            let restored = run(
                &mut c,
                &[b"RESTORE", name.as_bytes(), b"1000", &payload, b"ABSTTL"],
            );
            assert_eq!(restored, Ok(Value::Okay));
            assert!(!exists(&mut c, &name), "{name}: expired on arrival");
        }
        for i in 0..20 {
            let name = format!("live-{round}-{i}");
            acquire(&mut c, &name, "o", 200 + 10 * i).unwrap();
            live.push(name);
        }
    }
    // The last of them was granted a 390 ms lease just now; 5 s covers a loaded machine.
    let within = Duration::from_secs(5);
    for name in &live {
        assert!(
            gone_within(&mut c, name, within),
            "{name} outlived its lease"
        );
    }
    assert_eq!(stat(&mut c, "expired_while_held"), live.len() as f64);
    assert!(exists(&mut c, "d"), "the original is untouched");
}

/// Many locks through every path that moves, copies, drops or frees a value (release, DEL,
/// RENAME over another lock, COPY REPLACE, MOVE, SWAPDB, FLUSHDB, an expired RESTORE), in a
/// seeded random order, with leases renewed up and down: the lease heap stays right through all
/// of it, so every lock left ends on time and both dbs empty. The seed is printed.
#[test]
fn locks_through_every_path_in_random_order_all_end_on_time() {
    let s = Server::start();
    let mut c = s.con();
    acquire(&mut c, "model", "o", 60_000).unwrap();
    let payload = dump(&mut c, "model");
    ok(&mut c, &["DEL", "model"]);
    let seed = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(1, |d| d.as_nanos() as u64)
        | 1;
    eprintln!("seed {seed}");
    let mut x = seed;
    let mut next = |n: u64| {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        x % n
    };
    for _ in 0..3_000 {
        let (a, b) = (format!("m{}", next(200)), format!("m{}", next(200)));
        let ttl = (150 + next(450)).to_string();
        let args: Vec<&str> = match next(12) {
            0..=3 => vec!["LOCK.ACQUIRE", &a, "o", &ttl],
            4 => vec!["LOCK.EXTEND", &a, "o", &ttl],
            5 => vec!["LOCK.RELEASE", &a, "o"],
            6 => vec!["DEL", &a],
            7 => vec!["RENAME", &a, &b],
            8 => vec!["COPY", &a, &b, "REPLACE"],
            9 => vec!["MOVE", &a, "1"],
            10 => match next(3) {
                0 => vec!["SWAPDB", "0", "1"],
                1 => vec![
                    "EVAL",
                    "redis.call('SELECT', 1) redis.call('FLUSHDB') return 1",
                    "0",
                ],
                _ => vec!["FLUSHDB"],
            },
            _ => {
                let restored = run(
                    &mut c,
                    &[
                        b"RESTORE",
                        a.as_bytes(),
                        b"1000",
                        &payload,
                        b"ABSTTL",
                        b"REPLACE",
                    ],
                );
                assert_eq!(restored, Ok(Value::Okay), "seed {seed}");
                continue;
            }
        };
        // Errors are fine (no such key, a lock held by nobody): the server must answer.
        let _ = cmd(&mut c, &args);
    }
    // The last lease granted was at most 600 ms; a renamed one waits for the walk (~ms); 5 s
    // covers a loaded machine.
    for db in ["0", "1"] {
        ok(&mut c, &["SELECT", db]);
        let empty = eventually(Duration::from_secs(5), || {
            int(&ok(&mut c, &["DBSIZE"])) == 0
        });
        assert!(
            empty,
            "seed {seed}: db {db} kept {:?}",
            cmd(&mut c, &["KEYS", "*"])
        );
    }
    assert_eq!(stat(&mut c, "locks"), 0.0, "seed {seed}");
}

/// A renamed or moved lock is found by a walk through the keyspace (no command filter watches
/// for RENAME): among 60,000 other keys in two dbs it still ends within the bound, while
/// another client flushes and swaps other dbs (neither starts the walk over). The walk visits
/// 256 buckets a millisecond, so ~0.25 s for these keys: the bound gives it 12x that.
#[test]
fn a_lock_renamed_among_many_keys_is_found_and_ends_on_time() {
    let s = Server::start();
    let mut c = s.con();
    ok(&mut c, &["DEBUG", "POPULATE", "30000", "filler"]);
    ok(&mut c, &["SELECT", "4"]);
    ok(&mut c, &["DEBUG", "POPULATE", "30000", "filler"]);
    ok(&mut c, &["SELECT", "0"]);
    assert_eq!(stat(&mut c, "command_filter"), 0.0, "no filter watches");
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let churn = {
        let (mut other, stop) = (s.con(), stop.clone());
        std::thread::spawn(move || {
            ok(&mut other, &["SELECT", "9"]);
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                ok(&mut other, &["SET", "x", "1"]);
                ok(&mut other, &["FLUSHDB"]);
                ok(&mut other, &["SWAPDB", "10", "11"]);
                std::thread::sleep(Duration::from_millis(20));
            }
        })
    };
    let lease = 400;
    let within = Duration::from_millis(3_000);
    for round in 0..3 {
        let (a, b) = (format!("a{round}"), format!("b{round}"));
        acquire(&mut c, &a, "o", lease).unwrap();
        ok(&mut c, &["RENAME", &a, &format!("renamed-{a}")]);
        acquire(&mut c, &b, "o", lease).unwrap();
        assert_eq!(int(&ok(&mut c, &["MOVE", &b, "4"])), 1);
    }
    for round in 0..3 {
        let renamed = format!("renamed-a{round}");
        assert!(
            gone_within(&mut c, &renamed, within),
            "{renamed} outlived its lease"
        );
    }
    ok(&mut c, &["SELECT", "4"]);
    for round in 0..3 {
        let moved = format!("b{round}");
        assert!(
            gone_within(&mut c, &moved, within),
            "{moved} outlived its lease"
        );
    }
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    churn.join().unwrap();
    assert_eq!(
        int(&ok(&mut c, &["DBSIZE"])),
        30_000,
        "the walk deleted only locks"
    );
}

/// A replica never deletes a lock itself; when the master that would have done so is gone and
/// the replica is promoted, it ends the leases that ran out meanwhile.
#[test]
fn a_promoted_replica_ends_the_leases_that_ran_out_while_it_was_a_replica() {
    let master = Server::start();
    let replica = Server::builder().replica_of(&master).start();
    wait_link_up(&mut replica.con());
    let mut m = master.con();
    wait_streaming(&mut m);
    let t0 = Instant::now();
    acquire(&mut m, "k", "a", 2_000).unwrap();
    assert_eq!(int(&ok(&mut m, &["WAIT", "1", "5000"])), 1);
    let acked = Instant::now();
    master.signal(libc::SIGSTOP);
    // The master's deadline is at least 2 s after `t0` (50 ms: ms rounding), so it was
    // stopped before it could end the lease and delete the lock.
    assert!(
        t0.elapsed() < Duration::from_millis(1_950),
        "stopped within the lease"
    );
    // The replica applied the grant before WAIT answered, so its lease ends by `acked` + 2 s
    // (50 ms: ms rounding).
    std::thread::sleep(Duration::from_millis(2_050).saturating_sub(acked.elapsed()));
    let mut r = replica.con();
    assert!(
        exists(&mut r, "k"),
        "the replica keeps it for its master to delete"
    );
    assert_eq!(fence(&mut r, "k"), None, "but its lease ended there too");
    ok(&mut r, &["REPLICAOF", "NO", "ONE"]);
    assert!(
        gone_within(&mut r, "k", Duration::from_secs(2)),
        "promoted, it deletes the lock"
    );
    assert!(acquire(&mut r, "k", "b", 1_000).is_some());
    master.signal(libc::SIGCONT);
}

/// The server whose clock moves, or `None` (printed) where libfaketime cannot run it.
fn server_with_clock(clock: &ClockFile) -> Option<Server> {
    let Some(env) = clock.env() else {
        eprintln!("SKIPPED on this server: libfaketime cannot start a jemalloc build");
        return None;
    };
    Some(Server::builder().env(&pairs(&env)).start())
}

/// The cases: the wall clock stepped an hour forward while a 3 s lease runs (it is
/// still held until its 3 s are over, gone by 5 s), and an hour back while a 2 s lease runs
/// with a waiter (the lease ends within 4 s and the waiter is granted), and a WAIT timeout that
/// still ends on time.
#[test]
fn wall_clock_steps_neither_end_nor_stretch_a_lease() {
    let clock = ClockFile::new("leases", "+0");
    let Some(s) = server_with_clock(&clock) else {
        return;
    };
    let mut c = s.con();

    let t0 = Instant::now();
    acquire(&mut c, "forward", "a", 3_000).unwrap();
    clock.set("+3600");
    std::thread::sleep(Duration::from_millis(100));
    assert!(
        fence(&mut c, "forward").is_some(),
        "still held after 100 ms"
    );
    std::thread::sleep(Duration::from_millis(2_000).saturating_sub(t0.elapsed()));
    // Held as long as its 3 s (from after `t0`) are not over: an answer that came within them
    // must show it (50 ms: ms rounding).
    let held = fence(&mut c, "forward").is_some();
    let asked = t0.elapsed();
    assert!(
        held || asked >= Duration::from_millis(2_950),
        "ended early: gone {asked:?} after the acquire"
    );
    // Gone at the lease's end: 2 s of margin for a loaded machine (the failure this catches,
    // a lease on the stepped wall clock, is an hour late).
    assert!(
        gone_within(
            &mut c,
            "forward",
            Duration::from_millis(5_000).saturating_sub(t0.elapsed())
        ),
        "gone by 5 s"
    );

    clock.set("+0");
    acquire(&mut c, "held", "a", 60_000).unwrap();
    acquire(&mut c, "back", "a", 60_000).unwrap();
    let waiter = spawn_wait(&s, "back", "w", 10_000, 10_000);
    let mut t = s.con();
    let asked = Instant::now();
    let timeout = std::thread::spawn(move || {
        let r = cmd(
            &mut t,
            &["LOCK.ACQUIRE", "held", "t", "10000", "WAIT", "2500"],
        );
        (r, Instant::now())
    });
    wait_blocked(&mut c, 2);
    let t0 = Instant::now();
    assert_eq!(int(&ok(&mut c, &["LOCK.EXTEND", "back", "a", "2000"])), 1);
    clock.set("-3600");
    let granted = waiter.join().unwrap();
    let elapsed = t0.elapsed();
    assert!(matches!(granted, Ok(Value::Int(_))), "{granted:?}");
    // The bounds have 2 s of margin for a loaded machine: the failure they catch (a lease or
    // a timeout on the stepped wall clock) is an hour late.
    assert!(
        elapsed < Duration::from_millis(4_000),
        "the lease ended and the waiter was granted within 4 s: {elapsed:?}"
    );
    let (r, at) = timeout.join().unwrap();
    assert_eq!(r, Ok(Value::Nil));
    let timed_out = at - asked;
    assert!(
        timed_out < Duration::from_millis(4_500),
        "the WAIT timeout ended on time: {timed_out:?}"
    );
}

/// A replica whose clock is 30 s or an hour behind its master's counts a replicated lease from
/// when it applied it: promoted, it grants the lock again about when the lease ends (neither
/// 30 s later, nor earlier).
#[test]
fn a_replica_with_a_skewed_clock_ends_a_lease_on_its_own_clock() {
    for offset in ["-30", "-3600"] {
        let clock = ClockFile::new("replica", offset);
        let Some(env) = clock.env() else {
            eprintln!("SKIPPED on this server: libfaketime cannot start a jemalloc build");
            return;
        };
        let master = Server::start();
        let replica = Server::builder()
            .replica_of(&master)
            .env(&pairs(&env))
            .start();
        let mut m = master.con();
        wait_link_up(&mut replica.con());
        wait_streaming(&mut m);
        let t0 = Instant::now();
        acquire(&mut m, "k", "a", 2_000).unwrap();
        assert_eq!(int(&ok(&mut m, &["WAIT", "1", "5000"])), 1);
        let mut r = replica.con();
        let left = lease_left(&mut r, "k").unwrap();
        // Applied after `t0`: at least 2 s less what has passed since is left (2 ms: rounding).
        let since = t0.elapsed().as_millis() as i64;
        assert!(
            (2_000 - since - 2..=2_000).contains(&left),
            "{offset}: the replica's time left is the lease's: {left}, {since} ms after"
        );
        master.signal(libc::SIGSTOP);
        ok(&mut r, &["REPLICAOF", "NO", "ONE"]);
        let next = cmd(&mut r, &["LOCK.ACQUIRE", "k", "b", "1000", "WAIT", "10000"]);
        let elapsed = t0.elapsed();
        assert!(matches!(next, Ok(Value::Int(_))), "{offset}: {next:?}");
        // Not before the lease (sent after `t0`) ended (100 ms of slack for rounding); 2 s of
        // margin after it for a loaded machine (the failure is 30 s or an hour late).
        assert!(
            elapsed >= Duration::from_millis(1_900) && elapsed < Duration::from_millis(4_000),
            "{offset}: granted again when the lease ended: {elapsed:?}"
        );
        master.signal(libc::SIGCONT);
    }
}
