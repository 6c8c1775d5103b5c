//! `CONFIG RESETSTAT` resets `INFO lock` too, but only when the server really ran it.
//!
//! Redis has no module event for it. The command filter sees the command before the server
//! checks, authorises or queues it, so it only *notes* a candidate (a snapshot of two server
//! statistics); a timer looks again once the command has run and resets our statistics only if
//! the server's own were reset. A denied (NOPERM, NOAUTH) attempt raises the command's
//! `rejected_calls`; a queued one (MULTI) changes nothing until EXEC, which is checked the same
//! way; a real reset leaves the command's stats at `calls=1,...,rejected_calls=0,failed_calls=0`
//! and restarts `total_net_input_bytes` from zero.

use std::sync::Mutex;

use crate::core::hot;
use crate::core::metrics::{Reading, STATS};
use crate::ffi::server::info_field;

/// The server statistics a reset changes, read just before and just after a candidate.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Snapshot {
    /// The `cmdstat_config|resetstat` line of `INFO commandstats` ("" when absent).
    command_stats: String,
    /// `total_net_input_bytes` of `INFO stats`.
    net_input_bytes: u64,
}

/// What a candidate found (the server's statistics and ours, just before it ran), and whether
/// a queued `CONFIG RESETSTAT` may still run at EXEC.
struct Pending {
    before: Option<(Snapshot, Reading)>,
    maybe_queued: bool,
}

static PENDING: Mutex<Pending> = Mutex::new(Pending {
    before: None,
    maybe_queued: false,
});

/// Whether the server reset its statistics between `before` and `after`.
pub fn was_reset(before: &Snapshot, after: &Snapshot) -> bool {
    let field = |name: &str| {
        after.command_stats.split(',').find_map(|kv| {
            kv.strip_prefix(name)?
                .strip_prefix('=')?
                .parse::<u64>()
                .ok()
        })
    };
    let ran_last = field("calls").is_some_and(|c| c >= 1)
        && field("rejected_calls").unwrap_or(0) == 0
        && field("failed_calls").unwrap_or(0) == 0;
    // Identical command stats after a reset need an identical duration too: then the input
    // byte count, which only a reset lowers, tells.
    ran_last
        && (after.command_stats != before.command_stats
            || after.net_input_bytes < before.net_input_bytes)
}

/// The filter saw `CONFIG RESETSTAT` (or an EXEC that may run a queued one): note the
/// statistics now; the caller has `check` run once the command has run.
pub fn candidate() {
    let before = (read(), STATS.reading());
    PENDING.lock().unwrap_or_else(|p| p.into_inner()).before = Some(before);
}

/// The filter saw `EXEC`: whether it is a candidate (a `CONFIG RESETSTAT` may be queued).
pub fn exec_is_candidate() -> bool {
    let queued = std::mem::take(
        &mut PENDING
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .maybe_queued,
    );
    if queued {
        candidate();
    }
    queued
}

/// The filter saw `DISCARD`.
pub fn discard() {
    PENDING
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .maybe_queued = false;
}

/// After the candidate ran: if the server reset its statistics, reset ours to what they were
/// when it did (what happened since, such as the rest of a pipeline or EXEC, still counts).
pub fn check() {
    let Some((before, ours)) = PENDING
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .before
        .take()
    else {
        return;
    };
    let after = read();
    if was_reset(&before, &after) {
        STATS.reset_since(&ours);
        hot::clear();
    } else if after.command_stats == before.command_stats {
        // Neither run nor refused: queued in a MULTI, perhaps.
        PENDING
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .maybe_queued = true;
    }
}

fn read() -> Snapshot {
    Snapshot {
        command_stats: info_field(c"commandstats", c"cmdstat_config|resetstat").unwrap_or_default(),
        net_input_bytes: info_field(c"stats", c"total_net_input_bytes")
            .and_then(|v| v.parse().ok())
            .unwrap_or(0),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn snap(stats: &str, bytes: u64) -> Snapshot {
        Snapshot {
            command_stats: stats.to_string(),
            net_input_bytes: bytes,
        }
    }

    const RESET: &str = "calls=1,usec=5,usec_per_call=5.00,rejected_calls=0,failed_calls=0";

    #[test]
    fn a_first_reset_is_seen() {
        assert!(was_reset(&snap("", 500), &snap(RESET, 40)));
    }

    #[test]
    fn a_denied_attempt_is_not_a_reset() {
        let denied = "calls=0,usec=0,usec_per_call=0.00,rejected_calls=1,failed_calls=0";
        assert!(!was_reset(&snap("", 500), &snap(denied, 600)));
        let again = "calls=1,usec=5,usec_per_call=5.00,rejected_calls=1,failed_calls=0";
        assert!(!was_reset(&snap(RESET, 500), &snap(again, 600)));
    }

    #[test]
    fn a_queued_attempt_is_not_a_reset() {
        assert!(!was_reset(&snap(RESET, 500), &snap(RESET, 560)));
        assert!(!was_reset(&snap("", 500), &snap("", 560)));
    }

    #[test]
    fn a_second_reset_with_the_same_duration_is_seen_by_the_byte_count() {
        assert!(was_reset(&snap(RESET, 500), &snap(RESET, 0)));
    }

    #[test]
    fn a_reset_after_a_denied_one_is_seen() {
        let denied = "calls=1,usec=5,usec_per_call=5.00,rejected_calls=2,failed_calls=0";
        assert!(was_reset(&snap(denied, 900), &snap(RESET, 0)));
    }
}
