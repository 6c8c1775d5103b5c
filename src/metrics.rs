//! Counters, gauges and latency histograms, and the `INFO lock` section. Every update is O(1);
//! atomics because a value's free callback may run on a lazy-free thread.

use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};

use std::os::raw::c_int;

use redis_module::{raw, Context, InfoContext, RedisResult};

/// A monotonically increasing count since start or `CONFIG RESETSTAT`.
pub struct Counter(AtomicU64);

impl Counter {
    const fn new() -> Self {
        Self(AtomicU64::new(0))
    }
    pub fn incr(&self) {
        self.0.fetch_add(1, Ordering::Relaxed);
    }
    pub fn get(&self) -> u64 {
        self.0.load(Ordering::Relaxed)
    }
    fn reset(&self) {
        self.0.store(0, Ordering::Relaxed);
    }
}

/// A current value with its peak since start or `CONFIG RESETSTAT`.
pub struct Gauge {
    now: AtomicI64,
    peak: AtomicI64,
}

impl Gauge {
    const fn new() -> Self {
        Self {
            now: AtomicI64::new(0),
            peak: AtomicI64::new(0),
        }
    }
    pub fn add(&self, n: i64) {
        let now = self.now.fetch_add(n, Ordering::Relaxed) + n;
        self.peak.fetch_max(now, Ordering::Relaxed);
    }
    pub fn sub(&self, n: i64) {
        self.now.fetch_sub(n, Ordering::Relaxed);
    }
    pub fn get(&self) -> i64 {
        self.now.load(Ordering::Relaxed)
    }
    pub fn peak(&self) -> i64 {
        self.peak.load(Ordering::Relaxed)
    }
    fn reset(&self) {
        self.peak.store(self.get(), Ordering::Relaxed);
    }
}

const BUCKETS: usize = 64;

/// Durations in microseconds, in power-of-two buckets: bucket `b` holds values below `2^b`.
/// Percentiles are the upper bound of the bucket they fall in (at most 2x high), capped by the
/// exact maximum.
pub struct Histogram {
    buckets: [AtomicU64; BUCKETS],
    count: AtomicU64,
    max: AtomicU64,
}

impl Histogram {
    const fn new() -> Self {
        Self {
            buckets: [const { AtomicU64::new(0) }; BUCKETS],
            count: AtomicU64::new(0),
            max: AtomicU64::new(0),
        }
    }

    pub fn record(&self, micros: u64) {
        let bucket = (u64::BITS - micros.leading_zeros()) as usize;
        self.buckets[bucket.min(BUCKETS - 1)].fetch_add(1, Ordering::Relaxed);
        self.count.fetch_add(1, Ordering::Relaxed);
        self.max.fetch_max(micros, Ordering::Relaxed);
    }

    pub fn count(&self) -> u64 {
        self.count.load(Ordering::Relaxed)
    }

    pub fn max(&self) -> u64 {
        self.max.load(Ordering::Relaxed)
    }

    /// The `q` quantile (0 < q <= 1) in microseconds, 0 when empty.
    pub fn quantile(&self, q: f64) -> u64 {
        let count = self.count();
        if count == 0 {
            return 0;
        }
        let rank = ((count as f64) * q).ceil().max(1.0) as u64;
        let mut seen = 0;
        for (b, bucket) in self.buckets.iter().enumerate() {
            seen += bucket.load(Ordering::Relaxed);
            if seen >= rank {
                let upper = if b == 0 { 0 } else { (1u64 << b.min(63)) - 1 };
                return upper.min(self.max());
            }
        }
        self.max()
    }

    fn reset(&self) {
        for b in &self.buckets {
            b.store(0, Ordering::Relaxed);
        }
        self.count.store(0, Ordering::Relaxed);
        self.max.store(0, Ordering::Relaxed);
    }
}

pub struct Stats {
    pub acquired_immediately: Counter,
    /// Grants to the head of a queue: every one is a handoff (the lock is never free while
    /// anyone waits), so this is also the handoff count.
    pub acquired_after_wait: Counter,
    pub renewed: Counter,
    pub rejected: Counter,
    pub wait_timeouts: Counter,
    pub waiters_disconnected: Counter,
    /// Grants taken back because the waiter was gone (timed out or disconnected) before its
    /// reply went out.
    pub grants_revoked: Counter,
    pub queue_full: Counter,
    pub releases: Counter,
    pub releases_forced: Counter,
    pub release_not_owner: Counter,
    pub extends: Counter,
    pub extend_not_owner: Counter,
    pub expired_while_held: Counter,
    pub locks: Gauge,
    pub waiters: Gauge,
    pub wait_time: Histogram,
    pub hold_time: Histogram,
}

