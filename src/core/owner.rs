//! Owners: how a holder's name is kept, and the ones the server generates for `*`.
//!
//! An owner is kept as the bytes the client sent: inside the value up to 38 bytes (a UUID is
//! 36), on the heap beyond. Kept as given, an acquire copies it and a release compares it, with
//! nothing to parse or render: a UUID kept as its 16 bytes saved 16 bytes a lock but cost
//! about 480 instructions a cycle (callgrind), a quarter of the module's own.

/// The longest owner kept inside the value (the enum stays 40 bytes).
const INLINE_LEN: usize = 38;

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Owner {
    /// An owner up to 38 bytes, inside the value: its bytes and their length.
    Inline([u8; INLINE_LEN], u8),
    /// A longer owner, on the heap.
    Heap(Box<[u8]>),
}

impl Owner {
    pub fn new(bytes: &[u8]) -> Self {
        match u8::try_from(bytes.len()) {
            Ok(len) if bytes.len() <= INLINE_LEN => {
                let mut inline = [0u8; INLINE_LEN];
                inline[..bytes.len()].copy_from_slice(bytes);
                Owner::Inline(inline, len)
            }
            _ => Owner::Heap(bytes.into()),
        }
    }

    /// Whether this is the owner named by `bytes` (byte for byte).
    pub fn matches(&self, bytes: &[u8]) -> bool {
        self.bytes() == bytes
    }

    pub fn bytes(&self) -> &[u8] {
        match self {
            Owner::Inline(inline, len) => inline.get(..usize::from(*len)).unwrap_or(inline),
            Owner::Heap(own) => own,
        }
    }

    /// Heap bytes used beyond the `Owner` itself.
    pub fn heap_size(&self) -> usize {
        match self {
            Owner::Heap(own) => own.len(),
            Owner::Inline(..) => 0,
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
    fn owners_up_to_38_bytes_stay_inside_the_value() {
        for (s, inline) in [
            (&b"8d3e4f5a-1111-4222-8333-444455556666"[..], true),
            (b"8D3E4F5A-1111-4222-8333-444455556666", true),
            (b"8d3e4f5a11114222833344445555666f", true),
            (b"worker-7", true),
            (b"\x00\xff", true),
            (b"", true),
            (b"web-7.example.internal:12345:14:abcdef", true), // 38 bytes: the longest inline
            (b"web-7.example.internal:12345:140:abcdef", false),
        ] {
            let o = Owner::new(s);
            assert_eq!(matches!(o, Owner::Inline(..)), inline, "{s:?}");
            assert_eq!(o.bytes(), s);
            assert!(o.matches(s));
            assert_eq!(o.heap_size(), if inline { 0 } else { s.len() });
        }
    }

    #[test]
    fn matching_is_byte_for_byte() {
        let o = Owner::new(b"8d3e4f5a-1111-4222-8333-444455556666");
        assert!(!o.matches(b"8D3E4F5A-1111-4222-8333-444455556666"));
        assert!(!o.matches(b"8d3e4f5a-1111-4222-8333-44445555666"));
        assert!(!o.matches(b"8d3e4f5a-1111-4222-8333-4444555566660"));
    }

    #[test]
    fn an_owner_is_40_bytes() {
        assert_eq!(std::mem::size_of::<Owner>(), 40);
    }

    proptest! {
        #[test]
        fn any_owner_round_trips_and_matches_only_itself(a in proptest::collection::vec(any::<u8>(), 0..80), b in proptest::collection::vec(any::<u8>(), 0..80)) {
            let o = Owner::new(&a);
            prop_assert_eq!(o.bytes(), &a[..]);
            prop_assert!(o.matches(&a));
            prop_assert_eq!(o.matches(&b), a == b);
        }
    }
}
