//! The one Redis module timer the module keeps set (`effects::timers` decides when). When it
//! fires, the shell's `alarm` handler runs what is due.

use std::os::raw::c_void;
use std::sync::atomic::{AtomicPtr, Ordering};

use redis_module::{raw, Context};

use crate::core::lock::Millis;
use crate::ffi::handlers;

/// The longest delay a timer is started with. Redis adds `delay * 1000` to its microsecond
/// clock, so a deadline far away (from a master or an AOF) must not overflow it; a timer that
/// fires early just looks again and is set again.
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

/// Fire the alarm after `delay_ms` (clamped to 0..=MAX_DELAY_MS).
pub fn start(delay_ms: Millis) -> Option<TimerId> {
    let ctx = TIMER_CTX.load(Ordering::Relaxed);
    // SAFETY: CreateTimer is called on the main thread with a callback of the expected
    // signature and no data.
    unsafe {
        raw::RedisModule_CreateTimer.and_then(|create| {
            TimerId::new(create(
                ctx,
                delay_ms.clamp(0, MAX_DELAY_MS),
                Some(on_timer),
                std::ptr::null_mut(),
            ))
        })
    }
}

/// Stop a timer that has not fired yet.
pub fn stop(id: TimerId) {
    let ctx = TIMER_CTX.load(Ordering::Relaxed);
    // SAFETY: StopTimer only looks the id up among this module's pending timers; the data
    // pointer it hands back is null (none is given).
    unsafe {
        if let Some(stop) = raw::RedisModule_StopTimer {
            stop(ctx, id.get(), std::ptr::null_mut());
        }
    }
}

extern "C" fn on_timer(ctx: *mut raw::RedisModuleCtx, _data: *mut c_void) {
    // The handler contains panics itself, job by job.
    if let Some(h) = handlers::get() {
        (h.alarm)(&Context::new(ctx));
    }
}
