//! The `redislock` module type: RDB save/load (versioned), auxiliary token data, AOF rewrite,
//! MEMORY USAGE, DEBUG DIGEST, COPY, and the unlink hook that wakes waiters of a deleted lock.
//! Every callback contains panics (`guard`).
//!
//! What a load accepts: a token outside 1..=2^53-1 is always refused (it would poison the token
//! source, see `fencing`). A value restored by a client (`RESTORE`, and `MIGRATE` into this node)
//! must also respect this server's `lock.max-owner-length` and `lock.max-ttl`, like a grant
//! would; values the server loads itself (RDB at start, AOF, a full sync from the master, DEBUG
//! RELOAD) are state it already accepted once, and keep their lease even if the limits have
//! been lowered since.

use std::ffi::CString;
use std::os::raw::{c_char, c_int, c_void};

use redis_module::native_types::RedisType;
use redis_module::{raw, RedisString};

use crate::fencing;
use crate::guard;
use crate::keyspace::{APPLY_COMMAND, APPLY_FORMAT};
use crate::lock::Holder;
use crate::metrics::STATS;
use crate::waiters::{self, QueueKey};

/// Encoding of a lock value in RDB and DUMP payloads.
/// Version 1: owner, token, deadline. Version 2 adds the grant time (for LOCK.INFO `held`).
/// A newer version is refused (the load fails cleanly instead of misreading bytes).
pub const ENCODING_VERSION: i32 = 2;

/// Type methods version 4 (Redis 7.0) brings `unlink2`, which names the db and key.
const TYPE_METHODS_VERSION: u64 = 4;

pub static LOCK_TYPE: RedisType = RedisType::new(
    "redislock",
    ENCODING_VERSION,
    raw::RedisModuleTypeMethods {
        version: TYPE_METHODS_VERSION,
        rdb_load: Some(rdb_load),
        rdb_save: Some(rdb_save),
        aof_rewrite: Some(aof_rewrite),
        mem_usage: Some(mem_usage),
        digest: Some(digest),
        free: Some(free),
        aux_load: Some(aux_load),
        aux_save: Some(aux_save),
        aux_save_triggers: raw::REDISMODULE_AUX_BEFORE_RDB as c_int,
        free_effort: None,
        unlink: None,
        copy: Some(copy),
        defrag: None,
        mem_usage2: None,
        free_effort2: None,
        unlink2: Some(unlink2),
        copy2: None,
        aux_save2: None,
    },
);

/// Borrow the holder behind a value pointer Redis hands to a type callback.
///
/// # Safety
/// `value` must be a pointer this module stored with `set_value` / returned from `rdb_load`.
unsafe fn holder_of<'a>(value: *const c_void) -> Option<&'a Holder> {
    value.cast::<Holder>().as_ref()
}

fn load_holder(rdb: *mut raw::RedisModuleIO, encver: c_int) -> Result<Holder, &'static str> {
    const CORRUPT: &str = "refusing a lock value: truncated or corrupt";
    let owner = raw::load_string_buffer(rdb).map_err(|_| CORRUPT)?;
    let token = raw::load_unsigned(rdb).map_err(|_| CORRUPT)?;
    let deadline = raw::load_signed(rdb).map_err(|_| CORRUPT)?;
    let granted = if encver >= 2 {
        raw::load_signed(rdb).map_err(|_| CORRUPT)?
    } else {
        crate::clock::now_ms() // version 1 did not record it: count from the load
    };
    if owner.as_ref().is_empty() {
        return Err(CORRUPT);
    }
    if !fencing::in_range(token) {
        return Err("refusing a lock value: its token is outside 1..=2^53-1");
    }
    if restored_by_a_client(rdb) {
        if owner.as_ref().len() > crate::config::max_owner_length() {
            return Err("refusing a restored lock: its owner is longer than lock.max-owner-length");
        }
        let now = crate::clock::now_ms();
        if deadline.saturating_sub(now) > crate::config::max_ttl() {
            return Err(
                "refusing a restored lock: its lease ends later than lock.max-ttl from now",
            );
        }
    }
    Ok(Holder {
        owner: crate::owner::Owner::new(owner.as_ref()),
        token,
        deadline,
        granted,
    })
}

