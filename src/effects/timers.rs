//! Scheduling work for later: settle a queue at a deadline, time a waiter out, look at the
//! server's statistics after a `CONFIG RESETSTAT`. The shell's timer handler runs the jobs.
//!
//! A lock with nobody waiting needs no timer: its key carries a TTL at its deadline and Redis
//! removes it (and replicates the DEL). A lock with waiters gets one timer at its deadline, so
//! the head of the queue is served within a millisecond or two, not at Redis's 100 ms sweep.

use crate::core::lock::Millis;
use crate::core::registry::QueueKey;
use crate::core::settle::Job;
use crate::effects::queues;
use crate::ffi::clock;
use crate::ffi::timer::{self, TimerId};

/// Settle `key`'s queue at `due` (unix ms), unless a timer at least as early is pending.
pub fn settle_at(key: &QueueKey, due: Millis) {
    if queues::want_timer(key, due) {
        let _ = timer::start(
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

/// Time the waiter `client_id` out after `timeout_ms` (very long timeouts just wait).
pub fn time_out_after(client_id: u64, timeout_ms: Millis) -> Option<TimerId> {
    if timeout_ms > timer::MAX_DELAY_MS {
        return None;
    }
    timer::start(timeout_ms, Job::TimeOut { client_id })
}

/// Look at the server's statistics once the current command has run.
pub fn check_resetstat_soon() {
    let _ = timer::start(0, Job::CheckResetStat);
}

/// Release the session holds of the connection `client_id` on the next turn of the event loop.
pub fn end_session_soon(client_id: u64) {
    let _ = timer::start(0, Job::EndSession { client_id });
}

/// Start this master's fencing epoch on the next turn of the event loop (after start-up has
/// loaded the data, or once a promotion is done).
pub fn start_epoch_soon() {
    let _ = timer::start(0, Job::StartEpoch);
}

/// Run `job` again after `delay_ms` (paused writes, a panic).
pub fn retry(delay_ms: Millis, job: Job) {
    let _ = timer::start(delay_ms, job);
}
