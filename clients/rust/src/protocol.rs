//! The wire protocol, written once: the commands this crate sends, the grant's token, the loss
//! reasons of rule 8 and the retryable replies of rule 19 (docs/clients.md).

use std::time::Duration;

use redis::Value;

use crate::Error;

/// Error replies that say this server did not run the command and cannot serve the key now
/// (rule 19): asked again after a redirect or a new connection, never reported as refused.
pub(crate) const RETRYABLE: [&str; 8] = [
    "MOVED",
    "ASK",
    "TRYAGAIN",
    "CLUSTERDOWN",
    "READONLY",
    "LOADING",
    "MASTERDOWN",
    "UNBLOCKED",
];

/// Whether an error reply's code (its first word) is in the retryable list.
pub(crate) fn is_retryable(code: &str) -> bool {
    RETRYABLE.contains(&code)
}

/// The loss reasons of rule 8, word for word.
pub(crate) mod reason {
    /// A renewal or an extend answered 0.
    pub(crate) const RAN_OUT: &str = "the lease ran out before it was renewed";
    /// A release answered 0.
    pub(crate) const GONE_WHEN_RELEASED: &str =
        "the hold was gone when released (its lease ran out)";
    /// A fixed lease (watchdog off) reached its end.
    pub(crate) const FIXED_LEASE_ENDED: &str =
        "the lease ended (a fixed lease, not extended in time)";

    /// The lease deadline passed without a successful renewal.
    pub(crate) fn unreached(cause: &str) -> String {
        format!("the server could not be reached before the lease ended: {cause}")
    }

    /// A renewal got an error reply that is not retryable.
    pub(crate) fn refused(reply: &str) -> String {
        format!("renewal refused: {reply}")
    }

    /// Any other failure of the loop for this hold.
    #[allow(dead_code)] // the renewal loop's (next commit)
    pub(crate) fn watchdog_failed(cause: &str) -> String {
        format!("the watchdog failed: {cause}")
    }

    /// A session hold's own connection broke.
    #[allow(dead_code)] // the renewal loop's (next commit)
    pub(crate) fn session_closed(cause: &str) -> String {
        format!("the session's connection closed: {cause}")
    }
}

/// An error reply as the server wrote it (`NOPERM this user has no permissions ...`); another
/// error as the Redis client words it.
pub(crate) fn error_reply(e: &redis::RedisError) -> String {
    match (e.code(), e.detail()) {
        (Some(code), Some(detail)) => format!("{code} {detail}"),
        (Some(code), None) => code.to_string(),
        _ => e.to_string(),
    }
}

/// `d` in whole milliseconds, rounded up (a lease is never shorter than asked).
pub(crate) fn millis(d: Duration) -> u64 {
    u64::try_from(d.as_nanos().div_ceil(1_000_000)).unwrap_or(u64::MAX)
}

/// What names a hold on the server.
#[derive(Clone, Debug)]
pub(crate) struct HoldId {
    pub(crate) key: String,
    pub(crate) owner: String,
    pub(crate) token: u64,
}

/// How a hold shares its lock.
#[derive(Clone, Copy, Debug)]
pub(crate) enum Mode {
    Exclusive,
    Shared,
    Permits { limit: u32, n: u32 },
}

/// How long an acquire waits in the server's queue.
#[derive(Clone, Copy, Debug)]
pub(crate) enum Wait {
    /// Up to this long (zero: try once).
    For(Duration),
    Forever,
}

/// `LOCK.ACQUIRE key owner ttl [SHARED | LIMIT l PERMITS n] [SESSION] [WAIT ms]`.
pub(crate) fn acquire(
    key: &str,
    owner: &str,
    ttl: Duration,
    mode: Mode,
    session: bool,
    wait: Wait,
) -> redis::Cmd {
    let mut cmd = redis::cmd("LOCK.ACQUIRE");
    cmd.arg(key).arg(owner).arg(millis(ttl));
    match mode {
        Mode::Exclusive => {}
        Mode::Shared => {
            cmd.arg("SHARED");
        }
        Mode::Permits { limit, n } => {
            cmd.arg("LIMIT").arg(limit).arg("PERMITS").arg(n);
        }
    }
    if session {
        cmd.arg("SESSION");
    }
    match wait {
        Wait::For(d) if d.is_zero() => {}
        Wait::For(d) => {
            cmd.arg("WAIT").arg(millis(d));
        }
        Wait::Forever => {
            cmd.arg("WAIT").arg(0);
        }
    }
    cmd
}

