//! The one encoding of a lock's value. RDB and DUMP payloads, DEBUG DIGEST, the AOF rewrite and
//! replication all lay the holder's fields out through here, in one order (owner, token,
//! deadline, grant time), with the encoding version in one place.

use std::ffi::CStr;

use crate::core::fencing;
use crate::core::lock::{Holder, Millis, Token};
use crate::core::owner::{Owner, OwnerBytes};

/// Encoding of a lock value in RDB and DUMP payloads.
/// Version 1: owner, token, deadline. Version 2 adds the grant time (for LOCK.INFO `held`).
/// A newer version is refused (the load fails cleanly instead of misreading bytes).
pub const ENCODING_VERSION: i32 = 2;

/// The internal command that replicas and the AOF replay to set a holder, and its argument
/// format for `RedisModule_Replicate` / `EmitAOF`: key, owner buffer, token, deadline, grant time.
pub const APPLY_COMMAND: &CStr = c"LOCK.APPLY";
pub const APPLY_FORMAT: &CStr = c"sblll";

/// Where a value's fields go: an RDB stream, a digest.
pub trait Writer {
    fn write_bytes(&mut self, bytes: &[u8]);
    fn write_unsigned(&mut self, value: u64);
    fn write_signed(&mut self, value: i64);
}

/// Where a value's fields come from. Each read fails on a truncated or corrupt stream.
pub trait Reader {
    fn read_bytes(&mut self) -> Option<Vec<u8>>;
    fn read_unsigned(&mut self) -> Option<u64>;
    fn read_signed(&mut self) -> Option<i64>;
}

/// Why a stored value is refused.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Refused {
    NewerVersion,
    Corrupt,
    TokenOutOfRange,
}

impl Refused {
    pub const fn message(self) -> &'static str {
        match self {
            Refused::NewerVersion => "refusing a lock value encoded by a newer redis-lock",
            Refused::Corrupt => "refusing a lock value: truncated or corrupt",
            Refused::TokenOutOfRange => "refusing a lock value: its token is outside 1..=2^53-1",
        }
    }
}

/// A token as the signed integer Redis's APIs carry (tokens stay below 2^53: exact).
pub fn token_i64(token: Token) -> i64 {
    i64::try_from(token).unwrap_or(i64::MAX)
}

/// Write `holder` at the current version.
pub fn encode(holder: &Holder, out: &mut impl Writer) {
    out.write_bytes(&holder.owner.bytes());
    out.write_unsigned(holder.token);
    out.write_signed(holder.deadline);
    out.write_signed(holder.granted);
}

/// Read a holder written at `version`; values of version 1 count their grant from `now`.
pub fn decode(input: &mut impl Reader, version: i32, now: Millis) -> Result<Holder, Refused> {
    if version > ENCODING_VERSION {
        return Err(Refused::NewerVersion);
    }
    let owner = input.read_bytes().ok_or(Refused::Corrupt)?;
    let token = input.read_unsigned().ok_or(Refused::Corrupt)?;
    let deadline = input.read_signed().ok_or(Refused::Corrupt)?;
    let granted = if version >= 2 {
        input.read_signed().ok_or(Refused::Corrupt)?
    } else {
        now
    };
    if owner.is_empty() {
        return Err(Refused::Corrupt);
    }
    if !fencing::in_range(token) {
        return Err(Refused::TokenOutOfRange);
    }
    Ok(Holder {
        owner: Owner::new(&owner),
        token,
        deadline,
        granted,
    })
}

/// Feed `holder` to a digest, which takes integers as signed.
pub fn digest(holder: &Holder, out: &mut impl Writer) {
    out.write_bytes(&holder.owner.bytes());
    out.write_signed(token_i64(holder.token));
    out.write_signed(holder.deadline);
    out.write_signed(holder.granted);
}

/// The arguments of `LOCK.APPLY key ...` after the key, in `APPLY_FORMAT` order.
pub struct ApplyRecord<'a> {
    pub owner: OwnerBytes<'a>,
    pub token: i64,
    pub deadline: i64,
    pub granted: i64,
}

