//! Redis Cluster: 3 masters + 3 replicas on loopback, created with `redis-cli --cluster create`,
//! driven by a cluster-aware client: routing by slot, hash tags, CROSSSLOT, resharding a held
//! lock with a waiter, CLUSTER FAILOVER and a killed master.

use redis_lock_harness::cluster::Cluster;
use redis_lock_harness::*;
use std::time::Duration;

fn q(con: &mut redis::cluster::ClusterConnection, words: &[&str]) -> Result<Value, String> {
    let mut c = redis::cmd(words[0]);
    for w in &words[1..] {
        c.arg(*w);
    }
    c.query::<Value>(con)
        .map_err(|e| format!("{} {}", e.code().unwrap_or("?"), e.detail().unwrap_or("")))
}

#[test]
fn locks_route_by_slot_and_hash_tags_group_them() {
    let cluster = Cluster::start();
    let mut c = cluster.client();
    for i in 0..60 {
        let key = format!("order:{i}");
        let t = q(&mut c, &["LOCK.ACQUIRE", &key, "alice", "60000"]).unwrap();
        assert!(matches!(t, Value::Int(_)), "{key}: {t:?}");
        assert_eq!(q(&mut c, &["LOCK.FENCE", &key]).unwrap(), t);
    }
    let masters: Vec<usize> = (0..6).filter(|&i| cluster.is_master(i)).collect();
    assert_eq!(masters.len(), 3);
    for &m in &masters {
        assert!(
            int(&ok(&mut cluster.nodes[m].con(), &["DBSIZE"])) > 0,
            "every master holds some locks"
        );
    }
    // A node that does not serve the slot redirects.
    let owner = cluster.owner_of("order:1").unwrap();
    let other = *masters.iter().find(|&&m| m != owner).unwrap();
    let err = cmd(&mut cluster.nodes[other].con(), &["LOCK.FENCE", "order:1"]).unwrap_err();
    assert!(err.starts_with("MOVED"), "{err}");
    let err = cmd(&mut cluster.nodes[other].con(), &["LOCK.WATCH", "order:1"]).unwrap_err();
    assert!(
        err.starts_with("MOVED"),
        "a watcher follows the slot too: {err}"
    );
    // Hash tags keep related keys together; scripts may use both; mixing slots is CROSSSLOT.
    q(&mut c, &["SET", "{cart:7}:stock", "5"]).unwrap();
    let t = q(&mut c, &["LOCK.ACQUIRE", "{cart:7}:lock", "bob", "60000"]).unwrap();
    let script = "if redis.call('LOCK.FENCE', KEYS[1], ARGV[1]) == 1 then return redis.call('DECR', KEYS[2]) end return -1";
    let token = match t {
        Value::Int(t) => t.to_string(),
        _ => unreachable!(),
    };
    assert_eq!(
        q(
            &mut c,
            &[
                "EVAL",
                script,
                "2",
                "{cart:7}:lock",
                "{cart:7}:stock",
                &token
            ]
        )
        .unwrap(),
        Value::Int(4)
    );
    let owner = cluster.owner_of("{cart:7}:lock").unwrap();
    let err = cmd(
        &mut cluster.nodes[owner].con(),
        &["EVAL", script, "2", "{cart:7}:lock", "order:1", &token],
    )
    .unwrap_err();
    assert!(
        err.starts_with("CROSSSLOT")
            || err.contains("ERR Script attempted to access a non local key"),
        "{err}"
    );
    // A lock set routes by its keys' slot: hash tags put them together, else CROSSSLOT.
    let set = [
        "LOCK.MACQUIRE",
        "2",
        "{acct}:1",
        "{acct}:2",
        "carol",
        "60000",
    ];
    let Value::Array(tokens) = q(&mut c, &set).unwrap() else {
        panic!("a set of one slot is granted");
    };
    assert_eq!(tokens.len(), 2);
    let owner = cluster.owner_of("{acct}:1").unwrap();
    for words in [
        [
            "LOCK.MACQUIRE",
            "2",
            "{acct}:3",
            "order:1",
            "carol",
            "60000",
        ]
        .as_slice(),
        ["LOCK.MRELEASE", "2", "{acct}:1", "order:1", "carol"].as_slice(),
    ] {
        let err = cmd(&mut cluster.nodes[owner].con(), words).unwrap_err();
        assert!(err.starts_with("CROSSSLOT"), "{words:?}: {err}");
    }
    let release = ["LOCK.MRELEASE", "2", "{acct}:2", "{acct}:1", "carol"];
    assert_eq!(q(&mut c, &release).unwrap(), Value::Int(2));
}

