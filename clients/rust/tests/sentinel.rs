//! redis-lock-client through the `redis` crate's Sentinel support, across real Sentinel
//! failovers: a master and a replica with the module and three Sentinels (quorum 2, a master
//! down after 1 s) on loopback, started by the harness (`redis_lock_harness::sentinel`).

use std::time::Duration;

use redis::sentinel::{SentinelClient, SentinelServerType};
use redis_lock_client::Locker;
use redis_lock_harness::sentinel::{Deployment, Settings, MASTER_NAME};
use redis_lock_harness::*;

fn deployment() -> Deployment {
    Deployment::start(Settings {
        replicas: 1,
        ..Settings::default()
    })
}

fn locker(d: &Deployment) -> Locker {
    let sentinels = d
        .sentinels
        .iter()
        .map(|s| format!("redis://127.0.0.1:{}/", s.port))
        .collect();
    let client = SentinelClient::build(
        sentinels,
        MASTER_NAME.to_string(),
        None,
        SentinelServerType::Master,
    )
    .unwrap();
    // A failover takes seconds on a loaded machine: longer than none should be unavailable
    // here (the bound itself is tests/unavailable.rs's).
    Locker::sentinel(client).unavailable_after(Duration::from_secs(30))
}

/// Wait (without blocking the runtime) until a Sentinel names node 1, the replica.
async fn wait_failover(d: &Deployment) {
    let promoted = tokio::task::block_in_place(|| d.wait_promoted(0, Duration::from_secs(30)));
    assert_eq!(promoted.map(|(n, _)| n), Some(1), "no failover");
}

/// How many times `command` ran on the server behind `con`.
fn calls(con: &mut Connection, command: &str) -> i64 {
    let entry = info_field(con, "commandstats", &format!("cmdstat_{command}"));
    entry
        .split(',')
        .find_map(|f| f.strip_prefix("calls="))
        .and_then(|n| n.parse().ok())
        .unwrap_or(0)
}

fn owner_on(con: &mut Connection, key: &str) -> Option<String> {
    let info = ok(con, &["LOCK.INFO", key]);
    match map_field(&info, "owner") {
        Some(Value::BulkString(b)) => Some(String::from_utf8_lossy(&b).into_owned()),
        _ => None,
    }
}

/// A durable hold (the replica has it) outlives the master's death: the watchdog's renewals
/// go to the promoted replica, and the release there finds the hold.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_holders_watchdog_follows_the_new_master() {
    let mut d = deployment();
    let l = locker(&d);
    // A 20 s lease, renewed every 6.7 s: the renewals that fail while the master is down and
    // the Sentinels promote the replica (down after 1 s, then an election: seconds on a loaded
    // machine) must leave one through to the promoted replica before the lease ends, which
    // holds while the failover takes less than a renewal period.
    let g = l
        .lock("k")
        .ttl(Duration::from_secs(20))
        .replicas(1, Duration::from_secs(2))
        .acquire()
        .await
        .unwrap()
        .unwrap();
    d.nodes[0].kill9();
    wait_failover(&d).await;
    let mut new = d.nodes[1].con().unwrap();
    // Within a renewal period (6.7 s) and the time to reach the new master.
    let renewed = tokio::task::block_in_place(|| {
        eventually(Duration::from_secs(20), || {
            calls(&mut new, "lock.extend") >= 1
        })
    });
    assert!(renewed, "renewed on the new master");
    assert_eq!(fence(&mut new, "k"), Some(g.token() as i64));
    assert!(!g.is_lost() && g.lost_reason().is_none());
    assert!(g.release().await.unwrap(), "released on the new master");
    assert_eq!(ok(&mut new, &["EXISTS", "k"]), Value::Int(0));
}

/// A grant the replica never received: the promoted replica does not know the hold, so the
/// watchdog's first renewal there answers 0 and `lost()` resolves.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hold_the_new_master_lacks_is_reported_lost() {
    let mut d = deployment();
    let l = locker(&d);
    d.nodes[1].signal(libc::SIGSTOP);
    ok(
        &mut d.nodes[0].con().unwrap(),
        &["CLIENT", "KILL", "TYPE", "replica"],
    );
    let g = l
        .lock("k")
        .ttl(Duration::from_secs(3))
        .acquire()
        .await
        .unwrap()
        .unwrap();
    d.nodes[0].kill9();
    d.nodes[1].signal(libc::SIGCONT);
    wait_failover(&d).await;
    let reason = tokio::time::timeout(Duration::from_secs(10), g.lost())
        .await
        .expect("reported lost");
    assert!(
        reason.contains("ran out") || reason.contains("could not be reached"),
        "{reason}"
    );
    assert!(!g.release().await.unwrap(), "a lost hold reports false");
}

