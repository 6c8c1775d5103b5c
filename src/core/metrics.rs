//! Counters, gauges and latency histograms (the `INFO lock` section renders them, see
//! `shell::info`). Every update is O(1), and on the main thread free of locked instructions
//! (`core::tally`); atomics because a value's free callback may run on a lazy-free thread.

use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};

use crate::core::lock::{LockState, Want};
use crate::core::tally::Tally;

/// A monotonically increasing count since start or `CONFIG RESETSTAT`.
pub struct Counter(Tally);

impl Counter {
    const fn new() -> Self {
        Self(Tally::new())
    }
    pub fn incr(&self) {
        self.add(1);
    }
    pub fn add(&self, n: u64) {
        self.0.add(n);
    }
    pub fn get(&self) -> u64 {
        self.0.get()
    }
    /// Count only what came after `since` (an earlier reading).
    fn reset_to_since(&self, since: u64) {
        self.0.set(self.get().saturating_sub(since));
    }
}

/// A current value with its peak since start or `CONFIG RESETSTAT`.
pub struct Gauge {
    now: Tally,
    peak: AtomicI64,
}

impl Gauge {
    const fn new() -> Self {
        Self {
            now: Tally::new(),
            peak: AtomicI64::new(0),
        }
    }
    pub fn add(&self, n: i64) {
        self.now.add(n as u64);
        let now = self.get();
        // A locked instruction only at a new peak.
        if now > self.peak.load(Ordering::Relaxed) {
            self.peak.fetch_max(now, Ordering::Relaxed);
        }
    }
    pub fn sub(&self, n: i64) {
        self.now.add(n.wrapping_neg() as u64);
    }
    pub fn get(&self) -> i64 {
        self.now.get() as i64
    }
    pub fn peak(&self) -> i64 {
        self.peak.load(Ordering::Relaxed)
    }
    fn reset(&self) {
        self.peak.store(self.get(), Ordering::Relaxed);
    }
}

const BUCKETS: usize = 64;

/// The exponents `b` of the `2^b` µs bounds `INFO lock` shows cumulative counts for
/// (`wait_time_le_1024us` ... `wait_time_le_268435456us`: about 1 ms to 4.5 min, by 4x).
pub const INFO_BOUNDS: [u32; 10] = [10, 12, 14, 16, 18, 20, 22, 24, 26, 28];

/// Durations in microseconds, in power-of-two buckets: bucket `b` holds values below `2^b`.
/// Percentiles are the upper bound of the bucket they fall in (at most 2x high), capped by the
/// exact maximum.
pub struct Histogram {
    buckets: [Tally; BUCKETS],
    count: Tally,
    max: AtomicU64,
}

impl Histogram {
    const fn new() -> Self {
        Self {
            buckets: [const { Tally::new() }; BUCKETS],
            count: Tally::new(),
            max: AtomicU64::new(0),
        }
    }

    pub fn record(&self, micros: u64) {
        let bucket = (u64::BITS - micros.leading_zeros()) as usize;
        self.buckets[bucket.min(BUCKETS - 1)].add(1);
        self.count.add(1);
        // A locked instruction only at a new maximum.
        if micros > self.max() {
            self.max.fetch_max(micros, Ordering::Relaxed);
        }
    }

    pub fn count(&self) -> u64 {
        self.count.get()
    }

    pub fn max(&self) -> u64 {
        self.max.load(Ordering::Relaxed)
    }

    /// How many durations were below `2^b` microseconds: a cumulative bucket of a Prometheus
    /// histogram whose upper bound is `2^b` µs.
    pub fn below_pow2(&self, b: usize) -> u64 {
        self.buckets[..=b.min(BUCKETS - 1)]
            .iter()
            .map(Tally::get)
            .sum()
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
            seen += bucket.get();
            if seen >= rank {
                let upper = if b == 0 { 0 } else { (1u64 << b.min(63)) - 1 };
                return upper.min(self.max());
            }
        }
        self.max()
    }

    /// The bucket counts and the total, to reset to later.
    fn reading(&self) -> HistogramReading {
        HistogramReading {
            buckets: std::array::from_fn(|b| self.buckets[b].get()),
            count: self.count(),
        }
    }

    /// Keep only what was recorded after `since`. The exact maximum of those is not kept
    /// apart, so it becomes at most the top of the highest bucket still in use.
    fn reset_to_since(&self, since: &HistogramReading) {
        let mut top = None;
        for (b, bucket) in self.buckets.iter().enumerate() {
            let left = bucket.get().saturating_sub(since.buckets[b]);
            bucket.set(left);
            if left > 0 {
                top = Some(b);
            }
        }
        self.count.set(self.count().saturating_sub(since.count));
        let cap = top.map_or(0, |b| if b == 0 { 0 } else { (1u64 << b.min(63)) - 1 });
        self.max.store(self.max().min(cap), Ordering::Relaxed);
    }
}

#[derive(Clone)]
struct HistogramReading {
    buckets: [u64; BUCKETS],
    count: u64,
}

