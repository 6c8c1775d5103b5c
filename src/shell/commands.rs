//! The LOCK.* handlers. Each one parses (`core::args`), decides (`core::lock`), writes through
//! `effects::keyspace` (which replicates and emits events), counts what happened, and replies.
//! Arity is checked before a handler runs (`shell::table`), so each sees its declared count.

use redis_module::{raw, Context, ContextFlags, RedisResult, RedisString, RedisValue};

use crate::core::args::{self, Arg, OwnerArg};
use crate::core::config::Limits;
use crate::core::error::LockError;
use crate::core::fencing;
use crate::core::lock::{self, Acquire, Holder, Millis};
use crate::core::metrics::STATS;
use crate::core::owner::{self, Owner};
use crate::core::queue::Waiter;
use crate::core::registry::QueueKey;
use crate::core::settle::{grant_reply, token_reply};
use crate::effects::keyspace::{self, LockEvent, LockKey};
use crate::effects::queues::{self, Blocked};
use crate::effects::timers;
use crate::ffi::block;
use crate::ffi::clock;
use crate::ffi::server;
use crate::shell::waiting;

impl Arg for RedisString {
    fn bytes(&self) -> &[u8] {
        self.as_slice()
    }
}

/// Locks are granted and released by the master only. Redis refuses writes on read-only
/// replicas itself; a replica configured writable gets the same answer from the module.
fn refuse_on_replica(ctx: &Context) -> Result<(), LockError> {
    let flags = ctx.get_flags();
    if flags.contains(ContextFlags::SLAVE) && !flags.contains(ContextFlags::REPLICATED) {
        return Err(LockError::Replica);
    }
    Ok(())
}

/// `LOCK.ACQUIRE key owner ttl-ms [WAIT timeout-ms]`
pub fn acquire(ctx: &Context, args: Vec<RedisString>) -> RedisResult {
    refuse_on_replica(ctx)?;
    let now = clock::now_ms();
    let limits = Limits::current();
    let parsed = args::acquire(&args[2..], now, &limits)?;
    let generated;
    let (owner, with_owner) = match parsed.owner {
        OwnerArg::Given(owner) => (owner, false),
        OwnerArg::Generate => {
            generated = owner::uuid_from_random(server::random_bytes());
            (generated.as_bytes(), true)
        }
    };

    let lock = LockKey::open(ctx, &args[1]);
    let mut holder = lock.holder()?;
    let others_waiting = || queues::anyone_waiting() && queues::has_waiters(&lock.queue_key());
    let mut waiting = others_waiting();
    if waiting && lock::live(holder.as_ref(), now).is_none() {
        // The lease ran out a moment ago and the timer has not fired yet: the head goes first.
        waiting::pass_on(&lock, holder.as_ref(), now);
        holder = lock.holder()?;
        waiting = others_waiting();
    }

    let outcome = lock::acquire(holder.as_ref(), waiting, owner, parsed.ttl, now, || {
        fencing::issue(clock::now_us())
    })?;
    let granted = match outcome {
        Acquire::Granted(granted) => {
            STATS.acquired_immediately.incr();
            granted
        }
        Acquire::Renewed(renewed) => {
            STATS.renewed.incr();
            renewed
        }
        Acquire::Busy => {
            return match parsed.wait {
                Some(timeout) if server::can_block(ctx) => {
                    let due = lock::live(holder.as_ref(), now).map_or(now, |h| h.deadline);
                    wait_in_queue(
                        ctx,
                        lock.queue_key(),
                        owner,
                        with_owner,
                        parsed.ttl,
                        timeout,
                        due,
                        &limits,
                    )
                }
                _ => {
                    STATS.rejected.incr();
                    Ok(RedisValue::Null)
                }
            };
        }
    };
    lock.store(&granted, LockEvent::Acquire, now)?;
    if waiting {
        timers::settle_at(&lock.queue_key(), granted.deadline);
    }
    Ok(grant_reply(owner, granted.token, with_owner))
}

/// Block the caller in `key`'s queue (its reply comes from `ffi::block` later); the queue is
/// settled at `due`, when the current holder's lease ends.
#[allow(clippy::too_many_arguments)]
fn wait_in_queue(
    ctx: &Context,
    key: QueueKey,
    owner: &[u8],
    with_owner: bool,
    ttl: Millis,
    timeout: Millis,
    due: Millis,
    limits: &Limits,
) -> RedisResult {
    if queues::waiting(&key) >= limits.max_waiters {
        STATS.queue_full.incr();
        return Err(LockError::QueueFull.into());
    }
    let Some(mut handle) = block::block(ctx) else {
        STATS.rejected.incr();
        return Ok(RedisValue::Null);
    };
    let client_id = server::client_id(ctx);
    if timeout > 0 {
        handle.timeout = timers::time_out_after(client_id, timeout);
    }
    let client = Blocked {
        client_id,
        handle,
        with_owner,
        since_us: clock::now_us(),
    };
    queues::join(
        key.clone(),
        Waiter {
            client,
            owner: Owner::new(owner),
            ttl,
        },
    );
    timers::settle_at(&key, due);
    Ok(RedisValue::NoReply)
}

