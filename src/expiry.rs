//! Timers that release expired locks, hand them to the next waiter, and time waiters out.
//!
//! A lock with nobody waiting needs no timer: its key carries a TTL at its deadline and Redis
//! removes it (and replicates the DEL). A lock with waiters gets one timer at its deadline, so
//! the head of the queue is served within a millisecond or two, not at Redis's 100 ms sweep.
//! `settle` is the single place that decides what a queue gets; timers, DEL/FLUSH/SWAPDB
//! events and revoked grants all end up there, and running it twice does no harm.
//!
//! While the server pauses writes (`CLIENT PAUSE`, `FAILOVER`, a shutdown waiting for
//! replicas) it keeps the dataset still so a replica can catch up exactly; Redis 7.0 even
//! asserts that nothing is propagated then. The server says whether that is the case
//! (`RedisModule_AvoidReplicaTraffic`), so timers that would write wait for the pause to end,
//! whatever command started or refused to start it.

use std::os::raw::c_void;
use std::sync::atomic::{AtomicPtr, Ordering};
use std::sync::Mutex;

use redis_module::{raw, Context, ContextFlags, NotifyEvent, RedisString};

use crate::blocking::{self, Answer, Grant};
use crate::clock;
use crate::error::LockError;
use crate::guard;
use crate::keyspace::{self, LockEvent, LockKey};
use crate::lock::{live, Holder, Millis, Token};
use crate::metrics::STATS;
use crate::waiters::{self, QueueKey};

/// How soon to look again while writes are paused, or at a lock whose expired value Redis
/// may not delete yet.
const PAUSED_RETRY_MS: Millis = 10;

/// How soon a timer whose job panicked runs it again.
const RETRY_AFTER_PANIC_MS: Millis = 1_000;

/// The longest delay a timer is started with. Redis adds `delay * 1000` to its microsecond
/// clock, so a deadline far away (from a master or an AOF) must not overflow it; a timer that
/// fires early just looks again and starts the next one.
const MAX_TIMER_DELAY_MS: Millis = 365 * 24 * 3_600_000;

/// A pending module timer (Redis never hands out id 0).
pub type TimerId = std::num::NonZeroU64;

enum Job {
    /// Re-check a queue (deadline reached, key deleted, db flushed or swapped).
    Settle { key: QueueKey, due: Millis },
    /// A waiter disconnected before its grant's reply went out: release that grant.
    Revoke { key: QueueKey, token: Token },
    /// A waiter's WAIT timeout ran out.
    TimeOut { client_id: u64 },
    /// A `CONFIG RESETSTAT` went by: see whether the server really ran it.
    CheckResetStat,
}

impl Job {
    /// Whether the job may write to the dataset (and so must wait while writes are paused).
    fn writes(&self) -> bool {
        matches!(self, Job::Settle { .. } | Job::Revoke { .. })
    }
}

/// A module context for creating timers from callbacks that have none (unlink, free).
static TIMER_CTX: AtomicPtr<raw::RedisModuleCtx> = AtomicPtr::new(std::ptr::null_mut());

/// Keep a detached context for timers. Called once at load.
pub fn init(ctx: &Context) {
    // SAFETY: GetDetachedThreadSafeContext returns a context owned by the module for its lifetime.
    let detached = unsafe {
        raw::RedisModule_GetDetachedThreadSafeContext.map_or(std::ptr::null_mut(), |f| f(ctx.ctx))
    };
    TIMER_CTX.store(detached, Ordering::Relaxed);
}

fn start_timer(delay_ms: Millis, job: Job) -> Option<TimerId> {
    let ctx = TIMER_CTX.load(Ordering::Relaxed);
    let data = Box::into_raw(Box::new(job)).cast::<c_void>();
    // SAFETY: CreateTimer is called on the main thread; `on_timer` (or `stop_timer`) takes the
    // box back exactly once.
    unsafe {
        match raw::RedisModule_CreateTimer {
            Some(create) => TimerId::new(create(
                ctx,
                delay_ms.clamp(0, MAX_TIMER_DELAY_MS),
                Some(on_timer),
                data,
            )),
            None => {
                drop(Box::from_raw(data.cast::<Job>()));
                None
            }
        }
    }
}

