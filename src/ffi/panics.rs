//! Panics never cross into Redis. A panic unwinding out of an `extern "C"` callback aborts the
//! process, and with it the whole database, so every entry point Redis calls (command handlers,
//! timers, server and keyspace events, type callbacks, blocking callbacks, the command filter,
//! the INFO callback) runs its body through `contain`: the panic is caught, written to the
//! server log with where it happened, counted in `INFO lock` (`lock_panics`), and the entry
//! point returns its fallback instead.
//!
//! In debug builds (the ones the integration tests load) `LOCK.DEBUG PANIC <entry>` arms a panic
//! at the next call of a named entry point, so the tests can prove each one is contained.

use std::mem::{ManuallyDrop, MaybeUninit};
use std::panic::{self, AssertUnwindSafe};
use std::sync::Mutex;

use redis_module::{raw, Context, RedisResult, RedisString, Status};

use crate::core::error::LockError;
use crate::core::metrics::STATS;

/// A command handler, as the registration table lists them.
pub type Handler = fn(&Context, &[RedisString]) -> RedisResult;

/// Run a command handler and send its reply; a panic becomes an error reply (and a line in the
/// log). The reply goes out inside: a `RedisResult` is 144 bytes, and moving it out of
/// `catch_unwind` was a copy whose reads stalled (perf).
pub fn command(ctx: &Context, name: &str, args: &[RedisString], handler: Handler) -> Status {
    contain(
        name,
        || ctx.reply(Err(LockError::Internal.into())),
        || ctx.reply(handler(ctx, args)),
    )
}

/// The body of a command's `extern "C"` entry point: hand the arguments to `serve`, which
/// replies (through `command`, which contains panics).
pub fn serve(
    ctx: *mut raw::RedisModuleCtx,
    argv: *mut *mut raw::RedisModuleString,
    argc: std::os::raw::c_int,
    serve: impl FnOnce(&Context, &[RedisString]) -> Status,
) -> std::os::raw::c_int {
    let context = Context::new(ctx);
    with_args(ctx, argv, argc, |args| serve(&context, args)) as std::os::raw::c_int
}

/// `f` of the command's arguments, borrowed from Redis for the call: neither retained nor
/// freed (retaining and freeing each one, as `redis_module::decode_args` does, costs the
/// server more than parsing them). Up to eight are laid out in place on the stack (a
/// `SmallVec` filled and then moved was a 144-byte copy whose next read stalled: perf).
fn with_args<R>(
    ctx: *mut raw::RedisModuleCtx,
    argv: *mut *mut raw::RedisModuleString,
    argc: std::os::raw::c_int,
    f: impl FnOnce(&[RedisString]) -> R,
) -> R {
    let argc = usize::try_from(argc).unwrap_or(0);
    let raw: &[*mut raw::RedisModuleString] = if argv.is_null() || argc == 0 {
        &[]
    } else {
        // SAFETY: Redis passes `argc` valid string pointers in `argv`, alive for the whole
        // call, which outlives every use of the arguments here.
        unsafe { std::slice::from_raw_parts(argv, argc) }
    };
    let borrow = |&arg| ManuallyDrop::new(RedisString::from_redis_module_string(ctx, arg));
    if raw.len() <= 8 {
        let mut on_stack = [const { MaybeUninit::<ManuallyDrop<RedisString>>::uninit() }; 8];
        for (slot, arg) in on_stack.iter_mut().zip(raw) {
            slot.write(borrow(arg));
        }
        // SAFETY: the first `raw.len()` slots were just written; `MaybeUninit` and
        // `ManuallyDrop` have the layout of what they hold, and neither frees it (the strings
        // are Redis's).
        f(unsafe { std::slice::from_raw_parts(on_stack.as_ptr().cast(), raw.len()) })
    } else {
        let on_heap: Vec<ManuallyDrop<RedisString>> = raw.iter().map(borrow).collect();
        // SAFETY: `ManuallyDrop` has the layout of what it holds, and frees nothing.
        f(unsafe { std::slice::from_raw_parts(on_heap.as_ptr().cast(), on_heap.len()) })
    }
}

/// Where and why the last panic happened, written by the panic hook, read by `contain`.
static LAST_PANIC: Mutex<Option<String>> = Mutex::new(None);

/// Route panic messages to `contain` (and so to the server log) instead of stderr, which a
/// daemonized server does not keep. Installed once at load.
pub fn install_hook() {
    let previous = panic::take_hook();
    panic::set_hook(Box::new(move |info| {
        let message = info
            .payload()
            .downcast_ref::<&str>()
            .map(|s| (*s).to_string())
            .or_else(|| info.payload().downcast_ref::<String>().cloned())
            .unwrap_or_else(|| "(no message)".to_string());
        let place = info
            .location()
            .map(|l| format!(" at {}:{}", l.file(), l.line()))
            .unwrap_or_default();
        *LAST_PANIC.lock().unwrap_or_else(|p| p.into_inner()) = Some(format!("{message}{place}"));
        previous(info); // whoever installed a hook before us (the default one prints to stderr)
    }));
}

