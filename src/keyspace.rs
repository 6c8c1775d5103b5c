//! Reading and writing a lock's holder in the keyspace. Every write goes through `store` or
//! `remove`, which also replicate it as a deterministic effect (explicit token, absolute deadline),
//! emit the keyspace event, and account the end of the previous hold, so no state change can
//! miss the replicas, the AOF, the events or the metrics.

use std::time::Duration;

use redis_module::key::RedisKeyWritable;
use redis_module::{raw, Context, NotifyEvent, RedisString};

use crate::clock;
use crate::data_type::LOCK_TYPE;
use crate::error::LockError;
use crate::lock::{Holder, Millis};
use crate::metrics::STATS;

/// The internal command that replicas and the AOF replay to set a holder.
pub const APPLY_COMMAND: &str = "LOCK.APPLY";

/// Keyspace events of the module class (`notify-keyspace-events` with `d` or `A`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LockEvent {
    /// Granted at once, or re-acquired by its holder.
    Acquire,
    /// Released by its holder (or by LOCK.FORCERELEASE).
    Release,
    /// Granted to the head of its queue.
    Handoff,
    /// The holder extended its lease.
    Extend,
    /// The holder's lease ran out while it held the lock.
    Expire,
}

impl LockEvent {
    pub const fn name(self) -> &'static str {
        match self {
            Self::Acquire => "lock.acquire",
            Self::Release => "lock.release",
            Self::Handoff => "lock.handoff",
            Self::Extend => "lock.extend",
            Self::Expire => "lock.expire",
        }
    }
}

/// Emit a lock event on `key`.
pub fn notify(ctx: &Context, event: LockEvent, key: &RedisString) {
    ctx.notify_keyspace_event(NotifyEvent::MODULE, event.name(), key);
}

/// A hold ended at `now`: record how long it lasted, and whether the lease ran out first.
pub fn hold_ended(
    ctx: &Context,
    key: &RedisString,
    granted: Millis,
    deadline: Millis,
    now: Millis,
) {
    let expired = now >= deadline;
    let end = if expired { deadline } else { now };
    STATS.hold_time.record(
        u64::try_from(end.saturating_sub(granted))
            .unwrap_or(0)
            .saturating_mul(1000),
    );
    if expired {
        STATS.expired_while_held.incr();
        notify(ctx, LockEvent::Expire, key);
    }
}

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

    pub fn name(&self) -> &RedisString {
        self.name
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

    pub fn notify(&self, event: LockEvent) {
        notify(self.ctx, event, self.name);
    }

    /// If a different grant than `next` is stored, its hold ends now.
    fn end_previous_hold(&self, next: Option<u64>) {
        let previous = match self.key.get_value::<Holder>(&LOCK_TYPE) {
            Ok(Some(h)) if Some(h.token) != next => (h.granted, h.deadline),
            _ => return,
        };
        hold_ended(self.ctx, self.name, previous.0, previous.1, clock::now_ms());
    }

    /// Make `holder` the lock's state, set the key's TTL to its deadline, replicate it and
    /// emit `event`.
    pub fn store(&self, holder: &Holder, event: LockEvent) -> Result<(), LockError> {
        self.end_previous_hold(Some(holder.token));
        self.write(holder)?;
        let token = holder.token.to_string();
        let deadline = holder.deadline.to_string();
        let granted = holder.granted.to_string();
        let args: [&[u8]; 5] = [
            self.name.as_slice(),
            &holder.owner,
            token.as_bytes(),
            deadline.as_bytes(),
            granted.as_bytes(),
        ];
        self.ctx.replicate(APPLY_COMMAND, &args);
        self.notify(event);
        Ok(())
    }

    /// Write without replicating: for LOCK.APPLY itself, whose caller replicates verbatim.
    pub fn write(&self, holder: &Holder) -> Result<(), LockError> {
        match self.key.get_value::<Holder>(&LOCK_TYPE) {
            // Updating in place keeps the key (no unlink callback, no keyspace churn).
            Ok(Some(current)) => *current = holder.clone(),
            Ok(None) => {
                self.key
                    .set_value(&LOCK_TYPE, holder.clone())
                    .map_err(|_| LockError::WrongType)?;
                STATS.locks.add(1);
            }
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

    /// Delete the key and replicate the deletion (the caller emits the release event).
    pub fn remove(&self) {
        if self.exists() {
            self.end_previous_hold(None);
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