/// What `LOCK.ACQUIRE` answered: `Ok(Some(token))` granted, `Ok(None)` not granted, `Err` a
/// reply no redis-lock server gives (the reply, for the message).
pub(crate) fn grant(reply: &Value) -> Result<Option<u64>, String> {
    match reply {
        Value::Int(token) => u64::try_from(*token)
            .map(Some)
            .map_err(|_| format!("{reply:?}")),
        Value::Nil => Ok(None),
        other => Err(format!("{other:?}")),
    }
}

/// `LOCK.RELEASE key owner TOKEN token`.
pub(crate) fn release(id: &HoldId) -> redis::Cmd {
    let mut cmd = redis::cmd("LOCK.RELEASE");
    cmd.arg(&id.key).arg(&id.owner).arg("TOKEN").arg(id.token);
    cmd
}

/// `LOCK.EXTEND key owner ttl TOKEN token`: a renewal, or an extend.
pub(crate) fn extend(id: &HoldId, ttl: Duration) -> redis::Cmd {
    let mut cmd = redis::cmd("LOCK.EXTEND");
    cmd.arg(&id.key)
        .arg(&id.owner)
        .arg(millis(ttl))
        .arg("TOKEN")
        .arg(id.token);
    cmd
}

/// `LOCK.GUARD key token <cmd>`: `cmd` runs only while `token` is the live exclusive hold's.
pub(crate) fn guard(key: &str, token: u64, cmd: &redis::Cmd) -> redis::Cmd {
    let mut guarded = redis::cmd("LOCK.GUARD");
    guarded.arg(key).arg(token);
    for arg in cmd.args_iter() {
        match arg {
            redis::Arg::Simple(bytes) => {
                guarded.arg(bytes);
            }
            _ => {
                guarded.arg(0); // a cursor: scans start at 0
            }
        }
    }
    guarded
}

/// `WAIT n timeout`: a durable grant's replicas.
pub(crate) fn wait_replicas(n: usize, timeout: Duration) -> redis::Cmd {
    let mut cmd = redis::cmd("WAIT");
    cmd.arg(n).arg(millis(timeout));
    cmd
}

/// Whether the integer reply of a release or an extend says the hold was live.
pub(crate) fn was_live(reply: i64) -> bool {
    reply == 1
}

/// A ttl the server would refuse, refused before anything is sent (rule 17).
pub(crate) fn check_ttl(ttl: Duration) -> Result<(), Error> {
    if ttl < Duration::from_millis(1) {
        return Err(Error::InvalidArgument(format!("ttl {ttl:?} is under 1 ms")));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_round_up_to_whole_milliseconds() {
        assert_eq!(millis(Duration::from_micros(1500)), 2);
        assert_eq!(millis(Duration::from_millis(3)), 3);
        assert_eq!(millis(Duration::MAX), u64::MAX);
    }

    #[test]
    fn a_grant_is_a_token_or_nil() {
        assert_eq!(grant(&Value::Int(7)), Ok(Some(7)));
        assert_eq!(grant(&Value::Nil), Ok(None));
        assert!(grant(&Value::Int(-1)).is_err());
        assert!(grant(&Value::Okay).is_err());
    }

    #[test]
    fn the_retryable_list_is_rule_19s() {
        assert!(is_retryable("READONLY") && is_retryable("UNBLOCKED"));
        assert!(!is_retryable("NOPERM") && !is_retryable("STALE") && !is_retryable("ERR"));
    }

    #[test]
    fn an_acquire_carries_its_mode_and_wait() {
        let cmd = acquire(
            "k",
            "o",
            Duration::from_micros(1500),
            Mode::Permits { limit: 3, n: 2 },
            true,
            Wait::Forever,
        );
        let words: Vec<String> = cmd
            .args_iter()
            .map(|a| match a {
                redis::Arg::Simple(b) => String::from_utf8_lossy(b).into_owned(),
                _ => "cursor".into(),
            })
            .collect();
        let expected = "LOCK.ACQUIRE k o 2 LIMIT 3 PERMITS 2 SESSION WAIT 0";
        assert_eq!(words.join(" "), expected);
    }
}
