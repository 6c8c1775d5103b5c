//! Reading and writing a lock's state (its holds) in the keyspace. Every write goes through
//! `set_announced` / `set_replicated`, `set_granted_as_command` or `remove`, which also
//! replicate it as a deterministic effect (explicit token, the time left of each lease; or, for
//! a fresh grant of the next token, the command itself, which a replica replays to the same
//! state), emit the keyspace event, and account the end of the previous hold, so no state
//! change can miss the replicas, the AOF, the events or the metrics.
//!
//! A lock key carries no TTL: Redis counts TTLs on the wall clock, leases run on the lease
//! clock (`ffi::clock`). Every write has the value settled at its first deadline
//! (`effects::timers`' lease heap), which deletes it once its last lease ran out (`PTTL`
//! answers -1; `LOCK.INFO` tells the time left).

use std::cell::Cell;
use std::ffi::CStr;

use redis_module::{Context, RedisString};

use crate::core::config;
use crate::core::error::LockError;
use crate::core::fencing;
use crate::core::hot::{self, Signal};
use crate::core::lock::{self, LockState, Millis};
use crate::core::metrics::STATS;
use crate::core::registry::QueueKey;
use crate::core::value::LockValue;
use crate::effects::adrift;
use crate::effects::sessions;
use crate::effects::timers;
use crate::effects::watches;
use crate::ffi::data_type::LOCK_TYPE;
use crate::ffi::key::{Found, WritableKey};
use crate::ffi::server;

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

/// A hold ended at `now`: record how long it lasted, and whether the lease ran out first (which
/// it returns; the caller announces the expiry, `LockEvent::Expire`, once it holds no borrow of
/// the value: a subscriber of the event may write the key).
fn hold_ended(key: &RedisString, granted: Millis, deadline: Millis, now: Millis) -> bool {
    let expired = now >= deadline;
    let end = if expired { deadline } else { now };
    STATS.hold_time.record(
        u64::try_from(end.saturating_sub(granted))
            .unwrap_or(0)
            .saturating_mul(1000),
    );
    if expired {
        STATS.expired_while_held.incr();
        hot::record(Signal::Expired, key.as_slice());
    }
    expired
}

/// A lock key opened for writing.
pub struct LockKey<'a> {
    ctx: &'a Context,
    name: &'a RedisString,
    key: WritableKey,
    /// The command itself went to the replicas and the AOF, and replays as this key's
    /// deletion: `remove` must not replicate a `DEL` too.
    deletion_replicated: Cell<bool>,
}

impl<'a> LockKey<'a> {
    pub fn open(ctx: &'a Context, name: &'a RedisString) -> Self {
        Self {
            ctx,
            name,
            key: WritableKey::open(ctx, name),
            deletion_replicated: Cell::new(false),
        }
    }

