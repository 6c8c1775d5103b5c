//! Reading and writing a lock's state (its holds) in the keyspace. Every write goes through `store` or
//! `remove`, which also replicate it as a deterministic effect (explicit token, absolute deadline),
//! emit the keyspace event, and account the end of the previous hold, so no state change can
//! miss the replicas, the AOF, the events or the metrics.

use std::cell::Cell;
use std::ffi::CStr;
use std::sync::Mutex;
use std::time::Duration;

use redis_module::key::RedisKeyWritable;
use redis_module::{Context, RedisString};

use crate::core::error::LockError;
use crate::core::lock::{self, LockState, Millis};
use crate::core::metrics::STATS;
use crate::core::registry::QueueKey;
use crate::effects::sessions;
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
    /// The command itself went to the replicas and the AOF, and replays as this key's
    /// deletion: `remove` must not replicate a `DEL` too.
    deletion_replicated: Cell<bool>,
}

impl<'a> LockKey<'a> {
    pub fn open(ctx: &'a Context, name: &'a RedisString) -> Self {
        Self {
            ctx,
            name,
            key: ctx.open_key_writable(name),
            deletion_replicated: Cell::new(false),
        }
    }

    /// The context of the command or callback that opened the key.
    pub fn ctx(&self) -> &'a Context {
        self.ctx
    }

    /// The queue this lock's waiters stand in.
    pub fn queue_key(&self) -> QueueKey {
        QueueKey {
            db: server::selected_db(self.ctx),
            name: self.name.as_slice().into(),
        }
    }

    /// The stored state (some holds' leases may have run out: decisions look at live ones).
    pub fn state(&self) -> Result<Option<LockState>, LockError> {
        match self.key.get_value::<LockState>(&LOCK_TYPE) {
            Ok(value) => Ok(value.map(|s| s.clone())),
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

    /// Every stored hold that `next` does not keep (by token) ends now: account for it.
    fn end_previous_holds(&self, next: Option<&LockState>, now: Millis) {
        if let Ok(Some(previous)) = self.key.get_value::<LockState>(&LOCK_TYPE) {
            for ended in lock::ended(previous, next) {
                sessions::unbind(ended.token);
                hold_ended(self.ctx, self.name, ended.granted, ended.deadline, now);
            }
        }
    }

    /// Make `state` the lock's state, set the key's TTL to its last deadline, replicate it and
    /// emit `event`.
    pub fn store(&self, state: LockState, event: LockEvent, now: Millis) -> Result<(), LockError> {
        self.put(state, now)?;
        self.notify(event);
        Ok(())
    }

    /// `store` without an event of its own (holds that end still announce their expiry).
    pub fn put(&self, state: LockState, now: Millis) -> Result<(), LockError> {
        self.end_previous_holds(Some(&state), now);
        server::replicate_state(self.ctx, self.name, &state);
        self.write(state, now)
    }

    /// Write without replicating: for LOCK.APPLY itself, whose caller replicates verbatim.
    pub fn write(&self, state: LockState, now: Millis) -> Result<(), LockError> {
        // Redis deletes a key when now > expire; a lease ends when now >= deadline. Setting
        // the expire to the last deadline - 1 makes both agree, so Redis never drops a live
        // hold and a free lock with nobody waiting stops being a key (EXISTS 0, memory
        // returned). Clamped so Redis adding its clock can never overflow, whatever an AOF or a
        // master sends (real deadlines are at most lock.max-ttl, 10 years, away).
        let ttl = state
            .last_deadline()
            .saturating_sub(1)
            .saturating_sub(now)
            .clamp(1, MAX_KEY_TTL_MS);
        match self.key.get_value::<LockState>(&LOCK_TYPE) {
            // Updating in place keeps the key (no unlink callback, no keyspace churn).
            Ok(Some(current)) => {
                STATS.count_holds(current, -1);
                STATS.count_holds(&state, 1);
                *current = state;
            }
            Ok(None) => {
                STATS.count_holds(&state, 1);
                self.key
                    .set_value(&LOCK_TYPE, state)
                    .map_err(|_| LockError::WrongType)?;
                STATS.locks.add(1);
            }
            Err(_) => return Err(LockError::WrongType),
        }
        let _ = self
            .key
            .set_expire(Duration::from_millis(ttl.unsigned_abs()));
        Ok(())
    }

    /// Delete the key and replicate the deletion (the caller emits the release event).
    pub fn remove(&self, now: Millis) {
        if self.exists() {
            self.end_previous_holds(None, now);
            let _ = self.key.delete();
            if !self.deletion_replicated.get() {
                server::replicate_del(self.ctx, self.name);
            }
        }
    }

    /// Replicate the running command as it came (a release that frees an exclusive lock: it
    /// replays as the key's deletion, see `commands::release`), in place of the `DEL` that
    /// `remove` would send. Effects replicated after it (a handoff) follow it in order.
    pub fn replicate_command_as_deletion(&self) {
        self.ctx.replicate_verbatim();
        self.deletion_replicated.set(true);
    }
}

/// Whether `name` holds a lock (of any mode) in the selected db.
pub fn holds_lock(ctx: &Context, name: &RedisString) -> bool {
    matches!(
        ctx.open_key(name).get_value::<LockState>(&LOCK_TYPE),
        Ok(Some(_))
    )
}

/// Read a lock key's state without writing (replicas, read-only commands).
pub fn read_state(ctx: &Context, name: &RedisString) -> Result<Option<LockState>, LockError> {
    ctx.open_key(name)
        .get_value::<LockState>(&LOCK_TYPE)
        .map(|s| s.cloned())
        .map_err(|_| LockError::WrongType)
}

/// The last lock that left the keyspace with holds past their deadline, so the `expired`
/// notification that follows it can tell a lock's expiry from any other key's.
struct Unlinked {
    db: i32,
    name: Box<[u8]>,
    /// (grant time, deadline) of each hold whose lease had run out.
    ended: Vec<(Millis, Millis)>,
}

static LAST_UNLINKED: Mutex<Option<Unlinked>> = Mutex::new(None);

/// A lock value left the keyspace (unlink hook). Only holds past their deadline can have
/// expired.
pub fn note_unlinked(db: i32, name: &[u8], state: &LockState) {
    let now = clock::now_ms();
    let ended: Vec<(Millis, Millis)> = state
        .holds()
        .filter(|(h, _)| now >= h.deadline)
        .map(|(h, _)| (h.granted, h.deadline))
        .collect();
    if !ended.is_empty() {
        let mut slot = LAST_UNLINKED.lock().unwrap_or_else(|p| p.into_inner());
        *slot = Some(Unlinked {
            db,
            name: name.into(),
            ended,
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
        for (granted, deadline) in lock.ended {
            let now = clock::now_ms().max(deadline);
            hold_ended(ctx, &key, granted, deadline, now);
        }
    }
}