/// Every counter and histogram at one moment: what `CONFIG RESETSTAT` resets to.
#[derive(Clone)]
pub struct Reading {
    counters: [u64; COUNTERS],
    wait_time: HistogramReading,
    hold_time: HistogramReading,
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
    /// Panics caught at an entry point (see `ffi::panics`): each one is a bug worth a report.
    pub panics: Counter,
    /// Grants of shared holds and of semaphore permits (at once or after waiting).
    pub shared_grants: Counter,
    pub semaphore_grants: Counter,
    /// Requests that joined a queue, by mode.
    pub exclusive_waits: Counter,
    pub shared_waits: Counter,
    pub semaphore_waits: Counter,
    /// Upgrades refused with DEADLOCK.
    pub deadlocks: Counter,
    /// Session holds released because their connection closed.
    pub session_releases: Counter,
    /// `LOCK.GUARD` calls that ran their command / refused a stale token.
    pub guarded: Counter,
    pub guard_stale: Counter,
    /// Watchers answered with news (`LOCK.WATCH`, at once or after blocking).
    pub watch_news: Counter,
    /// Lock sets granted (`LOCK.MACQUIRE`, at once or after waiting; each also counts once in
    /// `acquired_immediately` or `acquired_after_wait`), and the keys they took.
    pub set_grants: Counter,
    pub set_keys_granted: Counter,
    pub locks: Gauge,
    pub waiters: Gauge,
    /// Clients blocked in `LOCK.WATCH`.
    pub watchers: Gauge,
    /// Stored holds by mode (an expired hold counts until it is dropped).
    pub exclusive_holds: Gauge,
    pub shared_holds: Gauge,
    pub semaphore_holds: Gauge,
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
    panics: Counter::new(),
    shared_grants: Counter::new(),
    semaphore_grants: Counter::new(),
    exclusive_waits: Counter::new(),
    shared_waits: Counter::new(),
    semaphore_waits: Counter::new(),
    deadlocks: Counter::new(),
    session_releases: Counter::new(),
    guarded: Counter::new(),
    guard_stale: Counter::new(),
    watch_news: Counter::new(),
    set_grants: Counter::new(),
    set_keys_granted: Counter::new(),
    locks: Gauge::new(),
    waiters: Gauge::new(),
    watchers: Gauge::new(),
    exclusive_holds: Gauge::new(),
    shared_holds: Gauge::new(),
    semaphore_holds: Gauge::new(),
    wait_time: Histogram::new(),
    hold_time: Histogram::new(),
};

const COUNTERS: usize = 27;

impl Stats {
    /// Read every counter and histogram (when a `CONFIG RESETSTAT` is about to run).
    pub fn reading(&self) -> Reading {
        let counters = self.counters();
        Reading {
            counters: std::array::from_fn(|i| counters[i].1.get()),
            wait_time: self.wait_time.reading(),
            hold_time: self.hold_time.reading(),
        }
    }

    /// `CONFIG RESETSTAT` ran when the stats read `at`: count only what happened since, and
    /// set peaks to the current values.
    pub fn reset_since(&self, at: &Reading) {
        for (i, c) in self.counters().iter().enumerate() {
            c.1.reset_to_since(at.counters[i]);
        }
        for (_, gauge) in self.gauges() {
            gauge.reset();
        }
        self.wait_time.reset_to_since(&at.wait_time);
        self.hold_time.reset_to_since(&at.hold_time);
    }

    /// Every gauge with its INFO field name.
    pub fn gauges(&self) -> [(&'static str, &Gauge); 6] {
        [
            ("locks", &self.locks),
            ("waiters", &self.waiters),
            ("watchers", &self.watchers),
            ("exclusive_holds", &self.exclusive_holds),
            ("shared_holds", &self.shared_holds),
            ("semaphore_holds", &self.semaphore_holds),
        ]
    }

    /// The holds of `state` were stored (`sign` 1) or left the keyspace (`sign` -1).
    pub fn count_holds(&self, state: &LockState, sign: i64) {
        let n = i64::try_from(state.holds().count()).unwrap_or(i64::MAX);
        let gauge = match state {
            LockState::Exclusive(_) => &self.exclusive_holds,
            LockState::Shared(_) => &self.shared_holds,
            LockState::Semaphore { .. } => &self.semaphore_holds,
        };
        gauge.add(sign * n);
    }

    /// A grant of `want`'s mode.
    pub fn granted(&self, want: Want) {
        match want {
            Want::Exclusive => {}
            Want::Shared => self.shared_grants.incr(),
            Want::Permits { .. } => self.semaphore_grants.incr(),
        }
    }

    /// A request of `want`'s mode joined a queue.
    pub fn queued(&self, want: Want) {
        match want {
            Want::Exclusive => self.exclusive_waits.incr(),
            Want::Shared => self.shared_waits.incr(),
            Want::Permits { .. } => self.semaphore_waits.incr(),
        }
    }

    /// Every counter with its INFO field name.
    pub fn counters(&self) -> [(&'static str, &Counter); COUNTERS] {
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
            ("panics", &self.panics),
            ("shared_grants", &self.shared_grants),
            ("semaphore_grants", &self.semaphore_grants),
            ("exclusive_waits", &self.exclusive_waits),
            ("shared_waits", &self.shared_waits),
            ("semaphore_waits", &self.semaphore_waits),
            ("deadlocks", &self.deadlocks),
            ("session_releases", &self.session_releases),
            ("guarded", &self.guarded),
            ("guard_stale", &self.guard_stale),
            ("watch_news", &self.watch_news),
            ("set_grants", &self.set_grants),
            ("set_keys_granted", &self.set_keys_granted),
        ]
    }
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
        assert_eq!(
            (h.below_pow2(7), h.below_pow2(8), h.below_pow2(13)),
            (3, 4, 5)
        );
        let before = h.reading();
        h.record(0);
        h.record(300);
        h.reset_to_since(&before);
        assert_eq!(h.count(), 2, "only what came after the reading");
        assert_eq!(h.max(), 511, "capped by the highest bucket left");
        h.reset_to_since(&h.reading());
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
