//! The one file where Redis calls back up into the shell. The trampolines of `ffi` (timers,
//! blocked clients, the type's unlink hook, server events, the command filter, INFO) hand over
//! to the `HANDLERS` below, which `lib.rs` installs at load; the expired-key event is registered
//! by `lib.rs` directly. Nothing imports this file but `lib.rs`.
//!
//! Re-entrancy: `unlinked` can fire inside any key lookup, including one made while settling a
//! queue, so it never settles there and then: it only notes the expiry and starts a timer. The
//! queue registry's lock (`effects::queues`) is never held while calling Redis, so a callback
//! that arrives in the middle of a command finds it free.

use redis_module::{Context, InfoContext, NotifyEvent};

use crate::core::error::LockError;
use crate::core::fencing;
use crate::core::lock::LockState;
use crate::core::metrics::STATS;
use crate::core::registry::QueueKey;
use crate::core::settle::{Answer, Job};
use crate::effects::epochs;
use crate::effects::keyspace;
use crate::effects::queues;
use crate::effects::sessions;
use crate::effects::timers;
use crate::ffi::block;
use crate::ffi::guard;
use crate::ffi::handlers::{CommandArgs, Handlers};
use crate::ffi::server;
use crate::shell::info;
use crate::shell::resetstat;
use crate::shell::waiting;

/// How soon to look again while writes are paused.
const PAUSED_RETRY_MS: i64 = 10;

/// How soon a timer whose job panicked runs it again.
const RETRY_AFTER_PANIC_MS: i64 = 1_000;

pub static HANDLERS: Handlers = Handlers {
    timer: on_timer,
    disconnected,
    client_unblocked,
    unlinked,
    flushed,
    swapped,
    demoted,
    promoted,
    client_closed,
    command_seen,
    // RESET, EXEC, DISCARD and CONFIG RESETSTAT.
    command_seen_words: 2,
    info: on_info,
};

fn on_timer(ctx: &Context, job: Job) {
    if let Job::Settle { key, due } = &job {
        // Bookkeeping first, so a failure below cannot leave the queue believing a timer is
        // still pending.
        queues::timer_fired(key, *due);
    }
    if job.writes() && server::writes_paused() {
        // Hand nothing over until writes resume.
        timers::retry(PAUSED_RETRY_MS, job);
        return;
    }
    let ran = guard::contain(
        "a timer",
        || false,
        || {
            run(ctx, &job);
            true
        },
    );
    // Every job can run again without harm: after a panic try once more a little later, so a
    // waiter is never left without a timer.
    if !ran && job.retry_after_panic() {
        timers::retry(RETRY_AFTER_PANIC_MS, job);
    }
}

fn run(ctx: &Context, job: &Job) {
    match job {
        Job::Settle { key, .. } => waiting::settle(ctx, key, None),
        Job::Revoke { key, token } => waiting::settle(ctx, key, Some(*token)),
        &Job::TimeOut { client_id } => {
            if let Some((mut client, settle)) = queues::leave(client_id) {
                client.timeout = None; // this timer: it has fired
                STATS.wait_timeouts.incr();
                block::answer(client, Answer::TimedOut);
                settle_after_leaving(settle);
            }
        }
        Job::CheckResetStat => resetstat::check(),
        Job::StartEpoch => epochs::start_if_master(ctx),
        &Job::EndSession { client_id } => {
            for (key, token) in sessions::take(client_id) {
                waiting::end_session_hold(ctx, &key, token);
            }
        }
    }
}

fn disconnected(client_id: u64) {
    if let Some((handle, settle)) = queues::leave(client_id) {
        STATS.waiters_disconnected.incr();
        block::release_handle(handle);
        settle_after_leaving(settle);
    }
}

fn client_unblocked(client_id: u64) {
    if let Some((handle, settle)) = queues::leave(client_id) {
        STATS.wait_timeouts.incr();
        block::release_handle(handle);
        settle_after_leaving(settle);
    }
}

