//! Small safe wrappers over the module API: the calling client and its db, the server's version
//! and pause state, random bytes, INFO fields, replication of effects and keyspace events.

use std::ffi::CStr;
use std::os::raw::c_int;
use std::sync::atomic::{AtomicI64, Ordering};

use redis_module::{
    raw, CallOptionsBuilder, CallResult, Context, ContextFlags, InfoContext, RedisString,
    RedisValue,
};

use crate::core::error::LockError;
use crate::core::lock::LockState;
use crate::ffi::clock;
use crate::ffi::handlers;
use crate::ffi::panics;

/// The id of the calling client (for a callback of a blocked client: that client).
pub fn client_id(ctx: &Context) -> u64 {
    // SAFETY: GetClientId is part of the module API since Redis 5 and takes any context.
    unsafe { raw::RedisModule_GetClientId.map_or(0, |f| f(ctx.ctx)) }
}

/// Whether the caller may block (not in MULTI, Lua, functions, RM_Call, ...).
pub fn can_block(ctx: &Context) -> bool {
    !ctx.get_flags().contains(ContextFlags::DENY_BLOCKING)
}

/// The db the context's client has selected.
pub fn selected_db(ctx: &Context) -> i32 {
    // SAFETY: GetSelectedDb only reads the context's client.
    unsafe { raw::RedisModule_GetSelectedDb.map_or(0, |f| f(ctx.ctx)) }
}

/// Select `db` on the context's client (timer contexts start in db 0).
pub fn select_db(ctx: &Context, db: i32) {
    if selected_db(ctx) != db {
        // SAFETY: SelectDb changes the context's own (temporary) client; an invalid id fails.
        unsafe {
            if let Some(select) = raw::RedisModule_SelectDb {
                select(ctx.ctx, db);
            }
        }
    }
}

/// The server's version as 0x00MMmmpp (0 if the API is missing).
pub fn version() -> c_int {
    // SAFETY: GetServerVersion takes no arguments.
    unsafe { raw::RedisModule_GetServerVersion.map_or(0, |v| v()) }
}

/// Whether the server pauses writes right now (`CLIENT PAUSE`, `FAILOVER`, shutdown).
pub fn writes_paused() -> bool {
    // SAFETY: AvoidReplicaTraffic takes no arguments and reads the server's pause state.
    unsafe { raw::RedisModule_AvoidReplicaTraffic.is_some_and(|f| f() != 0) }
}

/// 16 bytes from the server's random source (zeros if the API were missing).
pub fn random_bytes() -> [u8; 16] {
    let mut bytes = [0u8; 16];
    // SAFETY: GetRandomBytes fills exactly `len` bytes of the buffer it is given.
    unsafe {
        if let Some(fill) = raw::RedisModule_GetRandomBytes {
            fill(bytes.as_mut_ptr(), bytes.len());
        }
    }
    bytes
}

/// One field of an INFO section, read through the module API (no command is run).
pub fn info_field(section: &CStr, field: &CStr) -> Option<String> {
    // SAFETY: GetServerInfo accepts a NULL context (the data is then freed by us, below);
    // the field's C string lives until FreeServerInfo and is copied out before.
    unsafe {
        let data = raw::RedisModule_GetServerInfo?(std::ptr::null_mut(), section.as_ptr());
        if data.is_null() {
            return None;
        }
        let value = raw::RedisModule_ServerInfoGetFieldC.and_then(|get| {
            let ptr = get(data, field.as_ptr());
            (!ptr.is_null()).then(|| CStr::from_ptr(ptr).to_string_lossy().into_owned())
        });
        if let Some(free) = raw::RedisModule_FreeServerInfo {
            free(std::ptr::null_mut(), data);
        }
        value
    }
}

/// Replace the INFO callback the registration macro installs with ours, which contains panics
/// and renders through the shell's handler.
pub fn register_info(ctx: &Context) {
    raw::register_info_function(ctx.ctx, Some(on_info));
}

extern "C" fn on_info(ctx: *mut raw::RedisModuleInfoCtx, for_crash_report: c_int) {
    panics::contain(
        "the INFO callback",
        || (),
        || {
            if let Some(h) = handlers::get() {
                (h.info)(&InfoContext::new(ctx), for_crash_report != 0);
            }
        },
    );
}

