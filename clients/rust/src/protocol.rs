//! The wire protocol, written once: the commands this crate sends, the grant's token, what
//! `LOCK.WATCH` answered, the loss reasons of rule 8 and the retryable replies of rule 19
//! (docs/clients.md).

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

/// The most keys a set takes (the server's default `lock.max-set-size`).
pub(crate) const MAX_SET_SIZE: usize = 64;

/// `LOCK.MACQUIRE numkeys key ... owner ttl [SHARED] [SESSION] [WAIT ms]`: a set, every key
/// exclusive or every key shared.
pub(crate) fn macquire(
    keys: &[String],
    owner: &str,
    ttl: Duration,
    shared: bool,
    session: bool,
    wait: Wait,
) -> redis::Cmd {
    let mut cmd = redis::cmd("LOCK.MACQUIRE");
    cmd.arg(keys.len()).arg(keys).arg(owner).arg(millis(ttl));
    if shared {
        cmd.arg("SHARED");
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

/// What `LOCK.MACQUIRE` of `n` keys answered: `Ok(Some(tokens))` granted (in the keys'
/// order), `Ok(None)` not granted, `Err` a reply no redis-lock server gives.
pub(crate) fn grants(reply: &Value, n: usize) -> Result<Option<Vec<u64>>, String> {
    match reply {
        Value::Nil => Ok(None),
        Value::Array(items) if items.len() == n => items
            .iter()
            .map(|item| match grant(item) {
                Ok(Some(token)) => Ok(token),
                _ => Err(format!("{reply:?}")),
            })
            .collect::<Result<Vec<_>, _>>()
            .map(Some),
        other => Err(format!("{other:?}")),
    }
}

/// `LOCK.MRELEASE numkeys key ... owner`: how many of the keys `owner` held and released.
pub(crate) fn mrelease(keys: &[String], owner: &str) -> redis::Cmd {
    let mut cmd = redis::cmd("LOCK.MRELEASE");
    cmd.arg(keys.len()).arg(keys).arg(owner);
    cmd
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

/// `LOCK.WATCH key AFTER cursor [WAIT ms]`: who holds `key`, at once when they are no longer
/// the ones `cursor` names (`0`: at once), else when they change within `wait` (nil if not).
pub(crate) fn watch(key: &str, cursor: &str, wait: Option<Duration>) -> redis::Cmd {
    let mut cmd = redis::cmd("LOCK.WATCH");
    cmd.arg(key).arg("AFTER").arg(cursor);
    if let Some(wait) = wait {
        cmd.arg("WAIT").arg(millis(wait));
    }
    cmd
}

/// The cursor that names nothing seen yet: `LOCK.WATCH key AFTER 0` answers at once.
pub(crate) const FIRST_CURSOR: &str = "0";

/// What `LOCK.WATCH` answered: the cursor to pass next, and the exclusive holder (its owner and
/// token: an election's leader and term), if the lock has one.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Watched {
    pub(crate) cursor: String,
    pub(crate) exclusive: Option<(String, u64)>,
}

/// A map reply's fields: a RESP3 map, or a flat field/value array on RESP2.
fn fields(reply: &Value) -> Option<Vec<(&Value, &Value)>> {
    match reply {
        Value::Map(pairs) => Some(pairs.iter().map(|(k, v)| (k, v)).collect()),
        Value::Array(flat) if flat.len() % 2 == 0 => {
            Some(flat.chunks(2).map(|kv| (&kv[0], &kv[1])).collect())
        }
        _ => None,
    }
}

fn text(v: &Value) -> Option<String> {
    match v {
        Value::BulkString(b) => Some(String::from_utf8_lossy(b).into_owned()),
        Value::SimpleString(s) => Some(s.clone()),
        _ => None,
    }
}

fn field<'a>(pairs: &[(&Value, &'a Value)], name: &str) -> Option<&'a Value> {
    pairs
        .iter()
        .find(|(k, _)| text(k).as_deref() == Some(name))
        .map(|(_, v)| *v)
}

