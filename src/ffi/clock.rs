//! The module's clocks, read in one place.
//!
//! - `now_ms`: the lease clock. Monotonic (`CLOCK_MONOTONIC`, what `Instant` reads): every
//!   deadline, grant time and schedule entry is on it, so stepping the wall clock (NTP, an
//!   operator, a VM resumed) neither ends nor stretches a lease. Its readings mean nothing
//!   outside this process: deadlines leave it (RDB, AOF, replication) as the time left.
//! - `wall_ms`: the server's wall clock (`RedisModule_Milliseconds`), only to read deadlines
//!   stored by earlier versions as unix times and to tell when the wall clock moved against
//!   the lease clock (Redis counts its timers on it: `core::schedule::Alarm`).
//! - `wall_us`: a floor for a new fencing epoch (`core::fencing`; it never lowers one).
//! - `mono_us`: durations for the histograms.
//!
//! Outside a server (unit tests) the system clock stands in for the server's.

use std::sync::LazyLock;
use std::time::{SystemTime, UNIX_EPOCH};

use redis_module::raw;

use crate::core::codec::Clocks;
use crate::core::lock::Millis;

/// When the lease clock reads `ORIGIN_MS`: its first reading in this process, in nanoseconds of
/// `CLOCK_MONOTONIC`.
static ORIGIN: LazyLock<i64> = LazyLock::new(monotonic_ns);

/// The lease clock's first reading: far from 0 so that a grant time computed back from a long
/// hold stays positive, and far below the unix times of today so the two are never confused.
const ORIGIN_MS: Millis = 1 << 40;

/// Start the lease clock (at load, so a forked child that saves the data reads the same clock).
pub fn start() {
    LazyLock::force(&ORIGIN);
}

/// `CLOCK_MONOTONIC` (what `Instant` reads) in nanoseconds: read directly, as integers (every
/// command reads it; `Instant::elapsed` and `Duration::as_millis` cost some 100 instructions
/// more).
fn monotonic_ns() -> i64 {
    let mut now = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `now` is a timespec to write; CLOCK_MONOTONIC exists on every Linux.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut now) };
    now.tv_sec
        .saturating_mul(1_000_000_000)
        .saturating_add(now.tv_nsec)
}

/// Nanoseconds since `ORIGIN` (never negative: the clock is monotonic).
fn elapsed_ns() -> i64 {
    monotonic_ns().saturating_sub(*ORIGIN).max(0)
}

pub fn now_ms() -> Millis {
    ORIGIN_MS.saturating_add(elapsed_ns() / 1_000_000)
}

pub fn mono_us() -> u64 {
    u64::try_from(elapsed_ns() / 1_000).unwrap_or(0)
}

fn system_since_epoch() -> std::time::Duration {
    // A clock before 1970 reads as 1970.
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap_or_default()
}

pub fn wall_ms() -> Millis {
    // SAFETY: Milliseconds takes no arguments and only reads the clock.
    match unsafe { raw::RedisModule_Milliseconds } {
        Some(milliseconds) => unsafe { milliseconds() },
        None => Millis::try_from(system_since_epoch().as_millis()).unwrap_or(Millis::MAX),
    }
}

/// Both clocks now, to read a stored value against.
pub fn clocks() -> Clocks {
    Clocks {
        now: now_ms(),
        wall: wall_ms(),
    }
}

/// How far the wall clock stands ahead of the lease clock now.
pub fn wall_offset() -> Millis {
    wall_ms().saturating_sub(now_ms())
}

pub fn wall_us() -> u64 {
    // SAFETY: Microseconds (Redis 7.2+) takes no arguments and only reads the clock.
    if let Some(microseconds) = unsafe { raw::RedisModule_Microseconds } {
        return u64::try_from(unsafe { microseconds() }).unwrap_or(0);
    }
    if unsafe { raw::RedisModule_Milliseconds }.is_some() {
        // Redis 7.0: millisecond resolution.
        return u64::try_from(wall_ms()).unwrap_or(0).saturating_mul(1000);
    }
    u64::try_from(system_since_epoch().as_micros()).unwrap_or(u64::MAX)
}
