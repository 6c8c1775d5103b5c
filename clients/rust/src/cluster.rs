//! Redis Cluster: which master serves a key (its slot, from `CLUSTER SLOTS`), so that waits,
//! sessions and the renewal loop's connections go to that node; and the shared connection, a
//! single server's or the cluster's (the `redis` crate's async cluster connection, which routes
//! each short command by its key).

use std::collections::HashMap;
use std::sync::Arc;

use redis::aio::{ConnectionLike, MultiplexedConnection};
use redis::cluster_async::ClusterConnection;
use redis::cluster_routing::{Route, RoutingInfo, SingleNodeRoutingInfo, Slot, SlotAddr};
use redis::{Cmd, Pipeline, RedisFuture, Value};

/// The shared connection of a locker: to its server, or to its cluster.
#[derive(Clone)]
pub(crate) enum Conn {
    Single(MultiplexedConnection),
    Cluster(ClusterConnection),
}

impl ConnectionLike for Conn {
    fn req_packed_command<'a>(&'a mut self, cmd: &'a Cmd) -> RedisFuture<'a, Value> {
        match self {
            Conn::Single(conn) => conn.req_packed_command(cmd),
            Conn::Cluster(conn) => match set_key(cmd) {
                // The `redis` crate would route by the second word (numkeys): by the first key.
                Some(key) => {
                    let route = Route::with_key(key, SlotAddr::Master);
                    let routing =
                        RoutingInfo::SingleNode(SingleNodeRoutingInfo::SpecificNode(route));
                    let cmd = cmd.clone();
                    Box::pin(async move { conn.route_command(cmd, routing).await })
                }
                None => conn.req_packed_command(cmd),
            },
        }
    }

    fn req_packed_commands<'a>(
        &'a mut self,
        cmd: &'a Pipeline,
        offset: usize,
        count: usize,
    ) -> RedisFuture<'a, Vec<Value>> {
        match self {
            Conn::Single(conn) => conn.req_packed_commands(cmd, offset, count),
            Conn::Cluster(conn) => conn.req_packed_commands(cmd, offset, count),
        }
    }

    fn get_db(&self) -> i64 {
        match self {
            Conn::Single(conn) => conn.get_db(),
            Conn::Cluster(conn) => conn.get_db(),
        }
    }
}

/// The first key of a set's command (`LOCK.MACQUIRE` / `LOCK.MRELEASE numkeys key ...`).
fn set_key(cmd: &Cmd) -> Option<Vec<u8>> {
    let mut args = cmd.args_iter().map(|arg| match arg {
        redis::Arg::Simple(bytes) => Some(bytes),
        _ => None,
    });
    let name = args.next()??;
    let set = [&b"LOCK.MACQUIRE"[..], b"LOCK.MRELEASE"];
    if !set.iter().any(|n| n.eq_ignore_ascii_case(name)) {
        return None;
    }
    args.next()?; // numkeys
    args.next()?.map(<[u8]>::to_vec)
}

/// Which master serves each slot, from a `CLUSTER SLOTS` reply (the key's slot is the
/// `redis` crate's `Slot::for_key`: its hash tag's, or the whole key's).
#[derive(Clone, Debug, Default)]
pub(crate) struct SlotMap {
    masters: Vec<(String, u16)>,
    by_slot: Arc<HashMap<Slot, usize>>,
}

impl SlotMap {
    /// The map in `reply` (ranges of `[start, end, [host, port, ...], replicas...]`).
    pub(crate) fn parse(reply: &Value) -> Option<Self> {
        let Value::Array(ranges) = reply else {
            return None;
        };
        let mut map = SlotMap::default();
        let mut by_slot = HashMap::new();
        for range in ranges {
            let Value::Array(fields) = range else {
                return None;
            };
            let (Some(Value::Int(start)), Some(Value::Int(end)), Some(Value::Array(master))) =
                (fields.first(), fields.get(1), fields.get(2))
            else {
                return None;
            };
            let host = match master.first()? {
                Value::BulkString(b) => String::from_utf8_lossy(b).into_owned(),
                Value::SimpleString(s) => s.clone(),
                _ => return None,
            };
            let Some(Value::Int(port)) = master.get(1) else {
                return None;
            };
            map.masters.push((host, u16::try_from(*port).ok()?));
            let (start, end) = (u16::try_from(*start).ok()?, u16::try_from(*end).ok()?);
            for slot in (start..=end).filter_map(Slot::new) {
                by_slot.insert(slot, map.masters.len() - 1);
            }
        }
        map.by_slot = Arc::new(by_slot);
        Some(map)
    }

    /// The master serving `key`'s slot: host and port.
    pub(crate) fn node_of(&self, key: &str) -> Option<(String, u16)> {
        let master = self.by_slot.get(&Slot::for_key(key))?;
        self.masters.get(*master).cloned()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_map_names_the_master_of_a_slot() {
        let node = |port| Value::Array(vec![Value::BulkString(b"127.0.0.1".to_vec()), port]);
        let reply = Value::Array(vec![
            Value::Array(vec![
                Value::Int(0),
                Value::Int(8000),
                node(Value::Int(7000)),
            ]),
            Value::Array(vec![
                Value::Int(8001),
                Value::Int(16383),
                node(Value::Int(7001)),
            ]),
        ]);
        let map = SlotMap::parse(&reply).expect("a map");
        // `CLUSTER KEYSLOT foo` is 12182; a hash tag's slot is its content's (`bar`: 5061).
        assert_eq!(map.node_of("foo"), Some(("127.0.0.1".into(), 7001)));
        assert_eq!(map.node_of("{bar}:foo"), Some(("127.0.0.1".into(), 7000)));
    }
}