/// What a `LOCK.WATCH` reply says: `Ok(None)` nothing new (nil), `Ok(Some(..))` the holders,
/// `Err` a reply no redis-lock server gives (the reply, for the message).
pub(crate) fn watched(reply: &Value) -> Result<Option<Watched>, String> {
    if matches!(reply, Value::Nil) {
        return Ok(None);
    }
    let unexpected = || format!("{reply:?}");
    let pairs = fields(reply).ok_or_else(unexpected)?;
    let cursor = field(&pairs, "cursor")
        .and_then(text)
        .ok_or_else(unexpected)?;
    let mode = field(&pairs, "mode")
        .and_then(text)
        .ok_or_else(unexpected)?;
    if mode != "exclusive" {
        return Ok(Some(Watched {
            cursor,
            exclusive: None,
        }));
    }
    let token = match field(&pairs, "token") {
        Some(Value::Int(t)) => u64::try_from(*t).map_err(|_| unexpected())?,
        _ => return Err(unexpected()),
    };
    let owner = match field(&pairs, "holders") {
        Some(Value::Array(holders)) => holders
            .first()
            .and_then(fields)
            .and_then(|h| field(&h, "owner").and_then(text)),
        _ => None,
    };
    let owner = owner.ok_or_else(unexpected)?;
    Ok(Some(Watched {
        cursor,
        exclusive: Some((owner, token)),
    }))
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
    fn bulk(s: &str) -> Value {
        Value::BulkString(s.as_bytes().to_vec())
    }

    #[test]
    fn a_watch_reply_names_the_exclusive_holder_on_resp2_and_resp3() {
        let holder = vec![
            bulk("owner"),
            bulk("node-1"),
            bulk("token"),
            Value::Int(17),
            bulk("ttl"),
            Value::Int(9000),
            bulk("permits"),
            Value::Int(1),
        ];
        let flat = Value::Array(vec![
            bulk("cursor"),
            bulk("17-1"),
            bulk("mode"),
            Value::SimpleString("exclusive".into()),
            bulk("token"),
            Value::Int(17),
            bulk("holders"),
            Value::Array(vec![Value::Array(holder.clone())]),
        ]);
        let expected = Watched {
            cursor: "17-1".into(),
            exclusive: Some(("node-1".into(), 17)),
        };
        assert_eq!(watched(&flat), Ok(Some(expected.clone())));
        let pairs = |v: Vec<Value>| {
            let mut it = v.into_iter();
            let mut out = Vec::new();
            while let (Some(k), Some(v)) = (it.next(), it.next()) {
                out.push((k, v));
            }
            Value::Map(out)
        };
        let map = pairs(vec![
            bulk("cursor"),
            bulk("17-1"),
            bulk("mode"),
            Value::SimpleString("exclusive".into()),
            bulk("token"),
            Value::Int(17),
            bulk("holders"),
            Value::Array(vec![pairs(holder)]),
        ]);
        assert_eq!(watched(&map), Ok(Some(expected)));
    }

    #[test]
    fn a_watch_reply_without_an_exclusive_holder_has_no_leader() {
        assert_eq!(watched(&Value::Nil), Ok(None));
        for mode in ["free", "foreign", "shared"] {
            let reply = Value::Array(vec![
                bulk("cursor"),
                bulk(mode),
                bulk("mode"),
                bulk(mode),
                bulk("token"),
                Value::Nil,
                bulk("holders"),
                Value::Array(vec![]),
            ]);
            let expected = Watched {
                cursor: mode.into(),
                exclusive: None,
            };
            assert_eq!(watched(&reply), Ok(Some(expected)));
        }
        assert!(watched(&Value::Int(3)).is_err());
        assert!(watched(&Value::Array(vec![bulk("mode"), bulk("exclusive")])).is_err());
    }

    #[test]
    fn a_watch_passes_its_cursor_and_wait() {
        let words = |cmd: redis::Cmd| -> String {
            let words: Vec<String> = cmd
                .args_iter()
                .map(|a| match a {
                    redis::Arg::Simple(b) => String::from_utf8_lossy(b).into_owned(),
                    _ => "cursor".into(),
                })
                .collect();
            words.join(" ")
        };
        let wait = Some(Duration::from_millis(5000));
        assert_eq!(
            words(watch("k", "17-1", wait)),
            "LOCK.WATCH k AFTER 17-1 WAIT 5000"
        );
        assert_eq!(
            words(watch("k", FIRST_CURSOR, None)),
            "LOCK.WATCH k AFTER 0"
        );
    }
}
