//! The renewal loop's connections (rule 6 of docs/clients.md): one per server (per master of a
//! cluster), made by the loop itself outside the locker's shared connection, made again after
//! a failure; or a session hold's own connection, never made again.

use std::collections::HashMap;
use std::sync::{Mutex, MutexGuard};

use redis::RedisError;

use crate::availability::Availability;
use crate::cluster::Conn;
use crate::source::Source;

/// Where a loop's renewals go.
pub(crate) enum Link {
    /// The locker's server (through Sentinel: the master it names on each connect; on a
    /// cluster: the master of each key's slot).
    Server(Nodes),
    /// A session hold's own connection: when it breaks, the hold is gone.
    Session(Conn),
}

pub(crate) struct Nodes {
    source: Source,
    /// Each node's connection with its generation (a count of those made), so that a failure
    /// drops only the connection it happened on.
    conns: Mutex<Made>,
    /// Held while connecting: one connection made at a time.
    connecting: tokio::sync::Mutex<()>,
}

/// The connections made so far, by node, each with its generation.
#[derive(Default)]
struct Made {
    count: u64,
    by_node: HashMap<String, (u64, Conn)>,
}

/// `mutex`'s content; poisoned only by a panic elsewhere, and still whole.
pub(crate) fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(|p| p.into_inner())
}

impl Link {
    pub(crate) fn server(source: Source) -> Self {
        Link::Server(Nodes {
            source,
            conns: Mutex::new(Made::default()),
            connecting: tokio::sync::Mutex::new(()),
        })
    }

    pub(crate) fn is_session(&self) -> bool {
        matches!(self, Link::Session(_))
    }

    /// The node that serves `key` (one name for every key but on a cluster).
    pub(crate) async fn node(&self, key: &str) -> Result<String, RedisError> {
        match self {
            Link::Session(_) => Ok(String::new()),
            Link::Server(nodes) => nodes.source.node(key).await,
        }
    }

    /// The connection to `node`, and its generation.
    pub(crate) async fn conn(
        &self,
        node: &str,
        availability: &Availability,
    ) -> Result<(u64, Conn), RedisError> {
        let nodes = match self {
            Link::Session(conn) => return Ok((0, conn.clone())),
            Link::Server(nodes) => nodes,
        };
        let current = || lock(&nodes.conns).by_node.get(node).cloned();
        if let Some(made) = current() {
            return Ok(made);
        }
        let _connecting = nodes.connecting.lock().await;
        if let Some(made) = current() {
            return Ok(made);
        }
        let conn = nodes.source.connect_node(node, availability).await?;
        let mut conns = lock(&nodes.conns);
        conns.count += 1;
        let made = (conns.count, Conn::Single(conn));
        conns.by_node.insert(node.to_string(), made.clone());
        Ok(made)
    }

    /// The connection of `generation` to `node` failed (None: whichever it was), or the node
    /// said it does not serve the key now: the next batch makes a new one, after the slot map
    /// is read again on a cluster.
    pub(crate) fn forget(&self, node: &str, generation: Option<u64>) {
        if let Link::Server(nodes) = self {
            let mut conns = lock(&nodes.conns);
            let current = conns.by_node.get(node).map(|c| c.0);
            if current.is_some() && (generation.is_none() || current == generation) {
                conns.by_node.remove(node);
            }
            nodes.source.forget();
        }
    }
}
