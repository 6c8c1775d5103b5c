//! A lock value as the keyspace keeps it: its holds, and what the module needs to end its
//! leases on time without a table by name: when it is due, its place in the lease heap
//! (`lease_heap`), and the db and key name it was watched under (a name up to 14 bytes inside
//! the value, a longer one behind one pointer). 96 bytes in all, one allocation for most locks.

use std::sync::atomic::{AtomicI32, AtomicU32, Ordering};

use crate::core::lock::{LockState, Millis};

/// The longest key name kept inside the value (the name stays 16 bytes).
const INLINE_NAME: usize = 14;

/// A key name, inside the value when short.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum KeyName {
    Short {
        len: u8,
        bytes: [u8; INLINE_NAME],
    },
    /// A thin pointer, so that the name takes 16 bytes either way.
    Long(Box<Box<[u8]>>),
}

impl KeyName {
    pub fn new(name: &[u8]) -> Self {
        match u8::try_from(name.len()) {
            Ok(len) if name.len() <= INLINE_NAME => {
                let mut bytes = [0; INLINE_NAME];
                bytes[..name.len()].copy_from_slice(name);
                KeyName::Short { len, bytes }
            }
            _ => KeyName::Long(Box::new(name.into())),
        }
    }

    pub fn bytes(&self) -> &[u8] {
        match self {
            KeyName::Short { len, bytes } => bytes.get(..usize::from(*len)).unwrap_or(bytes),
            KeyName::Long(name) => name,
        }
    }

    /// Bytes on the heap beyond the name itself (MEMORY USAGE).
    pub fn heap_size(&self) -> usize {
        match self {
            KeyName::Short { .. } => 0,
            KeyName::Long(name) => std::mem::size_of::<Box<[u8]>>() + name.len(),
        }
    }
}

/// Not in the lease heap.
const NOWHERE: u32 = u32::MAX;

/// Where the module watches a value's leases from. The place and the db are atomics: the
/// heap moves other values' places, and the server may free a value on a lazy-free thread,
/// which reads its place to know whether the heap still holds it.
#[derive(Debug)]
pub struct Lease {
    /// When the lock needs its next look (its first deadline), on the lease clock.
    pub due: Millis,
    place: AtomicU32,
    db: AtomicI32,
    name: KeyName,
}

impl Lease {
    fn new() -> Self {
        Self {
            due: 0,
            place: AtomicU32::new(NOWHERE),
            db: AtomicI32::new(0),
            name: KeyName::Short {
                len: 0,
                bytes: [0; INLINE_NAME],
            },
        }
    }

    /// Its index in the lease heap, if it is in it.
    pub fn place(&self) -> Option<usize> {
        match self.place.load(Ordering::Relaxed) {
            NOWHERE => None,
            at => usize::try_from(at).ok(),
        }
    }

    /// A heap of 4 billion locks (320 GB of values) is out of reach; a place past that would
    /// read as out of the heap, and the heap would skip a removal, never free twice.
    pub fn set_place(&self, at: Option<usize>) {
        let at = at.and_then(|at| u32::try_from(at).ok()).unwrap_or(NOWHERE);
        self.place.store(at, Ordering::Relaxed);
    }

    pub fn db(&self) -> i32 {
        self.db.load(Ordering::Relaxed)
    }

    /// SWAPDB moved the value to another db.
    pub fn set_db(&self, db: i32) {
        self.db.store(db, Ordering::Relaxed);
    }

    pub fn name(&self) -> &[u8] {
        self.name.bytes()
    }

    /// Where the value sits now (it is watched from here on).
    pub fn locate(&mut self, db: i32, name: &[u8]) {
        self.set_db(db);
        if self.name.bytes() != name {
            self.name = KeyName::new(name);
        }
    }
}

/// The value of a `redislock` key.
#[derive(Debug)]
pub struct LockValue {
    pub state: LockState,
    pub lease: Lease,
}

impl LockValue {
    /// A value not yet watched anywhere.
    pub fn new(state: LockState) -> Self {
        Self {
            state,
            lease: Lease::new(),
        }
    }

    /// The bytes the value takes (MEMORY USAGE).
    pub fn heap_size(&self) -> usize {
        std::mem::size_of::<LockValue>() - std::mem::size_of::<LockState>()
            + self.state.heap_size()
            + self.lease.name.heap_size()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::core::lock::Holder;
    use crate::core::owner::Owner;

    #[test]
    fn a_value_with_a_short_name_is_one_96_byte_allocation() {
        assert_eq!(std::mem::size_of::<KeyName>(), 16);
        assert_eq!(std::mem::size_of::<LockValue>(), 96);
    }

    #[test]
    fn names_come_back_as_they_went_in_whatever_their_length() {
        for len in [0, 1, 13, 14, 15, 64, 300] {
            let name: Vec<u8> = (0..len).map(|i| (i * 7) as u8).collect();
            let mut lease = Lease::new();
            lease.locate(3, &name);
            assert_eq!(lease.name(), &name[..]);
            assert_eq!(lease.db(), 3);
            assert_eq!(lease.name.heap_size() > 0, len > INLINE_NAME);
        }
    }

    #[test]
    fn a_new_value_is_in_no_heap() {
        let holder = Holder {
            owner: Owner::new(b"a"),
            token: 1,
            deadline: 10,
            granted: 0,
        };
        let value = LockValue::new(LockState::Exclusive(holder));
        assert_eq!(value.lease.place(), None);
        value.lease.set_place(Some(7));
        assert_eq!(value.lease.place(), Some(7));
        value.lease.set_place(Some(usize::MAX));
        assert_eq!(
            value.lease.place(),
            None,
            "past u32: out, never a wrong place"
        );
        assert_eq!(value.heap_size(), 96 + value.state.heap_size() - 64);
    }
}
