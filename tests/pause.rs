//! Handoffs wait while the server really pauses writes, and only then: a pause command the
//! server refused, denied, queued and discarded, or failed never freezes the queue. (Module
//! timers learn the pause from the server, not from the commands clients send.)

use redis_lock_harness::*;
use std::time::{Duration, Instant};

/// Hold `p` with a waiter behind it, let the lease end 300 ms later, run `attempt`, and check
/// the waiter gets the lock: at the expiry, not when the 100 s pause `attempt` tried would end
/// (its WAIT of 10 s would time out first).
fn waiter_is_served_despite(attempt: impl FnOnce(&Server, &mut Connection)) {
    let s = Server::start();
    let mut c = s.con();
    ok(
        &mut c,
        &[
            "ACL",
            "SETUSER",
            "limited",
            "on",
            "nopass",
            "+@all",
            "-client",
            "-failover",
            "-config",
        ],
    );
    acquire(&mut c, "p", "holder", 60_000).unwrap();
    let started = Instant::now();
    let w = spawn_wait(&s, "p", "waiter", 1000, 10_000);
    wait_blocked(&mut c, 1);
    assert_eq!(int(&ok(&mut c, &["LOCK.EXTEND", "p", "holder", "300"])), 1);
    attempt(&s, &mut c);
    let got = w.join().unwrap();
    assert!(
        matches!(got, Ok(Value::Int(_))),
        "the waiter got {got:?} after {:?}",
        started.elapsed()
    );
    assert_eq!(
        cmd(&mut c, &["PING"]),
        Ok(Value::SimpleString("PONG".into()))
    );
}

fn as_limited(s: &Server) -> Connection {
    let mut l = s.con();
    ok(&mut l, &["AUTH", "limited", "any"]);
    l
}

#[test]
fn a_pause_with_a_syntax_error_pauses_nothing() {
    waiter_is_served_despite(|_, c| {
        assert!(cmd(c, &["CLIENT", "PAUSE", "100000", "BOGUS"]).is_err());
    });
}

/// Valkey refuses this timeout as out of range (then nothing is paused); Redis 7.0 accepts it and
/// really pauses, so there the handoff waits for CLIENT UNPAUSE.
#[test]
fn a_pause_out_of_range_pauses_nothing() {
    waiter_is_served_despite(|_, c| {
        if cmd(c, &["CLIENT", "PAUSE", "9223372036854775807"]).is_ok() {
            // A pause of all clients: even INFO would wait. Lift it; the handoff follows.
            std::thread::sleep(Duration::from_millis(500));
            ok(c, &["CLIENT", "UNPAUSE"]);
        }
    });
}

#[test]
fn a_failover_without_replicas_pauses_nothing() {
    waiter_is_served_despite(|_, c| {
        assert!(cmd(c, &["FAILOVER"]).is_err(), "refused without a replica");
    });
}

#[test]
fn denied_pause_and_failover_pause_nothing() {
    waiter_is_served_despite(|s, _| {
        let mut l = as_limited(s);
        let denied = cmd(&mut l, &["CLIENT", "PAUSE", "100000"]);
        assert!(
            matches!(&denied, Err(e) if e.starts_with("NOPERM")),
            "{denied:?}"
        );
        let denied = cmd(&mut l, &["FAILOVER"]);
        assert!(
            matches!(&denied, Err(e) if e.starts_with("NOPERM")),
            "{denied:?}"
        );
    });
}

#[test]
fn a_discarded_pause_pauses_nothing() {
    waiter_is_served_despite(|_, c| {
        ok(c, &["MULTI"]);
        assert_eq!(
            cmd(c, &["CLIENT", "PAUSE", "100000", "WRITE"]),
            Ok(Value::SimpleString("QUEUED".into()))
        );
        ok(c, &["DISCARD"]);
    });
}

/// `LOCK.EXTEND p holder 100` and `CLIENT PAUSE pause_ms WRITE` in one EXEC, so the lease ends
/// inside the pause whatever the scheduler does; when the EXEC was sent.
fn shorten_and_pause(c: &mut Connection, pause_ms: &str) -> Instant {
    let sent = Instant::now();
    ok(c, &["MULTI"]);
    ok(c, &["LOCK.EXTEND", "p", "holder", "100"]);
    ok(c, &["CLIENT", "PAUSE", pause_ms, "WRITE"]);
    assert_eq!(
        ok(c, &["EXEC"]),
        Value::Array(vec![Value::Int(1), Value::Okay])
    );
    sent
}

/// The control: a real pause holds the handoff until it ends, then the waiter is served.
#[test]
fn a_real_pause_holds_the_handoff_until_it_ends() {
    let s = Server::start();
    let mut c = s.con();
    acquire(&mut c, "p", "holder", 60_000).unwrap();
    let w = spawn_wait(&s, "p", "waiter", 1000, 10_000);
    wait_blocked(&mut c, 1);
    let paused = shorten_and_pause(&mut c, "800");
    let got = w.join().unwrap();
    let waited = paused.elapsed();
    assert!(matches!(got, Ok(Value::Int(_))), "{got:?}");
    // The pause ends 800 ms after the EXEC, which came after `paused` (-50 ms: the server's
    // cached clock and its rounding to the ms); a handoff at the expiry would come at 100 ms.
    assert!(
        waited >= Duration::from_millis(750),
        "held during the pause: {waited:?}"
    );
}

/// A pause lifted early by CLIENT UNPAUSE lets the handoff go at once.
#[test]
fn unpause_releases_the_handoff() {
    let s = Server::start();
    let mut c = s.con();
    acquire(&mut c, "p", "holder", 60_000).unwrap();
    let w = spawn_wait(&s, "p", "waiter", 1000, 10_000);
    wait_blocked(&mut c, 1);
    let paused = shorten_and_pause(&mut c, "100000");
    // Past the lease's end (100 ms after the EXEC, which came after `paused`), still paused.
    std::thread::sleep(Duration::from_millis(400).saturating_sub(paused.elapsed()));
    assert_eq!(blocked_clients(&mut c), 1, "held while paused");
    let unpaused = Instant::now();
    ok(&mut c, &["CLIENT", "UNPAUSE"]);
    let got = w.join().unwrap();
    assert!(matches!(got, Ok(Value::Int(_))), "{got:?}");
    // The module looks again every 10 ms while paused; 2 s covers descheduled threads (the
    // pause had 100 s to go).
    assert!(
        unpaused.elapsed() < Duration::from_secs(2),
        "served at the unpause: {:?}",
        unpaused.elapsed()
    );
}