#[test]
fn resharding_carries_the_lock_and_answers_its_waiters() {
    let cluster = Cluster::start();
    let key = "invoice:42";
    let src = cluster.owner_of(key).unwrap();
    let dst = (0..6).find(|&i| i != src && cluster.is_master(i)).unwrap();
    let mut s = cluster.nodes[src].con();
    let t = acquire(&mut s, key, "alice", 60_000).unwrap();
    let waiter = spawn_wait(&cluster.nodes[src], key, "bob", 60_000, 0);
    wait_blocked(&mut s, 1);
    let watch = ["LOCK.WATCH", key, "AFTER", &t.to_string(), "WAIT", "0"];
    let watcher = spawn_wait_with(&cluster.nodes[src], &watch);
    wait_blocked(&mut s, 2);

    let slot = int(&ok(&mut s, &["CLUSTER", "KEYSLOT", key])).to_string();
    let (src_id, dst_id) = (cluster.node_id(src), cluster.node_id(dst));
    let mut d = cluster.nodes[dst].con();
    ok(&mut d, &["CLUSTER", "SETSLOT", &slot, "IMPORTING", &src_id]);
    ok(&mut s, &["CLUSTER", "SETSLOT", &slot, "MIGRATING", &dst_id]);
    ok(
        &mut s,
        &[
            "MIGRATE",
            "127.0.0.1",
            &cluster.nodes[dst].port.to_string(),
            key,
            "0",
            "5000",
        ],
    );
    // The waiter is answered at once (not left hanging), and told to retry.
    let answer = waiter.join().unwrap();
    assert!(
        answer.as_ref().is_err_and(|e| e.starts_with("TRYAGAIN")),
        "{answer:?}"
    );
    let seen = watcher.join().unwrap();
    assert!(
        seen.as_ref().is_err_and(|e| e.starts_with("TRYAGAIN")),
        "the watcher too: {seen:?}"
    );
    for i in 0..6 {
        if cluster.is_master(i) {
            ok(
                &mut cluster.nodes[i].con(),
                &["CLUSTER", "SETSLOT", &slot, "NODE", &dst_id],
            );
        }
    }
    cluster.wait_ok();
    let left = int(&ok(&mut s, &["CLUSTER", "COUNTKEYSINSLOT", &slot]));
    assert_eq!(left, 0, "nothing left behind on the source");
    assert_eq!(
        fence(&mut d, key),
        Some(t),
        "holder and token moved with the key"
    );
    assert_eq!(
        cmd(&mut d, &["LOCK.WATCH", key, "AFTER", &t.to_string()]),
        Ok(Value::Nil),
        "a watcher that saw alice there has nothing new on the new shard"
    );
    assert_eq!(release(&mut d, key, "alice"), 1, "the owner moved too");
    let mut c = cluster.client();
    let next = q(&mut c, &["LOCK.ACQUIRE", key, "bob", "1000"]).unwrap();
    assert!(
        matches!(next, Value::Int(n) if n > t),
        "tokens keep increasing on the new shard: {next:?} > {t}"
    );
}

#[test]
fn cluster_failover_keeps_acknowledged_grants_and_answers_waiters() {
    let cluster = Cluster::start();
    let key = "account:9";
    let m = cluster.owner_of(key).unwrap();
    let mut mc = cluster.nodes[m].con();
    let t = acquire(&mut mc, key, "alice", 60_000).unwrap();
    assert_eq!(int(&ok(&mut mc, &["WAIT", "1", "5000"])), 1);
    let waiter = spawn_wait(&cluster.nodes[m], key, "bob", 60_000, 0);
    wait_blocked(&mut mc, 1);
    let r = cluster.manual_failover(m);
    let answer = waiter.join().unwrap();
    assert!(
        answer.as_ref().is_err_and(|e| e.starts_with("UNBLOCKED")),
        "the old master's waiter is answered: {answer:?}"
    );
    cluster.wait_ok();
    let mut rc = cluster.nodes[r].con();
    assert_eq!(
        fence(&mut rc, key),
        Some(t),
        "the acknowledged grant survived"
    );
    assert_eq!(release(&mut rc, key, "alice"), 1);
    assert!(acquire(&mut rc, key, "bob", 1_000).unwrap() > t);
}

