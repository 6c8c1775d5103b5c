//! Walking one db's keys for lock values, a bounded step at a time (`RedisModule_Scan`, with
//! SCAN's guarantee: a key present for the whole walk is visited at least once).

use std::os::raw::{c_int, c_void};

use redis_module::{raw, Context, RedisString};

use crate::core::value::LockValue;
use crate::ffi::data_type::LOCK_TYPE;
use crate::ffi::panics;

/// What a step hands over for each lock it meets: its name and its value (whose address is the
/// identity the type's unlink and free hooks report).
pub type Visit<'a> = dyn FnMut(&[u8], &mut LockValue) + 'a;

/// A walk through the keys of `db`.
pub struct DbScan {
    db: i32,
    cursor: *mut raw::RedisModuleScanCursor,
}

// SAFETY: the cursor is plain memory owned by this value, used only on the main thread (timer
// jobs); it is kept in a mutex between steps.
unsafe impl Send for DbScan {}

impl DbScan {
    pub fn new(db: i32) -> Option<Self> {
        // SAFETY: creating a cursor has no precondition; a null one is refused below.
        let cursor = unsafe { raw::RedisModule_ScanCursorCreate.map(|create| create()) }?;
        (!cursor.is_null()).then_some(DbScan { db, cursor })
    }

    pub fn db(&self) -> i32 {
        self.db
    }

    /// Visit the locks of up to `steps` of the db's buckets; `None` when the db does not exist,
    /// else whether keys are left to visit.
    pub fn step(&mut self, ctx: &Context, steps: usize, visit: &mut Visit<'_>) -> Option<bool> {
        let (Some(scan), Some(select), Some(selected)) = (
            // SAFETY: reading the API's function pointers, set at load.
            unsafe { raw::RedisModule_Scan },
            unsafe { raw::RedisModule_SelectDb },
            unsafe { raw::RedisModule_GetSelectedDb },
        ) else {
            return None;
        };
        // SAFETY: `ctx` is the live context of this timer job; the previous db is selected
        // again before returning.
        let previous = unsafe { selected(ctx.ctx) };
        if unsafe { select(ctx.ctx, self.db) } != raw::REDISMODULE_OK as c_int {
            return None;
        }
        let mut visit: &mut Visit<'_> = visit;
        let privdata = std::ptr::from_mut(&mut visit).cast::<c_void>();
        let mut more = true;
        for _ in 0..steps {
            // SAFETY: the cursor is ours; `on_key` reads `privdata` as the `&mut Visit` it is,
            // only during this call.
            more = unsafe { scan(ctx.ctx, self.cursor, Some(on_key), privdata) } != 0;
            if !more {
                break;
            }
        }
        // SAFETY: as above.
        unsafe { select(ctx.ctx, previous) };
        Some(more)
    }
}

impl Drop for DbScan {
    fn drop(&mut self) {
        // SAFETY: the cursor was created by `new` and is destroyed once.
        unsafe {
            if let Some(destroy) = raw::RedisModule_ScanCursorDestroy {
                destroy(self.cursor);
            }
        }
    }
}

/// # Safety
/// Called by `RedisModule_Scan` only, with the `privdata` that `DbScan::step` passed.
unsafe extern "C" fn on_key(
    _ctx: *mut raw::RedisModuleCtx,
    name: *mut raw::RedisModuleString,
    key: *mut raw::RedisModuleKey,
    privdata: *mut c_void,
) {
    panics::contain(
        "the keyspace scan",
        || (),
        || {
            // SAFETY: `privdata` is the `&mut Visit` `step` passed, alive for its `scan` call.
            let visit = unsafe { &mut *privdata.cast::<&mut Visit<'_>>() };
            // SAFETY: the key handle and name are valid during the callback.
            unsafe {
                let (Some(type_of), Some(value_of)) = (
                    raw::RedisModule_ModuleTypeGetType,
                    raw::RedisModule_ModuleTypeGetValue,
                ) else {
                    return;
                };
                if key.is_null() || type_of(key) != *LOCK_TYPE.raw_type.borrow() {
                    return;
                }
                let value = value_of(key);
                if let Some(value) = value.cast::<LockValue>().as_mut() {
                    visit(RedisString::string_as_slice(name), value);
                }
            }
        },
    );
}
