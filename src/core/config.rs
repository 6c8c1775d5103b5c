//! `lock.*` configuration (CONFIG SET/GET, or `loadmodule ... <name> <value>`): named defaults
//! and bounds. Redis enforces the bounds and answers a clear error outside them.

use std::sync::atomic::{AtomicI64, Ordering};

/// `lock.max-waiters`: how many clients may queue on one lock.
pub const MAX_WAITERS_DEFAULT: i64 = 100_000;
pub const MAX_WAITERS_MIN: i64 = 1;
pub const MAX_WAITERS_MAX: i64 = 100_000_000;
pub static MAX_WAITERS: AtomicI64 = AtomicI64::new(MAX_WAITERS_DEFAULT);

/// `lock.max-ttl`: the longest lease, in milliseconds (default 30 days; at most 10 years, which
/// also keeps every deadline far from overflow).
pub const MAX_TTL_DEFAULT: i64 = 30 * 24 * 3_600_000;
pub const MAX_TTL_MIN: i64 = 1;
pub const MAX_TTL_MAX: i64 = 10 * 365 * 24 * 3_600_000;
pub static MAX_TTL: AtomicI64 = AtomicI64::new(MAX_TTL_DEFAULT);

/// `lock.max-holders`: how many holds one key may have at once (shared holds, semaphore
/// permits' holders).
pub const MAX_HOLDERS_DEFAULT: i64 = 10_000;
pub const MAX_HOLDERS_MIN: i64 = 1;
pub const MAX_HOLDERS_MAX: i64 = 1 << 20;
pub static MAX_HOLDERS: AtomicI64 = AtomicI64::new(MAX_HOLDERS_DEFAULT);

/// `lock.max-owner-length`: the longest owner, in bytes.
pub const MAX_OWNER_LENGTH_DEFAULT: i64 = 1024;
pub const MAX_OWNER_LENGTH_MIN: i64 = 1;
pub const MAX_OWNER_LENGTH_MAX: i64 = 1 << 20;
pub static MAX_OWNER_LENGTH: AtomicI64 = AtomicI64::new(MAX_OWNER_LENGTH_DEFAULT);

pub fn max_waiters() -> usize {
    usize::try_from(MAX_WAITERS.load(Ordering::Relaxed)).unwrap_or(usize::MAX)
}

pub fn max_holders() -> usize {
    usize::try_from(MAX_HOLDERS.load(Ordering::Relaxed)).unwrap_or(usize::MAX)
}

pub fn max_ttl() -> i64 {
    MAX_TTL.load(Ordering::Relaxed)
}

pub fn max_owner_length() -> usize {
    usize::try_from(MAX_OWNER_LENGTH.load(Ordering::Relaxed)).unwrap_or(usize::MAX)
}

/// The limits a command checks its arguments against, read once per command.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Limits {
    pub max_ttl: i64,
    pub max_owner_length: usize,
    pub max_waiters: usize,
    pub max_holders: usize,
}

impl Limits {
    pub fn current() -> Self {
        Self {
            max_ttl: max_ttl(),
            max_owner_length: max_owner_length(),
            max_waiters: max_waiters(),
            max_holders: max_holders(),
        }
    }
}
