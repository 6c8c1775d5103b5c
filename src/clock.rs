//! The wall clock, read in one place. Deadlines are unix milliseconds so they replicate as
//! absolute times; tokens use microseconds (see `fencing`).

use std::time::{SystemTime, UNIX_EPOCH};

use crate::lock::Millis;

fn since_epoch() -> std::time::Duration {
    // A clock before 1970 reads as 1970: deadlines then simply lie in the future.
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap_or_default()
}

pub fn now_ms() -> Millis {
    Millis::try_from(since_epoch().as_millis()).unwrap_or(Millis::MAX)
}

pub fn now_us() -> u64 {
    u64::try_from(since_epoch().as_micros()).unwrap_or(u64::MAX)
}
