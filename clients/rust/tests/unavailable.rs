//! Rule 14 of docs/clients.md: a lock service that cannot be reached, does not answer, or is not
//! Redis with the module is `Error::Unavailable` (naming the address) within the locker's bound
//! or the caller's deadline, whichever is first; never a hang, never "not granted". Real
//! servers stopped (SIGKILL) and frozen (SIGSTOP) by PID, and tiny TCP services of the test's.

use std::io::{Read, Write};
use std::net::TcpListener;
use std::sync::atomic::{AtomicUsize, Ordering::SeqCst};
use std::sync::Arc;
use std::time::{Duration, Instant};

use redis_lock_client::{redis, Error, LockGuard, Locker};
use redis_lock_harness::*;

mod common;
use common::calls;
use common::proxy::{proxy, Cut};

/// The locker's unavailability bound in these tests (10 s by default).
const BOUND: Duration = Duration::from_secs(1);
/// What a loaded 2-core machine may add to a bound: scheduling, connects, a timer's turn.
const MARGIN: Duration = Duration::from_secs(1);
/// "At once": nothing sent, or a refusal at the first try.
const AT_ONCE: Duration = Duration::from_millis(300);

fn locker_at(port: u16) -> Locker {
    let client = redis::Client::open(format!("redis://127.0.0.1:{port}/")).unwrap();
    Locker::new(client).unavailable_after(BOUND)
}

/// `result` is `Error::Unavailable` naming `127.0.0.1:port`, and came within `limit` of `since`.
#[track_caller]
fn assert_unavailable<T: std::fmt::Debug>(
    result: Result<T, Error>,
    port: u16,
    since: Instant,
    limit: Duration,
) -> String {
    let elapsed = since.elapsed();
    let message = match &result {
        Err(e @ Error::Unavailable { address, .. }) => {
            assert_eq!(address, &format!("127.0.0.1:{port}"));
            e.to_string()
        }
        other => panic!("expected Error::Unavailable, got {other:?}"),
    };
    assert!(
        message.starts_with(&format!("lock service unavailable at 127.0.0.1:{port}: ")),
        "{message}"
    );
    assert!(elapsed <= limit, "{elapsed:?} > {limit:?}: {message}");
    eprintln!("unavailable after {elapsed:?} (limit {limit:?}): {message}");
    message
}

/// A TCP service that is not Redis: each connection gets `reply` once it sent something
/// (None: never an answer), and stays open. Its threads end with the test process.
fn not_redis(reply: Option<&'static [u8]>) -> u16 {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    std::thread::spawn(move || {
        for mut stream in listener.incoming().flatten() {
            std::thread::spawn(move || {
                let mut buf = [0u8; 4096];
                while let Ok(n) = stream.read(&mut buf) {
                    if n == 0 {
                        return;
                    }
                    if let Some(reply) = reply {
                        let _ = stream.write_all(reply);
                    }
                }
            });
        }
    });
    port
}

