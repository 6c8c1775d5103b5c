//! The one encoding of a lock's value. RDB and DUMP payloads, DEBUG DIGEST, the AOF rewrite and
//! replication all lay the holds out through here, in one order, with the encoding version in
//! one place:
//!
//! - version 4: kind (0 exclusive, 1 shared, 2 semaphore), limit (0 for locks), the number of
//!   holds, then per hold: owner, token, the lease's time left and the time held so far (ms,
//!   at the moment of writing), permits (1 for locks);
//! - version 3 (still loaded): the same with the deadline and grant time as unix ms;
//! - version 2 (still loaded): one exclusive hold: owner, token, deadline, grant time (unix);
//! - version 1 (still loaded): owner, token, deadline (the grant counts from the load).
//!
//! Leases run on the lease clock of the server that holds them (`ffi::clock`), which means
//! nothing to another process: times leave as durations and are counted again from the moment
//! they are read (a replica, a restart). The reader's lease then ends later than the writer's
//! by the time in between (replication lag, downtime): never earlier. Unix times of older
//! versions are read against the reader's wall clock, the only meaning they have.
//!
//! Replicas and the AOF get an exclusive hold as `LOCK.APPLY key owner token PX left-ms held-ms`
//! (readable; the older `... deadline-unix-ms [granted-unix-ms]` is still read) and any other
//! state as `LOCK.APPLYSTATE key payload`, the payload being this encoding in bytes
//! (`to_bytes`).

use std::ffi::CStr;

use crate::core::fencing;
use crate::core::lock::{Holder, LockState, Millis, Permit, Token};
use crate::core::owner::Owner;

/// Encoding of a lock value in RDB and DUMP payloads.
/// Version 1: owner, token, deadline. Version 2 adds the grant time (for LOCK.INFO `held`).
/// Version 3: shared holds and semaphores. Version 4: times as durations.
/// A newer version is refused (the load fails cleanly instead of misreading bytes).
pub const ENCODING_VERSION: i32 = 4;

/// The first version whose times are durations, not unix times.
const DURATIONS_SINCE: i32 = 4;

/// The most holds a stored value may have (`lock.max-holders` is at most this).
pub const MAX_HOLDS: u64 = 1 << 20;

/// The internal command that replicas and the AOF replay to set a holder, and its argument
/// format for `RedisModule_Replicate` / `EmitAOF`: key, then buffers (with their lengths) for the
/// owner and the decimal token, then `PX` and the decimal time left and time held. Numbers go as
/// text formatted here: the server's `l` format costs it an extra allocation and a conversion
/// per number.
pub const APPLY_COMMAND: &CStr = c"LOCK.APPLY";
pub const APPLY_FORMAT: &CStr = c"sbbcbb";
/// The word that says the times after it are durations.
pub const APPLY_DURATIONS: &CStr = c"PX";
/// The internal command for every other state, and its format: key, payload buffer.
pub const APPLY_STATE_COMMAND: &CStr = c"LOCK.APPLYSTATE";
pub const APPLY_STATE_FORMAT: &CStr = c"sb";

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

/// The clocks a value is read against: the lease clock, and the wall clock (only to read the
/// unix times of versions 1 to 3).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Clocks {
    pub now: Millis,
    pub wall: Millis,
}

impl Clocks {
    /// A unix time as a reading of the lease clock.
    pub fn from_unix(&self, unix_ms: Millis) -> Millis {
        self.now.saturating_add(unix_ms.saturating_sub(self.wall))
    }
}

/// A hold's time left at `now` (never negative: a lease that ran out is read as ending now).
pub fn time_left(holder: &Holder, now: Millis) -> Millis {
    holder.deadline.saturating_sub(now).max(0)
}

/// How long a hold has been held at `now` (never negative).
pub fn time_held(holder: &Holder, now: Millis) -> Millis {
    now.saturating_sub(holder.granted).max(0)
}

/// A token as the signed integer Redis's APIs carry (tokens stay below 2^53: exact).
pub fn token_i64(token: Token) -> i64 {
    i64::try_from(token).unwrap_or(i64::MAX)
}

const KIND_EXCLUSIVE: u64 = 0;
const KIND_SHARED: u64 = 1;
const KIND_SEMAPHORE: u64 = 2;

/// Write `state` at the current version, its times counted at `now`.
pub fn encode(state: &LockState, out: &mut impl Writer, now: Millis) {
    encode_with(state, out, |h, out| {
        out.write_signed(time_left(h, now));
        out.write_signed(time_held(h, now));
    });
}

