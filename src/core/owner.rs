//! Owners: how a holder's name is kept, and the ones the server generates for `*`.
//!
//! Most owners are UUIDs. A canonical (lowercase, hyphenated) UUID is kept as its 16 bytes
//! instead of 36 characters, and so is a UUID written as 32 lowercase hex digits (redis-py's
//! `uuid1().hex`); owners up to 22 bytes are kept inside the value; so a held lock costs about
//! what the `SET NX PX` string it replaces does. Rendering gives back exactly the bytes the client
//! sent. Longer owners are kept on the heap as they are.

use std::ops::Deref;

const UUID_LEN: usize = 36;
const HEX_LEN: usize = 32;
/// The longest owner kept inside the value (the enum stays 24 bytes).
const INLINE_LEN: usize = 22;
const HYPHENS: [usize; 4] = [8, 13, 18, 23];

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Owner {
    /// A canonical lowercase hyphenated UUID, as its 16 bytes.
    Uuid([u8; 16]),
    /// 32 lowercase hex digits, as their 16 bytes.
    Hex([u8; 16]),
    /// A short owner (up to 22 bytes), kept inline: its bytes and their length.
    Short([u8; INLINE_LEN], u8),
    /// Any other binary-safe owner.
    Bytes(Box<[u8]>),
}

/// An owner's bytes, rendered on the stack for UUIDs.
pub enum OwnerBytes<'a> {
    Rendered([u8; UUID_LEN]),
    RenderedHex([u8; HEX_LEN]),
    Borrowed(&'a [u8]),
}

impl Deref for OwnerBytes<'_> {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        match self {
            OwnerBytes::Rendered(b) => b,
            OwnerBytes::RenderedHex(b) => b,
            OwnerBytes::Borrowed(b) => b,
        }
    }
}

/// Each byte's value as a lowercase hex digit, or `NOT_HEX` (a table: every acquire and release
/// of a UUID owner reads 32 digits).
const NOT_HEX: u8 = 0xff;
const HEX_VALUES: [u8; 256] = {
    let mut table = [NOT_HEX; 256];
    let mut c = 0;
    while c < 10 {
        table[b'0' as usize + c] = c as u8;
        c += 1;
    }
    let mut c = 0;
    while c < 6 {
        table[b'a' as usize + c] = 10 + c as u8;
        c += 1;
    }
    table
};
const HEX_DIGITS: &[u8; 16] = b"0123456789abcdef";

/// Where the 32 hex digits of a canonical UUID stand (around its hyphens).
const UUID_DIGITS: [usize; HEX_LEN] = {
    let mut at = [0usize; HEX_LEN];
    let (mut i, mut pos) = (0, 0);
    while i < HEX_LEN {
        if pos == HYPHENS[0] || pos == HYPHENS[1] || pos == HYPHENS[2] || pos == HYPHENS[3] {
            pos += 1;
        }
        at[i] = pos;
        i += 1;
        pos += 1;
    }
    at
};

/// The 16 bytes of a canonical lowercase hyphenated UUID string, if it is one.
fn parse_uuid(s: &[u8]) -> Option<[u8; 16]> {
    // As an array: its length is checked once, here.
    let s: &[u8; UUID_LEN] = s.try_into().ok()?;
    if HYPHENS.iter().any(|&i| s[i] != b'-') {
        return None;
    }
    hex_bytes(|i| s[UUID_DIGITS[i]])
}

/// The 16 bytes of 32 lowercase hex digits, if they are.
fn parse_hex(s: &[u8]) -> Option<[u8; 16]> {
    let s: &[u8; HEX_LEN] = s.try_into().ok()?;
    hex_bytes(|i| s[i])
}

