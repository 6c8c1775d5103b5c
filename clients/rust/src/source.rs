//! Where a locker's connections come from: one server, the master Sentinel names, or a Redis
//! Cluster (the cluster connection for short commands, the master of a key's slot for the rest).

use std::sync::Arc;

use redis::aio::MultiplexedConnection;
use redis::cluster::ClusterClient;
use redis::sentinel::SentinelClient;
use redis::{AsyncConnectionConfig, ConnectionAddr, ConnectionInfo, ErrorKind, RedisError, Value};
use tokio::sync::Mutex;

use crate::availability::Availability;
use crate::cluster::{Conn, SlotMap};

/// Where connections come from.
#[derive(Clone)]
pub(crate) enum Source {
    /// One server.
    Client(redis::Client),
    /// Whichever master Sentinel names, asked on every connect.
    Sentinel(Arc<Mutex<SentinelClient>>),
    /// A Redis Cluster: short commands on its cluster connection, the rest on the master of
    /// the key's slot.
    Cluster(Arc<ClusterSource>),
}

pub(crate) struct ClusterSource {
    pub(crate) client: ClusterClient,
    /// The first node's settings (user, password, database): each node's connection has them.
    pub(crate) template: ConnectionInfo,
    /// The slot map last read (`CLUSTER SLOTS`); dropped after a failure, read again.
    pub(crate) slots: std::sync::Mutex<Option<SlotMap>>,
}

/// No timeouts of the `redis` crate's: each caller bounds its calls (rule 14).
fn unbounded() -> AsyncConnectionConfig {
    AsyncConnectionConfig::new()
        .set_connection_timeout(None)
        .set_response_timeout(None)
}

impl Source {
    /// A connection of its own to the server of `key` (through Sentinel, `availability` learns
    /// the master's address; on a cluster, the master of the key's slot).
    pub(crate) async fn connect(
        &self,
        key: &str,
        availability: &Availability,
    ) -> Result<MultiplexedConnection, RedisError> {
        let client = match self {
            Source::Client(client) => client.clone(),
            Source::Sentinel(sentinel) => {
                let client = sentinel.lock().await.async_get_client().await?;
                let master = client.get_connection_info().addr();
                availability.found(format!("{master} (the master Sentinel named)"));
                client
            }
            Source::Cluster(cluster) => cluster.client_for(&self.node(key).await?)?,
        };
        client
            .get_multiplexed_async_connection_with_config(&unbounded())
            .await
    }

    /// The server that serves `key` (`host:port`; the same for every key but on a cluster).
    pub(crate) async fn node(&self, key: &str) -> Result<String, RedisError> {
        let Source::Cluster(cluster) = self else {
            return Ok(String::new());
        };
        let known = cluster.map().and_then(|m| m.node_of(key));
        let (host, port) = match known {
            Some(node) => node,
            None => cluster.read_map().await?.node_of(key).ok_or_else(|| {
                RedisError::from((
                    ErrorKind::ClusterConnectionNotFound,
                    "no master serves the slot",
                ))
            })?,
        };
        Ok(format!("{host}:{port}"))
    }

    /// A connection of its own to the server at `node` (from `node`).
    pub(crate) async fn connect_node(
        &self,
        node: &str,
        availability: &Availability,
    ) -> Result<MultiplexedConnection, RedisError> {
        match self {
            Source::Cluster(cluster) => {
                let client = cluster.client_for(node)?;
                client
                    .get_multiplexed_async_connection_with_config(&unbounded())
                    .await
            }
            _ => self.connect("", availability).await,
        }
    }

    /// The shared connection: a server's, or the cluster's (it routes by key).
    pub(crate) async fn shared(&self, availability: &Availability) -> Result<Conn, RedisError> {
        match self {
            Source::Cluster(cluster) => {
                Ok(Conn::Cluster(cluster.client.get_async_connection().await?))
            }
            _ => Ok(Conn::Single(self.connect("", availability).await?)),
        }
    }

    /// After a failure: the slot map is read again before the next use.
    pub(crate) fn forget(&self) {
        if let Source::Cluster(cluster) = self {
            *cluster.slots.lock().unwrap_or_else(|p| p.into_inner()) = None;
        }
    }

    pub(crate) fn is_cluster(&self) -> bool {
        matches!(self, Source::Cluster(_))
    }

    /// The address `Error::Unavailable` names.
    pub(crate) fn address(&self) -> String {
        match self {
            Source::Client(client) => client.get_connection_info().addr().to_string(),
            Source::Sentinel(_) => "the master Sentinel names (none named yet)".to_string(),
            Source::Cluster(cluster) => format!("the cluster of {}", cluster.template.addr()),
        }
    }
}

impl ClusterSource {
    fn map(&self) -> Option<SlotMap> {
        self.slots.lock().unwrap_or_else(|p| p.into_inner()).clone()
    }

    /// `CLUSTER SLOTS`, asked through the cluster connection.
    async fn read_map(&self) -> Result<SlotMap, RedisError> {
        let mut conn = self.client.get_async_connection().await?;
        let reply: Value = redis::cmd("CLUSTER")
            .arg("SLOTS")
            .query_async(&mut conn)
            .await?;
        let map = SlotMap::parse(&reply).ok_or_else(|| {
            RedisError::from((ErrorKind::Parse, "CLUSTER SLOTS", format!("{reply:?}")))
        })?;
        *self.slots.lock().unwrap_or_else(|p| p.into_inner()) = Some(map.clone());
        Ok(map)
    }

    /// A client for the node at `node` (`host:port`), with the first node's settings.
    fn client_for(&self, node: &str) -> Result<redis::Client, RedisError> {
        let (host, port) = node.rsplit_once(':').unwrap_or((node, "6379"));
        let port = port.parse().unwrap_or(6379);
        let addr = ConnectionAddr::Tcp(host.to_string(), port);
        redis::Client::open(self.template.clone().set_addr(addr))
    }
}