/// Whether a client's RESTORE (or a MIGRATE into this node) is loading the value, rather than
/// the server loading its own data (RDB, AOF, full sync, DEBUG RELOAD: `LOADING`) or a
/// replica applying its master's stream.
fn restored_by_a_client(rdb: *mut raw::RedisModuleIO) -> bool {
    // SAFETY: GetContextFromIO returns the IO's context (owned by Redis) during the callback.
    let flags = unsafe {
        match (
            raw::RedisModule_GetContextFromIO,
            raw::RedisModule_GetContextFlags,
        ) {
            (Some(ctx_of), Some(flags_of)) => flags_of(ctx_of(rdb)),
            _ => return false,
        }
    };
    let server_side = raw::REDISMODULE_CTX_FLAGS_LOADING | raw::REDISMODULE_CTX_FLAGS_SLAVE;
    flags & server_side as c_int == 0
}

extern "C" fn rdb_load(rdb: *mut raw::RedisModuleIO, encver: c_int) -> *mut c_void {
    guard::contain("rdb_load", std::ptr::null_mut, || {
        if encver > ENCODING_VERSION {
            log_io_warning(rdb, "refusing a lock value encoded by a newer redis-lock");
            return std::ptr::null_mut();
        }
        match load_holder(rdb, encver) {
            Ok(holder) => {
                fencing::observe(holder.token);
                STATS.locks.add(1);
                Box::into_raw(Box::new(holder)).cast::<c_void>()
            }
            Err(why) => {
                log_io_warning(rdb, why);
                std::ptr::null_mut()
            }
        }
    })
}

extern "C" fn rdb_save(rdb: *mut raw::RedisModuleIO, value: *mut c_void) {
    // SAFETY: Redis passes a value of this type.
    let Some(holder) = (unsafe { holder_of(value) }) else {
        return;
    };
    guard::contain(
        "rdb_save",
        || (),
        || {
            raw::save_slice(rdb, &holder.owner.bytes());
            raw::save_unsigned(rdb, holder.token);
            raw::save_signed(rdb, holder.deadline);
            raw::save_signed(rdb, holder.granted);
        },
    );
}

extern "C" fn aof_rewrite(
    aof: *mut raw::RedisModuleIO,
    key: *mut raw::RedisModuleString,
    value: *mut c_void,
) {
    // SAFETY: Redis passes a value of this type.
    let Some(holder) = (unsafe { holder_of(value) }) else {
        return;
    };
    guard::contain(
        "aof_rewrite",
        || (),
        || {
            let owner = holder.owner.bytes();
            let token = i64::try_from(holder.token).unwrap_or(i64::MAX);
            // SAFETY: EmitAOF reads the arguments as the format says: a module string, a buffer
            // with its length, and three long longs.
            unsafe {
                if let Some(emit) = raw::RedisModule_EmitAOF {
                    emit(
                        aof,
                        APPLY_COMMAND.as_ptr(),
                        APPLY_FORMAT.as_ptr(),
                        key,
                        owner.as_ptr().cast::<c_char>(),
                        owner.len(),
                        token as std::os::raw::c_longlong,
                        holder.deadline as std::os::raw::c_longlong,
                        holder.granted as std::os::raw::c_longlong,
                    );
                }
            }
        },
    );
}

extern "C" fn mem_usage(value: *const c_void) -> usize {
    // SAFETY: Redis passes a value of this type.
    let holder = unsafe { holder_of(value) };
    guard::contain(
        "mem_usage",
        || 0,
        || holder.map_or(0, |h| std::mem::size_of::<Holder>() + h.owner.heap_size()),
    )
}

extern "C" fn digest(md: *mut raw::RedisModuleDigest, value: *mut c_void) {
    guard::contain("digest", || (), || add_to_digest(md, value));
}