/// Emit a module keyspace event named `event` on `key`.
pub fn notify(ctx: &Context, event: &'static CStr, key: &RedisString) {
    notify_class(ctx, raw::REDISMODULE_NOTIFY_MODULE, event, key);
}

/// Emit the server's own `expired` event (class `x`) for `key`: the module removed a lock whose
/// last lease ran out, where Redis would have expired a key with a TTL.
pub fn notify_expired(ctx: &Context, key: &RedisString) {
    notify_class(ctx, raw::REDISMODULE_NOTIFY_EXPIRED, c"expired", key);
}

fn notify_class(ctx: &Context, class: c_int, event: &'static CStr, key: &RedisString) {
    // SAFETY: a static event name and a live key string, on the main thread.
    unsafe {
        if let Some(notify) = raw::RedisModule_NotifyKeyspaceEvent {
            notify(ctx.ctx, class, event.as_ptr(), key.inner);
        }
    }
}

/// Call `emit` (`RedisModule_Replicate` or `RedisModule_EmitAOF`, both C-variadic) with
/// `target` first and then the one effect that sets `key` to `state`: `LOCK.APPLY` for an
/// exclusive hold, `LOCK.APPLYSTATE` with the encoded state otherwise. A macro because the two
/// functions differ in their first argument and C variadics cannot be passed on.
macro_rules! emit_state {
    ($emit:expr, $target:expr, $key:expr, $state:expr) => {{
        use std::os::raw::c_char;
        use $crate::core::codec;
        let now = $crate::ffi::clock::now_ms();
        match $state {
            $crate::core::lock::LockState::Exclusive(holder) => {
                let record = codec::apply_record(holder, now);
                let (owner, token, left, held) = (
                    &*record.owner,
                    record.token.as_bytes(),
                    record.left.as_bytes(),
                    record.held.as_bytes(),
                );
                // SAFETY: the arguments match APPLY_FORMAT: a module string, two buffers each
                // with its length, a C string, two more buffers (alive in `record` for the
                // call); Redis copies them.
                let _ = unsafe {
                    $emit(
                        $target,
                        codec::APPLY_COMMAND.as_ptr(),
                        codec::APPLY_FORMAT.as_ptr(),
                        $key,
                        owner.as_ptr().cast::<c_char>(),
                        owner.len(),
                        token.as_ptr().cast::<c_char>(),
                        token.len(),
                        codec::APPLY_DURATIONS.as_ptr(),
                        left.as_ptr().cast::<c_char>(),
                        left.len(),
                        held.as_ptr().cast::<c_char>(),
                        held.len(),
                    )
                };
            }
            state => {
                let payload = codec::to_bytes(state, now);
                // SAFETY: APPLY_STATE_FORMAT: a module string and a buffer with its length.
                let _ = unsafe {
                    $emit(
                        $target,
                        codec::APPLY_STATE_COMMAND.as_ptr(),
                        codec::APPLY_STATE_FORMAT.as_ptr(),
                        $key,
                        payload.as_ptr().cast::<c_char>(),
                        payload.len(),
                    )
                };
            }
        }
    }};
}
pub(crate) use emit_state;

/// Replicate (and log to the AOF) the state of `key` as one effect (see `emit_state`).
pub fn replicate_state(ctx: &Context, key: &RedisString, state: &LockState) {
    // SAFETY: reading the API table's entry, filled in once at load.
    if let Some(replicate) = unsafe { raw::RedisModule_Replicate } {
        emit_state!(replicate, ctx.ctx, key.inner, state);
    }
}

/// Replicate (and log to the AOF) `LOCK.EPOCH epoch`: the epoch this master starts.
pub fn replicate_epoch(ctx: &Context, epoch: u64) {
    let text = epoch.to_string();
    // SAFETY: "b" takes a buffer and its length, alive for the call; Redis copies it.
    let _: c_int = unsafe {
        raw::RedisModule_Replicate.map_or(0, |replicate| {
            replicate(
                ctx.ctx,
                c"LOCK.EPOCH".as_ptr(),
                c"b".as_ptr(),
                text.as_ptr().cast::<std::os::raw::c_char>(),
                text.len(),
            )
        })
    };
}

/// Whether this server is a master (not a replica).
pub fn is_master(ctx: &Context) -> bool {
    ctx.get_flags().contains(ContextFlags::MASTER)
}

