//! A Redis Cluster of 3 masters and 3 replicas on loopback, for the cluster tests and the fault
//! suite.

use std::time::Duration;

use crate::*;

pub struct Cluster {
    pub nodes: Vec<Server>,
}

/// Whether a `CLUSTER NODES` line serves `slot`.
fn serves(line: &str, slot: i64) -> bool {
    line.split(' ').skip(8).any(|spec| {
        let (lo, hi) = spec.split_once('-').unwrap_or((spec, spec));
        matches!((lo.parse::<i64>(), hi.parse::<i64>()), (Ok(lo), Ok(hi)) if (lo..=hi).contains(&slot))
    })
}

impl Cluster {
    pub fn start() -> Self {
        let nodes: Vec<Server> = (0..6)
            .map(|_| {
                Server::builder()
                    .args(&[
                        "--cluster-enabled",
                        "yes",
                        "--cluster-config-file",
                        "nodes.conf",
                        "--cluster-node-timeout",
                        "2000",
                        "--appendonly",
                        "no",
                    ])
                    .start()
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

    /// The nodes still running.
    pub fn alive(&self) -> Vec<usize> {
        (0..self.nodes.len())
            .filter(|&i| self.nodes[i].pid() > 0)
            .collect()
    }

    pub fn wait_ok(&self) {
        for i in self.alive() {
            let mut c = self.nodes[i].con();
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

    pub fn client(&self) -> redis::cluster::ClusterConnection {
        let urls: Vec<String> = self
            .alive()
            .iter()
            .map(|&i| format!("redis://127.0.0.1:{}/", self.nodes[i].port))
            .collect();
        redis::cluster::ClusterClient::new(urls)
            .expect("cluster client")
            .get_connection()
            .expect("cluster connection")
    }

    pub fn node_id(&self, i: usize) -> String {
        text(&ok(&mut self.nodes[i].con(), &["CLUSTER", "MYID"]))
    }

    pub fn is_master(&self, i: usize) -> bool {
        info_field(&mut self.nodes[i].con(), "replication", "role") == "master"
    }

    /// The running master that serves `key`'s slot, by its own account.
    pub fn owner_of(&self, key: &str) -> Option<usize> {
        let alive = self.alive();
        let slot = int(&ok(
            &mut self.nodes[alive[0]].con(),
            &["CLUSTER", "KEYSLOT", key],
        ));
        alive.into_iter().find(|&i| {
            let nodes = text(&ok(&mut self.nodes[i].con(), &["CLUSTER", "NODES"]));
            self.is_master(i)
                && nodes
                    .lines()
                    .any(|l| l.contains("myself") && serves(l, slot))
        })
    }

    /// A replica of master `m`.
    pub fn replica_of(&self, m: usize) -> Option<usize> {
        let id = self.node_id(m);
        self.alive().into_iter().find(|&i| {
            i != m
                && text(&ok(&mut self.nodes[i].con(), &["CLUSTER", "NODES"]))
                    .lines()
                    .any(|l| l.contains("myself") && l.split(' ').nth(3) == Some(id.as_str()))
        })
    }

    /// Promote `m`'s replica with CLUSTER FAILOVER (asked again if a manual failover times
    /// out); returns the new master.
    pub fn manual_failover(&self, m: usize) -> usize {
        let r = self.replica_of(m).expect("a replica");
        let took_over = (0..3).any(|_| {
            let _ = cmd(&mut self.nodes[r].con(), &["CLUSTER", "FAILOVER"]);
            eventually(Duration::from_secs(15), || self.is_master(r))
        });
        assert!(took_over, "the replica took over");
        r
    }
}
