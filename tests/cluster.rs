//! Redis Cluster: 3 masters + 3 replicas on loopback, created with `redis-cli --cluster create`,
//! driven by a cluster-aware client: routing by slot, hash tags, CROSSSLOT, resharding a held
//! lock with a waiter, CLUSTER FAILOVER and a killed master.

mod common;
use common::*;
use std::time::Duration;

struct Cluster {
    nodes: Vec<Server>,
}

fn text(v: &Value) -> String {
    match v {
        Value::BulkString(b) => String::from_utf8_lossy(b).into_owned(),
        Value::SimpleString(s) => s.clone(),
        Value::VerbatimString { text, .. } => text.clone(),
        other => format!("{other:?}"),
    }
}

impl Cluster {
    fn start() -> Self {
        let nodes: Vec<Server> = (0..6)
            .map(|_| {
                Server::start_with(&[
                    "--cluster-enabled",
                    "yes",
                    "--cluster-config-file",
                    "nodes.conf",
                    "--cluster-node-timeout",
                    "2000",
                    "--appendonly",
                    "no",
                ])
            })
            .collect();
        let mut args: Vec<String> = vec!["--cluster".into(), "create".into()];
        args.extend(nodes.iter().map(|n| format!("127.0.0.1:{}", n.port)));
        args.extend([
            "--cluster-replicas".into(),
            "1".into(),
            "--cluster-yes".into(),
        ]);
        let out = std::process::Command::new("redis-cli")
            .args(&args)
            .output()
            .expect("redis-cli --cluster create");
        assert!(
            out.status.success(),
            "cluster create: {}",
            String::from_utf8_lossy(&out.stdout)
        );
        let cluster = Cluster { nodes };
        cluster.wait_ok();
        cluster
    }

    fn wait_ok(&self) {
        for n in &self.nodes {
            let mut c = n.con();
            assert!(
                eventually(Duration::from_secs(30), || text(&ok(
                    &mut c,
                    &["CLUSTER", "INFO"]
                ))
                .contains("cluster_state:ok")),
                "cluster never became ok"
            );
        }
    }

    fn client(&self) -> redis::cluster::ClusterConnection {
        let urls: Vec<String> = self
            .nodes
            .iter()
            .map(|n| format!("redis://127.0.0.1:{}/", n.port))
            .collect();
        redis::cluster::ClusterClient::new(urls)
            .expect("cluster client")
            .get_connection()
            .expect("cluster connection")
    }

    fn node_id(&self, i: usize) -> String {
        text(&ok(&mut self.nodes[i].con(), &["CLUSTER", "MYID"]))
    }

    fn is_master(&self, i: usize) -> bool {
        info_field(&mut self.nodes[i].con(), "replication", "role") == "master"
    }

    /// The index of the master serving `key` (ask any node for its slot's owner).
    fn owner_of(&self, key: &str) -> usize {
        let slot = int(&ok(&mut self.nodes[0].con(), &["CLUSTER", "KEYSLOT", key]));
        (0..self.nodes.len())
            .find(|&i| {
                let mut c = self.nodes[i].con();
                self.is_master(i) && int(&ok(&mut c, &["CLUSTER", "COUNTKEYSINSLOT", &slot.to_string()])) >= 0 && {
                    let nodes = text(&ok(&mut c, &["CLUSTER", "NODES"]));
                    nodes.lines().any(|l| {
                        l.contains("myself")
                            && l.split(' ').skip(8).any(|spec| {
                                let (lo, hi) = spec.split_once('-').unwrap_or((spec, spec));
                                matches!((lo.parse::<i64>(), hi.parse::<i64>()), (Ok(lo), Ok(hi)) if (lo..=hi).contains(&slot))
                            })
                    })
                }
            })
            .expect("a master serves every slot")
    }
}

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
    let owner = cluster.owner_of("order:1");
    let other = *masters.iter().find(|&&m| m != owner).unwrap();
    let err = cmd(&mut cluster.nodes[other].con(), &["LOCK.FENCE", "order:1"]).unwrap_err();
    assert!(err.starts_with("MOVED"), "{err}");
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
    let owner = cluster.owner_of("{cart:7}:lock");
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
}

#[test]
fn resharding_carries_the_lock_and_answers_its_waiters() {
    let cluster = Cluster::start();
    let key = "invoice:42";
    let src = cluster.owner_of(key);
    let dst = (0..6).find(|&i| i != src && cluster.is_master(i)).unwrap();
    let mut s = cluster.nodes[src].con();
    let t = acquire(&mut s, key, "alice", 60_000).unwrap();
    let waiter = spawn_wait(&cluster.nodes[src], key, "bob", 60_000, 0);
    wait_blocked(&mut s, 1);

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
    let m = cluster.owner_of(key);
    let mut mc = cluster.nodes[m].con();
    let t = acquire(&mut mc, key, "alice", 60_000).unwrap();
    assert_eq!(int(&ok(&mut mc, &["WAIT", "1", "5000"])), 1);
    let waiter = spawn_wait(&cluster.nodes[m], key, "bob", 60_000, 0);
    wait_blocked(&mut mc, 1);
    let my_id = cluster.node_id(m);
    let r = (0..6)
        .find(|&i| {
            text(&ok(&mut cluster.nodes[i].con(), &["CLUSTER", "NODES"]))
                .lines()
                .any(|l| l.contains("myself") && l.contains(&my_id) && l.contains("slave"))
        })
        .or_else(|| {
            (0..6).find(|&i| {
                i != m
                    && text(&ok(&mut cluster.nodes[i].con(), &["CLUSTER", "NODES"]))
                        .lines()
                        .any(|l| {
                            l.contains("myself") && l.split(' ').nth(3) == Some(my_id.as_str())
                        })
            })
        })
        .expect("the master's replica");
    // A manual failover can time out (the replica must catch up first): ask again if so.
    let took_over = (0..3).any(|_| {
        let _ = cmd(&mut cluster.nodes[r].con(), &["CLUSTER", "FAILOVER"]);
        eventually(Duration::from_secs(15), || cluster.is_master(r))
    });
    assert!(took_over, "the replica took over");
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
    let m = cluster.owner_of(key);
    let mut mc = cluster.nodes[m].con();
    let mut issued = Vec::new();
    for i in 0..20 {
        issued.push(acquire(&mut mc, &format!("{{shipment:3}}:{i}"), "a", 60_000).unwrap());
    }
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
