//! Scheduling work for later, on the lease clock: settle a lock at its deadline, time a waiter
//! out, walk the keyspace for a renamed lock. One `core::schedule`
//! holds it all; one Redis timer (`ffi::timer`) stands for its earliest entry, and the shell's
//! alarm handler takes what is due from here and runs it.
//!
//! Every lock is watched here until its last lease ends: its key carries no TTL (Redis counts
//! TTLs on the wall clock), so the module deletes it. A lock with waiters is settled at its
//! deadline, so the head of the queue is served within a millisecond or two. Lock values are
//! watched in the lease heap (`core::lease_heap`), by address, each keeping its due time, place
//! and name itself; names without a value of theirs (a queue behind a plain string, a settle
//! soon) in the schedule, by name.
//!
//! A value leaves the lease heap before its memory goes back (`ffi::lease_values`): its unlink
//! and a flush's start take it out, and a value the server frees while still in the heap is
//! buried here instead (`bury`, from any thread) and dropped on the main thread once out.
//!
//! Redis counts its timers on the wall clock too, so the one timer can fire early (the clock
//! stepped forward: nothing is due yet, it is set again) or late (stepped back). The server's
//! cron (`tick`, ten times a second by default, on the monotonic clock) sees the wall clock
//! move against the lease clock and sets the timer again: a step back delays work by at most
//! one cron period.

use std::collections::HashSet;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Mutex, MutexGuard};

use crate::core::lease_heap::LeaseHeap;
use crate::core::lock::Millis;
use crate::core::registry::QueueKey;
use crate::core::schedule::{self, Alarm, Due, Schedule};
use crate::core::settle::Job;
use crate::core::value::LockValue;
use crate::ffi::clock;
use crate::ffi::lease_values::{ValuePtr, Values};
use crate::ffi::server_locked::{Held, ServerLocked};
use crate::ffi::timer::{self, TimerId};

#[derive(Default)]
struct Timers {
    schedule: Schedule<QueueKey, Job>,
    /// Every lock value, by its first deadline.
    leases: LeaseHeap<ValuePtr>,
    /// The Redis timer that is set, and for when.
    alarm: Option<(Alarm, TimerId)>,
    /// Locks a replica found past their last deadline: its master deletes them, or, once it is
    /// master itself, it does (`promoted`).
    parked: HashSet<QueueKey>,
}

/// Serialized by the server's own lock: no mutex (`ffi::server_locked`).
static TIMERS: ServerLocked<Timers> = ServerLocked::new(Timers::default);

/// Values the server freed while the lease heap held them, until the main thread takes them
/// out (its own mutex: a lazy-free thread must never wait for the timers). Boxed: the heap
/// holds their addresses.
#[allow(clippy::vec_box)]
type Buried = Vec<Box<LockValue>>;
static BURIED: Mutex<Buried> = Mutex::new(Vec::new());
static ANY_BURIED: AtomicBool = AtomicBool::new(false);

/// Never held while calling into Redis in a way that can call back (timers only start and
/// stop the one Redis timer, which calls nothing).
fn timers() -> Held<'static, Timers> {
    TIMERS.hold()
}

impl Timers {
    /// After an entry was added: set the Redis timer again only if the entry comes before it
    /// (drift is the cron's to check: no clock is read here).
    fn rearm_for(&mut self, due: Millis) {
        if self.alarm.is_none_or(|(alarm, _)| due < alarm.due) {
            self.rearm();
        }
    }

    /// When the earliest entry of either kind is due.
    fn first_due(&self) -> Option<Millis> {
        let lease = self.leases.first_due(&Values);
        let named = self.schedule.first_due();
        lease.into_iter().chain(named).min()
    }

