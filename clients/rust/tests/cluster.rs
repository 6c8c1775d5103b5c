//! Routing in a Redis Cluster of three masters (and their replicas): every command of a lock,
//! the waits', sessions' and the renewal loop's connections of their own included, goes to the
//! master of the key's slot.

use std::collections::BTreeMap;
use std::time::Duration;

use redis_lock_client::{redis, Error, LockGuard, Locker};
use redis_lock_harness::cluster::Cluster;
use redis_lock_harness::*;

mod common;
use common::calls;

/// One hash tag served by each master: master index -> tag.
fn a_tag_per_master(cluster: &Cluster) -> BTreeMap<usize, String> {
    let mut tags = BTreeMap::new();
    let masters = (0..cluster.nodes.len())
        .filter(|&i| cluster.is_master(i))
        .count();
    for i in 0.. {
        let tag = format!("{{sku:{i}}}");
        let master = cluster.owner_of(&tag).expect("a master serves every slot");
        tags.entry(master).or_insert(tag);
        if tags.len() == masters {
            break;
        }
    }
    tags
}

fn blocked(s: &Server) -> bool {
    blocked_clients(&mut s.con()) == 1
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_cluster_routes_every_lock_to_its_slots_master() {
    let cluster = tokio::task::block_in_place(Cluster::start);
    let urls: Vec<String> = (cluster.nodes.iter())
        .map(|n| format!("redis://127.0.0.1:{}/", n.port))
        .collect();
    let locker = Locker::cluster(urls).expect("a cluster locker");
    let tags = tokio::task::block_in_place(|| a_tag_per_master(&cluster));
    assert_eq!(tags.len(), 3, "three masters");
    for (&m, tag) in &tags {
        let (node, key) = (&cluster.nodes[m], format!("{tag}:lock"));
        ok(&mut node.con(), &["SET", &format!("{tag}:stock"), "10"]);
        // A 1.5 s lease: renewals every 500 ms with 1 s of slack each.
        let ttl = Duration::from_millis(1500);
        let g = locker.lock(&key).ttl(ttl).acquire().await.unwrap().unwrap();
        assert_eq!(
            fence(&mut node.con(), &key),
            Some(g.token() as i64),
            "on {m}"
        );
        let waiting = locker.lock(&key).session().wait(Duration::from_secs(5));
        let waiting = tokio::spawn(waiting.acquire());
        let queued =
            tokio::task::block_in_place(|| eventually(Duration::from_secs(3), || blocked(node)));
        assert!(queued, "the waiter queues on the master of {key}");
        let stock = redis::cmd("DECRBY")
            .arg(format!("{tag}:stock"))
            .arg(1)
            .clone();
        assert_eq!(g.run::<i64>(&stock).await.unwrap(), 9, "a guarded write");
        let renewed = tokio::task::block_in_place(|| {
            eventually(Duration::from_secs(5), || calls(node, "lock.extend") >= 1)
        });
        assert!(renewed && !g.is_lost(), "renewed on the master of {key}");
        assert!(g.release().await.unwrap());
        let got = tokio::time::timeout(Duration::from_secs(5), waiting).await;
        let got: LockGuard = got.expect("granted in time").unwrap().unwrap().unwrap();
        assert_eq!(fence(&mut node.con(), &key), Some(got.token() as i64));
        assert!(got.release().await.unwrap());
    }
    // Rule 23: a set whose keys share a hash tag goes to that slot's master (a try, a wait,
    // its renewals, its release); keys in several slots are `Error::CrossSlot`, not retried.
    for (&m, tag) in &tags {
        let node = &cluster.nodes[m];
        let keys = [format!("{tag}:a"), format!("{tag}:b")];
        let ttl = Duration::from_millis(900);
        for wait in [Duration::ZERO, Duration::from_secs(1)] {
            let set = locker.lock_set(&keys).ttl(ttl).wait(wait).acquire().await;
            let set = set.unwrap().expect("granted");
            let before = calls(node, "lock.extend");
            let renewed = tokio::task::block_in_place(|| {
                eventually(Duration::from_secs(5), || {
                    calls(node, "lock.extend") >= before + 2
                })
            });
            assert!(
                renewed && !set.is_lost(),
                "the set renewed on the master of {tag}"
            );
            for key in &keys {
                assert_eq!(
                    fence(&mut node.con(), key),
                    set.token(key).map(|t| t as i64)
                );
            }
            assert!(set.release().await.unwrap());
        }
    }
    let spread: Vec<String> = tags.values().map(|tag| format!("{tag}:x")).collect();
    for wait in [Duration::ZERO, Duration::from_secs(1)] {
        let got = locker.lock_set(&spread).wait(wait).acquire().await;
        assert!(matches!(got, Err(Error::CrossSlot(_))), "{got:?}");
    }
    // Nothing was sent to a node that does not serve its slot: no node answered MOVED or ASK.
    for (i, node) in cluster.nodes.iter().enumerate() {
        for redirect in ["MOVED", "ASK"] {
            let field = format!("errorstat_{redirect}");
            let seen = try_info_field(&mut node.con(), "errorstats", &field).unwrap_or_default();
            assert!(seen.is_empty(), "node {i} answered {redirect}: {seen}");
        }
    }
}
