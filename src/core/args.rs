//! Argument parsing over bytes, with Redis's own integer rules, so every parser is unit-tested
//! without a server. Each command's arguments after the key parse into one value; arity is the
//! command table's business (`shell::table`), so the parsers see the right count.

use crate::core::config::{Kind, Limits, LoadArgError, Setting, SETTINGS};
use crate::core::error::LockError;
use crate::core::fencing;
use crate::core::lock::{self, Millis, Token, Want};
use crate::core::watch::Cursor;

/// One command argument's bytes (module strings in the server, byte slices in tests).
pub trait Arg {
    fn bytes(&self) -> &[u8];
}

impl Arg for &[u8] {
    fn bytes(&self) -> &[u8] {
        self
    }
}

/// How many queued owners LOCK.INFO lists without COUNT.
pub const INFO_DEFAULT_COUNT: usize = 10;

/// The longest decimal a 64-bit integer can have, sign included (Redis's `LONG_STR_SIZE` - 1).
const MAX_INTEGER_LEN: usize = 20;

/// A signed 64-bit integer exactly as Redis reads one (`string2ll`): optional `-`, no `+`, no
/// spaces, no leading zeros, no `-0`, in range.
pub fn integer(arg: &[u8]) -> Result<i64, LockError> {
    if arg.is_empty() || arg.len() > MAX_INTEGER_LEN {
        return Err(LockError::NotAnInteger);
    }
    if arg == b"0" {
        return Ok(0);
    }
    let (negative, digits) = match arg {
        [b'-', rest @ ..] => (true, rest),
        _ => (false, arg),
    };
    let Some((b'1'..=b'9', _)) = digits.split_first() else {
        return Err(LockError::NotAnInteger);
    };
    let mut value: u64 = 0;
    for &d in digits {
        if !d.is_ascii_digit() {
            return Err(LockError::NotAnInteger);
        }
        value = value
            .checked_mul(10)
            .and_then(|v| v.checked_add(u64::from(d - b'0')))
            .ok_or(LockError::NotAnInteger)?;
    }
    if negative {
        0i64.checked_sub_unsigned(value)
            .ok_or(LockError::NotAnInteger)
    } else {
        i64::try_from(value).map_err(|_| LockError::NotAnInteger)
    }
}

/// A lease length: positive, within `lock.max-ttl`, and a deadline that fits.
pub fn ttl(arg: &[u8], now: Millis, limits: &Limits) -> Result<Millis, LockError> {
    let ttl = integer(arg)?;
    lock::deadline(now, ttl)?;
    if ttl > limits.max_ttl {
        return Err(LockError::TtlAboveMax);
    }
    Ok(ttl)
}

/// A fencing token argument: positive.
pub fn token(arg: &[u8]) -> Result<Token, LockError> {
    u64::try_from(integer(arg)?)
        .ok()
        .filter(|t| *t > 0)
        .ok_or(LockError::TokenNotPositive)
}

/// An owner: any non-empty bytes.
pub fn owner(arg: &[u8]) -> Result<&[u8], LockError> {
    match arg {
        [] => Err(LockError::EmptyOwner),
        owner => Ok(owner),
    }
}

/// The owner of an acquire: `*` asks the server to make one up.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum OwnerArg<'a> {
    Given(&'a [u8]),
    Generate,
}

/// `LOCK.ACQUIRE key owner ttl-ms [SHARED | LIMIT max [PERMITS n]] [SESSION] [WAIT timeout-ms]`, after
/// the key (options in any order, each at most once).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct AcquireArgs<'a> {
    pub owner: OwnerArg<'a>,
    pub ttl: Millis,
    pub want: Want,
    /// `None` without WAIT; `Some(0)` waits without limit.
    pub wait: Option<Millis>,
    /// `SESSION`: the hold ends when the granted connection closes.
    pub session: bool,
}