/// A TCP service that accepts each connection and closes it at once: how many it accepted.
fn closing_at_once() -> (u16, Arc<AtomicUsize>) {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    let accepted = Arc::new(AtomicUsize::new(0));
    let counter = accepted.clone();
    std::thread::spawn(move || {
        for stream in listener.incoming().flatten() {
            counter.fetch_add(1, SeqCst);
            drop(stream);
        }
    });
    (port, accepted)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_wrong_address_is_unavailable_within_the_bound() {
    let port = free_port(); // nothing listens there: connection refused
    let started = Instant::now();
    let waited = locker_at(port).lock("k").acquire().await; // the default wait: without limit
    let message = assert_unavailable(waited, port, started, BOUND + MARGIN);
    assert!(message.to_lowercase().contains("refused"), "{message}");
    // Retried until the bound (but for the last pause between tries, 50 ms, that would end past it).
    assert!(
        started.elapsed() >= BOUND - Duration::from_millis(50),
        "retried"
    );
    // The caller's deadline first: trying once fails at the first refusal, a short wait at its end.
    let started = Instant::now();
    let tried = locker_at(port)
        .lock("k")
        .wait(Duration::ZERO)
        .acquire()
        .await;
    assert_unavailable(tried, port, started, AT_ONCE + MARGIN);
    let started = Instant::now();
    let short = locker_at(port).lock("k").wait(Duration::from_millis(300));
    let short = short.acquire().await;
    assert_unavailable(short, port, started, Duration::from_millis(300) + MARGIN);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_service_that_is_not_redis_is_unavailable_at_once() {
    let port = not_redis(Some(
        b"HTTP/1.1 400 Bad Request\r\nContent-Length: 0\r\n\r\n",
    ));
    let started = Instant::now();
    let http = locker_at(port).lock("k").acquire().await;
    let message = assert_unavailable(http, port, started, AT_ONCE + MARGIN);
    assert!(message.contains("not Redis"), "{message}");
    // Redis without the module answers, but not as the lock service.
    let s = Server::builder().without_module().start();
    let started = Instant::now();
    let plain = locker_at(s.port).lock("k").acquire().await;
    let message = assert_unavailable(plain, s.port, started, AT_ONCE + MARGIN);
    assert!(message.contains("redis-lock module"), "{message}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_service_that_never_answers_is_unavailable_within_the_bound() {
    let port = not_redis(None);
    let started = Instant::now();
    let waited = locker_at(port).lock("k").acquire().await; // watched by PING
    let message = assert_unavailable(waited, port, started, BOUND + MARGIN);
    assert!(message.contains("no answer"), "{message}");
    let started = Instant::now();
    let tried = locker_at(port)
        .lock("k")
        .wait(Duration::ZERO)
        .acquire()
        .await;
    assert_unavailable(tried, port, started, BOUND + MARGIN);
}

type Waiter = tokio::task::JoinHandle<(Result<Option<LockGuard>, Error>, Instant)>;

/// `k` held for `ttl`, `other` held too (for a live hold's release), and a waiter for `k` with
/// the default wait, queued in the server before this returns.
async fn hold_and_queue_a_waiter(s: &Server, ttl: Duration) -> (LockGuard, LockGuard, Waiter) {
    let port = s.port;
    let g = locker_at(port)
        .lock("k")
        .ttl(ttl)
        .acquire()
        .await
        .unwrap()
        .unwrap();
    let other = locker_at(port)
        .lock("other")
        .acquire()
        .await
        .unwrap()
        .unwrap();
    let waiter = tokio::spawn(async move {
        let waited = locker_at(port).lock("k").acquire().await;
        (waited, Instant::now())
    });
    tokio::task::block_in_place(|| wait_blocked(&mut s.con(), 1));
    (g, other, waiter)
}

/// The server killed while one client holds and another waits (the default wait): the
/// waiter, a guarded write and a live hold's release see unavailable within the bound. Once the hold's lease has ended, the client knows it lost:
/// a guarded write is stale and the release false, at once, without the server.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stopped_server_is_unavailable_to_a_holder_and_a_waiter() {
    let mut s = Server::start();
    let port = s.port;
    let (g, other, waiter) = hold_and_queue_a_waiter(&s, Duration::from_secs(3)).await;
    let stopped = Instant::now();
    s.kill9();
    let (waited, at) = waiter.await.unwrap();
    assert_unavailable(waited, port, stopped, BOUND + MARGIN);
    assert!(at - stopped <= BOUND + MARGIN);
    let started = Instant::now();
    let write = g.run::<i64>(redis::cmd("INCR").arg("n")).await;
    assert_unavailable(write, port, started, BOUND + MARGIN);
    let started = Instant::now();
    assert_unavailable(other.release().await, port, started, BOUND + MARGIN);
    // Lost by the lease's end (3 s after the last renewal before the kill, at the latest).
    let lost = tokio::time::timeout(Duration::from_secs(3) + MARGIN, g.lost()).await;
    assert!(lost.is_ok(), "lost by the lease's end");
    let started = Instant::now();
    let write = g.run::<i64>(redis::cmd("INCR").arg("n")).await;
    assert!(matches!(write, Err(Error::Stale(_))), "{write:?}");
    assert!(
        !g.release().await.unwrap(),
        "a lost hold's release is false"
    );
    assert!(started.elapsed() <= AT_ONCE, "{:?}", started.elapsed());
}

/// The server frozen (SIGSTOP) while one client holds and another waits: the guarded write,
/// the waiter (its PING watch), a live hold's release and a wait whose deadline passes all see
/// unavailable within the bound; resumed (SIGCONT), the same locker works again and the hold was kept.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_frozen_server_is_unavailable_to_a_holder_and_a_waiter() {
    let s = Server::start();
    let port = s.port;
    // A 30 s lease: the freeze's four steps (up to 2 s each on a loaded machine) end before
    // its first renewal is due (10 s), or that renewal awaits the freeze and lands after SIGCONT.
    let (g, other, waiter) = hold_and_queue_a_waiter(&s, Duration::from_secs(30)).await;
    let frozen = Instant::now();
    s.signal(libc::SIGSTOP);
    let started = Instant::now();
    let write = g.run::<i64>(redis::cmd("INCR").arg("n")).await;
    assert_unavailable(write, port, started, BOUND + MARGIN);
    let (waited, at) = waiter.await.unwrap();
    assert_unavailable(waited, port, frozen, BOUND + MARGIN);
    assert!(at - frozen <= BOUND + MARGIN);
    let started = Instant::now();
    assert_unavailable(other.release().await, port, started, BOUND + MARGIN);
    // The caller's deadline passes while the server does not answer: unavailable, not `None`.
    let started = Instant::now();
    let short = locker_at(port).lock("k").wait(Duration::from_millis(300));
    let short = short.acquire().await;
    assert_unavailable(
        short,
        port,
        started,
        Duration::from_millis(300) + MARGIN + MARGIN,
    );
    s.signal(libc::SIGCONT);
    assert!(!g.is_lost(), "{:?}", g.lost_reason());
    let n: i64 = g.run(redis::cmd("INCR").arg("n")).await.unwrap();
    assert!(n >= 1);
    assert!(g.release().await.unwrap(), "the hold outlived the freeze");
}

/// Through Sentinel, no Sentinel answering is unavailable too, naming what it could.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unreachable_sentinels_are_unavailable_within_the_bound() {
    use redis::sentinel::{SentinelClient, SentinelServerType};
    let sentinels = vec![format!("redis://127.0.0.1:{}/", free_port())];
    let client = SentinelClient::build(
        sentinels,
        "mymaster".into(),
        None,
        SentinelServerType::Master,
    );
    let l = Locker::sentinel(client.unwrap()).unavailable_after(BOUND);
    let started = Instant::now();
    let waited = l.lock("k").acquire().await;
    let Err(e @ Error::Unavailable { .. }) = waited else {
        panic!("expected Error::Unavailable, got {waited:?}")
    };
    eprintln!("unavailable after {:?}: {e}", started.elapsed());
    assert!(e.to_string().contains("Sentinel"), "{e}");
    assert!(
        started.elapsed() <= BOUND + MARGIN,
        "{:?}",
        started.elapsed()
    );
}

