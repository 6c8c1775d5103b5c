//! The wait queues of all locks on this server: connections, not data.
//!
//! Queues are keyed by (db, key name), not stored in the lock value: a queue belongs to the
//! name its waiters asked for, so DEL, RENAME, SWAPDB or FLUSHALL move or drop the holder but
//! leave the waiters where they were, and `expiry::settle` decides what they get.
//!
//! Everything runs on Redis's main thread. The mutex is never held while calling into Redis
//! (a key lookup can expire a key and re-enter us through the unlink callback).

use std::collections::HashMap;
use std::sync::{LazyLock, Mutex, MutexGuard};

use crate::blocking::BlockedClient;
use crate::lock::{Holder, Millis, Place, WaitQueue, Waiter};
use crate::metrics::STATS;

/// The name a queue belongs to.
#[derive(Clone, Debug, Hash, PartialEq, Eq)]
pub struct QueueKey {
    pub db: i32,
    pub name: Box<[u8]>,
}

/// A blocked `LOCK.ACQUIRE ... WAIT`.
#[derive(Debug)]
pub struct Blocked {
    pub client_id: u64,
    pub handle: BlockedClient,
    /// Asked with owner `*`: the reply carries the generated owner.
    pub with_owner: bool,
    /// When it started waiting (unix µs), for the wait-time histogram.
    pub since_us: u64,
}

pub type BlockedWaiter = Waiter<Blocked>;

#[derive(Default)]
struct Entry {
    queue: WaitQueue<Blocked>,
    /// When the earliest pending settle timer of this queue fires.
    timer_due: Option<Millis>,
}

#[derive(Default)]
struct Registry {
    queues: HashMap<QueueKey, Entry>,
    /// Where each blocked client stands: its queue and its place in it.
    client_queue: HashMap<u64, (QueueKey, Place)>,
}

static REGISTRY: LazyLock<Mutex<Registry>> = LazyLock::new(Mutex::default);

fn registry() -> MutexGuard<'static, Registry> {
    // A panic elsewhere must not wedge every later command: take the data as it is.
    REGISTRY
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// Queue a blocked client at the tail.
pub fn join(key: QueueKey, waiter: BlockedWaiter) {
    let mut reg = registry();
    let client_id = waiter.client.client_id;
    let place = reg
        .queues
        .entry(key.clone())
        .or_default()
        .queue
        .push(waiter);
    reg.client_queue.insert(client_id, (key, place));
    STATS.waiters.add(1);
}

/// Take a client out of whatever queue it is in (timeout, disconnect). Returns its handle if it
/// was still queued (not yet answered), so the caller can hand the handle back to Redis.
pub fn leave(client_id: u64) -> Option<BlockedClient> {
    let mut reg = registry();
    let (key, place) = reg.client_queue.remove(&client_id)?;
    let entry = reg.queues.get_mut(&key)?;
    let removed = entry.queue.remove(place);
    if entry.queue.is_empty() {
        reg.queues.remove(&key);
    }
    reg.shrink_if_idle();
    let waiter = removed?;
    STATS.waiters.sub(1);
    Some(waiter.client.handle)
}

/// Whether any lock on this server has a queue (a cheap check before building a key).
pub fn anyone_waiting() -> bool {
    !registry().queues.is_empty()
}

pub fn has_waiters(key: &QueueKey) -> bool {
    registry()
        .queues
        .get(key)
        .is_some_and(|e| !e.queue.is_empty())
}

pub fn waiting(key: &QueueKey) -> usize {
    registry().queues.get(key).map_or(0, |e| e.queue.len())
}

/// The queue length and the owners of its first `count` waiters, in order.
pub fn owners(key: &QueueKey, count: usize) -> (usize, Vec<Box<[u8]>>) {
    registry().queues.get(key).map_or((0, Vec::new()), |e| {
        let first = e
            .queue
            .iter()
            .take(count)
            .map(|w| Box::<[u8]>::from(&*w.owner.bytes()))
            .collect();
        (e.queue.len(), first)
    })
}

/// If `holder` is not live, pop the head of the queue and make it the holder.
pub fn hand_off(
    key: &QueueKey,
    holder: Option<&Holder>,
    now: Millis,
) -> Option<(BlockedWaiter, Holder)> {
    let mut reg = registry();
    let entry = reg.queues.get_mut(key)?;
    let handed = entry.queue.hand_off(
        holder,
        now,
        || crate::fencing::issue(crate::clock::now_us()),
    );
    if entry.queue.is_empty() {
        reg.queues.remove(key);
    }
    if let Some((waiter, _)) = &handed {
        reg.client_queue.remove(&waiter.client.client_id);
        STATS.waiters.sub(1);
    }
    reg.shrink_if_idle();
    handed
}

/// Remove and return every waiter of one queue.
pub fn take_all(key: &QueueKey) -> Vec<BlockedWaiter> {
    let mut reg = registry();
    let waiters: Vec<_> = reg
        .queues
        .remove(key)
        .map(|mut e| e.queue.drain().collect())
        .unwrap_or_default();
    for w in &waiters {
        reg.client_queue.remove(&w.client.client_id);
    }
    STATS.waiters.sub(waiters.len() as i64);
    reg.shrink_if_idle();
    waiters
}

/// Remove and return every waiter of every queue.
pub fn take_everyone() -> Vec<BlockedWaiter> {
    let mut reg = registry();
    reg.client_queue.clear();
    let everyone: Vec<_> = reg
        .queues
        .drain()
        .flat_map(|(_, mut e)| e.queue.drain().collect::<Vec<_>>())
        .collect();
    STATS.waiters.sub(everyone.len() as i64);
    reg.shrink_if_idle();
    everyone
}

/// The queues of one db (`None`: of every db).
pub fn queues_in(db: Option<i32>) -> Vec<QueueKey> {
    registry()
        .queues
        .keys()
        .filter(|k| db.is_none_or(|d| d == k.db))
        .cloned()
        .collect()
}

/// Record that a settle timer for `key` is due at `due`. Returns false when one at least as
/// early is already pending (or nobody waits), so no new timer is needed.
pub fn want_timer(key: &QueueKey, due: Millis) -> bool {
    let mut reg = registry();
    let Some(entry) = reg.queues.get_mut(key) else {
        return false;
    };
    match entry.timer_due {
        Some(pending) if pending <= due => false,
        _ => {
            entry.timer_due = Some(due);
            true
        }
    }
}

/// A settle timer for `key` fired: forget the pending due time.
pub fn timer_fired(key: &QueueKey, due: Millis) {
    let mut reg = registry();
    if let Some(entry) = reg.queues.get_mut(key) {
        if entry.timer_due == Some(due) {
            entry.timer_due = None;
        }
    }
}

impl Registry {
    /// Once nobody waits anywhere, give the tables' memory back (a burst of 10k waiters
    /// should not leave its high-water mark behind).
    fn shrink_if_idle(&mut self) {
        if self.queues.is_empty() && self.queues.capacity() > 0 {
            self.queues = HashMap::new();
            self.client_queue = HashMap::new();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_queue_entry_stays_small() {
        // The README's per-waiter figure: the queue entry plus a client-index entry.
        assert_eq!(std::mem::size_of::<BlockedWaiter>(), 72);
        assert_eq!(std::mem::size_of::<(u64, (QueueKey, Place))>(), 40);
    }
}