    /// Take the earliest entry due at `now` or before: a lease before the schedule's entries
    /// due at the same time.
    fn pop_due(&mut self, now: Millis) -> Option<Job> {
        let lease = self.leases.first_due(&Values).filter(|d| *d <= now);
        let named = self.schedule.first_due().filter(|d| *d <= now);
        if lease.is_some_and(|l| named.is_none_or(|n| l <= n)) {
            let h = self.leases.pop_due(&mut Values, now)?;
            let key = QueueKey {
                db: h.lease().db(),
                name: h.lease().name().into(),
            };
            return Some(Job::Settle { key });
        }
        self.schedule.pop_due(now).map(|due| match due {
            Due::Job(job) => job,
            Due::Key(key) => Job::Settle { key },
            Due::Id(client_id) => Job::TimeOut { client_id },
        })
    }

    /// Take the buried values out of the lease heap and let them go. Their names are settled
    /// now: the server freed them without the unlink that wakes the names' waiters.
    fn drop_buried(&mut self) {
        if !ANY_BURIED.swap(false, Ordering::Relaxed) {
            return;
        }
        let buried = std::mem::take(&mut *buried());
        let now = clock::now_ms();
        for value in &buried {
            if self.leases.remove(&mut Values, ValuePtr::of(value)) {
                let key = QueueKey {
                    db: value.lease.db(),
                    name: value.lease.name().into(),
                };
                self.schedule.add_key_owned(key, now);
            }
        }
    }

    /// The name `name` of `db` holds no lock any more (released, deleted, moved away):
    /// nothing to settle there. Most servers keep no name in the schedule: then no key is built.
    fn forget(&mut self, db: i32, name: &[u8]) {
        if !self.schedule.has_keys() && self.parked.is_empty() {
            return;
        }
        let key = QueueKey {
            db,
            name: name.into(),
        };
        self.schedule.cancel_key(&key);
        if !self.parked.is_empty() {
            self.parked.remove(&key);
        }
    }

    /// Set the Redis timer again if it could fire later than the earliest entry.
    fn rearm(&mut self) {
        let offset = clock::wall_offset();
        let first = self.first_due();
        if !schedule::must_rearm(self.alarm.map(|(a, _)| a), first, offset) {
            return;
        }
        let Some(due) = first else {
            return;
        };
        if let Some((_, id)) = self.alarm.take() {
            timer::stop(id);
        }
        let delay = due.saturating_sub(clock::now_ms()).max(0);
        self.alarm = timer::start(delay).map(|id| {
            let alarm = Alarm {
                due,
                wall_offset: offset,
            };
            (alarm, id)
        });
    }
}

fn buried() -> MutexGuard<'static, Buried> {
    BURIED
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// Settle the lock `value`, stored under `name` in `db`, at `due` (its first deadline, lease
/// clock), instead of any time set before.
pub fn watch_lease(value: &mut LockValue, db: i32, name: &[u8], due: Millis) {
    value.lease.locate(db, name);
    value.lease.due = due;
    let mut t = timers();
    t.leases.upsert(&mut Values, ValuePtr::of(value));
    t.rearm_for(due);
}

/// The lock `value` left the name `name` of `db`: nothing is settled there for it any more,
/// neither its leases nor the name (in one look at the timers: every release comes here).
pub fn forget_lease(value: &LockValue, db: i32, name: &[u8]) {
    let mut t = timers();
    if value.lease.place().is_some() {
        t.leases.remove(&mut Values, ValuePtr::of(value));
    }
    t.forget(db, name);
}

/// The server frees `value` (on any thread): let it go, or, if the lease heap still holds it,
/// keep it until the main thread has taken it out.
pub fn bury(value: Box<LockValue>) {
    if value.lease.place().is_none() {
        return; // nothing holds its address: it goes here
    }
    buried().push(value);
    ANY_BURIED.store(true, Ordering::Relaxed);
}

/// Settle `key` at `due` (lease clock), unless it is already to be settled by then.
pub fn settle_at(key: &QueueKey, due: Millis) {
    let mut t = timers();
    if t.schedule.add_key(key, due) {
        t.rearm_for(due);
    }
}

/// Settle `key` on the next turn of the event loop.
pub fn settle_soon(key: &QueueKey) {
    settle_at(key, clock::now_ms());
}

/// Run `job` after `delay_ms`.
fn run_after(delay_ms: Millis, job: Job) {
    let mut t = timers();
    let due = clock::now_ms().saturating_add(delay_ms.max(0));
    t.schedule.add(due, job);
    t.rearm_for(due);
}