pub fn acquire<'a, A: Arg>(
    rest: &'a [A],
    now: Millis,
    limits: &Limits,
) -> Result<AcquireArgs<'a>, LockError> {
    let [owner_arg, ttl_arg, options @ ..] = rest else {
        return Err(LockError::Syntax);
    };
    let ttl = ttl(ttl_arg.bytes(), now, limits)?;
    let (want, wait, session) = acquire_options(options, now)?;
    let owner = match owner_arg.bytes() {
        b"*" => OwnerArg::Generate,
        given => {
            let given = owner(given)?;
            if given.len() > limits.max_owner_length {
                return Err(LockError::OwnerTooLong);
            }
            OwnerArg::Given(given)
        }
    };
    Ok(AcquireArgs {
        owner,
        ttl,
        want,
        wait,
        session,
    })
}

/// `SHARED`, `SESSION`, `LIMIT max`, `PERMITS n`, `WAIT timeout-ms`, in any order, each at
/// most once.
fn acquire_options<A: Arg>(
    mut options: &[A],
    now: Millis,
) -> Result<(Want, Option<Millis>, bool), LockError> {
    let (mut shared, mut limit, mut permits, mut wait) = (false, None, None, None);
    let mut session = false;
    while let Some((flag, rest)) = options.split_first() {
        let flag = flag.bytes();
        let value = rest.first().map(Arg::bytes);
        options = rest;
        if flag.eq_ignore_ascii_case(b"SHARED") && !shared {
            shared = true;
            continue;
        }
        if flag.eq_ignore_ascii_case(b"SESSION") && !session {
            session = true;
            continue;
        }
        let (Some(value), Some((_, after))) = (value, options.split_first()) else {
            return Err(LockError::Syntax);
        };
        options = after;
        if flag.eq_ignore_ascii_case(b"WAIT") && wait.is_none() {
            wait = Some(wait_timeout(value, now)?);
        } else if flag.eq_ignore_ascii_case(b"LIMIT") && limit.is_none() {
            limit = Some(count_of(value)?);
        } else if flag.eq_ignore_ascii_case(b"PERMITS") && permits.is_none() {
            permits = Some(count_of(value)?);
        } else {
            return Err(LockError::Syntax);
        }
    }
    let want = match (shared, limit, permits) {
        (false, None, None) => Want::Exclusive,
        (true, None, None) => Want::Shared,
        (false, Some(limit), n) => {
            let n = n.unwrap_or(1);
            if n > limit {
                return Err(LockError::PermitsOutOfRange);
            }
            Want::Permits { limit, n }
        }
        _ => return Err(LockError::Syntax), // SHARED with LIMIT, or PERMITS alone
    };
    Ok((want, wait, session))
}

/// A `LIMIT` or `PERMITS` count: 1 ..= 2^32-1.
fn count_of(arg: &[u8]) -> Result<u32, LockError> {
    u32::try_from(integer(arg)?)
        .ok()
        .filter(|n| *n >= 1)
        .ok_or(LockError::PermitsOutOfRange)
}

/// A `WAIT` timeout: zero (no limit) or positive, far from overflow.
fn wait_timeout(arg: &[u8], now: Millis) -> Result<Millis, LockError> {
    let timeout = integer(arg)?;
    if timeout < 0 {
        return Err(LockError::TimeoutNegative);
    }
    // Keep a minute of headroom below overflow of the absolute time.
    now.checked_add(timeout)
        .and_then(|t| t.checked_add(60_000))
        .ok_or(LockError::TimeoutTooLarge)?;
    Ok(timeout)
}

/// `[TOKEN token]`
fn only_token<A: Arg>(options: &[A]) -> Result<Option<Token>, LockError> {
    match options {
        [] => Ok(None),
        [flag, t] if flag.bytes().eq_ignore_ascii_case(b"TOKEN") => token(t.bytes()).map(Some),
        _ => Err(LockError::Syntax),
    }
}

/// `LOCK.RELEASE key owner [TOKEN token]`, after the key.
pub fn release<A: Arg>(rest: &[A]) -> Result<(&[u8], Option<Token>), LockError> {
    let [owner_arg, options @ ..] = rest else {
        return Err(LockError::Syntax);
    };
    let owner = owner(owner_arg.bytes())?;
    Ok((owner, only_token(options)?))
}

