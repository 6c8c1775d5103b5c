//! Lock sets (`LOCK.MACQUIRE`, `LOCK.MRELEASE`): several keys taken in one step or not at all.
//! Their arguments, and what an acquire decides at once from its keys' states. A set that
//! waits is queued and granted by `core::registry` (`join_set`, `grant_set`).

use crate::core::args::{self, AcquireArgs, Arg};
use crate::core::config::Limits;
use crate::core::error::LockError;
use crate::core::lock::{self, Acquire, LockState, Millis, Request, Token, Want};

/// `numkeys key [key ...]` and what follows: the keys (1 to `lock.max-set-size`, distinct)
/// and the arguments after them.
pub fn keys<'a, A: Arg>(args: &'a [A], limits: &Limits) -> Result<(&'a [A], &'a [A]), LockError> {
    let [numkeys, rest @ ..] = args else {
        return Err(LockError::Syntax);
    };
    let n = usize::try_from(args::integer(numkeys.bytes())?)
        .ok()
        .filter(|n| (1..=limits.max_set_size).contains(n))
        .ok_or(LockError::SetSize)?;
    if rest.len() < n {
        return Err(LockError::Syntax);
    }
    let (keys, after) = rest.split_at(n);
    let mut names: Vec<&[u8]> = keys.iter().map(Arg::bytes).collect();
    names.sort_unstable();
    if names.windows(2).any(|pair| pair[0] == pair[1]) {
        return Err(LockError::DuplicateKey);
    }
    Ok((keys, after))
}

/// Where the keys of `NAME numkeys key [key ...] ...` stand among `argc` arguments (the name
/// included), for Redis's routing and ACL checks: empty when numkeys is not a count of
/// arguments that are there (the command itself then answers with the error).
pub fn key_positions(numkeys: &[u8], argc: usize) -> std::ops::Range<usize> {
    let n = args::integer(numkeys)
        .ok()
        .and_then(|n| usize::try_from(n).ok())
        .unwrap_or(0);
    if n == 0 || n > argc.saturating_sub(2) {
        return 0..0;
    }
    2..2 + n
}

/// `LOCK.MACQUIRE numkeys key [key ...] owner ttl-ms [SHARED] [SESSION] [WAIT timeout-ms]`:
/// the keys and the acquire's arguments (every key in one mode; no semaphore permits).
pub fn acquire_args<'a, A: Arg>(
    args: &'a [A],
    now: Millis,
    limits: &Limits,
) -> Result<(&'a [A], AcquireArgs<'a>), LockError> {
    let (keys, rest) = keys(args, limits)?;
    let parsed = args::acquire(rest, now, limits)?;
    if matches!(parsed.want, Want::Permits { .. }) {
        return Err(LockError::SetOfPermits);
    }
    Ok((keys, parsed))
}

/// `LOCK.MRELEASE numkeys key [key ...] owner`: the keys and the owner.
pub fn release_args<'a, A: Arg>(
    args: &'a [A],
    limits: &Limits,
) -> Result<(&'a [A], &'a [u8]), LockError> {
    let (keys, rest) = keys(args, limits)?;
    let [owner] = rest else {
        return Err(LockError::Syntax);
    };
    Ok((keys, args::owner(owner.bytes())?))
}

/// One key of a set, as an acquire finds it.
#[derive(Clone, Debug)]
pub struct Member {
    pub state: Option<LockState>,
    /// Others wait in its queue.
    pub queued: bool,
    /// A plain string (another client's old-style lock) holds the name.
    pub foreign: bool,
}

/// What a set's acquire decides at once.
#[derive(Debug, PartialEq, Eq)]
pub enum SetAcquire {
    /// Every key is the caller's: granted, or renewed where it held it already (key order).
    Granted(Vec<Acquire>),
    /// Some key is not free for it (held, or others wait first): nothing changes. `own`: the
    /// owner holds some of the keys already (waiting would wait for itself).
    Busy { own: bool },
}

