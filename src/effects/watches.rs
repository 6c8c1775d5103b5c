//! The server's watchers (`LOCK.WATCH ... WAIT`): one `core::watch::Watchers` over blocked
//! clients, the names that may have changed since their last look, and the `lock_watchers`
//! gauge kept in step.
//!
//! Anything that may change what stands under a name calls `changed` (a write of the keyspace
//! module, an unlink, a load, a settle at a lease's end, a flush or swap); the names are looked
//! at together once the current command has run (`Job::LookAtWatched`). A plain string written
//! by another client reaches no module callback: while a watched name holds no lock, every
//! command the filter sees has it looked at (at most once per turn of the event loop), and a
//! plain string's TTL is looked at when it runs out and at least every `RECHECK_MS`, like the
//! waiters behind it (`effects::foreign`). With nobody watching, each call reads one flag.
//!
//! Never held while calling into Redis, like `effects::queues`.

use std::collections::HashSet;
use std::num::NonZeroI64;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{LazyLock, Mutex, MutexGuard};

use crate::core::lock::Millis;
use crate::core::metrics::STATS;
use crate::core::registry::{Client, QueueKey};
use crate::core::settle::Job;
use crate::core::watch::{Cursor, Watchers};
use crate::effects::foreign;
use crate::effects::timers;
use crate::ffi::block::BlockedClient;

/// A blocked `LOCK.WATCH ... WAIT`.
#[derive(Debug)]
pub struct Watching {
    pub client_id: u64,
    pub handle: BlockedClient,
    /// When its WAIT timeout is due in the schedule (none: it waits without limit).
    pub timeout: Option<NonZeroI64>,
}

impl Client for Watching {
    fn id(&self) -> u64 {
        self.client_id
    }
}

#[derive(Default)]
struct State {
    watchers: Watchers<Watching>,
    /// Names to look at on the next turn.
    changed: HashSet<QueueKey>,
    /// Watched names that held no lock at their last look: no module callback tells when a
    /// plain string comes or goes there.
    unlocked: HashSet<QueueKey>,
}

static STATE: LazyLock<Mutex<State>> = LazyLock::new(Mutex::default);
/// Whether anyone watches (read by every `changed`).
static ANY: AtomicBool = AtomicBool::new(false);
/// Whether any watched name held no lock at its last look (read by the filter).
static ANY_UNLOCKED: AtomicBool = AtomicBool::new(false);
/// Whether a look is already due on the next turn of the event loop.
static LOOK_DUE: AtomicBool = AtomicBool::new(false);
/// When the next look at plain strings is due (lease clock), if one is.
static RECHECK_DUE: Mutex<Option<Millis>> = Mutex::new(None);

fn state() -> MutexGuard<'static, State> {
    STATE.lock().unwrap_or_else(|p| p.into_inner())
}

fn keep_flags(s: &State) {
    ANY.store(s.watchers.count() > 0, Ordering::Relaxed);
    ANY_UNLOCKED.store(!s.unlocked.is_empty(), Ordering::Relaxed);
    let count = i64::try_from(s.watchers.count()).unwrap_or(i64::MAX);
    STATS.watchers.add(count - STATS.watchers.get());
}

fn look_soon() {
    if !LOOK_DUE.swap(true, Ordering::Relaxed) {
        timers::retry(0, Job::LookAtWatched);
    }
}

/// `client` waits for news of `key` after `after`.
pub fn watch(key: QueueKey, client: Watching, after: Cursor) {
    let mut s = state();
    s.watchers.watch(key, client, after);
    keep_flags(&s);
}

/// Take a client out (timeout, disconnect, `CLIENT UNBLOCK`): its handle, if it watched.
pub fn leave(client_id: u64) -> Option<BlockedClient> {
    if !ANY.load(Ordering::Relaxed) {
        return None;
    }
    let mut s = state();
    let left = s.watchers.leave(client_id)?;
    drop_unwatched(&mut s);
    keep_flags(&s);
    drop(s);
    timers::cancel_time_out(left.client_id, left.timeout.map(NonZeroI64::get));
    Some(left.handle)
}

