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
use crate::core::lock::{self, LockState, Millis, Token};
use crate::core::metrics::STATS;
use crate::core::queue::Handed;
use crate::core::registry::QueueKey;
use crate::core::settle::{self, Answer, Grant, Look, Next};
use crate::effects::epochs;
use crate::effects::foreign;
use crate::effects::keyspace::{self, LockEvent, LockKey};
use crate::effects::queues::{self, BlockedWaiter};
use crate::effects::sessions;
use crate::effects::timers;
use crate::effects::watches;
use crate::ffi::block;
use crate::ffi::clock;
use crate::ffi::server;
use crate::shell::cluster;
use crate::shell::set_handoff;

/// Bring `key` in line with its queue (a settle or revoke timer, or an event). `revoked`: a
/// grant whose reply never went out, released here if it still holds.
pub fn settle(ctx: &Context, key: &QueueKey, revoked: Option<Token>) {
    // A lease may have ended here (on a replica too, which parks the lock below).
    watches::changed(key);
    if ctx.get_flags().contains(ContextFlags::SLAVE) {
        // Replicas never grant or expire on their own: the master deletes the lock, or this
        // node does once it is promoted.
        timers::park(key.clone());
        return;
    }
    server::select_db(ctx, key.db);
    let name = RedisString::create_from_slice(ctx.ctx, &key.name);
    if !cluster::may_grant(ctx, &name) {
        // The slot left this node (resharding): its waiters retry and follow the redirect.
        fail(queues::take_all(key), LockError::SlotMoved);
        return;
    }
    let lock = LockKey::open(ctx, &name);
    let now = clock::now_ms();
    match lock.state() {
        Ok(state) => {
            foreign::unwatch(key);
            let revoked_hold = revoked.and_then(|token| {
                let state = state.as_ref()?;
                state
                    .holds()
                    .any(|(h, _)| h.token == token)
                    .then(|| lock::without(state, token, now))
            });
            let state = match revoked_hold {
                // The grant's reply never went out: that hold ends now (others stay).
                Some(Some(rest)) => match lock.set_replicated(rest.clone(), now) {
                    Ok(()) => Some(rest),
                    Err(_) => state,
                },
                Some(None) => None,
                None => state,
            };
            pass_on(&lock, state.as_ref(), now);
        }
        Err(err) => match keyspace::foreign_or_gone(ctx, &name, err) {
            // Another client's plain-string lock holds the name: its waiters wait on.
            Ok(Some(ttl)) if queues::has_waiters(key) => {
                foreign::watch(key, foreign::due(ttl, now))
            }
            Ok(Some(_)) => foreign::unwatch(key),
            Ok(None) => {
                // The string ran out between the two looks: settle the name afresh, now free
                // (the first handle is stale; a string cannot come back, so once more is all).
                drop(lock);
                settle(ctx, key, revoked);
            }
            Err(err) => {
                // Another type now lives under this name (SET, RESTORE, RENAME onto it).
                foreign::unwatch(key);
                fail(queues::take_all(key), err);
            }
        },
    }
}

/// The key's stored state is `state` (some holds may have run out, or it may be gone): do what
/// `settle::decide` says. Holds that ran out beside live ones are dropped first; a lock whose
/// queue head fits is handed over; one nobody waits for and nobody holds is deleted; otherwise
/// the schedule watches the next deadline.
pub fn pass_on(lock: &LockKey, state: Option<&LockState>, now: Millis) {
    let pruned = state.and_then(|s| settle::pruned(s, now));
    let state = match pruned {
        // Storing accounts for each hold that ended and announces its expiry.
        Some(live) => match lock.set_replicated(live.clone(), now) {
            Ok(()) => Some(live),
            Err(_) => return,
        },
        None => state.cloned(),
    };
    let state = state.as_ref();
    let live = lock::live(state, now);
    let next_deadline = live.and_then(|s| s.next_deadline(now));
    // Most locks have nobody waiting: skip building the queue key then.
    let key = (queues::anyone_waiting() || next_deadline.is_some()).then(|| lock.queue_key());
    let waiting = queues::anyone_waiting() && key.as_ref().is_some_and(queues::has_waiters);
    let next = settle::decide(
        Look {
            next_deadline,
            waiting,
            head_fits: waiting
                && key
                    .as_ref()
                    .is_some_and(|k| queues::head_fits(k, state, now)),
        },
        now,
    );
    match (next, &key) {
        // Nobody could be served (no token left, or a set at the head waits for its other
        // keys): watch the live holds, or let a free lock's value go.
        (Next::HandOff, Some(key)) if !hand_off(lock, key, state, now) => match next_deadline {
            Some(at) => watch(lock, key, at),
            None => lock.remove(now),
        },
        (Next::HandOff, _) => {}
        (Next::WatchUntil(at), Some(key)) => watch(lock, key, at),
        (Next::Remove, _) => lock.remove(now),
        _ => {}
    }
}