/// The fields of `state`, with each hold's times written by `times` (none for a digest).
fn encode_with<W: Writer>(state: &LockState, out: &mut W, times: impl Fn(&Holder, &mut W)) {
    let (kind, limit) = match state {
        LockState::Exclusive(_) => (KIND_EXCLUSIVE, 0),
        LockState::Shared(_) => (KIND_SHARED, 0),
        LockState::Semaphore { limit, .. } => (KIND_SEMAPHORE, *limit),
    };
    out.write_unsigned(kind);
    out.write_unsigned(u64::from(limit));
    out.write_unsigned(state.holds().count() as u64);
    for (holder, permits) in state.holds() {
        out.write_bytes(holder.owner.bytes());
        out.write_unsigned(holder.token);
        times(holder, out);
        out.write_unsigned(u64::from(permits));
    }
}

/// Read one hold's owner, token, deadline and (from version 2) grant time.
fn decode_holder(input: &mut impl Reader, version: i32, at: Clocks) -> Result<Holder, Refused> {
    let owner = input.read_bytes().ok_or(Refused::Corrupt)?;
    let token = input.read_unsigned().ok_or(Refused::Corrupt)?;
    let first = input.read_signed().ok_or(Refused::Corrupt)?;
    let second = if version >= 2 {
        Some(input.read_signed().ok_or(Refused::Corrupt)?)
    } else {
        None
    };
    let (deadline, granted) = if version >= DURATIONS_SINCE {
        let held = second.unwrap_or(0);
        (
            at.now.saturating_add(first.max(0)),
            at.now.saturating_sub(held.max(0)),
        )
    } else {
        (
            at.from_unix(first),
            second.map_or(at.now, |g| at.from_unix(g)),
        )
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

/// Read a state written at `version`, at the clocks `at`; values of version 1 count their
/// grant from the reading.
pub fn decode(input: &mut impl Reader, version: i32, at: Clocks) -> Result<LockState, Refused> {
    if version > ENCODING_VERSION {
        return Err(Refused::NewerVersion);
    }
    if version < 3 {
        return decode_holder(input, version, at).map(LockState::Exclusive);
    }
    let kind = input.read_unsigned().ok_or(Refused::Corrupt)?;
    let limit = input.read_unsigned().ok_or(Refused::Corrupt)?;
    let count = input.read_unsigned().ok_or(Refused::Corrupt)?;
    if count == 0 || count > MAX_HOLDS || (kind == KIND_EXCLUSIVE && count != 1) {
        return Err(Refused::Corrupt);
    }
    let limit = match kind {
        KIND_SEMAPHORE => u32::try_from(limit)
            .ok()
            .filter(|l| *l > 0)
            .ok_or(Refused::Corrupt)?,
        KIND_EXCLUSIVE | KIND_SHARED if limit == 0 => 0,
        _ => return Err(Refused::Corrupt),
    };
    let mut holds = Vec::new();
    let mut in_use: u64 = 0;
    for _ in 0..count {
        let holder = decode_holder(input, version, at)?;
        let permits = input.read_unsigned().ok_or(Refused::Corrupt)?;
        let valid = match kind {
            KIND_SEMAPHORE => (1..=u64::from(limit)).contains(&permits),
            _ => permits == 1,
        };
        in_use = in_use.saturating_add(permits);
        if !valid || (kind == KIND_SEMAPHORE && in_use > u64::from(limit)) {
            return Err(Refused::Corrupt);
        }
        holds.push(Permit {
            holder,
            n: permits as u32,
        });
    }
    Ok(match kind {
        KIND_EXCLUSIVE => LockState::Exclusive(holds.remove(0).holder),
        KIND_SHARED => LockState::Shared(holds.into_iter().map(|p| p.holder).collect()),
        _ => LockState::Semaphore { limit, holds },
    })
}

/// Feed `state` to a digest (integers as the digest takes them: signed). Times stay out: each
/// server counts a lease on its own clock, so a master and its replica differ there while
/// holding the same locks.
pub fn digest(state: &LockState, out: &mut impl Writer) {
    let mut signed = Signed(out);
    encode_with(state, &mut signed, |_, _| {});
}

/// A writer that passes unsigned integers on as signed ones (tokens and counts stay below 2^63).
struct Signed<'a, W>(&'a mut W);

impl<W: Writer> Writer for Signed<'_, W> {
    fn write_bytes(&mut self, bytes: &[u8]) {
        self.0.write_bytes(bytes);
    }
    fn write_unsigned(&mut self, value: u64) {
        self.0.write_signed(token_i64(value));
    }
    fn write_signed(&mut self, value: i64) {
        self.0.write_signed(value);
    }
}

