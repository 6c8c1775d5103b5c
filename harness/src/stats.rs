//! Stats: INFO fields, the module's counters (INFO lock), who is blocked, the server's version.

use crate::client::{cmd, ok};
use crate::{Connection, Value};

pub fn info_field(con: &mut Connection, section: &str, field: &str) -> String {
    try_info_field(con, section, field)
        .unwrap_or_else(|e| panic!("[\"INFO\", {section:?}] failed: {e}"))
}

/// `info_field`, with a failed INFO as an error: for a server that may close the connection
/// meanwhile (Sentinel kills a demoted master's clients).
pub fn try_info_field(con: &mut Connection, section: &str, field: &str) -> Result<String, String> {
    let info = match cmd(con, &["INFO", section])? {
        Value::BulkString(b) => String::from_utf8_lossy(&b).into_owned(),
        Value::VerbatimString { text, .. } => text,
        other => panic!("unexpected INFO reply {other:?}"),
    };
    Ok(info
        .lines()
        .find_map(|l| {
            l.strip_prefix(&format!("{field}:"))
                .map(|v| v.trim().to_string())
        })
        .unwrap_or_default())
}

/// An INFO lock field as a number.
pub fn stat(con: &mut Connection, field: &str) -> f64 {
    let v = info_field(con, "lock", &format!("lock_{field}"));
    v.parse()
        .unwrap_or_else(|_| panic!("INFO lock has no numeric lock_{field}: {v:?}"))
}

/// Number of clients blocked on the server (from INFO clients).
pub fn blocked_clients(con: &mut Connection) -> i64 {
    info_field(con, "clients", "blocked_clients")
        .parse()
        .unwrap_or(-1)
}

/// Ids of the clients currently blocked, oldest first.
pub fn blocked_ids(c: &mut Connection) -> Vec<u64> {
    let list = match ok(c, &["CLIENT", "LIST"]) {
        Value::BulkString(b) => String::from_utf8(b).unwrap(),
        Value::VerbatimString { text, .. } => text,
        other => panic!("{other:?}"),
    };
    let mut ids: Vec<u64> = list
        .lines()
        .filter(|l| l.contains("flags=b"))
        .filter_map(|l| l.split(' ').find_map(|f| f.strip_prefix("id=")))
        .filter_map(|id| id.parse().ok())
        .collect();
    ids.sort_unstable();
    ids
}

/// `redis_version` of INFO server as (major, minor) (Valkey reports its Redis compatibility
/// version, 7.2).
pub fn redis_version(con: &mut Connection) -> (u32, u32) {
    let v = info_field(con, "server", "redis_version");
    let mut parts = v.split('.').map(|p| p.parse().unwrap_or(0));
    (parts.next().unwrap_or(0), parts.next().unwrap_or(0))
}

/// Redis 7.0 (older than 7.2), whose module API lacks a few things the README names.
pub fn is_redis_7_0(con: &mut Connection) -> bool {
    redis_version(con) < (7, 2)
}