/// Time the waiter `client_id` out after `timeout_ms`; returns when. Counted from the end of
/// the clock's current millisecond (part of it has passed): a timeout never ends early.
pub fn time_out_after(client_id: u64, timeout_ms: Millis) -> Millis {
    let due = clock::now_ms()
        .saturating_add(timeout_ms.max(0))
        .saturating_add(1);
    let mut t = timers();
    t.schedule.add_id(due, client_id);
    t.rearm_for(due);
    due
}

/// The waiter `client_id` left its queue before its timeout (due then): drop the timeout.
pub fn cancel_time_out(client_id: u64, due: Option<Millis>) {
    if let Some(due) = due {
        timers().schedule.cancel_id(due, client_id);
    }
}

/// Look for lock values adrift (renamed or moved) after `delay_ms`.
pub fn find_adrift_after(delay_ms: Millis) {
    run_after(delay_ms, Job::FindAdrift);
}

/// Release the session holds of the connection `client_id` on the next turn of the event loop.
pub fn end_session_soon(client_id: u64) {
    run_after(0, Job::EndSession { client_id });
}

/// Start this master's fencing epoch on the next turn of the event loop (after start-up has
/// loaded the data, or once a promotion is done).
pub fn start_epoch_soon() {
    run_after(0, Job::StartEpoch);
}

/// Look at the names waited on behind plain strings once the current command has run.
pub fn look_at_foreign_soon() {
    run_after(0, Job::LookAtForeign);
}

/// Run `job` again after `delay_ms` (paused writes, a panic).
pub fn retry(delay_ms: Millis, job: Job) {
    run_after(delay_ms, job);
}

/// The Redis timer fired: everything due now, in due order. Work it adds comes up on a later
/// turn of the event loop (`rearm_after_alarm`).
pub fn alarm_rang() -> Vec<Job> {
    let mut t = timers();
    t.alarm = None;
    t.drop_buried();
    let now = clock::now_ms();
    std::iter::from_fn(|| t.pop_due(now)).collect()
}

/// Set the Redis timer for what is left once the due work ran.
pub fn rearm_after_alarm() {
    timers().rearm();
}

/// The server's cron: set the Redis timer again if the wall clock moved against the lease clock.
pub fn tick() {
    let mut t = timers();
    t.drop_buried();
    t.rearm();
}

/// A replica found `key` past its last deadline: keep it in mind for a promotion.
pub fn park(key: QueueKey) {
    timers().parked.insert(key);
}

/// This replica became a master: settle every lock it parked (its old master never deleted
/// them).
pub fn unpark_all() -> Vec<QueueKey> {
    let parked = std::mem::take(&mut timers().parked);
    parked.into_iter().collect()
}

/// Two dbs traded contents: each lock's pending settle follows it.
pub fn swap_dbs(first: i32, second: i32) {
    let swap = |db: i32| match db {
        d if d == first => second,
        d if d == second => first,
        d => d,
    };
    let mut t = timers();
    for h in t.leases.handles() {
        h.lease().set_db(swap(h.lease().db()));
    }
    t.schedule.rekey(|key| {
        Some(QueueKey {
            db: swap(key.db),
            name: key.name.clone(),
        })
    });
    let parked = std::mem::take(&mut t.parked);
    t.parked = parked
        .into_iter()
        .map(|key| QueueKey {
            db: swap(key.db),
            name: key.name,
        })
        .collect();
}

/// A db (`None`: every db) is being emptied: its values leave the lease heap before the server
/// frees them.
pub fn flush_starting(db: Option<i32>) {
    let kept = |h: ValuePtr| db.is_some_and(|d| d != h.lease().db());
    timers().leases.retain(&mut Values, kept);
}

/// A db (`None`: every db) was emptied: its locks' settles are moot.
pub fn flushed(db: Option<i32>) {
    let mut t = timers();
    let kept = |key: &QueueKey| db.is_some_and(|d| d != key.db);
    t.schedule.rekey(|key| kept(key).then(|| key.clone()));
    t.parked.retain(kept);
}