/// `state` as bytes at `now`: a version byte, then the fields (lengths and integers
/// little-endian).
pub fn to_bytes(state: &LockState, now: Millis) -> Vec<u8> {
    let mut out = Bytes(vec![ENCODING_VERSION as u8]);
    encode(state, &mut out, now);
    out.0
}

/// Read `to_bytes` output back (any trailing byte is corruption).
pub fn from_bytes(bytes: &[u8], at: Clocks) -> Result<LockState, Refused> {
    let (&version, rest) = bytes.split_first().ok_or(Refused::Corrupt)?;
    let mut input = BytesReader(rest);
    let state = decode(&mut input, i32::from(version), at)?;
    if !input.0.is_empty() {
        return Err(Refused::Corrupt);
    }
    Ok(state)
}

struct Bytes(Vec<u8>);

impl Writer for Bytes {
    fn write_bytes(&mut self, bytes: &[u8]) {
        self.0
            .extend_from_slice(&(bytes.len() as u64).to_le_bytes());
        self.0.extend_from_slice(bytes);
    }
    fn write_unsigned(&mut self, value: u64) {
        self.0.extend_from_slice(&value.to_le_bytes());
    }
    fn write_signed(&mut self, value: i64) {
        self.0.extend_from_slice(&value.to_le_bytes());
    }
}

struct BytesReader<'a>(&'a [u8]);

impl BytesReader<'_> {
    fn take(&mut self, n: usize) -> Option<&[u8]> {
        if self.0.len() < n {
            return None;
        }
        let (head, rest) = self.0.split_at(n);
        self.0 = rest;
        Some(head)
    }
    fn word(&mut self) -> Option<[u8; 8]> {
        self.take(8)?.try_into().ok()
    }
}

impl Reader for BytesReader<'_> {
    fn read_bytes(&mut self) -> Option<Vec<u8>> {
        let len = usize::try_from(u64::from_le_bytes(self.word()?)).ok()?;
        self.take(len).map(<[u8]>::to_vec)
    }
    fn read_unsigned(&mut self) -> Option<u64> {
        self.word().map(u64::from_le_bytes)
    }
    fn read_signed(&mut self) -> Option<i64> {
        self.word().map(i64::from_le_bytes)
    }
}

/// The arguments of `LOCK.APPLY key ...` after the key, in `APPLY_FORMAT` order (`PX` between
/// the token and the times).
pub struct ApplyRecord<'a> {
    pub owner: &'a [u8],
    pub token: Decimal,
    pub left: Decimal,
    pub held: Decimal,
}

/// `holder` as `LOCK.APPLY` arguments, its times counted at `now`.
pub fn apply_record(holder: &Holder, now: Millis) -> ApplyRecord<'_> {
    ApplyRecord {
        owner: holder.owner.bytes(),
        token: Decimal::of(token_i64(holder.token)),
        left: Decimal::of(time_left(holder, now)),
        held: Decimal::of(time_held(holder, now)),
    }
}

/// An integer as decimal text, on the stack (what `LOCK.APPLY` parses back).
pub struct Decimal {
    text: [u8; 20],
    start: usize,
}

impl Decimal {
    pub fn of(value: i64) -> Self {
        // Two digits per division: the server does this for every replicated number.
        const PAIRS: &[u8; 200] = b"0001020304050607080910111213141516171819\
            2021222324252627282930313233343536373839\
            4041424344454647484950515253545556575859\
            6061626364656667686970717273747576777879\
            8081828384858687888990919293949596979899";
        let mut text = [0u8; 20]; // i64::MIN is 20 characters
        let mut start = text.len();
        let mut rest = value.unsigned_abs();
        while rest >= 100 {
            let pair = usize::try_from(rest % 100).unwrap_or(0) * 2;
            rest /= 100;
            start -= 2;
            text[start..start + 2].copy_from_slice(&PAIRS[pair..pair + 2]);
        }
        if rest >= 10 {
            let pair = usize::try_from(rest).unwrap_or(0) * 2;
            start -= 2;
            text[start..start + 2].copy_from_slice(&PAIRS[pair..pair + 2]);
        } else {
            start -= 1;
            text[start] = b'0' + rest as u8;
        }
        if value < 0 {
            start -= 1;
            text[start] = b'-';
        }
        Self { text, start }
    }

