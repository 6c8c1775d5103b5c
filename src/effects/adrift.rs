//! Lock values adrift: unlinked from their name by the server (not by this module) and not
//! freed, which only a `RENAME`, `RENAMENX` or `MOVE` does. Their leases were watched under the
//! old name; `shell::renames` walks the keyspace for them and watches them where they are.
//!
//! Values are known by their address while the server keeps them: the type's free hook takes
//! an address out before the allocator can hand it to another value. The free hook may run on a
//! lazy-free thread, hence the mutex; `ANY` spares the common free (nothing adrift) the lock.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Mutex, MutexGuard};

use crate::core::lock::Millis;
use crate::effects::timers;

/// Each value adrift, with the number of the unlink that set it adrift (`NEXT`).
static ADRIFT: Mutex<Option<HashMap<usize, u64>>> = Mutex::new(None);
/// The number the next unlink gets.
static NEXT: AtomicU64 = AtomicU64::new(0);
/// Whether `ADRIFT` holds any address.
static ANY: AtomicBool = AtomicBool::new(false);
/// Whether this module is deleting a key itself (its unlink is no rename).
static DELETING: AtomicBool = AtomicBool::new(false);
/// Whether a `Job::FindAdrift` is due.
static FIND_DUE: AtomicBool = AtomicBool::new(false);

fn adrift() -> MutexGuard<'static, Option<HashMap<usize, u64>>> {
    ADRIFT.lock().unwrap_or_else(|p| p.into_inner())
}

/// Run `delete`, a deletion by this module: the value it unlinks is freed, never adrift.
pub fn deleting_here<T>(delete: impl FnOnce() -> T) -> T {
    struct Deleting;
    impl Drop for Deleting {
        fn drop(&mut self) {
            DELETING.store(false, Ordering::Relaxed); // even if `delete` panicked
        }
    }
    DELETING.store(true, Ordering::Relaxed);
    let _deleting = Deleting;
    delete()
}

/// The server unlinked the value at `value` from its name: adrift until freed or found.
pub fn left(value: usize) {
    if DELETING.load(Ordering::Relaxed) {
        return;
    }
    let number = NEXT.fetch_add(1, Ordering::Relaxed);
    adrift()
        .get_or_insert_with(HashMap::new)
        .insert(value, number);
    ANY.store(true, Ordering::Relaxed);
    look_after(0);
}

/// Have the walk take its next step after `delay_ms` (unless a step is already due).
pub fn look_after(delay_ms: Millis) {
    if !FIND_DUE.swap(true, Ordering::Relaxed) {
        timers::find_adrift_after(delay_ms);
    }
}

/// The walk's step is running: a later one must be asked for again.
pub fn looking() {
    FIND_DUE.store(false, Ordering::Relaxed);
}

/// The server freed the value at `value`.
pub fn freed(value: usize) {
    if ANY.load(Ordering::Relaxed) {
        forget(value);
    }
}

/// Stop looking for `value` (found, freed, or not found by a whole walk). True if it was adrift.
pub fn forget(value: usize) -> bool {
    let mut set = adrift();
    let Some(values) = set.as_mut() else {
        return false;
    };
    let was = values.remove(&value).is_some();
    if values.is_empty() {
        *set = None;
        ANY.store(false, Ordering::Relaxed);
    }
    was
}

/// Whether `value` is adrift.
pub fn is_adrift(value: usize) -> bool {
    ANY.load(Ordering::Relaxed) && adrift().as_ref().is_some_and(|v| v.contains_key(&value))
}

/// The number the next unlink gets: a walk that starts now finds every value adrift below it
/// if it is still in the keyspace.
pub fn next_number() -> u64 {
    NEXT.load(Ordering::Relaxed)
}

/// A whole walk, started at `started` (a `next_number`), did not find these: they left the
/// keyspace some other way (a lazy free to come). Values unlinked again since are kept.
pub fn give_up_before(started: u64) {
    let mut set = adrift();
    if let Some(values) = set.as_mut() {
        values.retain(|_, number| *number >= started);
        if values.is_empty() {
            *set = None;
            ANY.store(false, Ordering::Relaxed);
        }
    }
}

/// Whether any value is adrift.
pub fn any() -> bool {
    ANY.load(Ordering::Relaxed)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// One test, as the set is the process's: left, freed, found, given up, our own deletes.
    #[test]
    fn a_value_is_adrift_until_freed_found_or_given_up() {
        deleting_here(|| left(1));
        assert!(
            !is_adrift(1),
            "this module's own delete sets nothing adrift"
        );
        left(1);
        left(2);
        assert!(any() && is_adrift(1) && is_adrift(2));
        freed(1);
        assert!(!is_adrift(1), "freed: not moved anywhere");
        let walk_started = next_number();
        left(3); // unlinked while the walk runs
        left(2); // renamed again while the walk runs: its new number keeps it
        give_up_before(walk_started);
        assert!(
            is_adrift(2) && is_adrift(3),
            "both left after the walk began"
        );
        assert!(forget(3), "found");
        give_up_before(next_number());
        assert!(
            !is_adrift(2) && !any(),
            "a whole later walk missed it: given up"
        );
        let panicked = std::panic::catch_unwind(|| deleting_here(|| panic!("in delete")));
        assert!(panicked.is_err());
        left(4);
        assert!(is_adrift(4), "a panic in a delete leaves renames seen");
        assert!(forget(4) && !any());
    }
}