/// The try-once form against a service that closes every link: unavailable at its first
/// failure, after one attempt (one connection), not retried until the bound.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_try_once_form_is_unavailable_at_its_first_failure() {
    let (port, accepted) = closing_at_once();
    let started = Instant::now();
    let tried = locker_at(port)
        .lock("k")
        .wait(Duration::ZERO)
        .acquire()
        .await;
    assert_unavailable(tried, port, started, AT_ONCE + MARGIN);
    assert_eq!(accepted.load(SeqCst), 1, "one attempt");
}

/// A wait whose deadline passes while the server is silent: unavailable at most min(1 s,
/// bound) after the deadline, whatever the bound.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_wait_whose_deadline_passes_on_a_silent_server_is_unavailable_soon_after() {
    const WAIT: Duration = Duration::from_millis(300);
    let port = not_redis(None);
    for bound in [Duration::from_secs(4), Duration::from_millis(500)] {
        let client = redis::Client::open(format!("redis://127.0.0.1:{port}/")).unwrap();
        let locker = Locker::new(client).unavailable_after(bound);
        let started = Instant::now();
        let waited = locker.lock("k").wait(WAIT).acquire().await;
        // 4 s bound: by 2.3 s (300 ms + 1 s + the margin), well before the bound.
        let limit = WAIT + bound.min(Duration::from_secs(1)) + MARGIN;
        assert_unavailable(waited, port, started, limit);
    }
}

/// A try waits for a slow server's reply up to the bound, not a second: frozen for 1.5 s, then
/// resumed, it answers and the try is granted.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_try_waits_for_a_slow_servers_reply_up_to_the_bound() {
    let s = Server::start();
    let client = redis::Client::open(format!("redis://127.0.0.1:{}/", s.port)).unwrap();
    let locker = Locker::new(client).unavailable_after(Duration::from_secs(5));
    let warm = locker.lock("warm").wait(Duration::ZERO).acquire().await;
    let warm = warm.unwrap().unwrap(); // the shared connection made while the server answers
    s.signal(libc::SIGSTOP);
    let pid = s.pid();
    let thaw = std::thread::spawn(move || {
        std::thread::sleep(Duration::from_millis(1500));
        signal_pid(pid, libc::SIGCONT);
    });
    let started = Instant::now();
    let tried = locker.lock("k").wait(Duration::ZERO).acquire().await;
    let waited = started.elapsed();
    thaw.join().unwrap();
    let g = tried.unwrap().expect("granted once the server answered");
    eprintln!("granted after {waited:?}");
    assert!(g.release().await.unwrap());
    assert!(warm.release().await.unwrap());
}