/// A waiter blocked on the master when it dies: its link breaks, it asks again with the same
/// owner (through Sentinel, so on the promoted replica once there is one), and is granted there
/// when the replicated hold's lease ends.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_waiter_retries_with_its_owner_on_the_new_master() {
    let mut d = deployment();
    let l = locker(&d);
    let holder = l
        .lock("k")
        .ttl(Duration::from_secs(3))
        .replicas(1, Duration::from_secs(2))
        .watchdog(false)
        .acquire()
        .await
        .unwrap()
        .unwrap();
    let waiter = tokio::spawn({
        let l = l.clone();
        async move {
            l.lock("k")
                .ttl(Duration::from_secs(5))
                .wait(Duration::from_secs(20))
                .acquire()
                .await
        }
    });
    wait_blocked(&mut d.nodes[0].con().unwrap(), 1);
    d.nodes[0].kill9();
    wait_failover(&d).await;
    let g = tokio::time::timeout(Duration::from_secs(25), waiter)
        .await
        .unwrap()
        .unwrap()
        .unwrap()
        .expect("granted on the new master");
    let mut new = d.nodes[1].con().unwrap();
    assert!(g.token() > holder.token());
    assert_eq!(fence(&mut new, "k"), Some(g.token() as i64));
    assert_eq!(owner_on(&mut new, "k").as_deref(), Some(g.owner()));
    assert!(
        !holder.release().await.unwrap(),
        "the holder's lease ran out"
    );
    assert!(g.release().await.unwrap());
}

/// `SENTINEL FAILOVER` of a live master: Sentinel promotes the replica, then turns the old
/// master into a replica and kills its clients' links: the waiter asks again with its owner
/// on the new master; the holder's release (its shared connection gone with the old master)
/// is sent again on a new connection, finds the durable hold there, and the waiter is granted.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_waiter_on_a_demoted_master_retries_on_the_new_one() {
    let d = deployment();
    let l = locker(&d);
    let holder = l
        .lock("k")
        .ttl(Duration::from_secs(30))
        .replicas(1, Duration::from_secs(2))
        .watchdog(false)
        .acquire()
        .await
        .unwrap()
        .unwrap();
    let held = holder.token();
    let waiter = tokio::spawn({
        let l = l.clone();
        async move {
            l.lock("k")
                .ttl(Duration::from_secs(5))
                .wait(Duration::from_secs(40))
                .acquire()
                .await
        }
    });
    wait_blocked(&mut d.nodes[0].con().unwrap(), 1);
    let mut s = redis::Client::open(format!("redis://127.0.0.1:{}/", d.sentinels[0].port))
        .unwrap()
        .get_connection()
        .unwrap();
    ok(&mut s, &["SENTINEL", "FAILOVER", MASTER_NAME]);
    wait_failover(&d).await;
    let mut new = d.nodes[1].con().unwrap();
    tokio::task::block_in_place(|| {
        // Asked on a fresh connection each time: Sentinel kills the clients of the old master,
        // maybe between the connect and the INFO (then asked again).
        let role = || {
            let mut c = d.nodes[0].con()?;
            try_info_field(&mut c, "replication", "role").ok()
        };
        assert!(
            eventually(Duration::from_secs(30), || role().as_deref()
                == Some("slave")),
            "Sentinel turned the old master into a replica"
        );
        wait_blocked(&mut new, 1);
    });
    assert!(
        holder.release().await.unwrap(),
        "released on the new master"
    );
    let g = tokio::time::timeout(Duration::from_secs(10), waiter)
        .await
        .unwrap()
        .unwrap()
        .unwrap()
        .expect("granted on the new master");
    assert!(g.token() > held);
    assert_eq!(fence(&mut new, "k"), Some(g.token() as i64));
    assert_eq!(owner_on(&mut new, "k").as_deref(), Some(g.owner()));
    assert!(g.release().await.unwrap());
}
