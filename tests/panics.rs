//! A panic inside the module never takes the server down: every entry point Redis calls contains
//! it, logs it, counts it (`lock_panics`) and leaves the lock consistent. The debug build's
//! `LOCK.DEBUG PANIC <entry>` arms one panic at the next call of a named entry point.

use redis_lock_harness::*;
use std::time::Duration;

fn arm(c: &mut Connection, entry: &str) {
    ok(c, &["LOCK.DEBUG", "PANIC", entry]);
}

/// The server answers, the panic was logged and counted `n` times in all.
fn contained(s: &Server, c: &mut Connection, entry: &str, n: f64) {
    assert_eq!(cmd(c, &["PING"]), Ok(Value::SimpleString("PONG".into())));
    assert!(
        eventually(Duration::from_secs(5), || s
            .log()
            .contains(&format!("a panic in {entry} was contained"))),
        "logged; log:\n{}",
        s.log()
    );
    assert_eq!(stat(c, "panics"), n);
}

#[test]
fn commands_answer_an_error_and_change_nothing_more() {
    let s = Server::start();
    let mut c = s.con();
    let err = cmd(&mut c, &["LOCK.DEBUG", "PANIC-NOW"]).unwrap_err();
    assert!(err.starts_with("ERR redis-lock internal error"), "{err}");
    contained(&s, &mut c, "LOCK.DEBUG", 1.0);
    arm(&mut c, "LOCK.ACQUIRE");
    let err = cmd(&mut c, &["LOCK.ACQUIRE", "k", "a", "1000"]).unwrap_err();
    assert!(err.starts_with("ERR redis-lock internal error"), "{err}");
    contained(&s, &mut c, "LOCK.ACQUIRE", 2.0);
    assert_eq!(
        fence(&mut c, "k"),
        None,
        "the interrupted acquire granted nothing"
    );
    assert!(
        acquire(&mut c, "k", "a", 1000).is_some(),
        "the next one works"
    );
}

#[test]
fn a_timer_that_panics_runs_again_so_the_waiter_is_still_served() {
    let s = Server::start();
    let mut c = s.con();
    acquire(&mut c, "k", "h", 60_000).unwrap();
    let w = spawn_wait(&s, "k", "w", 60_000, 10_000);
    wait_blocked(&mut c, 1);
    arm(&mut c, "a timer");
    // The lease ends now that the waiter is queued: its timer is the one that panics.
    assert_eq!(int(&ok(&mut c, &["LOCK.EXTEND", "k", "h", "100"])), 1);
    let got = w.join().unwrap();
    assert!(
        matches!(got, Ok(Value::Int(_))),
        "served after the retry: {got:?}"
    );
    contained(&s, &mut c, "a timer", 1.0);
}

#[test]
fn a_reply_that_panics_is_an_error_and_the_grant_goes_back() {
    let s = Server::start();
    let mut c = s.con();
    acquire(&mut c, "k", "h", 60_000).unwrap();
    let w = spawn_wait(&s, "k", "w", 60_000, 10_000);
    wait_blocked(&mut c, 1);
    arm(&mut c, "the reply callback");
    assert_eq!(release(&mut c, "k", "h"), 1);
    let got = w.join().unwrap();
    assert!(
        matches!(&got, Err(e) if e.starts_with("ERR redis-lock internal error")),
        "{got:?}"
    );
    contained(&s, &mut c, "the reply callback", 1.0);
    assert!(
        eventually(Duration::from_secs(5), || fence(&mut c, "k").is_none()),
        "a grant the client never learned of is revoked"
    );
    assert_eq!(stat(&mut c, "grants_revoked"), 1.0);
}

#[test]
fn a_lost_disconnect_callback_leaves_no_lock_with_the_closed_connection() {
    let s = Server::start();
    let mut c = s.con();
    acquire(&mut c, "k", "h", 60_000).unwrap();
    let w = spawn_wait(&s, "k", "w", 60_000, 0);
    wait_blocked(&mut c, 1);
    let id = blocked_ids(&mut c)[0].to_string();
    arm(&mut c, "the disconnect callback");
    ok(&mut c, &["CLIENT", "KILL", "ID", &id]);
    assert!(w.join().unwrap().is_err());
    contained(&s, &mut c, "the disconnect callback", 1.0);
    // The closed waiter stayed queued: the release hands it the lock, which comes straight back.
    assert_eq!(release(&mut c, "k", "h"), 1);
    assert!(eventually(Duration::from_secs(5), || fence(&mut c, "k").is_none()));
    assert!(acquire(&mut c, "k", "next", 1000).is_some());
}

