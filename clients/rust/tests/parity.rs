//! The "same case, same answer" table of docs/clients.md (rules 16 and 17), one test per row:
//! what the client already knows it answers without the server (checked with the server's
//! `INFO commandstats`), arguments checked before anything is sent, durations rounded up (the
//! sent command read back from `SLOWLOG`), and the default wait. Release twice is not
//! expressible (`release` takes the guard): a `compile_fail` doctest on `LockGuard::release`.

use std::time::{Duration, Instant};

use redis_lock_client::{redis, Error};
use redis_lock_harness::*;

mod common;
use common::{calls, known_lost, locker, without_the_server};

/// "At once": nothing sent, or one round trip, on a loaded machine.
const AT_ONCE: Duration = Duration::from_millis(300);

/// Every command the server runs from now on is kept in its slow log.
fn log_every_command(s: &Server) {
    let mut con = s.con();
    ok(&mut con, &["CONFIG", "SET", "slowlog-log-slower-than", "0"]);
    ok(&mut con, &["CONFIG", "SET", "slowlog-max-len", "1000"]);
    ok(&mut con, &["SLOWLOG", "RESET"]);
}

/// The arguments of each `name` command in the slow log.
fn logged(s: &Server, name: &str) -> Vec<Vec<String>> {
    let Value::Array(entries) = ok(&mut s.con(), &["SLOWLOG", "GET", "1000"]) else {
        panic!("SLOWLOG GET")
    };
    let text = |v: &Value| match v {
        Value::BulkString(b) => String::from_utf8_lossy(b).into_owned(),
        other => format!("{other:?}"),
    };
    let args = entries.iter().filter_map(|entry| match entry {
        Value::Array(fields) => match &fields[3] {
            Value::Array(args) => Some(args.iter().map(text).collect::<Vec<_>>()),
            _ => None,
        },
        _ => None,
    });
    args.filter(|a| a[0].eq_ignore_ascii_case(name)).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_release_that_finds_the_lease_gone_is_false_and_lost() {
    let s = Server::start();
    let g = locker(&s)
        .lock("k")
        .watchdog(false)
        .acquire()
        .await
        .unwrap();
    let g = g.unwrap();
    ok(&mut s.con(), &["LOCK.FORCERELEASE", "k"]);
    let lost = g.lost(); // outlives the guard that `release` takes
    assert!(!g.is_lost(), "the client does not know yet");
    assert!(!g.release().await.unwrap(), "the lease was gone: false");
    let reason = tokio::time::timeout(AT_ONCE, lost)
        .await
        .expect("lost fires");
    assert!(
        reason == "the hold was gone when released (its lease ran out)",
        "{reason}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn release_of_a_hold_known_lost_is_false_and_sends_nothing() {
    let s = Server::start();
    let g = known_lost(&s).await;
    let released = without_the_server(&s, "lock.release", g.release()).await;
    assert!(!released.unwrap());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_guarded_write_of_a_hold_known_lost_is_stale_and_sends_nothing() {
    let s = Server::start();
    // A 900 ms lease: the watchdog's next renewal (within 300 ms) answers 0.
    let g = locker(&s).lock("k").ttl(Duration::from_millis(900));
    let g = g.acquire().await.unwrap().unwrap();
    ok(&mut s.con(), &["LOCK.FORCERELEASE", "k"]);
    let reason = tokio::time::timeout(Duration::from_secs(2), g.lost()).await;
    assert!(reason.unwrap().contains("ran out"));
    let before = calls(&s, "lock.guard");
    let write = g.run::<i64>(redis::cmd("INCR").arg("n")).await;
    assert!(matches!(write, Err(Error::Stale(_))), "{write:?}");
    assert_eq!(calls(&s, "lock.guard"), before, "nothing sent");
    assert_eq!(ok(&mut s.con(), &["EXISTS", "n"]), Value::Int(0));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_ttl_of_zero_or_under_1ms_is_an_invalid_argument() {
    let s = Server::start();
    let l = locker(&s);
    for ttl in [Duration::ZERO, Duration::from_micros(999)] {
        let refused = l.lock("k").ttl(ttl).acquire().await;
        assert!(
            matches!(refused, Err(Error::InvalidArgument(_))),
            "{refused:?}"
        );
    }
    for (limit, permits) in [(2, 0), (2, 3)] {
        let refused = l.lock("k").permits(limit, permits).acquire().await;
        assert!(
            matches!(refused, Err(Error::InvalidArgument(_))),
            "{refused:?}"
        );
    }
    assert_eq!(calls(&s, "lock.acquire"), 0, "nothing sent");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_ttl_of_1_5ms_is_a_2ms_lease() {
    let s = Server::start();
    log_every_command(&s);
    let l = locker(&s).lock("k").ttl(Duration::from_micros(1500));
    let g = l.watchdog(false).acquire().await.unwrap().unwrap();
    let sent = logged(&s, "LOCK.ACQUIRE");
    assert_eq!(sent.len(), 1, "{sent:?}");
    assert_eq!(sent[0][3], "2", "{sent:?}");
    drop(g);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_default_wait_is_without_limit() {
    let s = Server::start();
    let holder = locker(&s).lock("k").acquire().await.unwrap().unwrap();
    let waiter = tokio::spawn({
        let l = locker(&s);
        async move { l.lock("k").acquire().await }
    });
    tokio::task::block_in_place(|| wait_blocked(&mut s.con(), 1));
    // Longer than any default a client might have had (none, or a second or so).
    tokio::time::sleep(Duration::from_millis(1500)).await;
    assert!(!waiter.is_finished(), "still waiting");
    assert!(holder.release().await.unwrap());
    let granted = tokio::time::timeout(Duration::from_secs(5), waiter).await;
    let granted = granted
        .unwrap()
        .unwrap()
        .unwrap()
        .expect("granted after the release");
    assert!(granted.release().await.unwrap());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_form_that_tries_once_is_wait_zero() {
    let s = Server::start();
    let l = locker(&s);
    let holder = l.lock("k").acquire().await.unwrap().unwrap();
    log_every_command(&s);
    let started = Instant::now();
    let tried = l.lock("k").wait(Duration::ZERO).acquire().await.unwrap();
    assert!(tried.is_none(), "busy: not granted");
    assert!(started.elapsed() < AT_ONCE, "{:?}", started.elapsed());
    let sent = logged(&s, "LOCK.ACQUIRE");
    assert_eq!(sent.len(), 1, "{sent:?}");
    assert!(!sent[0].iter().any(|a| a == "WAIT"), "{sent:?}");
    assert!(holder.release().await.unwrap());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_bound_of_zero_is_an_invalid_argument() {
    let s = Server::start();
    let l = locker(&s).unavailable_after(Duration::ZERO);
    let waits = [Some(Duration::ZERO), Some(Duration::from_secs(1)), None];
    for wait in waits {
        let builder = l.lock("k");
        let builder = match wait {
            Some(d) => builder.wait(d),
            None => builder.wait_forever(),
        };
        let refused = builder.acquire().await;
        assert!(
            matches!(refused, Err(Error::InvalidArgument(_))),
            "{refused:?}"
        );
    }
    assert_eq!(calls(&s, "lock.acquire"), 0, "nothing sent");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_wait_of_1ms_or_less_on_a_free_lock_is_granted() {
    let s = Server::start();
    let l = locker(&s);
    let waits = [
        ("a", Duration::from_millis(1)),
        ("b", Duration::from_nanos(1)),
    ];
    for (key, wait) in waits {
        let g = l.lock(key).wait(wait).acquire().await.unwrap();
        let g = g.unwrap_or_else(|| panic!("a wait of {wait:?} on a free lock: granted"));
        assert!(g.release().await.unwrap());
    }
    assert_eq!(calls(&s, "lock.acquire"), 2, "one try each, always sent");
}
