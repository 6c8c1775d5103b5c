//! Owners: how a holder's name is kept, and the ones the server generates for `*`.
//!
//! Most owners are UUIDs. A canonical (lowercase, hyphenated) UUID is kept as its 16 bytes
//! instead of 36 characters, so a held lock costs about what the `SET NX PX` string it replaces
//! does; rendering it gives back exactly the bytes the client sent. Anything else is kept as is.

use std::ops::Deref;

const UUID_LEN: usize = 36;
const HYPHENS: [usize; 4] = [8, 13, 18, 23];

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Owner {
    /// A canonical lowercase hyphenated UUID, as its 16 bytes.
    Uuid([u8; 16]),
    /// Any other binary-safe owner.
    Bytes(Box<[u8]>),
}

/// An owner's bytes, rendered on the stack for UUIDs.
pub enum OwnerBytes<'a> {
    Rendered([u8; UUID_LEN]),
    Borrowed(&'a [u8]),
}

impl Deref for OwnerBytes<'_> {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        match self {
            OwnerBytes::Rendered(b) => b,
            OwnerBytes::Borrowed(b) => b,
        }
    }
}

fn hex_value(c: u8) -> Option<u8> {
    match c {
        b'0'..=b'9' => Some(c - b'0'),
        b'a'..=b'f' => Some(c - b'a' + 10),
        _ => None,
    }
}

/// The 16 bytes of a canonical lowercase hyphenated UUID string, if it is one.
fn parse_uuid(s: &[u8]) -> Option<[u8; 16]> {
    if s.len() != UUID_LEN || HYPHENS.iter().any(|&i| s[i] != b'-') {
        return None;
    }
    let mut out = [0u8; 16];
    let mut digits = s
        .iter()
        .enumerate()
        .filter(|(i, _)| !HYPHENS.contains(i))
        .map(|(_, c)| *c);
    for byte in &mut out {
        let hi = hex_value(digits.next()?)?;
        let lo = hex_value(digits.next()?)?;
        *byte = hi << 4 | lo;
    }
    Some(out)
}

fn render_uuid(bytes: &[u8; 16]) -> [u8; UUID_LEN] {
    const HEX: &[u8; 16] = b"0123456789abcdef";
    let mut out = [b'-'; UUID_LEN];
    let mut at = 0;
    for b in bytes {
        while HYPHENS.contains(&at) {
            at += 1;
        }
        out[at] = HEX[usize::from(b >> 4)];
        out[at + 1] = HEX[usize::from(b & 0xf)];
        at += 2;
    }
    out
}

impl Owner {
    pub fn new(bytes: &[u8]) -> Self {
        match parse_uuid(bytes) {
            Some(uuid) => Owner::Uuid(uuid),
            None => Owner::Bytes(bytes.into()),
        }
    }

    /// Whether this is the owner named by `bytes` (byte for byte).
    pub fn matches(&self, bytes: &[u8]) -> bool {
        match self {
            Owner::Uuid(uuid) => parse_uuid(bytes).is_some_and(|other| other == *uuid),
            Owner::Bytes(own) => **own == *bytes,
        }
    }

    pub fn bytes(&self) -> OwnerBytes<'_> {
        match self {
            Owner::Uuid(uuid) => OwnerBytes::Rendered(render_uuid(uuid)),
            Owner::Bytes(own) => OwnerBytes::Borrowed(own),
        }
    }

    /// Heap bytes used beyond the `Owner` itself.
    pub fn heap_size(&self) -> usize {
        match self {
            Owner::Uuid(_) => 0,
            Owner::Bytes(own) => own.len(),
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
        for s in [
            &b"8D3E4F5A-1111-4222-8333-444455556666"[..], // uppercase: would not round-trip
            b"8d3e4f5a11114222833344445555666600000",
            b"8d3e4f5a-1111-4222-8333-44445555666g",
            b"worker-7",
            b"\x00\xff",
        ] {
            let o = Owner::new(s);
            assert!(matches!(o, Owner::Bytes(_)), "{s:?}");
            assert_eq!(&*o.bytes(), s);
            assert!(o.matches(s));
        }
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
        fn every_uuid_round_trips(bytes in any::<[u8; 16]>()) {
            let s = render_uuid(&bytes);
            let o = Owner::new(&s);
            prop_assert_eq!(o.clone(), Owner::Uuid(bytes));
            prop_assert_eq!(&*o.bytes(), &s[..]);
        }
    }
}
