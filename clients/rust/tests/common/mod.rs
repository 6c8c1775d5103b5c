//! What more than one test file asks the server.

use redis_lock_harness::*;

/// How many times the server ran `command` (`INFO commandstats`; 0 before the first).
pub fn calls(s: &Server, command: &str) -> u64 {
    let field = format!("cmdstat_{command}");
    let stats = try_info_field(&mut s.con(), "commandstats", &field).unwrap_or_default();
    let calls = stats.split(',').find_map(|kv| kv.strip_prefix("calls="));
    calls.map_or(0, |n| n.parse().unwrap())
}