pub static STATS: Stats = Stats {
    acquired_immediately: Counter::new(),
    acquired_after_wait: Counter::new(),
    renewed: Counter::new(),
    rejected: Counter::new(),
    wait_timeouts: Counter::new(),
    waiters_disconnected: Counter::new(),
    grants_revoked: Counter::new(),
    queue_full: Counter::new(),
    releases: Counter::new(),
    releases_forced: Counter::new(),
    release_not_owner: Counter::new(),
    extends: Counter::new(),
    extend_not_owner: Counter::new(),
    expired_while_held: Counter::new(),
    locks: Gauge::new(),
    waiters: Gauge::new(),
    wait_time: Histogram::new(),
    hold_time: Histogram::new(),
};

impl Stats {
    /// `CONFIG RESETSTAT`: counters and histograms to zero, peaks to the current values.
    pub fn reset(&self) {
        for c in self.counters() {
            c.1.reset();
        }
        self.locks.reset();
        self.waiters.reset();
        self.wait_time.reset();
        self.hold_time.reset();
    }

    fn counters(&self) -> [(&'static str, &Counter); 14] {
        [
            ("acquired_immediately", &self.acquired_immediately),
            ("acquired_after_wait", &self.acquired_after_wait),
            ("renewed", &self.renewed),
            ("rejected", &self.rejected),
            ("wait_timeouts", &self.wait_timeouts),
            ("waiters_disconnected", &self.waiters_disconnected),
            ("grants_revoked", &self.grants_revoked),
            ("queue_full", &self.queue_full),
            ("releases", &self.releases),
            ("releases_forced", &self.releases_forced),
            ("release_not_owner", &self.release_not_owner),
            ("extends", &self.extends),
            ("extend_not_owner", &self.extend_not_owner),
            ("expired_while_held", &self.expired_while_held),
        ]
    }
}

fn ms(micros: u64) -> String {
    format!("{:.3}", micros as f64 / 1000.0)
}

/// The `INFO lock` section `lock_stats` (Redis prefixes each field with `lock_`).
pub fn add_info(ctx: &InfoContext) -> RedisResult<()> {
    let s = &STATS;
    let mut section = ctx.builder().add_section("stats");
    for (name, counter) in s.counters() {
        section = section.field(name, counter.get())?;
    }
    for (name, gauge) in [("locks", &s.locks), ("waiters", &s.waiters)] {
        section = section
            .field(name, gauge.get())?
            .field(&format!("{name}_peak"), gauge.peak())?;
    }
    for (name, h) in [("wait_time", &s.wait_time), ("hold_time", &s.hold_time)] {
        section = section
            .field(&format!("{name}_count"), h.count())?
            .field(&format!("{name}_p50_ms"), ms(h.quantile(0.50)))?
            .field(&format!("{name}_p99_ms"), ms(h.quantile(0.99)))?
            .field(&format!("{name}_max_ms"), ms(h.max()))?;
    }
    section.build_section()?.build_info()?;
    Ok(())
}

/// Replace the INFO callback the registration macro installs with ours.
pub fn register_info(ctx: &Context) {
    raw::register_info_function(ctx.ctx, Some(on_info));
}

extern "C" fn on_info(ctx: *mut raw::RedisModuleInfoCtx, _for_crash_report: c_int) {
    let _ = add_info(&InfoContext::new(ctx));
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn histogram_quantiles_are_bucket_bounds_capped_by_the_max() {
        let h = Histogram::new();
        assert_eq!(h.quantile(0.5), 0);
        for us in [100, 110, 120, 130, 5_000] {
            h.record(us);
        }
        assert_eq!(h.count(), 5);
        assert_eq!(h.max(), 5_000);
        let p50 = h.quantile(0.5);
        assert!((120..256).contains(&p50), "p50 {p50}");
        assert_eq!(h.quantile(0.99), 5_000);
        h.record(0);
        h.reset();
        assert_eq!((h.count(), h.max(), h.quantile(0.99)), (0, 0, 0));
    }

    #[test]
    fn gauge_tracks_peak_and_reset_keeps_the_current_value() {
        let g = Gauge::new();
        g.add(3);
        g.sub(2);
        assert_eq!((g.get(), g.peak()), (1, 3));
        g.reset();
        assert_eq!(g.peak(), 1);
    }

    #[test]
    fn extreme_durations_land_in_the_last_bucket() {
        let h = Histogram::new();
        h.record(u64::MAX);
        assert_eq!(h.quantile(1.0), (1u64 << 63) - 1);
    }
}
