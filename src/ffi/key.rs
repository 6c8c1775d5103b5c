//! A key opened for writing, read and written as a lock value (`effects::keyspace::LockKey`
//! sits on it). Against `redis_module::key::RedisKeyWritable`: one `KeyType` and one
//! `ModuleTypeGetType` per read (its `get_value` checks the type through a `RefCell` each
//! time), the stored value's address handed back as stored (no second lookup), and a read
//! that comes back in two registers: a `Result<Option<&T>, RedisError>` went through the
//! stack, and the loads that followed it stalled on the stores (perf).

use std::os::raw::c_int;
use std::ptr::NonNull;

use redis_module::{raw, Context, RedisString};

use crate::core::value::LockValue;
use crate::ffi::data_type::LOCK_TYPE;

/// What a key holds.
pub enum Found<'a> {
    Empty,
    Lock(&'a mut LockValue),
    /// A value of another type.
    Other,
}

/// A key open for reading and writing until dropped.
pub struct WritableKey {
    key: NonNull<raw::RedisModuleKey>,
}

impl WritableKey {
    /// Open `name` in the selected db of `ctx` (the caller's command or callback context).
    pub fn open(ctx: &Context, name: &RedisString) -> Self {
        let mode = (raw::REDISMODULE_READ | raw::REDISMODULE_WRITE) as c_int;
        // SAFETY: a live context and key name of this call; OpenKey in write mode returns a
        // key handle (never NULL), which `Drop` closes.
        let key = unsafe { raw::RedisModule_OpenKey.map(|open| open(ctx.ctx, name.inner, mode)) };
        match key.and_then(|k| NonNull::new(k.cast::<raw::RedisModuleKey>())) {
            Some(key) => Self { key },
            None => panic!("RedisModule_OpenKey gave no key"),
        }
    }

    fn raw(&self) -> *mut raw::RedisModuleKey {
        self.key.as_ptr()
    }

    pub fn is_empty(&self) -> bool {
        // SAFETY: an open key handle.
        let kind = unsafe { raw::RedisModule_KeyType.map_or(0, |f| f(self.raw())) };
        kind == raw::REDISMODULE_KEYTYPE_EMPTY as c_int
    }

    /// What the key holds. The lock value is borrowed from the keyspace: `LockKey` takes it for
    /// one step at a time and lets it go before the next call into the server.
    pub fn found(&self) -> Found<'_> {
        // SAFETY: an open key handle; a value of our type is a `LockValue` this module boxed
        // (`store`, `rdb_load`, `copy2`), alive while the key holds it, and the caller holds no
        // other reference to it (above).
        unsafe {
            let kind = raw::RedisModule_KeyType.map_or(0, |f| f(self.raw()));
            if kind == raw::REDISMODULE_KEYTYPE_EMPTY as c_int {
                return Found::Empty;
            }
            let ours = *LOCK_TYPE.raw_type.borrow();
            let its =
                raw::RedisModule_ModuleTypeGetType.map_or(std::ptr::null_mut(), |f| f(self.raw()));
            if its.is_null() || its != ours {
                return Found::Other;
            }
            let value =
                raw::RedisModule_ModuleTypeGetValue.map_or(std::ptr::null_mut(), |f| f(self.raw()));
            match value.cast::<LockValue>().as_mut() {
                Some(value) => Found::Lock(value),
                None => Found::Other,
            }
        }
    }

    /// Store `value` in the empty key; the value as stored, or `None` if the server refused it
    /// (then it is dropped here).
    #[allow(clippy::mut_from_ref)] // the keyspace's value, not the handle's: as `found`
    pub fn store(&self, value: Box<LockValue>) -> Option<&mut LockValue> {
        let ours = *LOCK_TYPE.raw_type.borrow();
        let value = Box::into_raw(value);
        // SAFETY: an open writable key; on success the server owns the box (its free callback
        // gives it back), on failure it stays ours and is dropped.
        unsafe {
            let stored = raw::RedisModule_ModuleTypeSetValue
                .map_or(raw::REDISMODULE_ERR as c_int, |f| {
                    f(self.raw(), ours, value.cast())
                });
            if stored == raw::REDISMODULE_OK as c_int {
                value.as_mut()
            } else {
                drop(Box::from_raw(value));
                None
            }
        }
    }

    /// Delete the key (its unlink and free callbacks run now, on this thread).
    pub fn delete(&self) {
        // SAFETY: an open writable key.
        unsafe {
            if let Some(delete) = raw::RedisModule_DeleteKey {
                delete(self.raw());
            }
        }
    }
}

impl Drop for WritableKey {
    fn drop(&mut self) {
        // SAFETY: the handle `open` got, closed once.
        unsafe {
            if let Some(close) = raw::RedisModule_CloseKey {
                close(self.raw());
            }
        }
    }
}
