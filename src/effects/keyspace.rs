//! Reading and writing a lock's holder in the keyspace. Every write goes through `store` or
//! `remove`, which also replicate it as a deterministic effect (explicit token, absolute deadline),
//! emit the keyspace event, and account the end of the previous hold, so no state change can
//! miss the replicas, the AOF, the events or the metrics.

use std::ffi::CStr;
use std::sync::Mutex;
use std::time::Duration;

use redis_module::key::RedisKeyWritable;
use redis_module::{Context, RedisString};

use crate::core::error::LockError;
use crate::core::lock::{Holder, Millis};
use crate::core::metrics::STATS;
use crate::core::registry::QueueKey;
use crate::ffi::clock;
use crate::ffi::data_type::LOCK_TYPE;
use crate::ffi::server;

/// The longest key TTL the module ever sets: a century.
const MAX_KEY_TTL_MS: Millis = 100 * 365 * 24 * 3_600_000;

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
    pub const fn name(self) -> &'static CStr {
        match self {
            Self::Acquire => c"lock.acquire",
            Self::Release => c"lock.release",
            Self::Handoff => c"lock.handoff",
            Self::Extend => c"lock.extend",
            Self::Expire => c"lock.expire",
        }
    }
}

/// Emit a lock event on `key`.
pub fn notify(ctx: &Context, event: LockEvent, key: &RedisString) {
    server::notify(ctx, event.name(), key);
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

    /// The queue this lock's waiters stand in.
    pub fn queue_key(&self) -> QueueKey {
        QueueKey {
            db: server::selected_db(self.ctx),
            name: self.name.as_slice().into(),
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

    /// Whether Redis still stores a value under this name that lookups treat as expired (it
    /// does so while writes are paused). `MEMORY USAGE` finds keys without expiring them.
    pub fn expired_value_kept(&self) -> bool {
        let subcommand = self.ctx.create_string("USAGE");
        matches!(
            self.ctx.call("MEMORY", &[&subcommand, self.name]),
            Ok(redis_module::RedisValue::Integer(_))
        )
    }

    pub fn notify(&self, event: LockEvent) {
        notify(self.ctx, event, self.name);
    }

    /// If a different grant than `next` is stored, its hold ends now.
    fn end_previous_hold(&self, next: Option<u64>, now: Millis) {
        let previous = match self.key.get_value::<Holder>(&LOCK_TYPE) {
            Ok(Some(h)) if Some(h.token) != next => (h.granted, h.deadline),
            _ => return,
        };
        hold_ended(self.ctx, self.name, previous.0, previous.1, now);
    }

    /// Make `holder` the lock's state, set the key's TTL to its deadline, replicate it and
    /// emit `event`.
    pub fn store(&self, holder: &Holder, event: LockEvent, now: Millis) -> Result<(), LockError> {
        self.end_previous_hold(Some(holder.token), now);
        self.write(holder, now)?;
        server::replicate_apply(self.ctx, self.name, holder);
        self.notify(event);
        Ok(())
    }

    /// Write without replicating: for LOCK.APPLY itself, whose caller replicates verbatim.
    pub fn write(&self, holder: &Holder, now: Millis) -> Result<(), LockError> {
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
        // Clamped so Redis adding its clock can never overflow, whatever an AOF or a master sends
        // (real deadlines are at most lock.max-ttl, 10 years, away).
        let ttl = holder
            .deadline
            .saturating_sub(1)
            .saturating_sub(now)
            .clamp(1, MAX_KEY_TTL_MS);
        let _ = self
            .key
            .set_expire(Duration::from_millis(ttl.unsigned_abs()));
        Ok(())
    }

    /// Delete the key and replicate the deletion (the caller emits the release event).
    pub fn remove(&self, now: Millis) {
        if self.exists() {
            self.end_previous_hold(None, now);
            let _ = self.key.delete();
            server::replicate_del(self.ctx, self.name);
        }
    }
}

/// Read a lock key's holder without writing (replicas, read-only commands).
pub fn read_holder(ctx: &Context, name: &RedisString) -> Result<Option<Holder>, LockError> {
    ctx.open_key(name)
        .get_value::<Holder>(&LOCK_TYPE)
        .map(|h| h.cloned())
        .map_err(|_| LockError::WrongType)
}

/// The last lock that left the keyspace after its deadline, so the `expired` notification that
/// follows it can tell a lock's expiry from any other key's.
struct Unlinked {
    db: i32,
    name: Box<[u8]>,
    granted: Millis,
    deadline: Millis,
}

static LAST_UNLINKED: Mutex<Option<Unlinked>> = Mutex::new(None);

/// A lock value left the keyspace (unlink hook). Only one past its deadline can be an expiry.
pub fn note_unlinked(db: i32, name: &[u8], holder: &Holder) {
    if clock::now_ms() >= holder.deadline {
        let mut slot = LAST_UNLINKED.lock().unwrap_or_else(|p| p.into_inner());
        *slot = Some(Unlinked {
            db,
            name: name.into(),
            granted: holder.granted,
            deadline: holder.deadline,
        });
    }
}

/// Redis expired the key `name` of `db`: if it was the lock noted by `note_unlinked`, its lease
/// ran out while held. Account for it and emit `lock.expire`.
pub fn expired(ctx: &Context, db: i32, name: &[u8]) {
    let expired = {
        let mut slot = LAST_UNLINKED.lock().unwrap_or_else(|p| p.into_inner());
        match slot.as_ref() {
            Some(u) if u.db == db && *u.name == *name => slot.take(),
            _ => None,
        }
    };
    if let Some(lock) = expired {
        let key = RedisString::create_from_slice(ctx.ctx, name);
        let now = clock::now_ms().max(lock.deadline);
        hold_ended(ctx, &key, lock.granted, lock.deadline, now);
    }
}
