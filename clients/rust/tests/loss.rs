//! Rule 15 of docs/clients.md: a hold whose renewals stop succeeding is lost at the lease's end
//! the client computed (the send time of its last successful renewal plus the ttl), by a
//! timer, not a renewal period later; with the server stopped (SIGKILL) or frozen (SIGSTOP).

use std::time::{Duration, Instant};

use redis_lock_client::{redis, Error, Locker};
use redis_lock_harness::*;

mod common;
use common::calls;

const TTL: Duration = Duration::from_secs(2);
/// The rule's bound after the lease's end: 10% of the ttl plus 100 ms.
const LATE: Duration = Duration::from_millis(TTL.as_millis() as u64 / 10 + 100);
/// How much earlier than the server's deadline the client's may be: the renewal's trip to the
/// server (the client counts from its send time), on a loaded machine.
const EARLY: Duration = Duration::from_millis(100);

fn locker(s: &Server) -> Locker {
    Locker::new(redis::Client::open(format!("redis://127.0.0.1:{}/", s.port)).unwrap())
}

/// How soon after a renewal is seen the server must be stopped for the test to know its last
/// deadline: the next renewal is sent at least 600 ms after the one seen (a third of the ttl,
/// less the thirtieth a renewal may come early); half of that leaves its trip time to spare.
/// A machine too busy to stop it that soon runs the scenario again.
const STOP_WITHIN: Duration = Duration::from_millis(300);

/// Until the server's lease of `key` grows (a renewal just landed: the next is a third of the
/// ttl away): when that was seen, and the server's deadline then, between two instants (before
/// the read, after it).
fn just_renewed(s: &Server, key: &str) -> (Instant, (Instant, Instant)) {
    let mut con = s.con();
    let mut before = lease_left(&mut con, key).expect("held");
    let started = Instant::now();
    while started.elapsed() < TTL * 2 {
        let sent = Instant::now();
        let left = lease_left(&mut con, key).expect("held");
        let answered = Instant::now();
        if left > before + 50 {
            let left = Duration::from_millis(left as u64);
            return (sent, (sent + left, answered + left));
        }
        before = left;
        std::thread::sleep(Duration::from_millis(5));
    }
    panic!("no renewal seen within two leases");
}

/// A hold on a 2 s lease; right after a renewal, `stop` the server: when the loss is seen,
/// against the server's deadline (earliest, latest), and the reason.
async fn loss_when(stop: fn(&mut Server)) -> (Instant, (Instant, Instant), String) {
    for attempt in 1..=5 {
        let mut s = Server::start();
        let g = locker(&s)
            .lock("k")
            .ttl(TTL)
            .acquire()
            .await
            .unwrap()
            .unwrap();
        let lost = tokio::spawn({
            let lost = g.lost();
            async move { (lost.await, Instant::now()) }
        });
        let (seen, deadline, stopped) = tokio::task::block_in_place(|| {
            let (seen, deadline) = just_renewed(&s, "k");
            stop(&mut s);
            (seen, deadline, Instant::now())
        });
        if stopped > seen + STOP_WITHIN {
            // Another renewal may have landed first: its deadline is not known here.
            eprintln!(
                "attempt {attempt}: stopped {:?} after the renewal was seen: again",
                stopped - seen
            );
            s.signal(libc::SIGCONT);
            continue;
        }
        let waited = tokio::time::timeout(TTL * 2, lost).await;
        let (reason, at) = waited.expect("lost within two leases").unwrap();
        s.signal(libc::SIGCONT); // a frozen server goes on, to be killed by its Drop
        return (at, deadline, reason);
    }
    panic!("the server could not be stopped within {STOP_WITHIN:?} of a renewal in 5 attempts");
}

#[track_caller]
fn assert_at_the_lease_end(at: Instant, (earliest, latest): (Instant, Instant)) {
    assert!(
        at + EARLY >= earliest,
        "lost {:?} before the server's deadline",
        earliest - at
    );
    assert!(
        at <= latest + LATE,
        "lost {:?} after the server's deadline (bound {LATE:?})",
        at - latest
    );
    eprintln!(
        "lost {:+} ms from the server's deadline",
        at.saturating_duration_since(earliest).as_millis() as i64
            - earliest.saturating_duration_since(at).as_millis() as i64
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn loss_is_seen_at_the_lease_end_when_the_server_is_stopped() {
    let (at, deadline, reason) = loss_when(|s| s.kill9()).await;
    assert_at_the_lease_end(at, deadline);
    assert!(
        reason.contains("the server could not be reached before the lease ended: "),
        "{reason}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn loss_is_seen_at_the_lease_end_when_the_server_is_frozen() {
    let (at, deadline, reason) = loss_when(|s| s.signal(libc::SIGSTOP)).await;
    assert_at_the_lease_end(at, deadline);
    assert!(reason.contains("no answer"), "{reason}");
}

/// A fixed lease (no watchdog) is lost at its end by the timer, not at the next call; then a
/// guarded write is stale and the release false, both without the server.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fixed_lease_is_lost_at_its_end_and_answers_without_the_server() {
    let s = Server::start();
    let sent = Instant::now();
    let g = locker(&s).lock("k").ttl(TTL).watchdog(false).acquire();
    let g = g.await.unwrap().unwrap();
    let answered = Instant::now();
    let reason = tokio::time::timeout(TTL * 2, g.lost()).await;
    let at = Instant::now();
    assert_eq!(
        reason.expect("lost by the timer"),
        "the lease ended (a fixed lease, not extended in time)"
    );
    // The lease's end: the acquire's send time plus the ttl, between these two.
    assert_at_the_lease_end(at, (sent + TTL, answered + TTL));
    let (guards, releases) = (calls(&s, "lock.guard"), calls(&s, "lock.release"));
    let write = g.run::<i64>(redis::cmd("INCR").arg("n")).await;
    assert!(matches!(write, Err(Error::Stale(_))), "{write:?}");
    assert!(
        !g.release().await.unwrap(),
        "a lost hold's release is false"
    );
    assert_eq!(calls(&s, "lock.guard"), guards, "no guarded write sent");
    assert_eq!(calls(&s, "lock.release"), releases, "no release sent");
}
