//! Where fencing tokens come from, and why they never go backwards.
//!
//! A token is `max(last + 1, clock_us)`: one more than the last token this server issued or
//! saw, but never below the server's wall clock in microseconds (milliseconds x 1000 on Redis
//! 7.0, whose module API has no microsecond clock).
//!
//! - On one server, `last + 1` makes tokens strictly increase even if the clock jumps back.
//! - `last` survives restarts: it is saved as auxiliary RDB data, every lock value carries its
//!   token (RDB, DUMP/RESTORE) and every replicated or AOF-logged grant carries its token
//!   explicitly, and loading any of them raises `last` to at least that token.
//! - A replica raises `last` from every grant its master replicates. A promoted replica that
//!   missed the master's last grants (asynchronous replication) is still safe: each token the
//!   old master issued at wall time `t` is below `(t + 1 ms)` in microseconds unless it issued
//!   more than one grant per microsecond, and the promotion happens later than `t`, so the new
//!   master's clock floor lies above every token it never saw, as long as the two hosts' clocks
//!   differ by less than the time the failover takes.
//! - Tokens stay below 2^53 until the year 2255, so JavaScript clients read them exactly.
//!   `MAX_TOKEN` is a hard bound: loading, restoring or replaying a larger token is refused, and
//!   once the last token is `MAX_TOKEN` grants fail with an error instead of repeating it.

use std::sync::atomic::{AtomicU64, Ordering};

/// The largest token ever issued or accepted: 2^53 - 1, the largest integer a JavaScript (or any
/// IEEE double) client reads exactly.
pub const MAX_TOKEN: u64 = (1 << 53) - 1;

/// Whether `token` can be a fencing token (1 ..= MAX_TOKEN).
pub const fn in_range(token: u64) -> bool {
    token > 0 && token <= MAX_TOKEN
}

/// The pure rule, kept apart from the global so it can be tested.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct TokenSource {
    last: u64,
}

impl TokenSource {
    pub const fn new(last: u64) -> Self {
        Self { last }
    }

    /// The last token issued or observed.
    pub const fn last(&self) -> u64 {
        self.last
    }

    /// Issue a fresh token: strictly above every token issued or observed, and at least `clock_us`.
    /// `None` once no token up to `MAX_TOKEN` is left (never repeat one).
    pub fn issue(&mut self, clock_us: u64) -> Option<u64> {
        let token = self.last.saturating_add(1).max(clock_us);
        if token > MAX_TOKEN {
            return None;
        }
        self.last = token;
        Some(token)
    }

    /// Remember a token issued elsewhere (master, RDB, AOF) so later tokens are above it.
    pub fn observe(&mut self, token: u64) {
        self.last = self.last.max(token);
    }
}

/// The server-wide last token. Only the main thread touches it; atomics avoid any `unsafe`.
static LAST_TOKEN: AtomicU64 = AtomicU64::new(0);

/// Issue the next token of this server (`None`: exhausted).
pub fn issue(clock_us: u64) -> Option<u64> {
    let mut issued = None;
    let _ = LAST_TOKEN.fetch_update(Ordering::Relaxed, Ordering::Relaxed, |last| {
        let mut source = TokenSource::new(last);
        issued = source.issue(clock_us);
        Some(source.last())
    });
    issued
}

/// Raise the server's last token to at least `token`.
pub fn observe(token: u64) {
    LAST_TOKEN.fetch_max(token, Ordering::Relaxed);
}

/// The server's last token (saved as auxiliary RDB data).
pub fn last() -> u64 {
    LAST_TOKEN.load(Ordering::Relaxed)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn follows_the_clock_when_it_moves_forward() {
        let mut s = TokenSource::default();
        assert_eq!(s.issue(1_000), Some(1_000));
        assert_eq!(s.issue(5_000), Some(5_000));
    }

    #[test]
    fn counts_when_the_clock_stalls_or_jumps_back() {
        let mut s = TokenSource::new(10_000);
        assert_eq!(s.issue(10_000), Some(10_001));
        assert_eq!(s.issue(3), Some(10_002));
    }

    #[test]
    fn observed_tokens_raise_the_floor() {
        let mut s = TokenSource::default();
        s.observe(900);
        s.observe(100);
        assert_eq!(s.issue(1), Some(901));
    }

    #[test]
    fn refuses_rather_than_repeat_or_pass_the_bound() {
        let mut s = TokenSource::new(MAX_TOKEN - 1);
        assert_eq!(s.issue(0), Some(MAX_TOKEN));
        assert_eq!(s.issue(0), None);
        assert_eq!(s.last(), MAX_TOKEN, "a refused issue changes nothing");
        assert_eq!(TokenSource::new(u64::MAX).issue(0), None);
        assert_eq!(TokenSource::new(0).issue(MAX_TOKEN + 1), None);
        assert!(in_range(MAX_TOKEN) && !in_range(MAX_TOKEN + 1) && !in_range(0));
    }

    proptest! {
        #[test]
        fn tokens_strictly_increase_whatever_the_clock_does(
            steps in proptest::collection::vec((any::<bool>(), 0u64..1u64 << 52), 1..200)
        ) {
            let mut s = TokenSource::default();
            let mut prev = 0u64;
            let mut seen_max = 0u64;
            for (is_observe, value) in steps {
                if is_observe {
                    s.observe(value);
                    seen_max = seen_max.max(value);
                } else {
                    let t = s.issue(value).expect("far below the bound");
                    prop_assert!(t > prev && t > seen_max && t >= value);
                    prev = t;
                    seen_max = t;
                }
            }
        }
    }
}