/// The head of a queue left: who stands behind it may fit now (readers behind a writer, a
/// small semaphore request behind a big one). Settled on the next turn of the event loop.
fn settle_after_leaving(queue: Option<QueueKey>) {
    if let Some(key) = queue {
        timers::settle_soon(&key);
    }
}

/// A lock left the keyspace: note a possible expiry, and if anyone waits for that name, let a
/// timer settle it on the next turn of the event loop.
fn unlinked(db: i32, name: &[u8], state: &LockState) {
    keyspace::note_unlinked(db, name, state);
    for (holder, _) in state.holds() {
        sessions::unbind(holder.token); // the hold left this name
    }
    if !queues::anyone_waiting() {
        return;
    }
    let key = QueueKey {
        db,
        name: name.into(),
    };
    if queues::has_waiters(&key) {
        timers::settle_soon(&key);
    }
}

/// After a flush every lock of the flushed db(s) is free: serve their queues.
fn flushed(db: Option<i32>) {
    sessions::forget_db(db);
    for key in queues::queues_in(db) {
        timers::settle_soon(&key);
    }
}

/// The two dbs traded contents: every queue of either db meets a different holder (or none).
fn swapped(first: i32, second: i32) {
    for db in [first, second] {
        for key in queues::queues_in(Some(db)) {
            timers::settle_soon(&key);
        }
    }
}

/// A replica never grants: waiters of a demoted master get an error at once, and it issues no
/// token until it is a master again, in an epoch above its old master's.
fn demoted() {
    fencing::leave();
    sessions::forget_all(); // a replica knows no connections: session holds live to their lease
    waiting::fail_everyone(LockError::Demoted);
}

/// This replica became a master: it starts its epoch at once, before any grant.
fn promoted() {
    timers::start_epoch_soon();
}

/// A connection closed: if it kept session holds, release them on the next turn of the event
/// loop (freeing a client is no place to write to the keyspace).
fn client_closed(client_id: u64) {
    if sessions::keeps_any(client_id) {
        timers::end_session_soon(client_id);
    }
}

/// Redis has no module event for `CONFIG RESETSTAT`: notice it (and EXEC / DISCARD, which may
/// run or drop a queued one) go by; `resetstat` checks afterwards whether the server really ran
/// it. Every other command costs one length check of its name.
fn command_seen(args: &CommandArgs) {
    let first = args.get(0);
    let candidate = match first.len() {
        // RESET starts the connection afresh: its session ends (where the server names the
        // client to the filter: Redis 7.2+, Valkey).
        5 if args.count() == 1 && first.eq_ignore_ascii_case(b"reset") => {
            if let Some(id) = args.client_id().filter(|id| sessions::keeps_any(*id)) {
                timers::end_session_soon(id);
            }
            false
        }
        4 if args.count() == 1 && first.eq_ignore_ascii_case(b"exec") => {
            resetstat::exec_is_candidate()
        }
        7 if args.count() == 1 && first.eq_ignore_ascii_case(b"discard") => {
            resetstat::discard();
            false
        }
        6 if args.count() == 2
            && first.eq_ignore_ascii_case(b"config")
            && args.get(1).eq_ignore_ascii_case(b"resetstat") =>
        {
            resetstat::candidate();
            true
        }
        _ => false,
    };
    if candidate {
        timers::check_resetstat_soon();
    }
}

fn on_info(ctx: &InfoContext) {
    let _ = info::render(ctx);
}

/// Redis expired a key (its own lazy or active expiry): if it was a lock, its lease ran out
/// while held. Registered by `lib.rs` as the keyspace `expired` event handler.
pub fn on_key_expired(ctx: &Context, _event: NotifyEvent, _name: &str, key: &[u8]) {
    guard::contain(
        "the expired-key event",
        || (),
        || keyspace::expired(ctx, server::selected_db(ctx), key),
    );
}
