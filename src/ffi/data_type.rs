//! The `redislock` module type: RDB save/load (versioned), auxiliary token data, AOF rewrite,
//! MEMORY USAGE, DEBUG DIGEST, COPY, and the unlink hook that wakes waiters of a deleted lock
//! (the shell's `unlinked` handler). Every callback contains panics (`panics`); the value's
//! layout is `core::codec`'s.
//!
//! What a load accepts is `core::restore`'s decision; what a new value means (its tokens seen,
//! its counts, its leases watched) is the shell's `arrived` handler.

use std::ffi::CString;
use std::os::raw::{c_char, c_int, c_void};

use redis_module::native_types::RedisType;
use redis_module::{raw, RedisString};

use crate::core::codec::{self, Reader, Refused, Writer};
use crate::core::fencing;
use crate::core::lock::LockState;
use crate::core::metrics::STATS;
use crate::core::restore::{self, Origin};
use crate::core::value::LockValue;
use crate::ffi::clock;
use crate::ffi::handlers::{self, Place};
use crate::ffi::panics;
use crate::ffi::server;

/// Type methods version 4 (Redis 7.0) brings `unlink2`, which names the db and key.
const TYPE_METHODS_VERSION: u64 = 4;

pub static LOCK_TYPE: RedisType = RedisType::new(
    "redislock",
    codec::ENCODING_VERSION,
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
        copy: None,
        defrag: None,
        mem_usage2: None,
        free_effort2: None,
        unlink2: Some(unlink2),
        copy2: Some(copy2),
        aux_save2: None,
    },
);

/// Borrow the lock value behind a value pointer Redis hands to a type callback.
///
/// # Safety
/// `value` must be a pointer this module stored with `set_value` / returned from `rdb_load`.
unsafe fn value_of<'a>(value: *const c_void) -> Option<&'a LockValue> {
    value.cast::<LockValue>().as_ref()
}

/// Borrow the lock state behind a value pointer Redis hands to a type callback.
///
/// # Safety
/// As `value_of`.
unsafe fn state_of<'a>(value: *const c_void) -> Option<&'a LockState> {
    value_of(value).map(|v| &v.state)
}

/// An RDB stream read through the module API.
struct RdbReader(*mut raw::RedisModuleIO);

impl Reader for RdbReader {
    fn read_bytes(&mut self) -> Option<Vec<u8>> {
        raw::load_string_buffer(self.0)
            .ok()
            .map(|b| b.as_ref().to_vec())
    }
    fn read_unsigned(&mut self) -> Option<u64> {
        raw::load_unsigned(self.0).ok()
    }
    fn read_signed(&mut self) -> Option<i64> {
        raw::load_signed(self.0).ok()
    }
}

/// An RDB stream written through the module API.
struct RdbWriter(*mut raw::RedisModuleIO);

impl Writer for RdbWriter {
    fn write_bytes(&mut self, bytes: &[u8]) {
        raw::save_slice(self.0, bytes);
    }
    fn write_unsigned(&mut self, value: u64) {
        raw::save_unsigned(self.0, value);
    }
    fn write_signed(&mut self, value: i64) {
        raw::save_signed(self.0, value);
    }
}

/// A DEBUG DIGEST being computed.
struct DigestWriter(*mut raw::RedisModuleDigest);

impl Writer for DigestWriter {
    fn write_bytes(&mut self, bytes: &[u8]) {
        // SAFETY: a live digest and a buffer with its length, during the digest callback.
        unsafe {
            if let Some(add) = raw::RedisModule_DigestAddStringBuffer {
                add(self.0, bytes.as_ptr().cast::<c_char>(), bytes.len());
            }
        }
    }
    fn write_unsigned(&mut self, value: u64) {
        self.write_signed(codec::token_i64(value));
    }
    fn write_signed(&mut self, value: i64) {
        // SAFETY: a live digest, during the digest callback.
        unsafe {
            if let Some(add) = raw::RedisModule_DigestAddLongLong {
                add(self.0, value);
            }
        }
    }
}

fn load_state(rdb: *mut raw::RedisModuleIO, encver: c_int) -> Result<LockState, &'static str> {
    let state =
        codec::decode(&mut RdbReader(rdb), encver, clock::clocks()).map_err(Refused::message)?;
    let origin = if restored_by_a_client(rdb) {
        Origin::Client
    } else {
        Origin::Server
    };
    restore::admit(&state, origin, clock::now_ms())?;
    Ok(state)
}

/// A value loaded under a key (RDB at start, a full sync, DEBUG RELOAD, RESTORE) carries no
/// TTL: the shell watches its first deadline there.
fn arrived_by_load(rdb: *mut raw::RedisModuleIO, value: &mut LockValue) {
    // SAFETY: the IO is the live one of this load callback.
    unsafe {
        arrived_at(
            rdb,
            raw::RedisModule_GetDbIdFromIO,
            raw::RedisModule_GetKeyNameFromIO,
            value,
        )
    }
}

