//! redis-lock-client against real servers (the harness starts them, as for the module's tests).

use std::time::{Duration, Instant};

use redis_lock_client::{Error, Locker};
use redis_lock_harness::*;

fn locker(s: &Server) -> Locker {
    Locker::new(redis::Client::open(format!("redis://127.0.0.1:{}/", s.port)).unwrap())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn acquire_release_and_fifo_waits() {
    let s = Server::start();
    let l = locker(&s);
    let first = l
        .lock("job")
        .ttl(Duration::from_secs(5))
        .acquire()
        .await
        .unwrap()
        .unwrap();
    assert!(first.token() > 0);
    assert_eq!(fence(&mut s.con(), "job"), Some(first.token() as i64));
    assert!(
        l.lock("job")
            .wait(Duration::ZERO)
            .acquire()
            .await
            .unwrap()
            .is_none(),
        "busy, tried once"
    );
    let waiter = tokio::spawn({
        let l = l.clone();
        async move { l.lock("job").wait(Duration::from_secs(5)).acquire().await }
    });
    wait_blocked(&mut s.con(), 1);
    assert!(first.release().await.unwrap());
    let second = waiter.await.unwrap().unwrap().unwrap();
    assert!(second.token() > 0);
    assert!(second.release().await.unwrap());
    let started = Instant::now();
    let held = l.lock("job").acquire().await.unwrap().unwrap();
    assert!(l
        .lock("job")
        .wait(Duration::from_millis(200))
        .acquire()
        .await
        .unwrap()
        .is_none());
    assert!(started.elapsed() >= Duration::from_millis(150));
    drop(held); // released in the background
    let mut c = s.con();
    assert!(eventually(Duration::from_secs(5), || fence(&mut c, "job").is_none()));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_watchdog_renews_and_lost_resolves_when_the_hold_is_gone() {
    let s = Server::start();
    let l = locker(&s);
    // A 1.5 s lease: a renewal every 500 ms, each with 1 s of slack before the lease would end.
    let g = l
        .lock("w")
        .ttl(Duration::from_millis(1500))
        .acquire()
        .await
        .unwrap()
        .unwrap();
    tokio::time::sleep(Duration::from_millis(3200)).await; // more than two leases
    assert_eq!(fence(&mut s.con(), "w"), Some(g.token() as i64));
    assert!(!g.is_lost() && g.lost_reason().is_none());
    ok(&mut s.con(), &["LOCK.FORCERELEASE", "w"]);
    let reason = tokio::time::timeout(Duration::from_secs(2), g.lost())
        .await
        .unwrap();
    assert!(reason.contains("ran out"), "{reason}");
    assert!(g.is_lost() && g.lost_reason() == Some(reason));
    assert!(!g.release().await.unwrap(), "a lost hold reports false");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn run_guards_writes_with_the_token() {
    let s = Server::start();
    let mut c = s.con();
    ok(&mut c, &["SET", "{sku:9}:stock", "10"]);
    let l = locker(&s);
    // A 1 s lease: the first guarded write lands inside it even on a loaded machine.
    let g = l
        .lock("{sku:9}:lock")
        .ttl(Duration::from_secs(1))
        .watchdog(false)
        .acquire()
        .await
        .unwrap()
        .unwrap();
    let left: i64 = g
        .run(redis::cmd("DECRBY").arg("{sku:9}:stock").arg(1))
        .await
        .unwrap();
    assert_eq!(left, 9);
    let ended = tokio::task::block_in_place(|| {
        eventually(Duration::from_secs(3), || {
            fence(&mut c, "{sku:9}:lock").is_none()
        })
    });
    assert!(ended, "the fixed lease runs out");
    let stale = g
        .run::<i64>(redis::cmd("DECRBY").arg("{sku:9}:stock").arg(1))
        .await;
    assert!(matches!(stale, Err(Error::Stale(_))), "{stale:?}");
    assert_eq!(
        ok(&mut c, &["GET", "{sku:9}:stock"]),
        Value::BulkString(b"9".to_vec())
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shared_semaphore_session_and_durable_grants() {
    let s = Server::start();
    let l = locker(&s);
    let r1 = l.lock("doc").shared().acquire().await.unwrap().unwrap();
    let r2 = l.lock("doc").shared().acquire().await.unwrap().unwrap();
    assert!(
        l.lock("doc")
            .wait(Duration::ZERO)
            .acquire()
            .await
            .unwrap()
            .is_none(),
        "a writer waits for readers"
    );
    r1.release().await.unwrap();
    r2.release().await.unwrap();
    let p1 = l
        .lock("pool")
        .permits(2, 2)
        .acquire()
        .await
        .unwrap()
        .unwrap();
    assert!(l
        .lock("pool")
        .permits(2, 1)
        .wait(Duration::ZERO)
        .acquire()
        .await
        .unwrap()
        .is_none());
    p1.release().await.unwrap();
    let session = l.lock("sess").session().acquire().await.unwrap().unwrap();
    let info = ok(&mut s.con(), &["LOCK.INFO", "sess"]);
    let Some(Value::Array(holders)) = map_field(&info, "holders") else {
        panic!("{info:?}")
    };
    assert!(matches!(
        map_field(&holders[0], "session"),
        Some(Value::Int(_))
    ));
    session.release().await.unwrap();
    // No replica: a durable grant is not granted, and nothing stays held.
    let durable = l
        .lock("d")
        .replicas(1, Duration::from_millis(200))
        .acquire()
        .await
        .unwrap();
    assert!(durable.is_none());
    assert_eq!(fence(&mut s.con(), "d"), None);
    let err = l
        .lock("doc")
        .shared()
        .owner("x")
        .acquire()
        .await
        .unwrap()
        .unwrap();
    let _other = l.lock("doc").shared().acquire().await.unwrap().unwrap();
    let upgrade = l.lock("doc").owner("x").acquire().await;
    assert!(matches!(upgrade, Err(Error::Deadlock(_))), "{upgrade:?}");
    err.release().await.unwrap();
}
