//! Where a lock goes when `RENAME`, `RENAMENX` or `MOVE` takes it off its name.
//!
//! Its leases are watched by name (`effects::timers`), and the server tells a module nothing
//! about a rename but the keyspace events, which would cost every `DEL`, `EXPIRE` and `SET ...
//! PX` on the server a module context (about 860 instructions each). So the command filter
//! notes each rename or move it sees (source, destination), and when a lock leaves a source
//! name (the type's unlink hook) the note says where it went: the lock is settled there, which
//! watches it again. Notes are taken when used and kept for the last `KEPT` commands, so a
//! `RENAME` queued in `MULTI` is still known at `EXEC`; a note whose command failed or moved
//! another type only costs a look at a name holding no lock.

use std::collections::VecDeque;
use std::sync::Mutex;

use crate::core::registry::QueueKey;

/// How many renames and moves are remembered.
const KEPT: usize = 64;

/// Where the value at a source name went.
#[derive(Clone, Debug, PartialEq, Eq)]
enum Destination {
    /// `RENAME src dst`: same db, another name.
    Name(Box<[u8]>),
    /// `MOVE key db`: same name, another db.
    Db(i32),
}

static NOTES: Mutex<VecDeque<(Box<[u8]>, Destination)>> = Mutex::new(VecDeque::new());

fn notes() -> std::sync::MutexGuard<'static, VecDeque<(Box<[u8]>, Destination)>> {
    NOTES.lock().unwrap_or_else(|p| p.into_inner())
}

fn note(source: &[u8], destination: Destination) {
    let mut notes = notes();
    if notes.len() == KEPT {
        notes.pop_front();
    }
    notes.push_back((source.into(), destination));
}

/// The command filter saw a three-word command: note it if it renames or moves a key.
pub fn command_seen(name: &[u8], first: &[u8], second: &[u8]) {
    if name.eq_ignore_ascii_case(b"rename") || name.eq_ignore_ascii_case(b"renamenx") {
        note(first, Destination::Name(second.into()));
    } else if name.eq_ignore_ascii_case(b"move") {
        let db = std::str::from_utf8(second)
            .ok()
            .and_then(|d| d.parse::<i32>().ok())
            .filter(|d| *d >= 0);
        if let Some(db) = db {
            note(first, Destination::Db(db));
        }
    }
}

/// A lock left `name` of `db`: where it went, if a rename or move of that name was noted.
pub fn destination(db: i32, name: &[u8]) -> Option<QueueKey> {
    let mut notes = notes();
    if notes.is_empty() {
        return None;
    }
    let at = notes.iter().rposition(|(source, _)| **source == *name)?;
    let (_, destination) = notes.remove(at)?;
    Some(match destination {
        Destination::Name(to) => QueueKey { db, name: to },
        Destination::Db(to) => QueueKey {
            db: to,
            name: name.into(),
        },
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_noted_rename_or_move_says_where_the_lock_went_once() {
        command_seen(b"RENAME", b"a", b"b");
        command_seen(b"move", b"c", b"3");
        command_seen(b"MOVE", b"d", b"x"); // not a db: nothing to note
        command_seen(b"MOVE", b"d", b"-1");
        command_seen(b"SET", b"e", b"f");
        let key = |db, name: &[u8]| QueueKey {
            db,
            name: name.into(),
        };
        assert_eq!(destination(2, b"a"), Some(key(2, b"b")));
        assert_eq!(destination(2, b"a"), None, "taken when used");
        assert_eq!(destination(0, b"c"), Some(key(3, b"c")));
        assert_eq!(destination(0, b"d"), None);
        assert_eq!(destination(0, b"e"), None);
        for i in 0..=KEPT {
            command_seen(b"renamenx", format!("s{i}").as_bytes(), b"t");
        }
        assert_eq!(destination(0, b"s0"), None, "only the last KEPT are kept");
        assert_eq!(destination(0, b"s1"), Some(key(0, b"t")));
    }
}
