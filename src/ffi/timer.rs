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

/// Run `job` after `delay_ms` (clamped to 0..=MAX_DELAY_MS).
pub fn start(delay_ms: Millis, job: Job) -> Option<TimerId> {
    let ctx = TIMER_CTX.load(Ordering::Relaxed);
    let data = Box::into_raw(Box::new(job)).cast::<c_void>();
    // SAFETY: CreateTimer is called on the main thread; `on_timer` (or `stop`) takes the box
    // back exactly once.
    unsafe {
        match raw::RedisModule_CreateTimer {
            Some(create) => TimerId::new(create(
                ctx,
                delay_ms.clamp(0, MAX_DELAY_MS),
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
pub fn stop(timer: Option<TimerId>) {
    let Some(id) = timer else {
        return;
    };
    let ctx = TIMER_CTX.load(Ordering::Relaxed);
    let mut data: *mut c_void = std::ptr::null_mut();
    // SAFETY: StopTimer hands back the data pointer of a pending timer of this module, which is
    // a box made in `start`; after it succeeds the timer never fires.
    unsafe {
        if let Some(stop) = raw::RedisModule_StopTimer {
            if stop(ctx, id.get(), &mut data) == raw::REDISMODULE_OK as i32 && !data.is_null() {
                drop(Box::from_raw(data.cast::<Job>()));
            }
        }
    }
}

extern "C" fn on_timer(ctx: *mut raw::RedisModuleCtx, data: *mut c_void) {
    if data.is_null() {
        return;
    }
    // SAFETY: `data` is the box made in `start`; Redis calls each timer once.
    let job = unsafe { Box::from_raw(data.cast::<Job>()) };
    // The handler contains panics itself: it alone knows whether to run the job again.
    if let Some(h) = handlers::get() {
        (h.timer)(&Context::new(ctx), *job);
    }
}
