//! The module's command filter costs every command on the server (about 200 instructions, 5%
//! of a `GET`), so it is registered only while it has work (`lock_command_filter` shows it): a
//! connection keeping `SESSION` holds (its `RESET` ends them), a waiter behind a plain string,
//! a watcher of a name holding no lock. Locks alone, renamed or not, need none.

use std::time::Duration;

use redis_lock_harness::*;

fn filter_on(c: &mut Connection) -> bool {
    stat(c, "command_filter") == 1.0
}

/// The filter goes once its work is done: after the command or timer run that ended it.
fn filter_goes(c: &mut Connection) -> bool {
    eventually(Duration::from_secs(5), || !filter_on(c))
}

#[test]
fn the_filter_is_there_only_while_it_has_work() {
    let s = Server::start();
    let mut c = s.con();
    assert!(!filter_on(&mut c), "loaded alone");
    acquire(&mut c, "plain", "o", 60_000).unwrap();
    ok(&mut c, &["RENAME", "plain", "renamed"]);
    assert!(!filter_on(&mut c), "locks, renamed or not, need none");

    // Session holds: on Redis 7.0 the filter cannot tell whose RESET it sees, so none there.
    let names_clients = !is_redis_7_0(&mut c);
    ok(&mut c, &["LOCK.ACQUIRE", "s", "o", "60000", "SESSION"]);
    assert_eq!(
        filter_on(&mut c),
        names_clients,
        "a session hold: RESET must end it"
    );
    assert_eq!(release(&mut c, "s", "o"), 1);
    assert!(filter_goes(&mut c), "the session hold ended");
    if names_clients {
        let mut a = s.con();
        ok(&mut a, &["LOCK.ACQUIRE", "s", "a", "60000", "SESSION"]);
        assert!(filter_on(&mut c), "registered again");
        ok(&mut a, &["RESET"]);
        assert!(
            eventually(Duration::from_secs(5), || fence(&mut c, "s").is_none()),
            "the RESET ended the session hold"
        );
        assert!(filter_goes(&mut c), "and the filter with it");
    }

    ok(&mut c, &["SET", "old", "someone", "PX", "60000"]);
    let w = spawn_wait(&s, "old", "new", 60_000, 10_000);
    wait_blocked(&mut c, 1);
    assert!(filter_on(&mut c), "a waiter behind a plain string");
    ok(&mut c, &["DEL", "old"]);
    assert!(matches!(w.join().unwrap(), Ok(Value::Int(_))), "served");
    assert!(filter_goes(&mut c), "nobody waits behind a string");

    let watcher = spawn_wait_with(
        &s,
        &["LOCK.WATCH", "free", "AFTER", "free", "WAIT", "10000"],
    );
    wait_blocked(&mut c, 1);
    assert!(filter_on(&mut c), "a watcher of a name without a lock");
    ok(&mut c, &["SET", "free", "now-a-string"]);
    assert!(
        watcher.join().unwrap().is_ok(),
        "the watcher heard of the string"
    );
    assert!(filter_goes(&mut c), "nobody watches");

    // The work can end without a command of the module: the cron notices.
    let mut w = s.con();
    let id = int(&ok(&mut w, &["CLIENT", "ID"])).to_string();
    let watcher = std::thread::spawn(move || {
        cmd(
            &mut w,
            &["LOCK.WATCH", "free2", "AFTER", "free", "WAIT", "10000"],
        )
    });
    wait_blocked(&mut c, 1);
    assert!(filter_on(&mut c), "a watcher again");
    ok(&mut c, &["CLIENT", "KILL", "ID", &id]);
    assert!(watcher.join().unwrap().is_err(), "its connection closed");
    assert!(filter_goes(&mut c), "the cron took the filter away");
}

/// `CONFIG RESETSTAT` with no filter: seen at the next read of the statistics, whichever.
#[test]
fn resetstat_is_seen_without_the_filter() {
    let s = Server::start();
    let mut c = s.con();
    acquire(&mut c, "k", "a", 60_000).unwrap();
    let waited = cmd(&mut c, &["LOCK.ACQUIRE", "k", "b", "1000", "WAIT", "20"]);
    assert_eq!(waited, Ok(Value::Nil), "b queued and timed out");
    assert_eq!(release(&mut c, "k", "a"), 1);
    assert!(!filter_on(&mut c));
    let hot = |c: &mut Connection| match ok(c, &["LOCK.HOT", "WAITS"]) {
        Value::Array(rows) => rows.len(),
        other => panic!("{other:?}"),
    };
    assert_eq!(hot(&mut c), 1, "k was waited on");
    ok(&mut c, &["CONFIG", "RESETSTAT"]);
    assert_eq!(hot(&mut c), 0, "LOCK.HOT, read first, is cleared");
    assert_eq!(stat(&mut c, "releases"), 0.0, "INFO lock too");
    assert_eq!(stat(&mut c, "wait_timeouts"), 0.0);
}
