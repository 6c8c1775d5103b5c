//! Foreign holds: a plain string under a lock's name is an old-style lock (`SET key id NX PX
//! ttl`) of a client not yet moved to the module, and counts as held by someone else
//! (`lock.foreign-holds`). Waiters queue behind it and are served the moment it is gone.
//!
//! The server says nothing to a module when a string is deleted but through keyspace events,
//! which would cost every `DEL`, `EXPIRE` and `SET ... PX` on the server a module context (see
//! `shell::renames`). So while anyone waits behind a string, every command the filter sees
//! (a `DEL`, the old client's release script, an `EXEC`, the one whose eviction removed it) has
//! the waited-for names looked at once the command has run, at most once per turn of the event
//! loop; and each name is looked at when its string's TTL runs out, and at least every
//! `RECHECK_MS` in case it went some other way. With nobody waiting the filter only reads one
//! flag.

use std::collections::HashSet;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Mutex, MutexGuard};

use crate::core::lock::Millis;
use crate::core::registry::QueueKey;
use crate::effects::timers;

/// The longest a waiter behind a string waits for a look at it.
pub const RECHECK_MS: Millis = 1_000;

/// The names waiters wait on behind a string.
static WATCHED: Mutex<Option<HashSet<QueueKey>>> = Mutex::new(None);
/// Whether `WATCHED` has any name (read by the filter on every command).
static ANY: AtomicBool = AtomicBool::new(false);
/// Whether a look at every watched name is already due on the next turn of the event loop.
static LOOK_DUE: AtomicBool = AtomicBool::new(false);

/// Never held while calling into Redis.
fn watched() -> MutexGuard<'static, Option<HashSet<QueueKey>>> {
    WATCHED.lock().unwrap_or_else(|p| p.into_inner())
}

/// When to look at a string whose TTL is `ttl` (none: `None`) at the latest: when the TTL runs
/// out, or within `RECHECK_MS`.
pub fn due(ttl: Option<Millis>, now: Millis) -> Millis {
    let wait = ttl.unwrap_or(RECHECK_MS).clamp(0, RECHECK_MS);
    now.saturating_add(wait)
}

/// A string stands under `key` and someone waits there: look at it at `due` (see `due`), and
/// after any command.
pub fn watch(key: &QueueKey, due: Millis) {
    timers::settle_at(key, due);
    let mut names = watched();
    let names = names.get_or_insert_with(HashSet::new);
    if !names.contains(key) {
        names.insert(key.clone());
        ANY.store(true, Ordering::Relaxed);
    }
}

/// No string stands under `key` any more, or nobody waits there.
pub fn unwatch(key: &QueueKey) {
    if !ANY.load(Ordering::Relaxed) {
        return;
    }
    let mut names = watched();
    if let Some(set) = names.as_mut() {
        set.remove(key);
        ANY.store(!set.is_empty(), Ordering::Relaxed);
    }
}

/// Whether anyone waits behind a string (the command filter then has work).
pub fn any() -> bool {
    ANY.load(Ordering::Relaxed)
}

/// The command filter saw a command: if anyone waits behind a string, have every such name
/// looked at once this turn's commands have run.
pub fn command_seen() {
    if ANY.load(Ordering::Relaxed) && !LOOK_DUE.swap(true, Ordering::Relaxed) {
        timers::look_at_foreign_soon();
    }
}

/// The look is due: the names to settle (each settle watches its name again if it must).
pub fn take_look() -> Vec<QueueKey> {
    LOOK_DUE.store(false, Ordering::Relaxed);
    watched()
        .as_ref()
        .map(|set| set.iter().cloned().collect())
        .unwrap_or_default()
}

/// How many names waiters wait on behind a string (INFO).
pub fn watched_count() -> usize {
    watched().as_ref().map_or(0, HashSet::len)
}