fn drop_unwatched(s: &mut State) {
    let State {
        watchers, unlocked, ..
    } = s;
    unlocked.retain(|k| watchers.is_watched(k));
}

/// Whether anyone watches a name (callers skip building a key when nobody does).
pub fn anyone_watching() -> bool {
    ANY.load(Ordering::Relaxed)
}

/// What stands under `key` may have changed: look at it on the next turn if anyone watches it.
pub fn changed(key: &QueueKey) {
    if !ANY.load(Ordering::Relaxed) {
        return;
    }
    let mut s = state();
    if s.watchers.is_watched(key) && !s.changed.contains(key) {
        s.changed.insert(key.clone());
        drop(s);
        look_soon();
    }
}

/// Every watched name of `db` (`None`: every db) may have changed (a flush, a swap).
pub fn changed_in(db: Option<i32>) {
    if !ANY.load(Ordering::Relaxed) {
        return;
    }
    let mut s = state();
    let names = s.watchers.names_in(db);
    s.changed.extend(names);
    drop(s);
    look_soon();
}

/// Whether a watched name held no lock at its last look (the command filter then has work).
pub fn any_unlocked() -> bool {
    ANY_UNLOCKED.load(Ordering::Relaxed)
}

/// The filter saw a command: if a watched name held no lock, it may hold a string now (or no
/// longer).
pub fn command_seen() {
    if ANY_UNLOCKED.load(Ordering::Relaxed) {
        recheck_unlocked();
    }
}

/// Look again at every watched name that held no lock (the command filter, a string's TTL).
pub fn recheck_unlocked() {
    let mut s = state();
    let names: Vec<QueueKey> = s.unlocked.iter().cloned().collect();
    s.changed.extend(names);
    drop(s);
    look_soon();
}

/// The look is due: the names to look at.
pub fn take_changed() -> Vec<QueueKey> {
    LOOK_DUE.store(false, Ordering::Relaxed);
    state().changed.drain().collect()
}

/// Take out every watcher of `key` for whom `now` is news.
pub fn take_news(key: &QueueKey, now: Cursor) -> Vec<Watching> {
    let mut s = state();
    let news = s.watchers.take_news(key, now);
    drop_unwatched(&mut s);
    keep_flags(&s);
    drop(s);
    for w in &news {
        timers::cancel_time_out(w.client_id, w.timeout.map(NonZeroI64::get));
    }
    news
}

/// What the last look at `key` found. `unlocked`: no lock stands there; `string_ttl`: a plain
/// string does, with that TTL (`Some(None)`: none): look at it again when the TTL runs out, and
/// within `foreign::RECHECK_MS`.
pub fn looked(key: &QueueKey, unlocked: bool, string_ttl: Option<Option<Millis>>, now: Millis) {
    let mut s = state();
    if unlocked && s.watchers.is_watched(key) {
        s.unlocked.insert(key.clone());
    } else {
        s.unlocked.remove(key);
    }
    keep_flags(&s);
    drop(s);
    if let Some(ttl) = string_ttl {
        let due = foreign::due(ttl, now);
        let mut next = RECHECK_DUE.lock().unwrap_or_else(|p| p.into_inner());
        // One recheck pending at a time, unless this one is due earlier.
        if next.is_none_or(|at| due < at) {
            *next = Some(due);
            drop(next);
            timers::retry(due.saturating_sub(now), Job::RecheckWatched);
        }
    }
}

/// A recheck of plain strings is due.
pub fn recheck_due() {
    *RECHECK_DUE.lock().unwrap_or_else(|p| p.into_inner()) = None;
    recheck_unlocked();
}

/// How many names are watched (INFO).
pub fn names() -> usize {
    state().watchers.names()
}