#[test]
fn keyspace_type_and_server_callbacks_contain_panics() {
    let s = Server::start();
    let mut c = s.con();
    let mut n = 0.0;
    let mut expect = |c: &mut Connection, entry: &str| {
        n += 1.0;
        contained(&s, c, entry, n);
    };
    // The unlink hook (DEL under a waiter): the waiter is still served at the old deadline.
    acquire(&mut c, "k", "h", 60_000).unwrap();
    let w = spawn_wait(&s, "k", "w", 60_000, 10_000);
    wait_blocked(&mut c, 1);
    assert_eq!(int(&ok(&mut c, &["LOCK.EXTEND", "k", "h", "300"])), 1);
    arm(&mut c, "the unlink callback");
    assert_eq!(int(&ok(&mut c, &["DEL", "k"])), 1);
    assert!(matches!(w.join().unwrap(), Ok(Value::Int(_))));
    expect(&mut c, "the unlink callback");
    // The server's cron.
    arm(&mut c, "the cron event");
    expect(&mut c, "the cron event");
    // The module's timer: the job that ends a lease nobody waits for.
    arm(&mut c, "a timer");
    acquire(&mut c, "x", "h", 20).unwrap();
    expect(&mut c, "a timer");
    assert!(
        eventually(Duration::from_secs(5), || int(&ok(
            &mut c,
            &["EXISTS", "x"]
        )) == 0),
        "the job ran again after the panic and ended the lease"
    );
    // Type callbacks.
    acquire(&mut c, "t", "h", 60_000).unwrap();
    arm(&mut c, "mem_usage");
    let _ = cmd(&mut c, &["MEMORY", "USAGE", "t"]);
    expect(&mut c, "mem_usage");
    arm(&mut c, "digest");
    let _ = cmd(&mut c, &["DEBUG", "DIGEST-VALUE", "t"]);
    expect(&mut c, "digest");
    arm(&mut c, "copy");
    assert!(cmd(&mut c, &["COPY", "t", "t2"]).is_err() || int(&ok(&mut c, &["EXISTS", "t2"])) == 0);
    expect(&mut c, "copy");
    let payload = dump(&mut c, "t");
    arm(&mut c, "rdb_load");
    assert!(run(&mut c, &[b"RESTORE", b"t3", b"0", &payload]).is_err());
    expect(&mut c, "rdb_load");
    // The command filter (registered while a watcher of a name without a lock needs it).
    let watcher = spawn_wait_with(&s, &["LOCK.WATCH", "w", "AFTER", "free", "WAIT", "10000"]);
    wait_blocked(&mut c, 1);
    arm(&mut c, "the command filter");
    assert_eq!(
        cmd(&mut c, &["SET", "x", "1"]),
        Ok(Value::Okay),
        "the command still runs"
    );
    expect(&mut c, "the command filter");
    ok(&mut c, &["SET", "w", "1"]);
    assert!(watcher.join().unwrap().is_ok(), "the watcher was answered");
    // After a command, and the walk that finds a renamed lock.
    arm(&mut c, "after a command");
    assert_eq!(fence(&mut c, "none"), None, "the command answered");
    expect(&mut c, "after a command");
    acquire(&mut c, "r", "h", 60_000).unwrap();
    arm(&mut c, "the keyspace scan");
    ok(&mut c, &["RENAME", "r", "r2"]);
    expect(&mut c, "the keyspace scan");
    // The INFO callback.
    arm(&mut c, "the INFO callback");
    let _ = cmd(&mut c, &["INFO", "lock"]);
    expect(&mut c, "the INFO callback");
    // FLUSHALL under a waiter.
    acquire(&mut c, "f", "h", 60_000).unwrap();
    let w = spawn_wait(&s, "f", "w", 60_000, 10_000);
    wait_blocked(&mut c, 1);
    assert_eq!(int(&ok(&mut c, &["LOCK.EXTEND", "f", "h", "300"])), 1);
    arm(&mut c, "the flush event");
    ok(&mut c, &["FLUSHALL"]);
    assert!(matches!(w.join().unwrap(), Ok(Value::Int(_))));
    expect(&mut c, "the flush event");
}