/// `LOCK.EXTEND key owner ttl-ms [TOKEN token]`, after the key.
pub fn extend<'a, A: Arg>(
    rest: &'a [A],
    now: Millis,
    limits: &Limits,
) -> Result<(&'a [u8], Millis, Option<Token>), LockError> {
    let [owner_arg, ttl_arg, options @ ..] = rest else {
        return Err(LockError::Syntax);
    };
    let owner = owner(owner_arg.bytes())?;
    let ttl = ttl(ttl_arg.bytes(), now, limits)?;
    Ok((owner, ttl, only_token(options)?))
}

/// `LOCK.GUARD key token command [arg ...]`, after the key: the token and the command's words.
pub fn guard<A: Arg>(rest: &[A]) -> Result<(Token, &[A]), LockError> {
    let [token_arg, command @ ..] = rest else {
        return Err(LockError::Syntax);
    };
    if command.is_empty() {
        return Err(LockError::Syntax);
    }
    Ok((token(token_arg.bytes())?, command))
}

/// `LOCK.FENCE key [token]`, after the key.
pub fn fence<A: Arg>(rest: &[A]) -> Result<Option<Token>, LockError> {
    match rest {
        [] => Ok(None),
        [t] => token(t.bytes()).map(Some),
        _ => Err(LockError::Syntax),
    }
}

/// `LOCK.INFO key [COUNT count]`, after the key.
pub fn info<A: Arg>(rest: &[A]) -> Result<usize, LockError> {
    match rest {
        [] => Ok(INFO_DEFAULT_COUNT),
        [flag, n] if flag.bytes().eq_ignore_ascii_case(b"COUNT") => {
            usize::try_from(integer(n.bytes())?).map_err(|_| LockError::CountNegative)
        }
        _ => Err(LockError::Syntax),
    }
}

/// `LOCK.WATCH key [AFTER cursor] [WAIT timeout-ms]`, after the key.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct WatchArgs {
    pub after: Cursor,
    /// `None` without WAIT (never blocks); `Some(0)` waits without limit.
    pub wait: Option<Millis>,
}

/// `[AFTER cursor] [WAIT timeout-ms]`, in either order, each at most once.
pub fn watch<A: Arg>(mut rest: &[A], now: Millis) -> Result<WatchArgs, LockError> {
    let (mut after, mut wait) = (None, None);
    while let [flag, value, tail @ ..] = rest {
        let (flag, value) = (flag.bytes(), value.bytes());
        if flag.eq_ignore_ascii_case(b"AFTER") && after.is_none() {
            after = Some(Cursor::parse(value)?);
        } else if flag.eq_ignore_ascii_case(b"WAIT") && wait.is_none() {
            wait = Some(wait_timeout(value, now)?);
        } else {
            return Err(LockError::Syntax);
        }
        rest = tail;
    }
    if !rest.is_empty() {
        return Err(LockError::Syntax);
    }
    Ok(WatchArgs {
        after: after.unwrap_or(Cursor::Unseen),
        wait,
    })
}

/// `LOCK.EPOCH epoch`, after the name: an epoch a master started.
pub fn epoch<A: Arg>(rest: &[A]) -> Result<u64, LockError> {
    let [epoch] = rest else {
        return Err(LockError::Syntax);
    };
    u64::try_from(integer(epoch.bytes())?)
        .ok()
        .filter(|e| (1..=fencing::MAX_EPOCH).contains(e))
        .ok_or(LockError::EpochOutOfRange)
}

/// The module arguments (`loadmodule path [name value ...]`, names with or without `lock.`, in
/// any case): the starting value of every setting of `SETTINGS`, in its order, checked as
/// `CONFIG SET` checks them. Any unknown name, missing value or bad value refuses them all.
pub fn module_args<A: Arg>(words: &[A]) -> Result<[i64; SETTINGS.len()], LoadArgError> {
    let mut values = SETTINGS.each_ref().map(|s| s.default);
    let mut given = [false; SETTINGS.len()];
    let text = |b: &[u8]| String::from_utf8_lossy(b).into_owned();
    for pair in words.chunks(2) {
        let name = pair[0].bytes();
        let bare = match name.get(..5) {
            Some(prefix) if prefix.eq_ignore_ascii_case(b"lock.") => &name[5..],
            _ => name,
        };
        let Some(i) = SETTINGS
            .iter()
            .position(|s| s.name.as_bytes().eq_ignore_ascii_case(bare))
        else {
            return Err(LoadArgError::Unknown(text(name)));
        };
        let setting = &SETTINGS[i];
        let Some(value) = pair.get(1).map(|v| v.bytes()) else {
            return Err(LoadArgError::NoValue(setting.name.into()));
        };
        if std::mem::replace(&mut given[i], true) {
            return Err(LoadArgError::Repeated(setting.name.into()));
        }
        values[i] = setting_value(setting, value)?;
    }
    Ok(values)
}

