//! Redis Cluster: a lock may only be handed to a waiter by the node that serves its slot.
//!
//! Commands are redirected by Redis itself before they reach the module. Waiters are not: when
//! a lock's key leaves this node (MIGRATE during resharding), `settle` must not grant it here
//! again; its waiters are told to retry instead (they then follow the MOVED redirect).

use redis_module::{Context, ContextFlags, RedisString, RedisValue};

/// Whether this node may create or hand over `key` now: outside cluster mode always; in cluster
/// mode only if it serves the key's slot and is not migrating it away.
pub fn may_grant(ctx: &Context, key: &RedisString) -> bool {
    if !ctx.get_flags().contains(ContextFlags::CLUSTER) {
        return true;
    }
    let keyslot = ctx.create_string("KEYSLOT");
    let Ok(RedisValue::Integer(slot)) = ctx.call("CLUSTER", &[&keyslot, key]) else {
        return false;
    };
    let nodes = ctx.create_string("NODES");
    let text = match ctx.call("CLUSTER", &[&nodes]) {
        Ok(RedisValue::BulkString(s)) | Ok(RedisValue::SimpleString(s)) => s,
        Ok(RedisValue::StringBuffer(b)) => String::from_utf8_lossy(&b).into_owned(),
        Ok(RedisValue::VerbatimString((_, b))) => String::from_utf8_lossy(&b).into_owned(),
        _ => return false,
    };
    text.lines()
        .find(|line| {
            line.split(' ')
                .nth(2)
                .is_some_and(|flags| flags.contains("myself"))
        })
        .is_some_and(|line| serves(line, slot))
}

/// Whether a `CLUSTER NODES` line (this node's) serves `slot` without migrating it.
fn serves(line: &str, slot: i64) -> bool {
    let mut owned = false;
    for spec in line.split(' ').skip(8) {
        if let Some(migration) = spec.strip_prefix('[') {
            // "[slot->-target]" migrating away, "[slot-<-source]" importing.
            let moving = migration
                .split("->-")
                .next()
                .and_then(|s| s.parse::<i64>().ok());
            if migration.contains("->-") && moving == Some(slot) {
                return false;
            }
            continue;
        }
        let (lo, hi) = spec.split_once('-').unwrap_or((spec, spec));
        if let (Ok(lo), Ok(hi)) = (lo.parse::<i64>(), hi.parse::<i64>()) {
            owned |= (lo..=hi).contains(&slot);
        }
    }
    owned
}

#[cfg(test)]
mod tests {
    use super::serves;

    #[test]
    fn reads_slot_ranges_and_migrations() {
        let line = "abc 127.0.0.1:7000@17000 myself,master - 0 0 1 connected 0-5460 6000 [42->-def] [7000-<-xyz]";
        assert!(serves(line, 0));
        assert!(serves(line, 5460));
        assert!(serves(line, 6000));
        assert!(!serves(line, 5461));
        assert!(!serves(line, 42), "migrating away");
        assert!(!serves(line, 7000), "importing is not serving yet");
        assert!(!serves(
            "abc 127.0.0.1:7000@17000 myself,slave def 0 0 1 connected",
            1
        ));
    }
}