#[test]
fn a_killed_master_is_replaced_and_tokens_keep_increasing() {
    let mut cluster = Cluster::start();
    let key = "{shipment:3}";
    let m = cluster.owner_of(key).unwrap();
    let mut mc = cluster.nodes[m].con();
    let mut issued = Vec::new();
    for i in 0..20 {
        issued.push(acquire(&mut mc, &format!("{{shipment:3}}:{i}"), "a", 60_000).unwrap());
    }
    // A replica that never finished its first sync refuses to take over (its data is older
    // than cluster-replica-validity-factor allows): kill the master once one has the grants.
    // Under a loaded machine the first sync can take seconds; 30 s is the margin.
    assert_eq!(
        int(&ok(&mut mc, &["WAIT", "1", "30000"])),
        1,
        "a replica acknowledged the grants"
    );
    cluster.nodes[m].kill9();
    let survivors: Vec<usize> = (0..6).filter(|&i| i != m).collect();
    // The replica takes over after the node timeout; keep trying with fresh slot maps.
    let mut next = None;
    assert!(
        eventually(Duration::from_secs(40), || {
            let urls: Vec<String> = survivors
                .iter()
                .map(|&i| format!("redis://127.0.0.1:{}/", cluster.nodes[i].port))
                .collect();
            let Ok(mut c) =
                redis::cluster::ClusterClient::new(urls).and_then(|cl| cl.get_connection())
            else {
                return false;
            };
            next = match q(&mut c, &["LOCK.ACQUIRE", key, "b", "1000"]) {
                Ok(Value::Int(n)) => Some(n),
                _ => None,
            };
            next.is_some()
        }),
        "a replica took over the dead master's slots"
    );
    let max = *issued.iter().max().unwrap();
    assert!(
        next.unwrap() > max,
        "{next:?} > {max}: tokens never go backwards, lost grants included"
    );
}

/// LOCK.GUARD in a cluster: it routes by the lock and the guarded command's keys (movable keys),
/// runs when they share the lock's slot, and keys of another slot are CROSSSLOT.
#[test]
fn guard_routes_with_its_keys_and_refuses_other_slots() {
    let cluster = Cluster::start();
    let mut c = cluster.client();
    q(&mut c, &["SET", "{sku:9}:stock", "100"]).unwrap();
    let token = match q(&mut c, &["LOCK.ACQUIRE", "{sku:9}:lock", "w", "60000"]).unwrap() {
        Value::Int(t) => t.to_string(),
        other => panic!("{other:?}"),
    };
    assert_eq!(
        q(
            &mut c,
            &[
                "LOCK.GUARD",
                "{sku:9}:lock",
                &token,
                "DECRBY",
                "{sku:9}:stock",
                "1"
            ]
        )
        .unwrap(),
        Value::Int(99)
    );
    // On the lock's own node, a key of another slot is refused and nothing runs.
    let owner = cluster.owner_of("{sku:9}:lock").unwrap();
    let mut node = cluster.nodes[owner].con();
    let other_key = (0..100)
        .map(|i| format!("elsewhere:{i}"))
        .find(|k| cluster.owner_of(k) != Some(owner))
        .unwrap();
    let err = cmd(
        &mut node,
        &["LOCK.GUARD", "{sku:9}:lock", &token, "SET", &other_key, "x"],
    )
    .unwrap_err();
    assert!(err.starts_with("CROSSSLOT"), "{err}");
    let err = cmd(
        &mut node,
        &[
            "LOCK.GUARD",
            "{sku:9}:lock",
            &token,
            "MSET",
            "{sku:9}:a",
            "1",
            "{sku:8}:b",
            "2",
        ],
    )
    .unwrap_err();
    assert!(err.starts_with("CROSSSLOT"), "{err}");
    assert_eq!(cmd(&mut node, &["EXISTS", "{sku:9}:a"]), Ok(Value::Int(0)));
}