/// Run `body` for the entry point `entry`; if it panics, log the panic and return `fallback()`.
pub fn contain<R>(entry: &str, fallback: impl FnOnce() -> R, body: impl FnOnce() -> R) -> R {
    match panic::catch_unwind(AssertUnwindSafe(|| {
        debug_panics::trip(entry);
        body()
    })) {
        Ok(value) => value,
        Err(_) => {
            STATS.panics.incr();
            let what = LAST_PANIC
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .take()
                .unwrap_or_else(|| "(no message)".to_string());
            log_warning(&format!(
                "redis-lock: a panic in {entry} was contained (please report it): {what}"
            ));
            fallback()
        }
    }
}

/// Write one line to the server log at warning level, whatever bytes it holds.
pub fn log_warning(message: &str) {
    // The log takes a C string: NUL bytes (from a binary key in a message) become '?'.
    let bytes: Vec<u8> = message
        .bytes()
        .map(|b| if b == 0 { b'?' } else { b })
        .chain(std::iter::once(0))
        .collect();
    // SAFETY: a NULL context is allowed by RedisModule_Log; level and format are static C
    // strings and `bytes` is NUL-terminated with no interior NUL.
    unsafe {
        if let Some(log) = raw::RedisModule_Log {
            log(
                std::ptr::null_mut(),
                c"warning".as_ptr(),
                c"%s".as_ptr(),
                bytes.as_ptr().cast::<std::os::raw::c_char>(),
            );
        }
    }
}

/// Debug builds only: panics armed by `LOCK.DEBUG PANIC <entry>`, to test containment.
pub mod debug_panics {
    #[cfg(debug_assertions)]
    static ARMED: std::sync::Mutex<Vec<String>> = std::sync::Mutex::new(Vec::new());

    /// Panic here if a panic was armed for `entry` (once per arming).
    #[cfg(debug_assertions)]
    pub fn trip(entry: &str) {
        let hit = {
            let mut armed = ARMED.lock().unwrap_or_else(|p| p.into_inner());
            match armed.iter().position(|e| e.eq_ignore_ascii_case(entry)) {
                Some(at) => {
                    armed.swap_remove(at);
                    true
                }
                None => false,
            }
        };
        if hit {
            panic!("panic injected by LOCK.DEBUG PANIC {entry}");
        }
    }

    #[cfg(not(debug_assertions))]
    #[inline(always)]
    pub fn trip(_entry: &str) {}

    /// Arm one panic at the next call of `entry`.
    #[cfg(debug_assertions)]
    pub fn arm(entry: &str) {
        ARMED
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .push(entry.to_string());
    }

    /// `LOCK.DEBUG PANIC <entry>` (debug builds only): arm a panic at the next call of the
    /// entry point named as `contain` names it ("LOCK.ACQUIRE", "a timer", "the reply
    /// callback", ...). `LOCK.DEBUG PANIC-NOW` panics inside the command itself.
    #[cfg(debug_assertions)]
    pub fn register(ctx: &redis_module::Context) -> Result<(), String> {
        use std::os::raw::c_int;

        use redis_module::{raw, Context, RedisError, RedisValue};

        fn debug(_ctx: &Context, args: &[redis_module::RedisString]) -> redis_module::RedisResult {
            match args {
                [_, sub, entry] if sub.as_slice().eq_ignore_ascii_case(b"panic") => {
                    arm(&String::from_utf8_lossy(entry.as_slice()));
                    Ok(RedisValue::SimpleStringStatic("OK"))
                }
                [_, sub] if sub.as_slice().eq_ignore_ascii_case(b"panic-now") => {
                    panic!("LOCK.DEBUG PANIC-NOW")
                }
                _ => Err(RedisError::Str(
                    "ERR usage: LOCK.DEBUG PANIC <entry> | PANIC-NOW",
                )),
            }
        }

        extern "C" fn entry(
            ctx: *mut raw::RedisModuleCtx,
            argv: *mut *mut raw::RedisModuleString,
            argc: c_int,
        ) -> c_int {
            super::serve(ctx, argv, argc, |ctx, args| {
                super::command(ctx, "LOCK.DEBUG", args, debug)
            })
        }

        // SAFETY: registering a command at load time with static C strings.
        let status = unsafe {
            raw::RedisModule_CreateCommand.map_or(raw::REDISMODULE_ERR as c_int, |create| {
                create(
                    ctx.ctx,
                    c"lock.debug".as_ptr(),
                    Some(entry),
                    c"admin".as_ptr(),
                    0,
                    0,
                    0,
                )
            })
        };
        if status == raw::REDISMODULE_OK as c_int {
            Ok(())
        } else {
            Err("failed to register LOCK.DEBUG".to_string())
        }
    }

    #[cfg(not(debug_assertions))]
    pub fn register(_ctx: &redis_module::Context) -> Result<(), String> {
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_panic_becomes_the_fallback_and_is_counted() {
        let before = STATS.panics.get();
        let got = contain("test", || 7, || -> i32 { panic!("boom") });
        assert_eq!(got, 7);
        assert_eq!(STATS.panics.get(), before + 1);
        assert_eq!(contain("test", || 7, || 3), 3);
    }

    #[test]
    fn armed_debug_panics_fire_once() {
        debug_panics::arm("unit-entry");
        assert_eq!(contain("unit-entry", || 0, || 1), 0);
        assert_eq!(contain("unit-entry", || 0, || 1), 1);
    }
}
