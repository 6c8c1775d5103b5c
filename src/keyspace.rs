//! Reading and writing a lock's holder in the keyspace. Every write goes through `store` or
//! `remove`, which also replicate it as a deterministic effect (explicit token, absolute deadline),
//! so no state change can miss the replicas or the AOF.

use std::time::Duration;

use redis_module::key::RedisKeyWritable;
use redis_module::{raw, Context, RedisString};

use crate::clock;
use crate::data_type::LOCK_TYPE;
use crate::error::LockError;
use crate::lock::Holder;

/// The internal command that replicas and the AOF replay to set a holder.
pub const APPLY_COMMAND: &str = "LOCK.APPLY";

/// A lock key opened for writing.
pub struct LockKey<'a> {
    ctx: &'a Context,
    name: &'a RedisString,
    key: RedisKeyWritable,
}

impl<'a> LockKey<'a> {
    pub fn open(ctx: &'a Context, name: &'a RedisString) -> Self {
        Self {
            ctx,
            name,
            key: ctx.open_key_writable(name),
        }
    }

    /// The stored holder (its lease may have run out: callers check `is_live`).
    pub fn holder(&self) -> Result<Option<Holder>, LockError> {
        match self.key.get_value::<Holder>(&LOCK_TYPE) {
            Ok(value) => Ok(value.map(|h| h.clone())),
            Err(_) => Err(LockError::WrongType),
        }
    }

    pub fn exists(&self) -> bool {
        !self.key.is_empty()
    }

    /// Make `holder` the lock's state, set the key's TTL to its deadline, and replicate it.
    pub fn store(&self, holder: &Holder) -> Result<(), LockError> {
        self.write(holder)?;
        let token = holder.token.to_string();
        let deadline = holder.deadline.to_string();
        let args: [&[u8]; 4] = [
            self.name.as_slice(),
            &holder.owner,
            token.as_bytes(),
            deadline.as_bytes(),
        ];
        self.ctx.replicate(APPLY_COMMAND, &args);
        Ok(())
    }

    /// Write without replicating: for LOCK.APPLY itself, whose caller replicates verbatim.
    pub fn write(&self, holder: &Holder) -> Result<(), LockError> {
        match self.key.get_value::<Holder>(&LOCK_TYPE) {
            // Updating in place keeps the key (no unlink callback, no keyspace churn).
            Ok(Some(current)) => *current = holder.clone(),
            Ok(None) => self
                .key
                .set_value(&LOCK_TYPE, holder.clone())
                .map_err(|_| LockError::WrongType)?,
            Err(_) => return Err(LockError::WrongType),
        }
        // Redis deletes a key when now > expire; the lease ends when now >= deadline. Setting
        // the expire to deadline - 1 makes both agree, so Redis never drops a live lock and a
        // free lock with nobody waiting stops being a key (EXISTS 0, memory returned).
        let ttl = holder
            .deadline
            .saturating_sub(1)
            .saturating_sub(clock::now_ms())
            .max(1);
        let _ = self
            .key
            .set_expire(Duration::from_millis(ttl.unsigned_abs()));
        Ok(())
    }

    /// Delete the key and replicate the deletion.
    pub fn remove(&self) {
        if self.exists() {
            let _ = self.key.delete();
            self.ctx.replicate("DEL", &[self.name]);
        }
    }
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
