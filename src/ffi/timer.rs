//! Module timers carrying a `Job`. When one fires, the shell's `timer` handler runs the job.

use std::os::raw::c_void;
use std::sync::atomic::{AtomicPtr, Ordering};

use redis_module::{raw, Context};

use crate::core::lock::Millis;
use crate::core::settle::Job;
use crate::ffi::handlers;

/// The longest delay a timer is started with. Redis adds `delay * 1000` to its microsecond
/// clock, so a deadline far away (from a master or an AOF) must not overflow it; a timer that
/// fires early just looks again and starts the next one.
pub const MAX_DELAY_MS: Millis = 365 * 24 * 3_600_000;

/// A pending module timer (Redis never hands out id 0).
pub type TimerId = std::num::NonZeroU64;

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

/// A timer's data pointer carries its job: boxed, or, for the most common one (each waiting
/// client's timeout), the client id itself in the pointer's bits with the low bit set (a box
/// is aligned, so its low bit is clear): a waiter costs no allocation for its timer.
fn pack(job: Job) -> *mut c_void {
    if let Job::TimeOut { client_id } = job {
        if let Some(bits) = client_id
            .checked_mul(2)
            .and_then(|b| usize::try_from(b | 1).ok())
        {
            return std::ptr::without_provenance_mut(bits);
        }
    }
    Box::into_raw(Box::new(job)).cast::<c_void>()
}

/// The job `pack` put in `data`.
///
/// # Safety
/// `data` came from `pack` and is unpacked once.
unsafe fn unpack(data: *mut c_void) -> Job {
    let bits = data.addr();
    if bits & 1 == 1 {
        return Job::TimeOut {
            client_id: (bits >> 1) as u64,
        };
    }
    // SAFETY: a clear low bit: the box `pack` made (the caller unpacks it once).
    *unsafe { Box::from_raw(data.cast::<Job>()) }
}

/// Run `job` after `delay_ms` (clamped to 0..=MAX_DELAY_MS).
pub fn start(delay_ms: Millis, job: Job) -> Option<TimerId> {
    let ctx = TIMER_CTX.load(Ordering::Relaxed);
    let data = pack(job);
    // SAFETY: CreateTimer is called on the main thread; `on_timer` (or `stop`) unpacks the
    // data exactly once.
    unsafe {
        match raw::RedisModule_CreateTimer {
            Some(create) => TimerId::new(create(
                ctx,
                delay_ms.clamp(0, MAX_DELAY_MS),
                Some(on_timer),
                data,
            )),
            None => {
                drop(unpack(data));
                None
            }
        }
    }
}

/// Stop a timer that has not fired yet and free its job.
pub fn stop(timer: Option<TimerId>) {
    let Some(id) = timer else {
        return;
    };
    let ctx = TIMER_CTX.load(Ordering::Relaxed);
    let mut data: *mut c_void = std::ptr::null_mut();
    // SAFETY: StopTimer hands back the data pointer of a pending timer of this module, packed
    // in `start`; after it succeeds the timer never fires.
    unsafe {
        if let Some(stop) = raw::RedisModule_StopTimer {
            if stop(ctx, id.get(), &mut data) == raw::REDISMODULE_OK as i32 && !data.is_null() {
                drop(unpack(data));
            }
        }
    }
}

extern "C" fn on_timer(ctx: *mut raw::RedisModuleCtx, data: *mut c_void) {
    if data.is_null() {
        return;
    }
    // SAFETY: `data` was packed in `start`; Redis calls each timer once.
    let job = unsafe { unpack(data) };
    // The handler contains panics itself: it alone knows whether to run the job again.
    if let Some(h) = handlers::get() {
        (h.timer)(&Context::new(ctx), job);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::core::registry::QueueKey;

    #[test]
    fn jobs_come_back_as_they_went() {
        for client_id in [0, 1, 7, u64::MAX >> 1, u64::MAX] {
            let job = Job::TimeOut { client_id };
            // SAFETY: unpacked once, right after packing.
            let back = unsafe { unpack(pack(job)) };
            assert!(matches!(back, Job::TimeOut { client_id: c } if c == client_id));
        }
        let key = QueueKey {
            db: 3,
            name: b"k".as_slice().into(),
        };
        let job = Job::Settle {
            key: key.clone(),
            due: 9,
        };
        // SAFETY: as above.
        let back = unsafe { unpack(pack(job)) };
        assert!(matches!(back, Job::Settle { key: k, due: 9 } if k == key));
    }
}
