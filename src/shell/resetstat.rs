//! `CONFIG RESETSTAT` resets `INFO lock` too, seen at the next read of our statistics.
//!
//! Redis has no module event for it, and a command filter that watched for it would tax every
//! command on the server (about 200 instructions, 5% of a `GET`). So every read of our
//! statistics (`INFO lock`, `LOCK.HOT`) first compares two server statistics with the last
//! read's: a reset leaves the command's own stats at `calls=1` with that call's duration, and
//! restarts `total_net_input_bytes` from zero. What happened between the reset and that read
//! is reset along with the rest (see docs/operations.md, *Metrics*). A denied attempt (NOPERM,
//! NOAUTH) only raises `rejected_calls`; a queued or discarded one (MULTI) changes nothing.

use std::sync::Mutex;

use crate::core::hot;
use crate::core::metrics::STATS;
use crate::ffi::server::info_field;

/// The server statistics a reset changes, as the last read found them.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Snapshot {
    /// The `cmdstat_config|resetstat` line of `INFO commandstats` ("" when absent).
    command_stats: String,
    /// `total_net_input_bytes` of `INFO stats`.
    net_input_bytes: u64,
    /// `total_commands_processed` of `INFO stats`: counted at the end of every command (and of
    /// every command a script or module runs), so each read, in a command of its own, sees more
    /// than the last one unless a reset restarted it.
    commands: u64,
}

/// What the last read found (`None` before the first).
static LAST: Mutex<Option<Snapshot>> = Mutex::new(None);

/// Whether the server reset its statistics between the reads `before` and `after`.
pub fn was_reset(before: &Snapshot, after: &Snapshot) -> bool {
    let ran = |s: &Snapshot| {
        let field = |name: &str| {
            s.command_stats.split(',').find_map(|kv| {
                kv.strip_prefix(name)?
                    .strip_prefix('=')?
                    .parse::<u64>()
                    .ok()
            })
        };
        (field("calls").unwrap_or(0), field("usec").unwrap_or(0))
    };
    let (calls, usec) = ran(after);
    // Only a run changes calls and usec, and every run resets them first. Two runs of the same
    // duration leave the same line: then the input bytes, which only a reset lowers, or the
    // commands processed, which only a reset keeps from growing between two reads, tell. A
    // reset goes unseen only if it took as long as the last one seen and more bytes and more
    // commands came after it than between that one and the last read.
    calls >= 1
        && ((calls, usec) != ran(before)
            || after.net_input_bytes < before.net_input_bytes
            || after.commands <= before.commands)
}

/// Before our statistics are read: if the server reset its own since the last read, reset
/// ours (and `LOCK.HOT`'s). At load, this takes the first snapshot. Reads come from commands
/// (`INFO`, `LOCK.HOT`) and the load, each in a command of its own (see `Snapshot::commands`).
pub fn catch_up() {
    let now = read();
    let before = LAST
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .replace(now.clone());
    if before.is_some_and(|before| was_reset(&before, &now)) {
        STATS.reset_since(&STATS.reading());
        hot::clear();
    }
}

fn read() -> Snapshot {
    Snapshot {
        command_stats: info_field(c"commandstats", c"cmdstat_config|resetstat").unwrap_or_default(),
        net_input_bytes: number(c"total_net_input_bytes"),
        commands: number(c"total_commands_processed"),
    }
}

fn number(field: &std::ffi::CStr) -> u64 {
    info_field(c"stats", field)
        .and_then(|v| v.parse().ok())
        .unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A read with `bytes` of input and as many commands so far.
    fn snap(stats: &str, bytes: u64) -> Snapshot {
        Snapshot {
            command_stats: stats.to_string(),
            net_input_bytes: bytes,
            commands: bytes,
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
    fn a_reset_after_the_last_read_is_seen() {
        let other = "calls=1,usec=7,usec_per_call=7.00,rejected_calls=0,failed_calls=0";
        assert!(was_reset(&snap(RESET, 500), &snap(other, 9_000)));
        let denied_since = "calls=1,usec=7,usec_per_call=7.00,rejected_calls=1,failed_calls=0";
        assert!(was_reset(&snap(RESET, 500), &snap(denied_since, 9_000)));
    }

    #[test]
    fn a_queued_attempt_is_not_a_reset() {
        assert!(!was_reset(&snap(RESET, 500), &snap(RESET, 560)));
        assert!(!was_reset(&snap("", 500), &snap("", 560)));
    }

    #[test]
    fn a_second_reset_of_the_same_duration_soon_after_a_read_is_seen_by_the_commands() {
        // RESETSTAT; read (1 command, 30 bytes); ...; RESETSTAT; read (1 command, 30 bytes).
        let read = |bytes, commands| Snapshot {
            command_stats: RESET.to_string(),
            net_input_bytes: bytes,
            commands,
        };
        assert!(was_reset(&read(30, 1), &read(30, 1)));
        assert!(
            was_reset(&read(30, 1), &read(90, 1)),
            "more bytes, no more commands"
        );
        assert!(
            !was_reset(&read(30, 1), &read(90, 4)),
            "the residue: unseen"
        );
        assert!(
            !was_reset(&snap("", 30), &snap("", 30)),
            "never reset: no line"
        );
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