/// The 16 bytes of the 32 digits `digit(0..32)`, if all are lowercase hex: decoded without a
/// branch per digit (an owner is parsed on every acquire), checked once at the end.
fn hex_bytes(digit: impl Fn(usize) -> u8) -> Option<[u8; 16]> {
    let mut out = [0u8; 16];
    let mut seen = 0u8;
    for (i, byte) in out.iter_mut().enumerate() {
        let (hi, lo) = (
            HEX_VALUES[usize::from(digit(2 * i))],
            HEX_VALUES[usize::from(digit(2 * i + 1))],
        );
        seen |= hi | lo;
        *byte = hi << 4 | lo;
    }
    // A digit's value fits in 4 bits; `NOT_HEX` does not.
    (seen & !0xf == 0).then_some(out)
}

fn render_hex(bytes: &[u8; 16]) -> [u8; HEX_LEN] {
    let mut out = [0u8; HEX_LEN];
    for (pair, b) in out.chunks_exact_mut(2).zip(bytes) {
        pair[0] = HEX_DIGITS[usize::from(b >> 4)];
        pair[1] = HEX_DIGITS[usize::from(b & 0xf)];
    }
    out
}

fn render_uuid(bytes: &[u8; 16]) -> [u8; UUID_LEN] {
    let mut out = [b'-'; UUID_LEN];
    for (b, at) in bytes.iter().zip(UUID_DIGITS.chunks_exact(2)) {
        out[at[0]] = HEX_DIGITS[usize::from(b >> 4)];
        out[at[1]] = HEX_DIGITS[usize::from(b & 0xf)];
    }
    out
}

impl Owner {
    pub fn new(bytes: &[u8]) -> Self {
        if let Some(uuid) = parse_uuid(bytes) {
            return Owner::Uuid(uuid);
        }
        if let Some(hex) = parse_hex(bytes) {
            return Owner::Hex(hex);
        }
        if bytes.len() <= INLINE_LEN {
            let mut inline = [0u8; INLINE_LEN];
            inline[..bytes.len()].copy_from_slice(bytes);
            return Owner::Short(inline, bytes.len() as u8);
        }
        Owner::Bytes(bytes.into())
    }

    /// Whether this is the owner named by `bytes` (byte for byte: a compact owner's rendering
    /// is the one string that parses to it, and rendering has no branch to mispredict).
    pub fn matches(&self, bytes: &[u8]) -> bool {
        match self {
            Owner::Uuid(uuid) => render_uuid(uuid) == bytes,
            Owner::Hex(hex) => render_hex(hex) == bytes,
            Owner::Short(..) | Owner::Bytes(_) => *self.bytes() == *bytes,
        }
    }

    pub fn bytes(&self) -> OwnerBytes<'_> {
        match self {
            Owner::Uuid(uuid) => OwnerBytes::Rendered(render_uuid(uuid)),
            Owner::Hex(hex) => OwnerBytes::RenderedHex(render_hex(hex)),
            Owner::Short(inline, len) => OwnerBytes::Borrowed(&inline[..usize::from(*len)]),
            Owner::Bytes(own) => OwnerBytes::Borrowed(own),
        }
    }

    /// Heap bytes used beyond the `Owner` itself.
    pub fn heap_size(&self) -> usize {
        match self {
            Owner::Bytes(own) => own.len(),
            _ => 0,
        }
    }
}

impl From<&[u8]> for Owner {
    fn from(bytes: &[u8]) -> Self {
        Owner::new(bytes)
    }
}