    pub fn as_bytes(&self) -> &[u8] {
        &self.text[self.start..]
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

    /// The lease clock when the test states are written.
    const NOW: Millis = 1 << 40;

    fn at(now: Millis) -> Clocks {
        Clocks {
            now,
            wall: now + 1_700_000_000_000,
        }
    }

    /// A hold as the module keeps one: granted at or before now, ending at or after it.
    fn holder() -> impl Strategy<Value = Holder> {
        (
            prop_oneof![
                proptest::collection::vec(any::<u8>(), 1..64),
                Just(b"8d3e4f5a-1111-2222-3333-444455556666".to_vec()),
            ],
            1..=fencing::MAX_TOKEN,
            0..(10i64 << 40),
            0..(1i64 << 40),
        )
            .prop_map(|(owner, token, left, held)| Holder {
                owner: Owner::new(&owner),
                token,
                deadline: NOW + left,
                granted: NOW - held,
            })
    }

    fn state() -> impl Strategy<Value = LockState> {
        prop_oneof![
            holder().prop_map(LockState::Exclusive),
            proptest::collection::vec(holder(), 1..5).prop_map(LockState::Shared),
            proptest::collection::vec((holder(), 1u32..3), 1..5).prop_map(|holds| {
                let limit = holds.iter().map(|(_, n)| n).sum::<u32>() + 1;
                LockState::Semaphore {
                    limit,
                    holds: holds
                        .into_iter()
                        .map(|(holder, n)| Permit { holder, n })
                        .collect(),
                }
            }),
        ]
    }

    proptest! {
        #[test]
        fn every_state_round_trips(s in state()) {
            let mut stream = Fields::default();
            encode(&s, &mut stream, NOW);
            prop_assert_eq!(decode(&mut stream, ENCODING_VERSION, at(NOW)), Ok(s.clone()));
            prop_assert!(stream.0.is_empty());
            prop_assert_eq!(from_bytes(&to_bytes(&s, NOW), at(NOW)), Ok(s));
        }

        /// Read later (a replica, a restart), every lease has as long left as when it was
        /// written, and every hold was held as long: the times count from the reading.
        #[test]
        fn times_count_again_from_the_reading(s in state(), later in 0..(1i64 << 40)) {
            let read = from_bytes(&to_bytes(&s, NOW), at(NOW + later)).unwrap();
            for ((a, _), (b, _)) in s.holds().zip(read.holds()) {
                prop_assert_eq!(b.deadline - (NOW + later), a.deadline - NOW);
                prop_assert_eq!((NOW + later) - b.granted, NOW - a.granted);
            }
        }

        #[test]
        fn the_replicated_record_carries_every_field(h in holder()) {
            let r = apply_record(&h, NOW);
            prop_assert_eq!(r.owner, h.owner.bytes());
            let text = |b: &[u8]| String::from_utf8_lossy(b).into_owned();
            prop_assert_eq!(text(r.token.as_bytes()), token_i64(h.token).to_string());
            prop_assert_eq!(text(r.left.as_bytes()), (h.deadline - NOW).to_string());
            prop_assert_eq!(text(r.held.as_bytes()), (NOW - h.granted).to_string());
        }

        #[test]
        fn decimals_read_as_redis_writes_them(v in any::<i64>()) {
            let expected = v.to_string();
            let decimal = Decimal::of(v);
            prop_assert_eq!(decimal.as_bytes(), expected.as_bytes());
        }

        #[test]
        fn damaged_bytes_never_panic(s in state(), cut in any::<usize>(), flip in any::<(usize, u8)>()) {
            let bytes = to_bytes(&s, NOW);
            let _ = from_bytes(&bytes[..cut % (bytes.len() + 1)], at(NOW));
            let mut damaged = bytes.clone();
            let pos = flip.0 % damaged.len();
            damaged[pos] ^= flip.1;
            let _ = from_bytes(&damaged, at(NOW));
        }
    }

    /// Unix times (versions 1 to 3) are read against the reader's wall clock.
    const WALL: Clocks = Clocks {
        now: 50,
        wall: 1_700_000_001_000,
    };

    #[test]
    fn version_2_loads_as_one_exclusive_hold() {
        let mut stream = Fields::default();
        stream.write_bytes(b"o");
        stream.write_unsigned(5);
        stream.write_signed(1_700_000_001_100);
        stream.write_signed(1_700_000_000_990);
        let s = decode(&mut stream, 2, WALL).unwrap();
        assert_eq!(
            s,
            LockState::Exclusive(Holder {
                owner: Owner::new(b"o"),
                token: 5,
                deadline: 150,
                granted: 40
            })
        );
    }

    #[test]
    fn version_1_counts_the_grant_from_the_load() {
        let mut stream = Fields::default();
        stream.write_bytes(b"o");
        stream.write_unsigned(5);
        stream.write_signed(1_700_000_001_100);
        let Ok(LockState::Exclusive(h)) = decode(&mut stream, 1, WALL) else {
            panic!("version 1 is one exclusive hold")
        };
        assert_eq!((h.token, h.deadline, h.granted), (5, 150, 50));
    }

    #[test]
    fn version_3_reads_unix_times_and_version_4_durations() {
        let write = |version_4: bool| {
            let mut s = Fields::default();
            s.write_unsigned(1);
            s.write_unsigned(0);
            s.write_unsigned(1);
            s.write_bytes(b"o");
            s.write_unsigned(5);
            if version_4 {
                s.write_signed(100);
                s.write_signed(10);
            } else {
                s.write_signed(1_700_000_001_100);
                s.write_signed(1_700_000_000_990);
            }
            s.write_unsigned(1);
            s
        };
        for (version, mut stream) in [(3, write(false)), (4, write(true))] {
            let Ok(LockState::Shared(holds)) = decode(&mut stream, version, WALL) else {
                panic!("one shared hold")
            };
            assert_eq!((holds[0].deadline, holds[0].granted), (150, 40));
        }
    }

    #[test]
    fn leases_that_ran_out_are_written_as_ending_now() {
        let h = Holder {
            owner: Owner::new(b"o"),
            token: 1,
            deadline: NOW - 5,
            granted: NOW + 5,
        };
        let r = apply_record(&h, NOW);
        assert_eq!(
            (r.left.as_bytes(), r.held.as_bytes()),
            (&b"0"[..], &b"0"[..])
        );
    }

    #[test]
    fn digests_leave_the_times_out() {
        let mut a = Fields::default();
        let mut b = Fields::default();
        let h = |deadline| Holder {
            owner: Owner::new(b"o"),
            token: 1,
            deadline,
            granted: 0,
        };
        digest(&LockState::Exclusive(h(10)), &mut a);
        digest(&LockState::Exclusive(h(99)), &mut b);
        assert_eq!(a.0, b.0);
    }

    #[test]
    fn refuses_what_it_cannot_trust() {
        let write = |kind: u64, limit: u64, holds: &[(&[u8], u64, u64)]| {
            let mut s = Fields::default();
            s.write_unsigned(kind);
            s.write_unsigned(limit);
            s.write_unsigned(holds.len() as u64);
            for (owner, token, permits) in holds {
                s.write_bytes(owner);
                s.write_unsigned(*token);
                s.write_signed(1);
                s.write_signed(1);
                s.write_unsigned(*permits);
            }
            s
        };
        assert_eq!(
            decode(&mut write(0, 0, &[(b"o", 1, 1)]), 5, WALL),
            Err(Refused::NewerVersion)
        );
        assert_eq!(
            decode(&mut write(0, 0, &[(b"", 1, 1)]), 3, WALL),
            Err(Refused::Corrupt)
        );
        assert_eq!(
            decode(&mut write(0, 0, &[(b"o", 0, 1)]), 3, WALL),
            Err(Refused::TokenOutOfRange)
        );
        assert_eq!(
            decode(
                &mut write(0, 0, &[(b"o", fencing::MAX_TOKEN + 1, 1)]),
                3,
                WALL
            ),
            Err(Refused::TokenOutOfRange)
        );
        assert_eq!(
            decode(&mut write(0, 0, &[(b"a", 1, 1), (b"b", 2, 1)]), 3, WALL),
            Err(Refused::Corrupt),
            "two exclusive holds"
        );
        assert_eq!(
            decode(&mut write(1, 0, &[]), 3, WALL),
            Err(Refused::Corrupt),
            "no holds"
        );
        assert_eq!(
            decode(&mut write(2, 2, &[(b"a", 1, 2), (b"b", 2, 1)]), 3, WALL),
            Err(Refused::Corrupt),
            "over the limit"
        );
        assert_eq!(
            decode(&mut write(2, 0, &[(b"a", 1, 1)]), 3, WALL),
            Err(Refused::Corrupt),
            "no permits"
        );
        assert_eq!(
            decode(&mut write(3, 0, &[(b"a", 1, 1)]), 3, WALL),
            Err(Refused::Corrupt),
            "unknown kind"
        );
        let mut truncated = write(1, 0, &[(b"a", 1, 1)]);
        truncated.0.pop_back();
        assert_eq!(decode(&mut truncated, 3, WALL), Err(Refused::Corrupt));
        assert_eq!(from_bytes(&[], WALL), Err(Refused::Corrupt));
    }
}