/// One module argument's value for `setting`, checked as `CONFIG SET` checks it.
fn setting_value(setting: &Setting, value: &[u8]) -> Result<i64, LoadArgError> {
    let refused = |why: fn(String, String) -> LoadArgError| {
        why(
            setting.name.into(),
            String::from_utf8_lossy(value).into_owned(),
        )
    };
    match setting.kind {
        Kind::YesNo if value.eq_ignore_ascii_case(b"yes") => Ok(1),
        Kind::YesNo if value.eq_ignore_ascii_case(b"no") => Ok(0),
        Kind::YesNo => Err(refused(LoadArgError::NotYesNo)),
        Kind::Integer { min, max } => {
            let n = integer(value).map_err(|_| refused(LoadArgError::NotAnInteger))?;
            if !(min..=max).contains(&n) {
                let (name, value) = (setting.name.into(), String::from_utf8_lossy(value));
                return Err(LoadArgError::OutOfBounds(name, value.into(), min, max));
            }
            Ok(n)
        }
    }
}

/// `LOCK.APPLY key owner token PX left-ms held-ms` (or the unix-time form), after the key.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ApplyArgs<'a> {
    pub owner: &'a [u8],
    pub token: Token,
    pub times: ApplyTimes,
}

/// The times of a `LOCK.APPLY`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ApplyTimes {
    /// `PX left held`: the lease's time left and the time held so far (ms).
    Left { left: Millis, held: Millis },
    /// Earlier versions: unix times; without the grant time (the first version) `held`
    /// counts from the replay.
    Unix {
        deadline: Millis,
        granted: Option<Millis>,
    },
}