fn add_to_digest(md: *mut raw::RedisModuleDigest, value: *mut c_void) {
    // SAFETY: Redis passes a value of this type and a live digest.
    unsafe {
        let Some(holder) = holder_of(value) else {
            return;
        };
        if let (Some(add_buf), Some(add_ll), Some(end)) = (
            raw::RedisModule_DigestAddStringBuffer,
            raw::RedisModule_DigestAddLongLong,
            raw::RedisModule_DigestEndSequence,
        ) {
            let owner = holder.owner.bytes();
            add_buf(md, owner.as_ptr().cast::<c_char>(), owner.len());
            add_ll(md, i64::try_from(holder.token).unwrap_or(i64::MAX));
            add_ll(md, holder.deadline);
            add_ll(md, holder.granted);
            end(md);
        }
    }
}

extern "C" fn free(value: *mut c_void) {
    if !value.is_null() {
        // SAFETY: the value was made by `Box::into_raw` (set_value, rdb_load or copy).
        let holder = unsafe { Box::from_raw(value.cast::<Holder>()) };
        guard::contain("free", || (), || drop(holder));
        STATS.locks.sub(1);
    }
}

extern "C" fn copy(
    _from: *mut raw::RedisModuleString,
    _to: *mut raw::RedisModuleString,
    value: *const c_void,
) -> *mut c_void {
    // SAFETY: Redis passes a value of this type.
    let holder = unsafe { holder_of(value) };
    guard::contain("copy", std::ptr::null_mut, || match holder {
        Some(holder) => {
            STATS.locks.add(1);
            Box::into_raw(Box::new(holder.clone())).cast::<c_void>()
        }
        None => std::ptr::null_mut(),
    })
}

/// A lock left the keyspace (DEL, UNLINK, expiry, overwrite, RENAME or MOVE away): if anyone
/// waits for that name, let `settle` hand it over on the next turn of the event loop.
extern "C" fn unlink2(ctx: *mut raw::RedisModuleKeyOptCtx, value: *const c_void) {
    guard::contain("the unlink callback", || (), || unlinked(ctx, value));
}

fn unlinked(ctx: *mut raw::RedisModuleKeyOptCtx, value: *const c_void) {
    // SAFETY: the option context is valid during the callback; the key name is borrowed only here.
    let (db, name) = unsafe {
        let (Some(db_of), Some(name_of)) = (
            raw::RedisModule_GetDbIdFromOptCtx,
            raw::RedisModule_GetKeyNameFromOptCtx,
        ) else {
            return;
        };
        (db_of(ctx), RedisString::string_as_slice(name_of(ctx)))
    };
    // SAFETY: Redis passes a value of this type.
    if let Some(holder) = unsafe { holder_of(value) } {
        crate::expiry::note_unlinked(db, name, holder);
    }
    if !waiters::anyone_waiting() {
        return;
    }
    let key = QueueKey {
        db,
        name: name.into(),
    };
    if waiters::has_waiters(&key) {
        crate::expiry::settle_soon(&key);
    }
}

extern "C" fn aux_save(rdb: *mut raw::RedisModuleIO, _when: c_int) {
    guard::contain(
        "aux_save",
        || (),
        || raw::save_unsigned(rdb, fencing::last()),
    );
}

extern "C" fn aux_load(rdb: *mut raw::RedisModuleIO, encver: c_int, _when: c_int) -> c_int {
    const ERR: c_int = raw::REDISMODULE_ERR as c_int;
    guard::contain(
        "aux_load",
        || ERR,
        || {
            if encver > ENCODING_VERSION {
                log_io_warning(rdb, "refusing token data encoded by a newer redis-lock");
                return ERR;
            }
            match raw::load_unsigned(rdb) {
                Ok(last) if last <= fencing::MAX_TOKEN => {
                    fencing::observe(last);
                    raw::REDISMODULE_OK as c_int
                }
                Ok(_) => {
                    log_io_warning(rdb, "refusing token data: the last token is above 2^53-1");
                    ERR
                }
                Err(_) => ERR,
            }
        },
    )
}

fn log_io_warning(rdb: *mut raw::RedisModuleIO, msg: &str) {
    let (Ok(level), Ok(fmt), Ok(msg)) = (
        CString::new("warning"),
        CString::new("%s"),
        CString::new(msg),
    ) else {
        return;
    };
    // SAFETY: LogIOError formats `msg` through "%s".
    unsafe {
        if let Some(log) = raw::RedisModule_LogIOError {
            log(rdb, level.as_ptr(), fmt.as_ptr(), msg.as_ptr());
        }
    }
}