    /// The key's name.
    pub fn name(&self) -> &'a RedisString {
        self.name
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
        self.with_state(|state| state.cloned())
    }

    /// `f` of the stored state, borrowed (`state` without the copy). `f` must not write the
    /// key: it decides, the caller writes after.
    pub fn with_state<R>(&self, f: impl FnOnce(Option<&LockState>) -> R) -> Result<R, LockError> {
        match self.key.found() {
            Found::Empty => Ok(f(None)),
            Found::Lock(value) => Ok(f(Some(&value.state))),
            Found::Other => Err(LockError::WrongType),
        }
    }

    /// Whether the stored value is watched to be settled by `due` (then its queue needs no
    /// entry of its own in the schedule).
    pub fn watched_by(&self, due: Millis) -> bool {
        match self.key.found() {
            Found::Lock(value) => value.lease.place().is_some() && value.lease.due <= due,
            _ => false,
        }
    }

    pub fn exists(&self) -> bool {
        !self.key.is_empty()
    }

    pub fn notify(&self, event: LockEvent) {
        notify(self.ctx, event, self.name);
    }

    /// Every stored hold that `next` does not keep (by token) ends now: account for it. True
    /// when some ended and every one of them ran out of lease.
    fn end_previous_holds(&self, next: Option<&LockState>, now: Millis) -> bool {
        let (mut ended_n, mut expired_n) = (0, 0);
        if let Found::Lock(previous) = self.key.found() {
            for ended in lock::ended(&previous.state, next) {
                sessions::unbind(ended.token);
                ended_n += 1;
                expired_n += usize::from(hold_ended(self.name, ended.granted, ended.deadline, now));
            }
        }
        // The value is no longer borrowed: the events' subscribers may write the key.
        for _ in 0..expired_n {
            self.notify(LockEvent::Expire);
        }
        ended_n > 0 && expired_n == ended_n
    }

    /// Make `state` the lock's state, have it settled at its first deadline, replicate it and
    /// emit `event`.
    pub fn set_announced(
        &self,
        state: LockState,
        event: LockEvent,
        now: Millis,
    ) -> Result<(), LockError> {
        self.set_replicated(state, now)?;
        self.notify(event);
        Ok(())
    }

    /// `set_announced` without an event of its own (holds that end still announce their
    /// expiry).
    pub fn set_replicated(&self, state: LockState, now: Millis) -> Result<(), LockError> {
        self.end_previous_holds(Some(&state), now);
        server::replicate_state(self.ctx, self.name, &state);
        fencing::replicated(state.holds().map(|(h, _)| h.token).max().unwrap_or(0));
        self.set_local(state, now)
    }

    /// Store a fresh grant of a free name and replicate the running command itself (no lookup,
    /// no new arguments): a replica, or the AOF's replay, runs it through `replay_grant` and
    /// issues the same token (`fencing::replay_issue`). Only for a command a replica replays
    /// to this very state: the name held nothing, nobody waited, the owner was given, and the
    /// stream knew the last token before this one was issued (`fencing::stream_knows_last`).
    pub fn set_granted_as_command(&self, state: LockState, now: Millis) -> Result<(), LockError> {
        let token = state.holds().map(|(h, _)| h.token).max().unwrap_or(0);
        self.set_local(state, now)?;
        self.ctx.replicate_verbatim();
        fencing::replicated(token);
        self.notify(LockEvent::Acquire);
        Ok(())
    }

    /// Store a grant replayed as its command (a replica, the AOF) and pass it on as it came, to
    /// this server's replicas and AOF; as its effect where this server's AOF rewrites would
    /// drop the last token (`aof-use-rdb-preamble no`, see `fencing::aof_base_knows_last`).
    pub fn set_replayed(&self, state: LockState, now: Millis) -> Result<(), LockError> {
        if fencing::aof_base_knows_last() {
            self.ctx.replicate_verbatim();
        } else {
            server::replicate_state(self.ctx, self.name, &state);
        }
        self.set_local(state, now)
    }

    /// Set without replicating or announcing: for LOCK.APPLY itself, whose caller replicates
    /// verbatim.
    pub fn set_local(&self, state: LockState, _now: Millis) -> Result<(), LockError> {
        let first_deadline = state.first_deadline();
        let value = match self.key.found() {
            // Updating in place keeps the key (no unlink callback, no keyspace churn).
            Found::Lock(current) => {
                STATS.count_holds(&current.state, -1);
                STATS.count_holds(&state, 1);
                current.state = state;
                current
            }
            Found::Empty => {
                let stored = self.key.store(Box::new(LockValue::new(state)));
                let stored = stored.ok_or(LockError::WrongType)?;
                STATS.count_holds(&stored.state, 1);
                STATS.locks.add(1);
                stored
            }
            Found::Other => return Err(LockError::WrongType),
        };
        let db = server::selected_db(self.ctx);
        timers::watch_lease(value, db, self.name.as_slice(), first_deadline);
        if watches::anyone_watching() {
            watches::changed(&self.queue_key());
        }
        Ok(())
    }

    /// Delete the key and replicate the deletion (the caller emits the release event). A lock
    /// whose last lease ran out also gets the server's `expired` event, as a key with a TTL
    /// would.
    pub fn remove(&self, now: Millis) {
        if self.exists() {
            let expired = self.end_previous_holds(None, now);
            // The unlink hook this fires stops the schedule watching the name.
            adrift::deleting_here(|| self.key.delete());
            if !self.deletion_replicated.get() {
                server::replicate_del(self.ctx, self.name);
            }
            if expired {
                server::notify_expired(self.ctx, self.name);
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
        ctx.open_key(name).get_value::<LockValue>(&LOCK_TYPE),
        Ok(Some(_))
    )
}

/// The TTL of a plain string under `name` that stands for another client's hold (an
/// old-style `SET NX PX` lock; `lock.foreign-holds`): `None` if there is no such string, else
/// its time to live (`None` inside: it has none).
pub fn foreign_ttl(ctx: &Context, name: &RedisString) -> Option<Option<Millis>> {
    if !config::foreign_holds() {
        return None;
    }
    server::string_ttl(ctx, name)
}

/// What a failed read of `name`'s lock (`err`: not a lock) means outside a command: `Some`, a
/// plain string standing for another client's hold, with its TTL (`foreign_ttl`); `None`,
/// nothing stands there now; else `err`. Outside a command Redis 7.0 reads its clock afresh at
/// each lookup, so a string whose TTL ends between the read and this look is gone by now: the
/// name is free, not another type. (A command sees one instant throughout.)
pub fn foreign_or_gone(
    ctx: &Context,
    name: &RedisString,
    err: LockError,
) -> Result<Option<Option<Millis>>, LockError> {
    if let Some(ttl) = foreign_ttl(ctx, name) {
        return Ok(Some(ttl));
    }
    if ctx.open_key(name).is_null() {
        return Ok(None);
    }
    Err(err)
}

/// A read of a lock's state (`read`), unless it failed because a plain string stands under
/// `name` for another client's hold: then `None` (nothing of the caller's is there).
pub fn unless_foreign<T>(
    ctx: &Context,
    name: &RedisString,
    read: Result<T, LockError>,
) -> Result<Option<T>, LockError> {
    match read {
        Err(LockError::WrongType) if foreign_ttl(ctx, name).is_some() => Ok(None),
        other => other.map(Some),
    }
}

/// Read a lock key's state without writing (replicas, read-only commands).
pub fn read_state(ctx: &Context, name: &RedisString) -> Result<Option<LockState>, LockError> {
    ctx.open_key(name)
        .get_value::<LockValue>(&LOCK_TYPE)
        .map(|v| v.map(|v| v.state.clone()))
        .map_err(|_| LockError::WrongType)
}