/// `LOCK.RELEASE key owner`
pub fn release(ctx: &Context, args: Vec<RedisString>) -> RedisResult {
    refuse_on_replica(ctx)?;
    let owner = args::owner(args[2].as_slice())?;
    let now = clock::now_ms();
    let lock = LockKey::open(ctx, &args[1]);
    let holder = lock.holder()?;
    if !lock::may_release(holder.as_ref(), owner, now) {
        STATS.release_not_owner.incr();
        return Ok(RedisValue::Integer(0));
    }
    STATS.releases.incr();
    released(&lock, now)
}

/// The holder is gone: say so, and hand the lock to the head of the queue (or free it).
fn released(lock: &LockKey, now: Millis) -> RedisResult {
    lock.notify(LockEvent::Release);
    waiting::pass_on(lock, None, now);
    Ok(RedisValue::Integer(1))
}

/// `LOCK.FORCERELEASE key`: release whoever holds the lock (an operator's tool).
pub fn force_release(ctx: &Context, args: Vec<RedisString>) -> RedisResult {
    refuse_on_replica(ctx)?;
    let now = clock::now_ms();
    let lock = LockKey::open(ctx, &args[1]);
    let holder = lock.holder()?;
    if lock::live(holder.as_ref(), now).is_none() {
        return Ok(RedisValue::Integer(0));
    }
    STATS.releases_forced.incr();
    released(&lock, now)
}

/// `LOCK.EXTEND key owner ttl-ms`
pub fn extend(ctx: &Context, args: Vec<RedisString>) -> RedisResult {
    refuse_on_replica(ctx)?;
    let now = clock::now_ms();
    let (owner, ttl) = args::extend(&args[2..], now, &Limits::current())?;
    let lock = LockKey::open(ctx, &args[1]);
    let holder = lock.holder()?;
    match lock::extend(holder.as_ref(), owner, ttl, now)? {
        Some(extended) => {
            STATS.extends.incr();
            lock.store(&extended, LockEvent::Extend, now)?;
            Ok(RedisValue::Integer(1))
        }
        None => {
            STATS.extend_not_owner.incr();
            Ok(RedisValue::Integer(0))
        }
    }
}

/// `LOCK.FENCE key [token]`
pub fn fence(ctx: &Context, args: Vec<RedisString>) -> RedisResult {
    let token = args::fence(&args[2..])?;
    let holder = keyspace::read_holder(ctx, &args[1])?;
    let now = clock::now_ms();
    Ok(match token {
        Some(token) => RedisValue::Integer(i64::from(lock::token_is_current(
            holder.as_ref(),
            token,
            now,
        ))),
        None => lock::fence(holder.as_ref(), now).map_or(RedisValue::Null, token_reply),
    })
}

/// `LOCK.INFO key [COUNT n]`: who holds the lock, for how long, and who waits.
pub fn info(ctx: &Context, args: Vec<RedisString>) -> RedisResult {
    let count = args::info(&args[2..])?;
    let holder = keyspace::read_holder(ctx, &args[1])?;
    let now = clock::now_ms();
    let Some(holder) = lock::live(holder.as_ref(), now) else {
        return Ok(RedisValue::Null);
    };
    let queue = QueueKey {
        db: server::selected_db(ctx),
        name: args[1].as_slice().into(),
    };
    let (waiting, queued) = queues::owners(&queue, count);
    let fields: [(&str, RedisValue); 6] = [
        (
            "owner",
            RedisValue::StringBuffer(holder.owner.bytes().to_vec()),
        ),
        ("token", token_reply(holder.token)),
        ("ttl", RedisValue::Integer(holder.remaining(now))),
        ("held", RedisValue::Integer(holder.held_for(now))),
        (
            "waiters",
            RedisValue::Integer(i64::try_from(waiting).unwrap_or(i64::MAX)),
        ),
        (
            "queue",
            RedisValue::Array(
                queued
                    .into_iter()
                    .map(|o| RedisValue::StringBuffer(o.into()))
                    .collect(),
            ),
        ),
    ];
    // A map in this field order: RESP3 map, or a flat field/value array on RESP2.
    raw::reply_with_map(ctx.ctx, fields.len() as std::os::raw::c_long);
    for (field, value) in fields {
        ctx.reply(Ok(RedisValue::SimpleStringStatic(field)));
        ctx.reply(Ok(value));
    }
    Ok(RedisValue::NoReply)
}

/// `LOCK.APPLY key owner token deadline-unix-ms [granted-unix-ms]`: the effect replicas and
/// the AOF replay. (Without the grant time, as the first version wrote it, `held` counts from now.)
pub fn apply(ctx: &Context, args: Vec<RedisString>) -> RedisResult {
    let flags = ctx.get_flags();
    if !flags.intersects(ContextFlags::REPLICATED | ContextFlags::LOADING) {
        return Err(LockError::ApplyNotAllowed.into());
    }
    let parsed = args::apply(&args[2..])?;
    let holder = Holder {
        owner: Owner::new(parsed.owner),
        token: parsed.token,
        deadline: parsed.deadline,
        granted: parsed.granted.unwrap_or_else(clock::now_ms),
    };
    fencing::observe(holder.token);
    LockKey::open(ctx, &args[1]).write(&holder, clock::now_ms())?;
    ctx.replicate_verbatim();
    Ok(RedisValue::SimpleStringStatic("OK"))
}