/// Stop a timer that has not fired yet and free its job.
pub fn stop_timer(timer: Option<TimerId>) {
    let Some(id) = timer else {
        return;
    };
    let ctx = TIMER_CTX.load(Ordering::Relaxed);
    let mut data: *mut c_void = std::ptr::null_mut();
    // SAFETY: StopTimer hands back the data pointer of a pending timer of this module, which is
    // a box made in `start_timer`; after it succeeds the timer never fires.
    unsafe {
        if let Some(stop) = raw::RedisModule_StopTimer {
            if stop(ctx, id.get(), &mut data) == raw::REDISMODULE_OK as i32 && !data.is_null() {
                drop(Box::from_raw(data.cast::<Job>()));
            }
        }
    }
}

/// Time the waiter `client_id` out after `timeout_ms` (very long timeouts just wait).
pub fn time_out_after(client_id: u64, timeout_ms: Millis) -> Option<TimerId> {
    if timeout_ms > MAX_TIMER_DELAY_MS {
        return None;
    }
    start_timer(timeout_ms, Job::TimeOut { client_id })
}

/// Look at the server's statistics once the current command has run.
pub fn check_resetstat_soon() {
    start_timer(0, Job::CheckResetStat);
}

/// Whether the server pauses writes right now (`CLIENT PAUSE`, `FAILOVER`, shutdown).
fn writes_paused() -> bool {
    // SAFETY: AvoidReplicaTraffic takes no arguments and reads the server's pause state.
    unsafe { raw::RedisModule_AvoidReplicaTraffic.is_some_and(|f| f() != 0) }
}

extern "C" fn on_timer(ctx: *mut raw::RedisModuleCtx, data: *mut c_void) {
    if data.is_null() {
        return;
    }
    // SAFETY: `data` is the box made in `start_timer`; Redis calls each timer once.
    let job = unsafe { Box::from_raw(data.cast::<Job>()) };
    let ctx = Context::new(ctx);
    if let Job::Settle { key, due } = &*job {
        // Bookkeeping first, so a failure below cannot leave the queue believing a timer is
        // still pending.
        waiters::timer_fired(key, *due);
    }
    if job.writes() && writes_paused() {
        // Hand nothing over until writes resume.
        start_timer(PAUSED_RETRY_MS, *job);
        return;
    }
    let ran = guard::contain(
        "a timer",
        || false,
        || {
            run(&ctx, &job);
            true
        },
    );
    // Every job can run again without harm: after a panic try once more a little later, so a
    // waiter is never left without a timer.
    if !ran && !matches!(*job, Job::CheckResetStat) {
        let _ = start_timer(RETRY_AFTER_PANIC_MS, *job);
    }
}

fn run(ctx: &Context, job: &Job) {
    match job {
        Job::Settle { key, .. } => settle(ctx, key, None),
        Job::Revoke { key, token } => settle(ctx, key, Some(*token)),
        &Job::TimeOut { client_id } => {
            if let Some(mut client) = waiters::leave(client_id) {
                client.timeout = None; // this timer: it has fired
                STATS.wait_timeouts.incr();
                blocking::answer(client, Answer::TimedOut);
            }
        }
        Job::CheckResetStat => crate::resetstat::check(),
    }
}

/// Settle `key`'s queue at `due` (unix ms), unless a timer at least as early is pending.
pub fn settle_at(key: &QueueKey, due: Millis) {
    if waiters::want_timer(key, due) {
        let _ = start_timer(
            due.saturating_sub(clock::now_ms()),
            Job::Settle {
                key: key.clone(),
                due,
            },
        );
    }
}

/// Settle `key`'s queue on the next turn of the event loop.
pub fn settle_soon(key: &QueueKey) {
    settle_at(key, clock::now_ms());
}

/// Release the grant `token` of `key` on the next turn of the event loop, if it still holds.
pub fn revoke_later(key: QueueKey, token: Token) {
    let _ = start_timer(0, Job::Revoke { key, token });
}

/// Bring `key` in line with its queue: a free lock goes to the head of the queue; an expired
/// or revoked one with nobody waiting is deleted; a live one gets a timer at its deadline.
pub fn settle(ctx: &Context, key: &QueueKey, revoked: Option<Token>) {
    if ctx.get_flags().contains(ContextFlags::SLAVE) {
        return; // replicas never grant or expire on their own
    }
    keyspace::select_db(ctx, key.db);
    let name = RedisString::create_from_slice(ctx.ctx, &key.name);
    if !crate::cluster::may_grant(ctx, &name) {
        // The slot left this node (resharding): its waiters retry and follow the redirect.
        fail(waiters::take_all(key), LockError::SlotMoved);
        return;
    }
    let lock = LockKey::open(ctx, &name);
    match lock.holder() {
        Ok(holder) => {
            let holder = holder.filter(|h| Some(h.token) != revoked);
            pass_on(&lock, holder.as_ref(), clock::now_ms());
        }
        Err(err) => {
            // Another type now lives under this name (SET, RESTORE, RENAME onto it).
            fail(waiters::take_all(key), err);
        }
    }
}

