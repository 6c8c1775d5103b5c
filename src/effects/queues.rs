//! The server's wait queues: one `core::registry::Registry` over blocked clients, with the
//! `lock_waiters` gauge kept in step.
//!
//! Everything runs on Redis's main thread. The mutex is never held while calling into Redis
//! (a key lookup can expire a key and re-enter us through the unlink callback): every function
//! here takes it, works on the registry alone, and lets it go before returning.

use std::num::NonZeroI64;
use std::ops::{Deref, DerefMut};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{LazyLock, Mutex, MutexGuard};

use crate::core::config;
use crate::core::fencing;
use crate::core::lock::{LockState, Millis};
use crate::core::metrics::STATS;
use crate::core::queue::{Handed, Waiter};
use crate::core::registry::{Client, QueueKey, Registry, SetHanded, SetWants};
use crate::effects::timers;
use crate::ffi::block::BlockedClient;

/// A blocked `LOCK.ACQUIRE ... WAIT`.
#[derive(Debug)]
pub struct Blocked {
    pub client_id: u64,
    pub handle: BlockedClient,
    /// Asked with owner `*`: the reply carries the generated owner.
    pub with_owner: bool,
    /// When it started waiting (`clock::mono_us`), for the wait-time histogram.
    pub since_us: u64,
    /// Asked with `SESSION`: the hold it is granted is bound to its connection.
    pub session: bool,
    /// When its WAIT timeout is due in the schedule (dropped when it leaves the queue any
    /// other way). Lease-clock readings are never 0, so this takes 8 bytes.
    pub timeout: Option<NonZeroI64>,
}

impl Client for Blocked {
    fn id(&self) -> u64 {
        self.client_id
    }
}

pub type BlockedWaiter = Waiter<Blocked>;

static REGISTRY: LazyLock<Mutex<Registry<Blocked>>> = LazyLock::new(Mutex::default);
/// Whether any lock has a queue, as the registry said when its mutex was last let go: every
/// command asks, and a mutex costs two locked instructions.
static ANY: AtomicBool = AtomicBool::new(false);

/// The registry, locked; letting it go records whether anyone waits (`ANY`).
struct Locked(MutexGuard<'static, Registry<Blocked>>);

impl Deref for Locked {
    type Target = Registry<Blocked>;
    fn deref(&self) -> &Self::Target {
        &self.0
    }
}

impl DerefMut for Locked {
    fn deref_mut(&mut self) -> &mut Self::Target {
        &mut self.0
    }
}

impl Drop for Locked {
    fn drop(&mut self) {
        ANY.store(self.0.anyone_waiting(), Ordering::Relaxed);
    }
}

fn registry() -> Locked {
    // A panic elsewhere must not wedge every later command: take the data as it is.
    Locked(
        REGISTRY
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner()),
    )
}

/// Waiters left their queues: count them out and drop their timeouts.
fn count_out<'a>(left: impl IntoIterator<Item = &'a BlockedWaiter>) {
    let mut n = 0;
    for waiter in left {
        timers::cancel_time_out(
            waiter.client.client_id,
            waiter.client.timeout.map(NonZeroI64::get),
        );
        n += 1;
    }
    STATS.waiters.sub(n);
}

/// Queue a blocked client at the tail.
pub fn join(key: QueueKey, waiter: BlockedWaiter) {
    registry().join(key, waiter);
    STATS.waiters.add(1);
}

/// Queue a blocked client in every queue of `keys` at once (a lock set).
pub fn join_set(keys: Vec<QueueKey>, waiter: BlockedWaiter) {
    registry().join_set(keys, waiter);
    STATS.waiters.add(1);
}

/// Take a client out of whatever queues it is in (timeout, disconnect). Returns its handle if
/// it was still queued (not yet answered), so the caller can hand the handle back to Redis, and
/// the queues to settle where it was the head with others behind it (they may fit now).
pub fn leave(client_id: u64) -> Option<(BlockedClient, Vec<QueueKey>)> {
    let left = registry().leave(client_id)?;
    count_out([&left.waiter]);
    Some((left.waiter.client.handle, left.settle))
}

/// Whether any lock on this server has a queue (a cheap check before building a key).
pub fn anyone_waiting() -> bool {
    ANY.load(Ordering::Relaxed)
}

pub fn has_waiters(key: &QueueKey) -> bool {
    registry().has_waiters(key)
}

pub fn waiting(key: &QueueKey) -> usize {
    registry().waiting(key)
}

/// The queue length and the owners of its first `count` waiters, in order.
pub fn owners(key: &QueueKey, count: usize) -> (usize, Vec<Box<[u8]>>) {
    registry().owners(key, count)
}

/// Whether the head of `key`'s queue fits beside the live holds of `state`.
pub fn head_fits(key: &QueueKey, state: Option<&LockState>, now: Millis) -> bool {
    registry().head_fits(key, state, now)
}

/// Serve the head of the queue (and whoever fits behind it), with fresh tokens of this server.
pub fn hand_off(key: &QueueKey, state: Option<&LockState>, now: Millis) -> Option<Handed<Blocked>> {
    let handed = registry().hand_off(key, state, now, config::max_holders(), fencing::issue);
    if let Some(h) = &handed {
        count_out(h.served.iter().map(|(w, _)| w));
    }
    handed
}

/// Remove and return every waiter of one queue. A set among them leaves its other queues too,
/// which are settled soon (it may have stood at their head).
pub fn take_all(key: &QueueKey) -> Vec<BlockedWaiter> {
    let (waiters, settle) = registry().take_all(key);
    count_out(&waiters);
    for other in &settle {
        timers::settle_soon(other);
    }
    waiters
}

/// The set (its client id) whose seat heads `key`'s queue, if a set's does.
pub fn head_set(key: &QueueKey) -> Option<u64> {
    registry().head_set(key)
}

/// What the waiting set `id` asks for.
pub fn set_wants(id: u64) -> Option<SetWants> {
    registry().set_wants(id)
}

/// Grant the waiting set `id` all its keys if each is its now (`Registry::grant_set`), with
/// fresh tokens of this server.
pub fn grant_set(id: u64, states: &[Option<LockState>], now: Millis) -> Option<SetHanded<Blocked>> {
    let handed = registry().grant_set(id, states, now, config::max_holders(), fencing::issue);
    if let Some(h) = &handed {
        count_out([&h.waiter]);
    }
    handed
}

/// Remove and return every waiter of every queue.
pub fn take_everyone() -> Vec<BlockedWaiter> {
    let everyone = registry().take_everyone();
    count_out(&everyone);
    everyone
}

/// The queues of one db (`None`: of every db).
pub fn queues_in(db: Option<i32>) -> Vec<QueueKey> {
    registry().queues_in(db)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::core::registry::Seat;

    #[test]
    fn a_queue_entry_stays_small() {
        // The README's per-waiter figure: the queue entry (a 16-byte slot and the boxed
        // waiter) plus a client-index entry (see `core::registry`); a timeout adds its
        // schedule entry (see `core::schedule`).
        assert_eq!(std::mem::size_of::<BlockedWaiter>(), 104);
        // A lock set's seat in a queue: the set's id in the place of the client.
        assert_eq!(std::mem::size_of::<Waiter<Seat<Blocked>>>(), 104);
        // A slot of the queue's ring: its place and the boxed waiter (or a gap).
        assert_eq!(
            std::mem::size_of::<(crate::core::queue::Place, Option<Box<BlockedWaiter>>)>(),
            16
        );
    }
}
