//! The one file where Redis calls back up into the shell. The trampolines of `ffi` (timers,
//! blocked clients, the type's unlink hook, server events, the command filter, INFO) hand over
//! to the `HANDLERS` below, which `lib.rs` installs at load; the expired-key event is registered
//! by `lib.rs` directly. Nothing imports this file but `lib.rs`.
//!
//! Handlers here may run in the middle of a command (`unlinked` inside any key lookup): the
//! rules they follow are written once, in `docs/architecture.md`, *Re-entrancy rules*.

use redis_module::{Context, InfoContext};

use crate::core::error::LockError;
use crate::core::fencing;
use crate::core::metrics::STATS;
use crate::core::registry::QueueKey;
use crate::core::settle::{Answer, Job};
use crate::core::value::LockValue;
use crate::effects::adrift;
use crate::effects::epochs;
use crate::effects::foreign;
use crate::effects::queues;
use crate::effects::sessions;
use crate::effects::timers;
use crate::effects::watches;
use crate::ffi::block;
use crate::ffi::handlers::{CommandArgs, Handlers, Place};
use crate::ffi::panics;
use crate::ffi::server;
use crate::shell::filter;
use crate::shell::info;
use crate::shell::renames;
use crate::shell::resetstat;
use crate::shell::settling;
use crate::shell::watch;

/// How soon to look again while writes are paused.
const PAUSED_RETRY_MS: i64 = 10;

/// How soon a timer whose job panicked runs it again.
const RETRY_AFTER_PANIC_MS: i64 = 1_000;

pub static HANDLERS: Handlers = Handlers {
    alarm: on_alarm,
    cron,
    revoke: revoke_soon,
    disconnected,
    client_unblocked,
    arrived,
    unlinked,
    freed,
    flush_starting,
    flushed,
    swapped,
    demoted,
    promoted,
    client_closed,
    load_started,
    load_failed: fencing::load_failed,
    config_changed,
    any_command,
    command_seen,
    // RESET.
    command_seen_words: 1,
    after_command: filter::register_if_needed,
    info: on_info,
};

/// The server's cron: the module's timer will fire on time, the filter is there only with work.
fn cron(ctx: &Context) {
    timers::tick();
    filter::keep_if_needed(ctx);
}

/// The module's timer fired: run every job that is due, each on its own (a panic or paused
/// writes hold back only that job), then set the timer for the rest.
fn on_alarm(ctx: &Context) {
    for job in timers::alarm_rang() {
        run_contained(ctx, job);
    }
    timers::rearm_after_alarm();
    filter::keep_if_needed(ctx);
}

fn revoke_soon(job: Job) {
    timers::retry(0, job);
}

fn run_contained(ctx: &Context, job: Job) {
    if job.writes() && (server::writes_paused() || server::writes_refused(ctx)) {
        // Hand nothing over until writes resume (a pause ends, or replicas are back).
        timers::retry(PAUSED_RETRY_MS, job);
        return;
    }
    let ran = panics::contain(
        "a timer",
        || false,
        || {
            run(ctx, &job);
            true
        },
    );
    // Every job can run again without harm: after a panic try once more a little later, so a
    // waiter is never left without a timer.
    if !ran {
        timers::retry(RETRY_AFTER_PANIC_MS, job);
    }
}

fn run(ctx: &Context, job: &Job) {
    match job {
        Job::Settle { key } => settling::settle(ctx, key, None),
        Job::Revoke { key, token } => settling::settle(ctx, key, Some(*token)),
        &Job::TimeOut { client_id } => {
            if let Some((client, settle)) = queues::leave(client_id) {
                STATS.wait_timeouts.incr();
                block::answer(client, Answer::TimedOut);
                settle_after_leaving(settle);
            } else if let Some(watcher) = watches::leave(client_id) {
                block::answer(watcher, Answer::TimedOut);
            }
        }
        Job::LookAtWatched => watch::look(ctx, watches::take_changed()),
        Job::RecheckWatched => watches::recheck_due(),
        Job::FindAdrift => renames::step(ctx),
        Job::StartEpoch => {
            // A replica reads it too: grants it replays go to its own AOF.
            epochs::persistence_settings_changed(ctx);
            epochs::start_if_master(ctx);
        }
        Job::LookAtForeign => {
            for key in foreign::take_look() {
                settling::settle(ctx, &key, None);
            }
        }
        &Job::EndSession { client_id } => {
            for (key, token) in sessions::take(client_id) {
                settling::end_session_hold(ctx, &key, token);
            }
        }
    }
}

fn disconnected(client_id: u64) {
    if let Some((handle, settle)) = queues::leave(client_id) {
        STATS.waiters_disconnected.incr();
        block::release_handle(handle);
        settle_after_leaving(settle);
    } else if let Some(handle) = watches::leave(client_id) {
        block::release_handle(handle);
    }
}

fn client_unblocked(client_id: u64) {
    if let Some((handle, settle)) = queues::leave(client_id) {
        STATS.wait_timeouts.incr();
        block::release_handle(handle);
        settle_after_leaving(settle);
    } else if let Some(handle) = watches::leave(client_id) {
        block::release_handle(handle);
    }
}

