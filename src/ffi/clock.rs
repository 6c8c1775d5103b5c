//! The wall clock, read in one place: the server's own (`RedisModule_Milliseconds`), so lease
//! deadlines and Redis's key expiry agree on what time it is. Deadlines are unix milliseconds so
//! they replicate as absolute times. Tokens read no clock; a new fencing epoch takes the
//! microseconds as a floor (see `core::fencing`). Outside a server (unit tests) the system
//! clock stands in.

use std::time::{SystemTime, UNIX_EPOCH};

use redis_module::raw;

use crate::core::lock::Millis;

fn system_since_epoch() -> std::time::Duration {
    // A clock before 1970 reads as 1970: deadlines then simply lie in the future.
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap_or_default()
}

pub fn now_ms() -> Millis {
    // SAFETY: Milliseconds takes no arguments and only reads the clock.
    match unsafe { raw::RedisModule_Milliseconds } {
        Some(milliseconds) => unsafe { milliseconds() },
        None => Millis::try_from(system_since_epoch().as_millis()).unwrap_or(Millis::MAX),
    }
}

pub fn now_us() -> u64 {
    // SAFETY: Microseconds (Redis 7.2+) takes no arguments and only reads the clock.
    if let Some(microseconds) = unsafe { raw::RedisModule_Microseconds } {
        return u64::try_from(unsafe { microseconds() }).unwrap_or(0);
    }
    if unsafe { raw::RedisModule_Milliseconds }.is_some() {
        // Redis 7.0: millisecond resolution; the token counter fills the gaps.
        return u64::try_from(now_ms()).unwrap_or(0).saturating_mul(1000);
    }
    u64::try_from(system_since_epoch().as_micros()).unwrap_or(u64::MAX)
}