/// `owner token PX left held`, or `owner token deadline [granted]`.
pub fn apply<A: Arg>(rest: &[A]) -> Result<ApplyArgs<'_>, LockError> {
    let (owner_arg, token_arg, times) = match rest {
        [o, t, px, left, held] if px.bytes().eq_ignore_ascii_case(b"PX") => {
            let left = integer(left.bytes())?;
            let held = integer(held.bytes())?;
            if left < 0 || held < 0 {
                return Err(LockError::TimeNegative);
            }
            (o, t, ApplyTimes::Left { left, held })
        }
        [o, t, d] | [o, t, d, _] => {
            let deadline = Some(integer(d.bytes())?)
                .filter(|d| *d > 0)
                .ok_or(LockError::DeadlineNotPositive)?;
            let granted = rest.get(3).map(|g| integer(g.bytes())).transpose()?;
            (o, t, ApplyTimes::Unix { deadline, granted })
        }
        _ => return Err(LockError::Syntax),
    };
    let token = token(token_arg.bytes())?;
    if !fencing::in_range(token) {
        return Err(LockError::TokenAboveMax);
    }
    let owner = owner(owner_arg.bytes())?;
    Ok(ApplyArgs {
        owner,
        token,
        times,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    const LIMITS: Limits = Limits {
        max_ttl: 1_000,
        max_owner_length: 4,
        max_waiters: 10,
        max_holders: 10,
        max_set_size: 4,
    };

    fn args(words: &[&'static str]) -> Vec<&'static [u8]> {
        words.iter().map(|w| w.as_bytes()).collect()
    }

    #[test]
    fn integers_follow_redis_rules() {
        for (text, want) in [
            ("0", Some(0)),
            ("7", Some(7)),
            ("-7", Some(-7)),
            ("9223372036854775807", Some(i64::MAX)),
            ("-9223372036854775808", Some(i64::MIN)),
            ("9223372036854775808", None),
            ("-9223372036854775809", None),
            ("99999999999999999999", None),
            ("", None),
            ("-", None),
            ("+1", None),
            (" 1", None),
            ("1 ", None),
            ("01", None),
            ("-0", None),
            ("00", None),
            ("1.0", None),
            ("1e3", None),
            ("0x10", None),
            ("١", None),
        ] {
            assert_eq!(integer(text.as_bytes()).ok(), want, "{text:?}");
        }
    }

    proptest! {
        #[test]
        fn every_i64_round_trips(n in any::<i64>()) {
            prop_assert_eq!(integer(n.to_string().as_bytes()), Ok(n));
        }

        #[test]
        fn agrees_with_a_strict_reading_of_any_bytes(bytes in proptest::collection::vec(any::<u8>(), 0..22)) {
            // A strict reference: the canonical decimal form of the value it parses to.
            let reference = std::str::from_utf8(&bytes).ok()
                .and_then(|s| s.parse::<i64>().ok())
                .filter(|n| n.to_string().as_bytes() == bytes.as_slice());
            prop_assert_eq!(integer(&bytes).ok(), reference);
        }
    }

    #[test]
    fn acquire_arguments() {
        let now = 1_000;
        assert_eq!(
            acquire(&args(&["o", "10"]), now, &LIMITS),
            Ok(AcquireArgs {
                owner: OwnerArg::Given(b"o"),
                ttl: 10,
                want: Want::Exclusive,
                wait: None,
                session: false
            })
        );
        assert_eq!(
            acquire(&args(&["*", "10", "wait", "0"]), now, &LIMITS),
            Ok(AcquireArgs {
                owner: OwnerArg::Generate,
                ttl: 10,
                want: Want::Exclusive,
                wait: Some(0),
                session: false
            })
        );
        assert_eq!(
            acquire(&args(&["o", "10", "shared"]), now, &LIMITS).map(|a| a.want),
            Ok(Want::Shared)
        );
        assert_eq!(
            acquire(&args(&["o", "10", "WAIT", "5", "SHARED"]), now, &LIMITS)
                .map(|a| (a.want, a.wait)),
            Ok((Want::Shared, Some(5)))
        );
        assert_eq!(
            acquire(&args(&["o", "10", "LIMIT", "3"]), now, &LIMITS).map(|a| a.want),
            Ok(Want::Permits { limit: 3, n: 1 })
        );
        assert_eq!(
            acquire(
                &args(&["o", "10", "PERMITS", "2", "LIMIT", "3", "WAIT", "0"]),
                now,
                &LIMITS
            )
            .map(|a| a.want),
            Ok(Want::Permits { limit: 3, n: 2 })
        );
        for (words, err) in [
            (&["o", "0"][..], LockError::TtlNotPositive),
            (&["o", "x"], LockError::NotAnInteger),
            (&["o", "1001"], LockError::TtlAboveMax),
            (&["", "10"], LockError::EmptyOwner),
            (&["owner", "10"], LockError::OwnerTooLong),
            (&["o", "10", "WAIT"], LockError::Syntax),
            (&["o", "10", "WAIT", "-1"], LockError::TimeoutNegative),
            (
                &["o", "10", "WAIT", "9223372036854775807"],
                LockError::TimeoutTooLarge,
            ),
            (&["o", "10", "NOWAIT", "1"], LockError::Syntax),
            (&["o"], LockError::Syntax),
            (&["o", "10", "SHARED", "SHARED"], LockError::Syntax),
            (&["o", "10", "SHARED", "LIMIT", "2"], LockError::Syntax),
            (&["o", "10", "PERMITS", "2"], LockError::Syntax),
            (&["o", "10", "LIMIT"], LockError::Syntax),
            (&["o", "10", "LIMIT", "2", "LIMIT", "2"], LockError::Syntax),
            (&["o", "10", "WAIT", "1", "WAIT", "1"], LockError::Syntax),
            (&["o", "10", "LIMIT", "0"], LockError::PermitsOutOfRange),
            (&["o", "10", "LIMIT", "-1"], LockError::PermitsOutOfRange),
            (
                &["o", "10", "LIMIT", "4294967296"],
                LockError::PermitsOutOfRange,
            ),
            (
                &["o", "10", "LIMIT", "2", "PERMITS", "3"],
                LockError::PermitsOutOfRange,
            ),
            (&["o", "10", "LIMIT", "x"], LockError::NotAnInteger),
        ] {
            assert_eq!(acquire(&args(words), now, &LIMITS), Err(err), "{words:?}");
        }
        // The ttl is checked before the owner, as the first version did.
        assert_eq!(
            acquire(&args(&["", "0"]), now, &LIMITS),
            Err(LockError::TtlNotPositive)
        );
    }

    #[test]
    fn watch_arguments() {
        let held = Cursor::Held {
            newest: 7,
            holders: 2,
        };
        assert_eq!(
            watch(&args(&[]), 0),
            Ok(WatchArgs {
                after: Cursor::Unseen,
                wait: None
            })
        );
        assert_eq!(
            watch(&args(&["wait", "0", "AFTER", "7-2"]), 0),
            Ok(WatchArgs {
                after: held,
                wait: Some(0)
            })
        );
        assert_eq!(
            watch(&args(&["AFTER", "free"]), 0).map(|w| w.after),
            Ok(Cursor::Free)
        );
        for (bad, err) in [
            (&["AFTER"][..], LockError::Syntax),
            (&["AFTER", "1", "AFTER", "2"], LockError::Syntax),
            (&["WAIT", "1", "WAIT", "2"], LockError::Syntax),
            (&["AFTER", "x"], LockError::BadCursor),
            (&["WAIT", "-1"], LockError::TimeoutNegative),
            (&["COUNT", "1"], LockError::Syntax),
        ] {
            assert_eq!(watch(&args(bad), 0), Err(err), "{bad:?}");
        }
    }

    #[test]
    fn other_commands_arguments() {
        assert_eq!(epoch(&args(&["419001"])), Ok(419_001));
        assert_eq!(epoch(&args(&["2097151"])), Ok(fencing::MAX_EPOCH));
        for bad in ["0", "-1", "2097152"] {
            assert_eq!(
                epoch(&args(&[bad])),
                Err(LockError::EpochOutOfRange),
                "{bad}"
            );
        }
        assert_eq!(epoch(&args(&["x"])), Err(LockError::NotAnInteger));
        assert_eq!(
            extend(&args(&["o", "5"]), 0, &LIMITS),
            Ok((&b"o"[..], 5, None))
        );
        assert_eq!(
            extend(&args(&["o", "5", "token", "9"]), 0, &LIMITS),
            Ok((&b"o"[..], 5, Some(9)))
        );
        assert_eq!(
            extend(&args(&["o", "5", "TOKEN"]), 0, &LIMITS),
            Err(LockError::Syntax)
        );
        assert_eq!(release(&args(&["o"])), Ok((&b"o"[..], None)));
        assert_eq!(
            release(&args(&["o", "TOKEN", "7"])),
            Ok((&b"o"[..], Some(7)))
        );
        assert_eq!(
            release(&args(&["o", "TOKEN", "0"])),
            Err(LockError::TokenNotPositive)
        );
        assert_eq!(
            release(&args(&["o", "TOKENS", "7"])),
            Err(LockError::Syntax)
        );
        assert_eq!(
            guard(&args(&["7", "DECRBY", "k", "1"])).map(|(t, c)| (t, c.len())),
            Ok((7, 3))
        );
        assert_eq!(guard(&args(&["7"])).map(|(t, _)| t), Err(LockError::Syntax));
        assert_eq!(
            guard(&args(&["x", "GET", "k"])).map(|(t, _)| t),
            Err(LockError::NotAnInteger)
        );
        assert_eq!(
            acquire(&args(&["o", "10", "SESSION", "SHARED"]), 0, &LIMITS)
                .map(|a| (a.session, a.want)),
            Ok((true, Want::Shared))
        );
        assert_eq!(
            acquire(&args(&["o", "10", "SESSION", "session"]), 0, &LIMITS),
            Err(LockError::Syntax)
        );
        assert_eq!(
            extend(&args(&["", "5"]), 0, &LIMITS),
            Err(LockError::EmptyOwner)
        );
        assert_eq!(fence(&args(&[])), Ok(None));
        assert_eq!(fence(&args(&["12"])), Ok(Some(12)));
        assert_eq!(fence(&args(&["0"])), Err(LockError::TokenNotPositive));
        assert_eq!(info(&args(&[])), Ok(INFO_DEFAULT_COUNT));
        assert_eq!(info(&args(&["count", "3"])), Ok(3));
        assert_eq!(info(&args(&["COUNT", "-1"])), Err(LockError::CountNegative));
        assert_eq!(info(&args(&["LIMIT", "1"])), Err(LockError::Syntax));
        assert_eq!(
            apply(&args(&["o", "5", "PX", "100", "90"])),
            Ok(ApplyArgs {
                owner: b"o",
                token: 5,
                times: ApplyTimes::Left {
                    left: 100,
                    held: 90
                }
            })
        );
        assert_eq!(
            apply(&args(&["o", "5", "px", "0", "-1"])),
            Err(LockError::TimeNegative)
        );
        assert_eq!(
            apply(&args(&["o", "5", "100", "90"])).map(|a| a.times),
            Ok(ApplyTimes::Unix {
                deadline: 100,
                granted: Some(90)
            })
        );
        assert_eq!(
            apply(&args(&["o", "5", "100"])).map(|a| a.times),
            Ok(ApplyTimes::Unix {
                deadline: 100,
                granted: None
            })
        );
        assert_eq!(
            apply(&args(&["o", "5", "PX", "100"])),
            Err(LockError::NotAnInteger),
            "PX then one number is not the unix form"
        );
        assert_eq!(
            apply(&args(&["o", "9007199254740992", "100"])),
            Err(LockError::TokenAboveMax)
        );
        assert_eq!(
            apply(&args(&["o", "5", "0"])),
            Err(LockError::DeadlineNotPositive)
        );
    }

    #[test]
    fn module_arguments_follow_config_set_bounds() {
        let defaults = SETTINGS.each_ref().map(|s| s.default);
        assert_eq!(module_args::<&[u8]>(&[]), Ok(defaults));
        let [waiters, ttl, holders, owner, set_size, foreign, hot] = module_args(&args(&[
            "max-ttl",
            "5000",
            "LOCK.MAX-WAITERS",
            "7",
            "lock.max-owner-length",
            "1048576",
            "foreign-holds",
            "NO",
            "max-set-size",
            "3",
        ]))
        .unwrap();
        assert_eq!(
            (waiters, ttl, holders, owner, set_size, foreign, hot),
            (7, 5000, 10_000, 1 << 20, 3, 0, 10)
        );
        let refused = |words: &[&'static str]| module_args(&args(words)).unwrap_err().to_string();
        assert_eq!(
            refused(&["max-ttl", "0"]),
            "module argument 'max-ttl' ('0'): argument must be between 1 and 315360000000 inclusive"
        );
        assert_eq!(
            refused(&["max-waiters", "-1"]),
            "module argument 'max-waiters' ('-1'): argument must be between 1 and 100000000 inclusive"
        );
        assert_eq!(
            refused(&["max-holders", "010"]),
            "module argument 'max-holders' ('010'): argument couldn't be parsed into an integer"
        );
        assert_eq!(
            refused(&["foreign-holds", "1"]),
            "module argument 'foreign-holds' ('1'): argument must be 'yes' or 'no'"
        );
        assert!(refused(&["max-tll", "100"]).starts_with("unknown module argument 'max-tll'"));
        assert!(refused(&["lock.", "1"]).starts_with("unknown module argument 'lock.'"));
        assert_eq!(
            refused(&["max-ttl"]),
            "module argument 'max-ttl' has no value"
        );
        assert_eq!(
            refused(&["max-ttl", "1", "MAX-TTL", "2"]),
            "module argument 'max-ttl' is given twice"
        );
    }

    proptest! {
        #[test]
        fn module_arguments_accept_exactly_the_bounds(n in any::<i64>(), i in 0..SETTINGS.len()) {
            let setting = &SETTINGS[i];
            let value = n.to_string();
            let words: [&[u8]; 2] = [setting.name.as_bytes(), value.as_bytes()];
            let parsed = module_args(&words);
            let Kind::Integer { min, max } = setting.kind else {
                prop_assert!(parsed.is_err(), "a yes/no setting takes no integer");
                return Ok(());
            };
            prop_assert_eq!(parsed.is_ok(), (min..=max).contains(&n));
            if let Ok(values) = parsed {
                prop_assert_eq!(values[i], n);
            }
        }
    }
}
