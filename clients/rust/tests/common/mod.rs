//! What more than one test file asks the server.

use std::future::Future;
use std::time::{Duration, Instant};

use redis_lock_client::{redis, LockGuard, Locker};
use redis_lock_harness::*;

/// How many times the server ran `command` (`INFO commandstats`; 0 before the first).
pub fn calls(s: &Server, command: &str) -> u64 {
    let field = format!("cmdstat_{command}");
    let stats = try_info_field(&mut s.con(), "commandstats", &field).unwrap_or_default();
    let calls = stats.split(',').find_map(|kv| kv.strip_prefix("calls="));
    calls.map_or(0, |n| n.parse().unwrap())
}

#[allow(dead_code)] // not every test file uses it
pub fn locker(s: &Server) -> Locker {
    Locker::new(redis::Client::open(format!("redis://127.0.0.1:{}/", s.port)).unwrap())
}

/// A hold on a fixed 300 ms lease, once it is known lost (by the timer, with its reason).
#[allow(dead_code)] // not every test file uses it
pub async fn known_lost(s: &Server) -> LockGuard {
    let g = locker(s).lock("k").ttl(Duration::from_millis(300));
    let g = g.watchdog(false).acquire().await.unwrap().unwrap();
    let reason = tokio::time::timeout(Duration::from_secs(2), g.lost()).await;
    assert_eq!(
        reason.unwrap(),
        "the lease ended (a fixed lease, not extended in time)"
    );
    g
}

/// `answer`'s outcome, checked to come at once (300 ms: no round trip to wait for, on a loaded
/// machine) with no `command` sent to the server.
#[allow(dead_code)] // not every test file uses it
pub async fn without_the_server<T>(
    s: &Server,
    command: &str,
    answer: impl Future<Output = T>,
) -> T {
    let before = calls(s, command);
    let started = Instant::now();
    let outcome = answer.await;
    let took = started.elapsed();
    assert!(took < Duration::from_millis(300), "answered after {took:?}");
    assert_eq!(calls(s, command), before, "no {command} sent");
    outcome
}

#[allow(dead_code)] // not every test file uses it
pub mod proxy;
