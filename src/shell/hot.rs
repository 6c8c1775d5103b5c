//! `LOCK.HOT`: the most contended lock names (see `core::hot`).

use redis_module::{Context, RedisResult, RedisString, RedisValue};

use crate::core::hot;
use crate::shell::resetstat;

/// `LOCK.HOT WAITS|EXPIRED [COUNT count]`: `[name, count, error]` per name, highest first.
pub fn hot(_ctx: &Context, args: &[RedisString]) -> RedisResult {
    let (signal, count) = hot::parse(&args[1..])?;
    resetstat::catch_up();
    let rows = hot::top(signal, count)
        .into_iter()
        .map(|e| {
            RedisValue::Array(vec![
                RedisValue::StringBuffer(e.name),
                RedisValue::Integer(i64::try_from(e.count).unwrap_or(i64::MAX)),
                RedisValue::Integer(i64::try_from(e.error).unwrap_or(i64::MAX)),
            ])
        })
        .collect();
    Ok(RedisValue::Array(rows))
}