/// All or nothing: each key decides as `lock::acquire` would alone; the set is granted only if
/// every key is, with tokens issued in key order, and nothing is issued otherwise.
pub fn acquire(
    members: &[Member],
    req: &Request,
    now: Millis,
    max_holders: usize,
    mut issue_token: impl FnMut() -> Option<Token>,
) -> Result<SetAcquire, LockError> {
    let (mut busy, mut own) = (false, false);
    for m in members {
        if m.foreign {
            busy = true;
            continue;
        }
        // A dry run: the same decision the grant below makes, without spending a token.
        match lock::acquire(m.state.as_ref(), m.queued, req, now, max_holders, || {
            Some(Token::MAX)
        })? {
            Acquire::Busy => busy = true,
            Acquire::Renewed { .. } => own = true,
            Acquire::Granted { .. } => {}
        }
    }
    if busy {
        return Ok(SetAcquire::Busy { own });
    }
    let granted = members
        .iter()
        .map(|m| {
            lock::acquire(
                m.state.as_ref(),
                m.queued,
                req,
                now,
                max_holders,
                &mut issue_token,
            )
        })
        .collect::<Result<Vec<_>, _>>()?;
    Ok(SetAcquire::Granted(granted))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::core::lock::holder;

    fn limits(max_set_size: usize) -> Limits {
        Limits {
            max_ttl: 1_000_000,
            max_owner_length: 64,
            max_waiters: 10,
            max_holders: 10,
            max_set_size,
        }
    }

    fn words(s: &str) -> Vec<&[u8]> {
        s.split(' ').map(str::as_bytes).collect()
    }

    #[test]
    fn numkeys_counts_distinct_keys_within_the_bound() {
        let a = words("2 a b owner 100 WAIT 5");
        let (set, rest) = keys(&a, &limits(4)).unwrap();
        assert_eq!(set, &a[1..3]);
        assert_eq!(rest, &a[3..]);
        for (input, err) in [
            ("0 a owner 100", LockError::SetSize),
            ("5 a b c d e owner 100", LockError::SetSize),
            ("-1 a owner 100", LockError::SetSize),
            ("x a owner 100", LockError::NotAnInteger),
            ("3 a b", LockError::Syntax),
            ("3 a b a owner 100", LockError::DuplicateKey),
        ] {
            assert_eq!(keys(&words(input), &limits(4)).err(), Some(err), "{input}");
        }
    }

    #[test]
    fn key_positions_follow_numkeys() {
        assert_eq!(key_positions(b"2", 6), 2..4); // NAME 2 a b owner ttl
        assert_eq!(key_positions(b"4", 6), 2..6);
        for (numkeys, argc) in [(&b"5"[..], 6), (b"0", 6), (b"-1", 6), (b"x", 6), (b"1", 1)] {
            assert_eq!(key_positions(numkeys, argc), 0..0);
        }
    }

    #[test]
    fn a_set_takes_one_mode_and_no_permits() {
        let l = limits(4);
        let a = words("2 a b o 100 SHARED WAIT 0");
        let (set, parsed) = acquire_args(&a, 0, &l).unwrap();
        assert_eq!(set.len(), 2);
        assert_eq!((parsed.want, parsed.wait), (Want::Shared, Some(0)));
        assert_eq!(
            acquire_args(&words("1 a o 100 LIMIT 3"), 0, &l).err(),
            Some(LockError::SetOfPermits)
        );
        assert_eq!(
            release_args(&words("2 a b o"), &l).map(|(k, o)| (k.len(), o)),
            Ok((2, &b"o"[..]))
        );
        assert_eq!(
            release_args(&words("2 a b o extra"), &l).err(),
            Some(LockError::Syntax)
        );
    }

    fn free() -> Member {
        Member {
            state: None,
            queued: false,
            foreign: false,
        }
    }

    fn held_by(owner: &str) -> Member {
        Member {
            state: Some(LockState::Exclusive(holder(owner, 3, 1_000))),
            ..free()
        }
    }

    fn req(owner: &[u8]) -> Request<'_> {
        Request {
            owner,
            want: Want::Exclusive,
            ttl: 100,
        }
    }

    #[test]
    fn all_keys_or_none_and_no_token_spent_on_none() {
        let mut next = 10;
        let mut issue = || {
            next += 1;
            Some(next)
        };
        let got = acquire(&[free(), free()], &req(b"me"), 0, 10, &mut issue).unwrap();
        let SetAcquire::Granted(grants) = got else {
            panic!("{got:?}")
        };
        let tokens: Vec<Token> = grants
            .iter()
            .map(|g| match g {
                Acquire::Granted { token, .. } => *token,
                other => panic!("{other:?}"),
            })
            .collect();
        assert_eq!(tokens, [11, 12], "one token per key, in key order");
        for busy in [
            held_by("other"),
            Member {
                queued: true,
                ..free()
            },
            Member {
                foreign: true,
                ..free()
            },
        ] {
            let got = acquire(&[free(), busy], &req(b"me"), 0, 10, &mut issue);
            assert_eq!(got, Ok(SetAcquire::Busy { own: false }));
        }
        assert_eq!(
            acquire(
                &[held_by("me"), held_by("other")],
                &req(b"me"),
                0,
                10,
                &mut issue
            ),
            Ok(SetAcquire::Busy { own: true })
        );
        assert_eq!(issue(), Some(13), "nothing was issued for the sets refused");
    }

    #[test]
    fn a_set_the_owner_holds_in_part_is_renewed_there() {
        let got = acquire(&[held_by("me"), free()], &req(b"me"), 0, 10, || Some(20)).unwrap();
        let SetAcquire::Granted(grants) = got else {
            panic!("{got:?}")
        };
        assert!(matches!(grants[0], Acquire::Renewed { token: 3, .. }));
        assert!(matches!(grants[1], Acquire::Granted { token: 20, .. }));
    }
}