/// A fresh hyphenated UUID (version 4) made from 16 random bytes (the shell reads them from
/// the server's own random source).
pub fn uuid_from_random(bytes: [u8; 16]) -> String {
    uuid::Builder::from_random_bytes(bytes)
        .into_uuid()
        .hyphenated()
        .to_string()
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn canonical_uuids_are_compact_and_round_trip() {
        let s = b"8d3e4f5a-1111-4222-8333-444455556666";
        let o = Owner::new(s);
        assert!(matches!(o, Owner::Uuid(_)));
        assert_eq!(&*o.bytes(), s);
        assert!(o.matches(s));
        assert!(
            !o.matches(b"8D3E4F5A-1111-4222-8333-444455556666"),
            "byte for byte"
        );
        assert!(!o.matches(b"8d3e4f5a-1111-4222-8333-444455556667"));
    }

    #[test]
    fn everything_else_is_kept_verbatim() {
        for (s, inline) in [
            (&b"8D3E4F5A-1111-4222-8333-444455556666"[..], false), // uppercase: would not round-trip
            (b"8d3e4f5a11114222833344445555666600000", false),
            (b"8d3e4f5a-1111-4222-8333-44445555666g", false),
            (b"8D3E4F5A11114222833344445555666F", false), // uppercase hex
            (b"worker-7", true),
            (b"\x00\xff", true),
            (b"web-7.example:12345:14", true), // 22 bytes: the longest kept inline
            (b"web-7.example:12345:140", false),
        ] {
            let o = Owner::new(s);
            assert_eq!(matches!(o, Owner::Short(..)), inline, "{s:?}");
            assert!(matches!(o, Owner::Short(..) | Owner::Bytes(_)), "{s:?}");
            assert_eq!(&*o.bytes(), s);
            assert!(o.matches(s));
            assert_eq!(o.heap_size(), if inline { 0 } else { s.len() });
        }
    }

    #[test]
    fn hex_owners_are_compact_and_round_trip() {
        let s = b"8d3e4f5a11114222833344445555666f";
        let o = Owner::new(s);
        assert!(matches!(o, Owner::Hex(_)));
        assert_eq!(&*o.bytes(), s);
        assert!(o.matches(s));
        assert!(!o.matches(b"8d3e4f5a11114222833344445555666e"));
        assert!(!o.matches(b"8D3E4F5A11114222833344445555666F"));
    }

    #[test]
    fn holder_stays_small() {
        assert_eq!(std::mem::size_of::<Owner>(), 24);
    }

    proptest! {
        #[test]
        fn any_owner_round_trips_and_matches_only_itself(a in proptest::collection::vec(any::<u8>(), 1..48), b in proptest::collection::vec(any::<u8>(), 1..48)) {
            let o = Owner::new(&a);
            prop_assert_eq!(&*o.bytes(), &a[..]);
            prop_assert!(o.matches(&a));
            prop_assert_eq!(o.matches(&b), a == b);
        }

        #[test]
        fn a_compact_owner_matches_only_its_own_string(bytes in any::<[u8; 16]>(), at in 0..UUID_LEN, to in any::<u8>(), hex in any::<bool>()) {
            let own: Vec<u8> = if hex { render_hex(&bytes).to_vec() } else { render_uuid(&bytes).to_vec() };
            let o = Owner::new(&own);
            prop_assert!(matches!(o, Owner::Uuid(_) | Owner::Hex(_)));
            let mut other = own.clone();
            let at = at % other.len();
            other[at] = to;
            prop_assert_eq!(o.matches(&other), other == own);
            // What parses compact again is exactly what renders back the same.
            let again = Owner::new(&other);
            prop_assert_eq!(&*again.bytes(), &other[..]);
            prop_assert_eq!(matches!(again, Owner::Uuid(_) | Owner::Hex(_)),
                other.iter().enumerate().all(|(i, c)| if !hex && HYPHENS.contains(&i) { *c == b'-' } else { HEX_DIGITS.contains(c) }));
        }

        #[test]
        fn every_hex_owner_round_trips(bytes in any::<[u8; 16]>()) {
            let s = render_hex(&bytes);
            let o = Owner::new(&s);
            prop_assert_eq!(o.clone(), Owner::Hex(bytes));
            prop_assert_eq!(&*o.bytes(), &s[..]);
        }

        #[test]
        fn every_uuid_round_trips(bytes in any::<[u8; 16]>()) {
            let s = render_uuid(&bytes);
            let o = Owner::new(&s);
            prop_assert_eq!(o.clone(), Owner::Uuid(bytes));
            prop_assert_eq!(&*o.bytes(), &s[..]);
        }
    }
}