pub fn apply_record(holder: &Holder) -> ApplyRecord<'_> {
    ApplyRecord {
        owner: holder.owner.bytes(),
        token: token_i64(holder.token),
        deadline: holder.deadline,
        granted: holder.granted,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// An in-memory stream of fields.
    #[derive(Debug, Default)]
    struct Fields(std::collections::VecDeque<Field>);

    #[derive(Debug, Clone, PartialEq)]
    enum Field {
        Bytes(Vec<u8>),
        Unsigned(u64),
        Signed(i64),
    }

    impl Writer for Fields {
        fn write_bytes(&mut self, bytes: &[u8]) {
            self.0.push_back(Field::Bytes(bytes.to_vec()));
        }
        fn write_unsigned(&mut self, value: u64) {
            self.0.push_back(Field::Unsigned(value));
        }
        fn write_signed(&mut self, value: i64) {
            self.0.push_back(Field::Signed(value));
        }
    }

    impl Reader for Fields {
        fn read_bytes(&mut self) -> Option<Vec<u8>> {
            match self.0.pop_front()? {
                Field::Bytes(b) => Some(b),
                _ => None,
            }
        }
        fn read_unsigned(&mut self) -> Option<u64> {
            match self.0.pop_front()? {
                Field::Unsigned(v) => Some(v),
                _ => None,
            }
        }
        fn read_signed(&mut self) -> Option<i64> {
            match self.0.pop_front()? {
                Field::Signed(v) => Some(v),
                _ => None,
            }
        }
    }

    fn holder() -> impl Strategy<Value = Holder> {
        (
            prop_oneof![
                proptest::collection::vec(any::<u8>(), 1..64),
                Just(b"8d3e4f5a-1111-2222-3333-444455556666".to_vec()),
            ],
            1..=fencing::MAX_TOKEN,
            any::<i64>(),
            any::<i64>(),
        )
            .prop_map(|(owner, token, deadline, granted)| Holder {
                owner: Owner::new(&owner),
                token,
                deadline,
                granted,
            })
    }

    proptest! {
        #[test]
        fn every_holder_round_trips(h in holder()) {
            let mut stream = Fields::default();
            encode(&h, &mut stream);
            prop_assert_eq!(decode(&mut stream, ENCODING_VERSION, 0), Ok(h));
            prop_assert!(stream.0.is_empty());
        }

        #[test]
        fn the_replicated_record_carries_every_field(h in holder()) {
            let r = apply_record(&h);
            prop_assert_eq!(&*r.owner, &*h.owner.bytes());
            prop_assert_eq!(u64::try_from(r.token).ok(), Some(h.token));
            prop_assert_eq!((r.deadline, r.granted), (h.deadline, h.granted));
        }
    }

    #[test]
    fn version_1_counts_the_grant_from_the_load() {
        let mut stream = Fields::default();
        stream.write_bytes(b"o");
        stream.write_unsigned(5);
        stream.write_signed(100);
        let h = decode(&mut stream, 1, 42).unwrap();
        assert_eq!((h.token, h.deadline, h.granted), (5, 100, 42));
    }

    #[test]
    fn refuses_what_it_cannot_trust() {
        let write = |owner: &[u8], token: u64| {
            let mut s = Fields::default();
            s.write_bytes(owner);
            s.write_unsigned(token);
            s.write_signed(1);
            s.write_signed(1);
            s
        };
        assert_eq!(
            decode(&mut write(b"o", 1), 3, 0),
            Err(Refused::NewerVersion)
        );
        assert_eq!(decode(&mut write(b"", 1), 2, 0), Err(Refused::Corrupt));
        assert_eq!(
            decode(&mut write(b"o", 0), 2, 0),
            Err(Refused::TokenOutOfRange)
        );
        assert_eq!(
            decode(&mut write(b"o", fencing::MAX_TOKEN + 1), 2, 0),
            Err(Refused::TokenOutOfRange)
        );
        let mut truncated = write(b"o", 1);
        truncated.0.pop_back();
        assert_eq!(decode(&mut truncated, 2, 0), Err(Refused::Corrupt));
    }
}