/// The lock `value` joined the keyspace, at the key `name_of(ctx)` of db `db_of(ctx)` where
/// the server tells: hand it to the shell's `arrived` handler (at its final address: boxed).
///
/// # Safety
/// `ctx` is valid for both functions for the duration of the call.
unsafe fn arrived_at<T>(
    ctx: *mut T,
    db_of: Option<unsafe extern "C" fn(*mut T) -> c_int>,
    name_of: Option<unsafe extern "C" fn(*mut T) -> *const raw::RedisModuleString>,
    value: &mut LockValue,
) {
    let Some(h) = handlers::get() else {
        return;
    };
    // SAFETY: the caller's context is valid here; the name is borrowed only for this call.
    let place = unsafe {
        match (db_of, name_of) {
            (Some(db_of), Some(name_of)) => {
                let name = name_of(ctx);
                let db = db_of(ctx);
                (!name.is_null() && db >= 0).then(|| Place {
                    db,
                    name: RedisString::string_as_slice(name),
                })
            }
            _ => None,
        }
    };
    (h.arrived)(place, value);
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
    panics::contain("rdb_load", std::ptr::null_mut, || {
        match load_state(rdb, encver) {
            Ok(state) => {
                let mut value = Box::new(LockValue::new(state));
                arrived_by_load(rdb, &mut value);
                Box::into_raw(value).cast::<c_void>()
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
    let Some(state) = (unsafe { state_of(value) }) else {
        return;
    };
    panics::contain(
        "rdb_save",
        || (),
        || codec::encode(state, &mut RdbWriter(rdb), clock::now_ms()),
    );
}

extern "C" fn aof_rewrite(
    aof: *mut raw::RedisModuleIO,
    key: *mut raw::RedisModuleString,
    value: *mut c_void,
) {
    // SAFETY: Redis passes a value of this type.
    let Some(state) = (unsafe { state_of(value) }) else {
        return;
    };
    panics::contain(
        "aof_rewrite",
        || (),
        || {
            // SAFETY: reading the API table's entry, filled in once at load.
            if let Some(emit) = unsafe { raw::RedisModule_EmitAOF } {
                server::emit_state!(emit, aof, key, state);
            }
        },
    );
}

extern "C" fn mem_usage(value: *const c_void) -> usize {
    // SAFETY: Redis passes a value of this type.
    let value = unsafe { value_of(value) };
    panics::contain("mem_usage", || 0, || value.map_or(0, LockValue::heap_size))
}

extern "C" fn digest(md: *mut raw::RedisModuleDigest, value: *mut c_void) {
    panics::contain("digest", || (), || add_to_digest(md, value));
}

fn add_to_digest(md: *mut raw::RedisModuleDigest, value: *mut c_void) {
    // SAFETY: Redis passes a value of this type.
    let Some(state) = (unsafe { state_of(value) }) else {
        return;
    };
    codec::digest(state, &mut DigestWriter(md));
    // SAFETY: a live digest, during the digest callback.
    unsafe {
        if let Some(end) = raw::RedisModule_DigestEndSequence {
            end(md);
        }
    }
}

extern "C" fn free(value: *mut c_void) {
    if !value.is_null() {
        // SAFETY: the value was made by `Box::into_raw` (set_value, rdb_load or copy).
        let value = unsafe { Box::from_raw(value.cast::<LockValue>()) };
        panics::contain(
            "free",
            || (),
            || {
                STATS.count_holds(&value.state, -1);
                // The shell lets it go (possibly later: see `lease_values`).
                if let Some(h) = handlers::get() {
                    (h.freed)(value);
                }
            },
        );
        STATS.locks.sub(1);
    }
}

/// `COPY`: a new value for the destination, which the shell counts and whose leases it
/// watches there (it has no TTL to copy).
extern "C" fn copy2(ctx: *mut raw::RedisModuleKeyOptCtx, value: *const c_void) -> *mut c_void {
    // SAFETY: Redis passes a value of this type.
    let state = unsafe { state_of(value) };
    panics::contain("copy", std::ptr::null_mut, || match state {
        Some(state) => {
            let mut copy = Box::new(LockValue::new(state.clone()));
            arrived_by_copy(ctx, &mut copy);
            Box::into_raw(copy).cast::<c_void>()
        }
        None => std::ptr::null_mut(),
    })
}

fn arrived_by_copy(ctx: *mut raw::RedisModuleKeyOptCtx, value: &mut LockValue) {
    // SAFETY: the option context is the live one of this copy callback.
    unsafe {
        arrived_at(
            ctx,
            raw::RedisModule_GetToDbIdFromOptCtx,
            raw::RedisModule_GetToKeyNameFromOptCtx,
            value,
        )
    }
}

/// A lock left the keyspace (DEL, UNLINK, expiry, overwrite, RENAME or MOVE away): the shell
/// notes a possible expiry and wakes the waiters of that name.
extern "C" fn unlink2(ctx: *mut raw::RedisModuleKeyOptCtx, value: *const c_void) {
    panics::contain("the unlink callback", || (), || unlinked(ctx, value));
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
    if let (Some(value), Some(h)) = (unsafe { value_of(value) }, handlers::get()) {
        (h.unlinked)(db, name, value);
    }
}

extern "C" fn aux_save(rdb: *mut raw::RedisModuleIO, _when: c_int) {
    panics::contain(
        "aux_save",
        || (),
        || raw::save_unsigned(rdb, fencing::last()),
    );
}

extern "C" fn aux_load(rdb: *mut raw::RedisModuleIO, encver: c_int, _when: c_int) -> c_int {
    const ERR: c_int = raw::REDISMODULE_ERR as c_int;
    panics::contain(
        "aux_load",
        || ERR,
        || {
            if let Err(why) = restore::token_data_readable(encver) {
                log_io_warning(rdb, why);
                return ERR;
            }
            let Ok(last) = raw::load_unsigned(rdb) else {
                return ERR;
            };
            match restore::admit_last_token(last) {
                Ok(last) => {
                    fencing::observe(last);
                    raw::REDISMODULE_OK as c_int
                }
                Err(why) => {
                    log_io_warning(rdb, why);
                    ERR
                }
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
