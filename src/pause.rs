//! Client write pauses (`CLIENT PAUSE`, `FAILOVER`), as seen by the command filter.
//!
//! While writes are paused Redis freezes the dataset (failover relies on it): it neither runs
//! write commands nor deletes expired keys. Module timers still run, so the handoffs that
//! `expiry::settle` would make wait until the pause ends. Redis 7.0 has no module API telling
//! whether writes are paused, hence this record, kept from the commands that pause and unpause.

use std::sync::atomic::{AtomicI64, Ordering};

use crate::lock::Millis;

/// A FAILOVER pauses writes until it ends (the master then becomes a replica and answers its
/// waiters) or is aborted: treat it as a pause of at most this long.
const FAILOVER_PAUSE_MS: Millis = 60_000;

static PAUSED_UNTIL: AtomicI64 = AtomicI64::new(0);

/// What a command does to write pauses, from its arguments.
#[derive(Debug, PartialEq, Eq)]
pub enum PauseChange {
    Until(Millis),
    Lifted,
}

/// Classify a command by its first arguments (`CLIENT PAUSE ms [WRITE|ALL]`, `CLIENT UNPAUSE`,
/// `FAILOVER ... [TIMEOUT ms]`, `FAILOVER ABORT`).
pub fn change_of(args: &[&[u8]], now: Millis) -> Option<PauseChange> {
    let is = |i: usize, word: &[u8]| args.get(i).is_some_and(|a| a.eq_ignore_ascii_case(word));
    if is(0, b"client") && is(1, b"pause") {
        let ms: Millis = std::str::from_utf8(args.get(2)?).ok()?.parse().ok()?;
        return Some(PauseChange::Until(now.saturating_add(ms.max(0))));
    }
    if is(0, b"client") && is(1, b"unpause") {
        return Some(PauseChange::Lifted);
    }
    if is(0, b"failover") {
        if is(1, b"abort") {
            return Some(PauseChange::Lifted);
        }
        let timeout = args
            .iter()
            .position(|a| a.eq_ignore_ascii_case(b"timeout"))
            .and_then(|i| args.get(i + 1))
            .and_then(|t| std::str::from_utf8(t).ok()?.parse::<Millis>().ok())
            .filter(|t| *t > 0)
            .unwrap_or(FAILOVER_PAUSE_MS);
        return Some(PauseChange::Until(now.saturating_add(timeout)));
    }
    None
}

pub fn apply(change: PauseChange) {
    match change {
        PauseChange::Until(until) => {
            PAUSED_UNTIL.fetch_max(until, Ordering::Relaxed);
        }
        PauseChange::Lifted => PAUSED_UNTIL.store(0, Ordering::Relaxed),
    }
}

/// When the current write pause ends, if one is in force at `now`.
pub fn paused_until(now: Millis) -> Option<Millis> {
    let until = PAUSED_UNTIL.load(Ordering::Relaxed);
    (until > now).then_some(until)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_pause_and_unpause_commands() {
        let now = 1_000;
        assert_eq!(
            change_of(&[b"CLIENT", b"PAUSE", b"500", b"WRITE"], now),
            Some(PauseChange::Until(1_500))
        );
        assert_eq!(
            change_of(&[b"client", b"pause", b"20"], now),
            Some(PauseChange::Until(1_020))
        );
        assert_eq!(change_of(&[b"CLIENT", b"PAUSE", b"x"], now), None);
        assert_eq!(
            change_of(&[b"CLIENT", b"UNPAUSE"], now),
            Some(PauseChange::Lifted)
        );
        assert_eq!(
            change_of(&[b"FAILOVER", b"TIMEOUT", b"300"], now),
            Some(PauseChange::Until(1_300))
        );
        assert_eq!(
            change_of(&[b"FAILOVER"], now),
            Some(PauseChange::Until(61_000))
        );
        assert_eq!(
            change_of(&[b"FAILOVER", b"ABORT"], now),
            Some(PauseChange::Lifted)
        );
        assert_eq!(change_of(&[b"CLIENT", b"LIST"], now), None);
        assert_eq!(change_of(&[b"GET", b"k"], now), None);
    }
}
