//! What a loaded lock value must respect before it joins the keyspace, decided here so the
//! type's load callbacks in `ffi::data_type` only read and hand over.
//!
//! A token outside 1..=2^53-1 is always refused (the decoder refuses it: it would poison the
//! token source, see `fencing`). A value restored by a client (`RESTORE`, and `MIGRATE` into
//! this node) must also respect this server's `lock.max-owner-length`, `lock.max-ttl` and
//! `lock.max-holders`, as a grant would; values the server loads itself (RDB at start, AOF, a
//! full sync from the master, DEBUG RELOAD) are state it already accepted once, and keep their
//! leases even if the limits have been lowered since.

use crate::core::config::Limits;
use crate::core::fencing;
use crate::core::lock::{LockState, Millis, Token};

/// Who is loading a value.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Origin {
    /// The server's own data: RDB at start, AOF, a full sync, DEBUG RELOAD, a replica's stream.
    Server,
    /// A client's `RESTORE` (or a `MIGRATE` into this node).
    Client,
}

/// Whether `state`, loaded by `origin` at `now`, may join the keyspace under the settings in
/// force; the refusal's message otherwise (the server logs it and fails the load).
pub fn admit(state: &LockState, origin: Origin, now: Millis) -> Result<(), &'static str> {
    admit_within(state, origin, now, &Limits::current())
}

/// `admit` against the given limits.
pub fn admit_within(
    state: &LockState,
    origin: Origin,
    now: Millis,
    limits: &Limits,
) -> Result<(), &'static str> {
    if origin == Origin::Server {
        return Ok(());
    }
    if state
        .holds()
        .any(|(h, _)| h.owner.bytes().len() > limits.max_owner_length)
    {
        return Err("refusing a restored lock: an owner is longer than lock.max-owner-length");
    }
    if state.last_deadline().saturating_sub(now) > limits.max_ttl {
        return Err("refusing a restored lock: its lease ends later than lock.max-ttl from now");
    }
    if state.holds().count() > limits.max_holders {
        return Err("refusing a restored lock: it has more holders than lock.max-holders");
    }
    Ok(())
}

/// Whether the RDB's auxiliary token data, written with encoding `encver`, can be read here.
pub fn token_data_readable(encver: i32) -> Result<(), &'static str> {
    if encver > crate::core::codec::ENCODING_VERSION {
        return Err("refusing token data encoded by a newer redis-lock");
    }
    Ok(())
}

/// The last token handed out, from the RDB's auxiliary data: what the token source must never
/// go below, or why it is refused.
pub fn admit_last_token(last: Token) -> Result<Token, &'static str> {
    if last > fencing::MAX_TOKEN {
        return Err("refusing token data: the last token is above 2^53-1");
    }
    Ok(last)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::core::lock::{Holder, Permit};
    use crate::core::owner::Owner;

    const NOW: Millis = 1_000_000;

    fn limits() -> Limits {
        Limits {
            max_ttl: 60_000,
            max_owner_length: 8,
            max_waiters: 100,
            max_holders: 2,
            max_set_size: 4,
        }
    }

    fn holder(owner: &str, deadline: Millis) -> Holder {
        Holder {
            owner: Owner::new(owner.as_bytes()),
            token: 1,
            deadline,
            granted: NOW,
        }
    }

    fn shared(n: usize) -> LockState {
        LockState::Shared((0..n).map(|_| holder("reader", NOW + 1_000)).collect())
    }

    #[test]
    fn a_client_restore_respects_every_limit_at_its_edge() {
        let at_edge = LockState::Exclusive(holder("12345678", NOW + 60_000));
        assert_eq!(
            admit_within(&at_edge, Origin::Client, NOW, &limits()),
            Ok(())
        );
        assert_eq!(
            admit_within(&shared(2), Origin::Client, NOW, &limits()),
            Ok(())
        );
    }

    #[test]
    fn a_client_restore_past_a_limit_is_refused_with_the_limit_named() {
        let long_owner = LockState::Exclusive(holder("123456789", NOW + 1_000));
        let far_lease = LockState::Exclusive(holder("a", NOW + 60_001));
        let cases = [
            (long_owner, "lock.max-owner-length"),
            (far_lease, "lock.max-ttl"),
            (shared(3), "lock.max-holders"),
        ];
        for (state, limit) in cases {
            let why = admit_within(&state, Origin::Client, NOW, &limits()).unwrap_err();
            assert!(why.contains(limit), "{why}");
        }
    }

    #[test]
    fn the_servers_own_data_keeps_its_leases_whatever_the_limits() {
        let permits = LockState::Semaphore {
            limit: 5,
            holds: (0..5)
                .map(|_| Permit {
                    holder: holder("a-very-long-owner", NOW + 3_600_000),
                    n: 1,
                })
                .collect(),
        };
        assert_eq!(
            admit_within(&permits, Origin::Server, NOW, &limits()),
            Ok(())
        );
        assert!(admit_within(&permits, Origin::Client, NOW, &limits()).is_err());
    }

    #[test]
    fn an_expired_restore_is_within_the_ttl_limit() {
        let past = LockState::Exclusive(holder("a", NOW - 5_000));
        assert_eq!(admit_within(&past, Origin::Client, NOW, &limits()), Ok(()));
    }

    #[test]
    fn token_data_from_a_newer_encoding_or_above_2_53_is_refused() {
        let version = crate::core::codec::ENCODING_VERSION;
        assert_eq!(token_data_readable(version), Ok(()));
        assert!(token_data_readable(version + 1).is_err());
        assert_eq!(admit_last_token(42), Ok(42));
        assert_eq!(admit_last_token(fencing::MAX_TOKEN), Ok(fencing::MAX_TOKEN));
        assert!(admit_last_token(fencing::MAX_TOKEN + 1).is_err());
    }
}