/// A release whose link breaks after it was written (the proxy forwards it, then closes the
/// client's link): unavailable, and not sent again (the server ran it once).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_release_whose_reply_is_lost_is_unavailable_and_not_sent_again() {
    let s = Server::start();
    let port = proxy(s.port, b"LOCK.RELEASE", Cut::AfterSending);
    let g = locker_at(port).lock("k").acquire().await.unwrap().unwrap();
    let started = Instant::now();
    assert_unavailable(g.release().await, port, started, AT_ONCE + MARGIN);
    tokio::time::sleep(Duration::from_millis(200)).await; // a second try would have come by now
    assert_eq!(calls(&s, "lock.release"), 1, "sent once");
    assert_eq!(ok(&mut s.con(), &["EXISTS", "k"]), Value::Int(0), "it ran");
}

/// A release while a renewal waits for a frozen server: the renewal is abandoned, and the
/// release is unavailable within the bound (not after the renewal's wait, the lease's end).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_release_while_a_renewal_is_in_flight_abandons_the_renewal() {
    let s = Server::start();
    let port = s.port;
    // A 9 s lease: the renewal due 3 s after the grant awaits the frozen server up to 9 s.
    let g = locker_at(port).lock("k").ttl(Duration::from_secs(9));
    let g = g.acquire().await.unwrap().unwrap();
    let granted = Instant::now();
    s.signal(libc::SIGSTOP);
    tokio::time::sleep_until((granted + Duration::from_secs(4)).into()).await;
    let started = Instant::now();
    let released = g.release().await;
    s.signal(libc::SIGCONT);
    // By 6 s after the grant at the latest (bound + margin), 3 s before the renewal's end.
    assert_unavailable(released, port, started, BOUND + MARGIN);
}

/// A durable grant whose `WAIT` gets no answer (swallowed), or whose link breaks after it was
/// sent: unavailable within its timeout and min(1 s, bound), and the hold given back.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_durable_grant_whose_wait_fails_is_unavailable_and_given_back() {
    let s = Server::start();
    const TIMEOUT: Duration = Duration::from_millis(500);
    for cut in [Cut::Swallow, Cut::AfterSending] {
        let port = proxy(s.port, b"*3\r\n$4\r\nWAIT\r\n", cut);
        let started = Instant::now();
        let wait = Duration::from_secs(5); // a wait: on a connection of its own
        let durable = locker_at(port).lock("k").replicas(1, TIMEOUT).wait(wait);
        let durable = durable.acquire().await;
        assert_unavailable(durable, port, started, TIMEOUT + BOUND + MARGIN);
        // Given back: free long before its 30 s lease ends.
        let given_back = tokio::task::block_in_place(|| {
            eventually(Duration::from_secs(3), || {
                ok(&mut s.con(), &["EXISTS", "k"]) == Value::Int(0)
            })
        });
        assert!(given_back, "the hold given back");
    }
}

/// A shared connection whose link broke while idle (the server restarted since) is not an
/// attempt: the try after the restart is sent on a new connection and granted.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_try_after_a_restart_is_sent_on_a_new_connection() {
    let mut s = Server::start();
    let locker = locker_at(s.port);
    let first = locker.lock("a").wait(Duration::ZERO).acquire().await;
    assert!(first.unwrap().unwrap().release().await.unwrap());
    tokio::task::block_in_place(|| s.restart());
    tokio::time::sleep(Duration::from_millis(100)).await; // the old link's end seen by its driver
    let tried = locker.lock("k").wait(Duration::ZERO).acquire().await;
    let g = tried.unwrap().expect("granted on the restarted server");
    assert!(g.release().await.unwrap());
}

/// A release on a shared connection whose link broke while idle (the server closed it): a
/// `PING` finds that before the release is written, and the release goes on a new connection.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_release_after_the_shared_link_broke_while_idle_is_sent_on_a_new_one() {
    let s = Server::start();
    let g = locker_at(s.port)
        .lock("k")
        .acquire()
        .await
        .unwrap()
        .unwrap();
    let _: i64 = g.run(redis::cmd("INCR").arg("n")).await.unwrap(); // the shared connection
    let mut con = s.con();
    let Value::BulkString(clients) = ok(&mut con, &["CLIENT", "LIST"]) else {
        panic!("CLIENT LIST")
    };
    let clients = String::from_utf8(clients).unwrap();
    let shared = clients
        .lines()
        .find(|l| l.contains("cmd=lock.guard"))
        .unwrap();
    let id = shared
        .split(' ')
        .find_map(|f| f.strip_prefix("id="))
        .unwrap();
    ok(&mut con, &["CLIENT", "KILL", "ID", id]);
    tokio::time::sleep(Duration::from_millis(100)).await; // the link's end seen by its driver
    assert!(g.release().await.unwrap(), "released on a new connection");
}