/// Have `key` settled at `at`, unless the lease heap settles its lock value by then.
fn watch(lock: &LockKey, key: &QueueKey, at: Millis) {
    if !lock.watched_by(at) {
        timers::settle_at(key, at);
    }
}

/// Serve the head of `key`'s queue and whoever fits behind it (a set at the head is served
/// with all its keys, or not yet). False if nobody could be served.
fn hand_off(lock: &LockKey, key: &QueueKey, state: Option<&LockState>, now: Millis) -> bool {
    if epochs::ensure(lock.ctx()).is_err() {
        return false; // logged; the next grant tries again
    }
    if let Some(set) = queues::head_set(key) {
        return set_handoff::grant_waiting(lock, set, now);
    }
    let Some(handed) = queues::hand_off(key, state, now) else {
        return false;
    };
    let Handed { served, state } = handed;
    // Storing it has the lease heap settle it at its first deadline.
    if let Err(err) = lock.set_announced(state, LockEvent::Handoff, now) {
        for (waiter, _) in served {
            block::answer(waiter.client.handle, Answer::Failed(err));
        }
        return true;
    }
    for (waiter, token) in served {
        STATS.acquired_after_wait.incr();
        STATS.granted(waiter.want);
        if waiter.client.session {
            sessions::bind(waiter.client.client_id, key.clone(), token);
        }
        STATS
            .wait_time
            .record(clock::mono_us().saturating_sub(waiter.client.since_us));
        block::answer(
            waiter.client.handle,
            Answer::Granted(Grant {
                key: key.clone(),
                owner: waiter.owner,
                token,
                with_owner: waiter.client.with_owner,
            }),
        );
    }
    // Readers just served may let a SHARED set that now heads the queue in too.
    if let Some(set) = queues::head_set(key) {
        set_handoff::grant_waiting(lock, set, now);
    }
    true
}

/// A hold (or every hold) is gone: say so, store what is left, and hand the lock to whoever now
/// fits at the head of the queue (or free it).
pub fn release_hold(lock: &LockKey, rest: Option<LockState>, now: Millis) -> Result<(), LockError> {
    match rest {
        Some(rest) => {
            let kept = rest.clone();
            lock.set_announced(rest, LockEvent::Release, now)?;
            pass_on(lock, Some(&kept), now);
        }
        None => {
            lock.notify(LockEvent::Release);
            pass_on(lock, None, now);
        }
    }
    Ok(())
}

/// The connection that kept the session hold `token` of `key` closed: release that hold, if it
/// is still live there, exactly as `LOCK.RELEASE` would.
pub fn end_session_hold(ctx: &Context, key: &QueueKey, token: Token) {
    if ctx.get_flags().contains(ContextFlags::SLAVE) {
        return;
    }
    server::select_db(ctx, key.db);
    let name = RedisString::create_from_slice(ctx.ctx, &key.name);
    let lock = LockKey::open(ctx, &name);
    let now = clock::now_ms();
    let Ok(Some(state)) = lock.state() else {
        return;
    };
    if !state
        .holds()
        .any(|(h, _)| h.token == token && h.is_live(now))
    {
        return;
    }
    STATS.session_releases.incr();
    let _ = release_hold(&lock, lock::without(&state, token, now), now);
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