/// Replicate (and log to the AOF) `DEL key`.
pub fn replicate_del(ctx: &Context, key: &RedisString) {
    // SAFETY: "s" takes one module string.
    let _: c_int = unsafe {
        raw::RedisModule_Replicate.map_or(0, |replicate| {
            replicate(ctx.ctx, c"DEL".as_ptr(), c"s".as_ptr(), key.inner)
        })
    };
}

/// What a plain string under `name` (an old-style `SET NX PX` lock) says of its end: `None` if
/// `name` holds no string, else its time to live in ms (`None` inside: it has none).
pub fn string_ttl(ctx: &Context, name: &RedisString) -> Option<Option<i64>> {
    // SAFETY: the key is opened for reading on the context's db, only its type and expiry are
    // read, and it is closed before returning; `name` outlives the call.
    unsafe {
        let open = raw::RedisModule_OpenKey?;
        let close = raw::RedisModule_CloseKey?;
        let key =
            open(ctx.ctx, name.inner, raw::REDISMODULE_READ as c_int).cast::<raw::RedisModuleKey>();
        if key.is_null() {
            return None;
        }
        let is_string = raw::RedisModule_KeyType
            .is_some_and(|t| t(key) == raw::REDISMODULE_KEYTYPE_STRING as c_int);
        let ttl = raw::RedisModule_GetExpire.map_or(-1, |expire| expire(key));
        close(key);
        is_string.then_some((ttl >= 0).then_some(ttl))
    }
}

/// The server's `min-replicas-to-write`, read at most every `SETTING_READ_MS` (a `CONFIG GET`
/// costs far more than the check it guards, and the setting rarely changes).
static MIN_REPLICAS: AtomicI64 = AtomicI64::new(0);
static MIN_REPLICAS_READ_AT: AtomicI64 = AtomicI64::new(i64::MIN);
const SETTING_READ_MS: i64 = 100;

fn min_replicas_to_write(ctx: &Context) -> i64 {
    let now = clock::now_ms();
    let read_at = MIN_REPLICAS_READ_AT.load(Ordering::Relaxed);
    if now.saturating_sub(read_at) >= SETTING_READ_MS {
        let value = config_get(ctx, "min-replicas-to-write")
            .parse()
            .unwrap_or(0);
        MIN_REPLICAS.store(value, Ordering::Relaxed);
        MIN_REPLICAS_READ_AT.store(now, Ordering::Relaxed);
    }
    MIN_REPLICAS.load(Ordering::Relaxed)
}

/// A server setting's value as `CONFIG GET` shows it ("" when unknown).
fn config_get(ctx: &Context, name: &str) -> String {
    match ctx.call("CONFIG", &["GET", name]) {
        Ok(RedisValue::Array(pair)) => match pair.get(1) {
            Some(RedisValue::BulkString(s) | RedisValue::SimpleString(s)) => s.clone(),
            Some(RedisValue::BulkRedisString(s)) => s.to_string_lossy(),
            Some(RedisValue::StringBuffer(b)) => String::from_utf8_lossy(b).into_owned(),
            _ => String::new(),
        },
        _ => String::new(),
    }
}

/// Whether an AOF rewrite starts its base with an RDB preamble (`aof-use-rdb-preamble`),
/// which carries the module's auxiliary data (the last token).
pub fn aof_base_is_rdb(ctx: &Context) -> bool {
    config_get(ctx, "aof-use-rdb-preamble").eq_ignore_ascii_case("yes")
}

/// Whether the server refuses clients' writes right now for want of good replicas
/// (`min-replicas-to-write`; or after a failed save, `MISCONF`): the module then grants and
/// deletes nothing on its own either, or an isolated master would hand a lock over that a
/// promoted replica hands out too. Only asked where `min-replicas-to-write` is set.
pub fn writes_refused(ctx: &Context) -> bool {
    if min_replicas_to_write(ctx) <= 0 {
        return false;
    }
    // The module API has no such question, but a call in script mode runs the server's own
    // checks of a client's write first. LOCK.EPOCH is a write that the module refuses from
    // anyone but the master link or the AOF, so when the server lets it through, nothing
    // changes: its own refusal is the answer "writes are allowed".
    let options = CallOptionsBuilder::new()
        .script_mode()
        .errors_as_replies()
        .build();
    let result: CallResult = ctx.call_ext("LOCK.EPOCH", &options, &["1"]);
    match result {
        Ok(_) => false,
        Err(err) => err.to_utf8_string().as_deref() != Some(LockError::EpochNotAllowed.as_wire()),
    }
}