/// The head of a queue left: who stands behind it may fit now (readers behind a writer, a
/// small semaphore request behind a big one). Settled on the next turn of the event loop.
fn settle_after_leaving(queues: Vec<QueueKey>) {
    for key in &queues {
        timers::settle_soon(key);
    }
}

/// A lock joined the keyspace (loaded or copied): count it, keep the token source above its
/// tokens (a restored value may carry tokens this server never handed out), and end its leases
/// on time under its name.
fn arrived(place: Option<Place<'_>>, value: &mut LockValue) {
    for (holder, _) in value.state.holds() {
        fencing::observe(holder.token);
    }
    STATS.locks.add(1);
    STATS.count_holds(&value.state, 1);
    if let Some(place) = place {
        let due = value.state.first_deadline();
        timers::watch_lease(value, place.db, place.name, due);
        if watches::anyone_watching() {
            watches::changed(&QueueKey {
                db: place.db,
                name: place.name.into(),
            });
        }
    }
}

/// A lock left the keyspace (DEL, RENAME or MOVE away, overwritten, a TTL set by hand): stop
/// watching the name (`renames` finds it if it went elsewhere), and if anyone waits for the
/// name, let a timer settle it on the next turn of the event loop.
fn unlinked(db: i32, name: &[u8], value: &LockValue) {
    for (holder, _) in value.state.holds() {
        sessions::unbind(holder.token); // the hold left this name
    }
    timers::forget_lease(value, db, name);
    adrift::left(std::ptr::from_ref(value) as usize);
    if watches::anyone_watching() || queues::anyone_waiting() {
        let key = QueueKey {
            db,
            name: name.into(),
        };
        watches::changed(&key);
        if queues::anyone_waiting() && queues::has_waiters(&key) {
            timers::settle_soon(&key);
        }
    }
}

/// The server frees a lock value: it is adrift no more, and goes once out of the lease heap.
fn freed(value: Box<LockValue>) {
    // Forgotten before the memory goes back: on a lazy-free thread, a value made at this
    // address afterwards must not be forgotten instead.
    adrift::freed(std::ptr::from_ref(&*value) as usize);
    timers::bury(value);
}

/// A flush starts: its values leave the lease heap while they are still there.
fn flush_starting(db: Option<i32>) {
    timers::flush_starting(db);
}

/// After a flush every lock of the flushed db(s) is free: serve their queues.
fn flushed(db: Option<i32>) {
    sessions::forget_db(db);
    timers::flushed(db);
    watches::changed_in(db);
    for key in queues::queues_in(db) {
        timers::settle_soon(&key);
    }
}

/// The two dbs traded contents: every queue of either db meets a different holder (or none).
fn swapped(first: i32, second: i32) {
    renames::dbs_swapped();
    timers::swap_dbs(first, second);
    for db in [first, second] {
        watches::changed_in(Some(db));
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
    settling::fail_everyone(LockError::Demoted);
}

/// This replica became a master: it starts its epoch at once, before any grant, and deletes
/// the locks whose leases ran out while it was a replica (its old master did not).
fn promoted() {
    timers::start_epoch_soon();
    for key in timers::unpark_all() {
        timers::settle_soon(&key);
    }
}

/// A connection closed: if it kept session holds, release them on the next turn of the event
/// loop (freeing a client is no place to write to the keyspace).
fn client_closed(client_id: u64) {
    if sessions::keeps_any(client_id) {
        timers::end_session_soon(client_id);
    }
}

/// Without an RDB preamble an AOF rewrite's base lacks the last token: see
/// `epochs::persistence_settings_changed`.
fn config_changed(ctx: &Context, names: &[&[u8]]) {
    if names
        .iter()
        .any(|name| name.eq_ignore_ascii_case(b"aof-use-rdb-preamble"))
    {
        epochs::persistence_settings_changed(ctx);
    }
}

/// Any command may have set or deleted a plain string where someone waits behind one
/// (`foreign`) or watches (`watches`): `SET ... NX PX`, `DEL`, an old client's release script.
fn any_command() {
    foreign::command_seen();
    watches::command_seen();
}

/// RESET starts the connection afresh: its session ends (where the server names the client to
/// the filter: Redis 7.2+, Valkey). Every other one-word command costs one length check.
fn command_seen(args: &CommandArgs) {
    let first = args.get(0);
    if first.len() == 5 && first.eq_ignore_ascii_case(b"reset") {
        if let Some(id) = args.client_id().filter(|id| sessions::keeps_any(*id)) {
            timers::end_session_soon(id);
        }
    }
}

/// A load that replaces the data started (the values it replaces leave the adrift set as they
/// are freed; if the load fails, those adrift stay so).
fn load_started() {
    fencing::load_started();
    renames::dbs_swapped();
}

fn on_info(ctx: &InfoContext, for_crash_report: bool) {
    if !for_crash_report {
        resetstat::catch_up();
    }
    let _ = info::render(ctx);
}
