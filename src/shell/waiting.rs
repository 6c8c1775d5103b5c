//! Settling queues: the one place that carries out what `core::settle::decide` says a lock
//! needs. Timers, DEL/FLUSH/SWAPDB events, revoked grants and releases all end up here, and
//! running it twice does no harm.
//!
//! While the server pauses writes (`CLIENT PAUSE`, `FAILOVER`, a shutdown waiting for
//! replicas) it keeps the dataset still so a replica can catch up exactly; Redis 7.0 even
//! asserts that nothing is propagated then. The server says whether that is the case, so the
//! timer handler (`callbacks`) holds writing jobs back until the pause ends.

use redis_module::{Context, ContextFlags, RedisString};

use crate::core::error::LockError;
use crate::core::lock::{live, Holder, Millis, Token};
use crate::core::metrics::STATS;
use crate::core::registry::QueueKey;
use crate::core::settle::{self, Answer, Grant, Next};
use crate::effects::keyspace::{LockEvent, LockKey};
use crate::effects::queues::{self, BlockedWaiter};
use crate::effects::timers;
use crate::ffi::block;
use crate::ffi::clock;
use crate::ffi::server;
use crate::shell::cluster;

/// Bring `key` in line with its queue (a settle or revoke timer, or an event). `revoked`: a
/// grant whose reply never went out, released here if it still holds.
pub fn settle(ctx: &Context, key: &QueueKey, revoked: Option<Token>) {
    if ctx.get_flags().contains(ContextFlags::SLAVE) {
        return; // replicas never grant or expire on their own
    }
    server::select_db(ctx, key.db);
    let name = RedisString::create_from_slice(ctx.ctx, &key.name);
    if !cluster::may_grant(ctx, &name) {
        // The slot left this node (resharding): its waiters retry and follow the redirect.
        fail(queues::take_all(key), LockError::SlotMoved);
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
            fail(queues::take_all(key), err);
        }
    }
}

/// The holder is `holder` (maybe expired or gone): do what `settle::decide` says. A free lock
/// goes to the head of the queue; one nobody waits for is deleted; a live one with waiters gets
/// a timer at its deadline.
pub fn pass_on(lock: &LockKey, holder: Option<&Holder>, now: Millis) {
    // Most locks have nobody waiting: skip building the queue key then.
    let key = queues::anyone_waiting().then(|| lock.queue_key());
    let waiting = key.as_ref().is_some_and(queues::has_waiters);
    let next = settle::decide(
        live(holder, now).map(|h| h.deadline),
        waiting,
        lock.exists(),
        || lock.expired_value_kept(),
        now,
    );
    match (next, &key) {
        // No token left to issue: nobody can be served, the expired value goes.
        (Next::HandOff, Some(key)) if !hand_off(lock, key, holder, now) => lock.remove(now),
        (Next::HandOff, _) => {}
        (Next::WatchUntil(at) | Next::RetryAt(at), Some(key)) => timers::settle_at(key, at),
        (Next::Remove, _) => lock.remove(now),
        _ => {}
    }
}

/// Grant the lock to the head of `key`'s queue. False if nobody could be served.
fn hand_off(lock: &LockKey, key: &QueueKey, holder: Option<&Holder>, now: Millis) -> bool {
    let Some((waiter, granted)) = queues::hand_off(key, holder, now) else {
        return false;
    };
    if let Err(err) = lock.store(&granted, LockEvent::Handoff, now) {
        block::answer(waiter.client.handle, Answer::Failed(err));
        return true;
    }
    STATS.acquired_after_wait.incr();
    STATS
        .wait_time
        .record(clock::now_us().saturating_sub(waiter.client.since_us));
    block::answer(
        waiter.client.handle,
        Answer::Granted(Grant {
            key: key.clone(),
            owner: granted.owner.clone(),
            token: granted.token,
            with_owner: waiter.client.with_owner,
        }),
    );
    timers::settle_at(key, granted.deadline);
    true
}

/// Answer every waiter with `err` (used when the server stops being a master).
pub fn fail_everyone(err: LockError) {
    fail(queues::take_everyone(), err);
}

/// Answer waiters taken out of their queues with `err`.
fn fail(taken: Vec<BlockedWaiter>, err: LockError) {
    for waiter in taken {
        block::answer(waiter.client.handle, Answer::Failed(err));
    }
}