/// The holder is `holder` (maybe expired or gone): if it is not live, hand the lock to the
/// head of the queue, or delete it when nobody waits. Keeps a timer at the live deadline.
pub fn pass_on(lock: &LockKey, holder: Option<&Holder>, now: Millis) {
    // Most locks have nobody waiting: skip building the queue key then.
    let key = waiters::anyone_waiting().then(|| lock.queue_key());
    if let Some(key) = &key {
        let would_create = !lock.exists() && live(holder, now).is_none();
        if would_create && waiters::has_waiters(key) && lock.expired_value_kept() {
            // Redis keeps an expired lock it may not delete now (writes are paused): creating
            // a new value over it would trip Redis's own assertion. Try again shortly.
            settle_at(key, now.saturating_add(PAUSED_RETRY_MS));
            return;
        }
    }
    let handed = key
        .as_ref()
        .and_then(|key| waiters::hand_off(key, holder, now).map(|h| (key, h)));
    if let Some((key, (waiter, granted))) = handed {
        if let Err(err) = lock.store(&granted, LockEvent::Handoff, now) {
            blocking::answer(waiter.client.handle, Answer::Failed(err));
            return;
        }
        STATS.acquired_after_wait.incr();
        STATS
            .wait_time
            .record(clock::now_us().saturating_sub(waiter.client.since_us));
        blocking::answer(
            waiter.client.handle,
            Answer::Granted(Grant {
                key: key.clone(),
                owner: granted.owner.clone(),
                token: granted.token,
                with_owner: waiter.client.with_owner,
            }),
        );
        settle_at(key, granted.deadline);
    } else if let Some(live) = live(holder, now) {
        if let Some(key) = &key {
            settle_at(key, live.deadline);
        }
    } else {
        lock.remove(now);
    }
}

/// Answer every waiter of a lock with `err` (used when the server stops being a master).
pub fn fail_everyone(err: LockError) {
    fail(waiters::take_everyone(), err);
}

/// Answer waiters taken out of their queues with `err`.
fn fail(taken: Vec<waiters::BlockedWaiter>, err: LockError) {
    for waiter in taken {
        blocking::answer(waiter.client.handle, Answer::Failed(err));
    }
}

/// The last lock that left the keyspace after its deadline, so the `expired` notification that
/// follows it can tell a lock's expiry from any other key's.
struct Unlinked {
    db: i32,
    name: Box<[u8]>,
    granted: Millis,
    deadline: Millis,
}

static LAST_UNLINKED: Mutex<Option<Unlinked>> = Mutex::new(None);

/// A lock value left the keyspace (unlink hook). Only one past its deadline can be an expiry.
pub fn note_unlinked(db: i32, name: &[u8], holder: &Holder) {
    if clock::now_ms() >= holder.deadline {
        let mut slot = LAST_UNLINKED.lock().unwrap_or_else(|p| p.into_inner());
        *slot = Some(Unlinked {
            db,
            name: name.into(),
            granted: holder.granted,
            deadline: holder.deadline,
        });
    }
}

/// Redis expired a key (its own lazy or active expiry): if it was a lock, its lease ran out
/// while held. Count it and emit `lock.expire`.
pub fn on_key_expired(ctx: &Context, _event: NotifyEvent, _name: &str, key: &[u8]) {
    guard::contain("the expired-key event", || (), || expired(ctx, key));
}

fn expired(ctx: &Context, key: &[u8]) {
    let db = keyspace::selected_db(ctx);
    let expired = {
        let mut slot = LAST_UNLINKED.lock().unwrap_or_else(|p| p.into_inner());
        match slot.as_ref() {
            Some(u) if u.db == db && *u.name == *key => slot.take(),
            _ => None,
        }
    };
    if let Some(lock) = expired {
        let name = RedisString::create_from_slice(ctx.ctx, key);
        let now = clock::now_ms().max(lock.deadline);
        keyspace::hold_ended(ctx, &name, lock.granted, lock.deadline, now);
    }
}
