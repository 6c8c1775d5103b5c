//! Argument parsing and the LOCK.* handlers. Each handler decides with the pure functions of
//! `lock`, writes through `keyspace` (which replicates and emits events), counts what happened
//! in `metrics`, and never blocks where blocking is denied.

use redis_module::{raw, Context, ContextFlags, RedisError, RedisResult, RedisString, RedisValue};

use crate::blocking;
use crate::clock;
use crate::config;
use crate::data_type::LOCK_TYPE;
use crate::error::LockError;
use crate::expiry;
use crate::fencing;
use crate::keyspace::{self, LockEvent, LockKey};
use crate::lock::{self, Acquire, Holder, Millis, Token, Waiter};
use crate::metrics::STATS;
use crate::waiters::{self, Blocked, QueueKey};

/// How many queued owners LOCK.INFO lists without COUNT.
pub const INFO_DEFAULT_COUNT: usize = 10;

fn token_value(token: Token) -> RedisValue {
    RedisValue::Integer(i64::try_from(token).unwrap_or(i64::MAX))
}

fn parse_i64(arg: &RedisString) -> Result<i64, LockError> {
    arg.parse_integer().map_err(|_| LockError::NotAnInteger)
}

fn parse_ttl(arg: &RedisString, now: Millis) -> Result<Millis, LockError> {
    let ttl = parse_i64(arg)?;
    lock::deadline(now, ttl)?;
    if ttl > config::max_ttl() {
        return Err(LockError::TtlAboveMax);
    }
    Ok(ttl)
}

fn parse_token(arg: &RedisString) -> Result<Token, LockError> {
    let token = parse_i64(arg)?;
    u64::try_from(token)
        .ok()
        .filter(|t| *t > 0)
        .ok_or(LockError::TokenNotPositive)
}

fn parse_owner(arg: &RedisString) -> Result<&[u8], LockError> {
    match arg.as_slice() {
        [] => Err(LockError::EmptyOwner),
        owner => Ok(owner),
    }
}

/// `[WAIT timeout-ms]`: `None` without WAIT, `Some(0)` waits without limit.
fn parse_wait(options: &[RedisString], now: Millis) -> Result<Option<Millis>, LockError> {
    match options {
        [] => Ok(None),
        [flag, timeout] if flag.as_slice().eq_ignore_ascii_case(b"WAIT") => {
            let timeout = parse_i64(timeout)?;
            if timeout < 0 {
                return Err(LockError::TimeoutNegative);
            }
            // Redis adds the timeout to its clock: keep a minute of headroom below overflow.
            now.checked_add(timeout)
                .and_then(|t| t.checked_add(60_000))
                .ok_or(LockError::TimeoutTooLarge)?;
            Ok(Some(timeout))
        }
        _ => Err(LockError::Syntax),
    }
}

/// `[COUNT n]`
fn parse_count(options: &[RedisString]) -> Result<usize, LockError> {
    match options {
        [] => Ok(INFO_DEFAULT_COUNT),
        [flag, n] if flag.as_slice().eq_ignore_ascii_case(b"COUNT") => {
            usize::try_from(parse_i64(n)?).map_err(|_| LockError::CountNegative)
        }
        _ => Err(LockError::Syntax),
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

fn queue_key(ctx: &Context, name: &RedisString) -> QueueKey {
    QueueKey {
        db: keyspace::selected_db(ctx),
        name: name.as_slice().into(),
    }
}

/// `LOCK.ACQUIRE key owner ttl-ms [WAIT timeout-ms]`
pub fn acquire(ctx: &Context, args: Vec<RedisString>) -> RedisResult {
    if args.len() < 4 {
        return Err(RedisError::WrongArity);
    }
    refuse_on_replica(ctx)?;
    let now = clock::now_ms();
    let ttl = parse_ttl(&args[3], now)?;
    let wait = parse_wait(&args[4..], now)?;
    let generated;
    let (owner, with_owner) = if args[2].as_slice() == b"*" {
        generated = crate::owner::generate();
        (generated.as_bytes(), true)
    } else {
        let owner = parse_owner(&args[2])?;
        if owner.len() > config::max_owner_length() {
            return Err(LockError::OwnerTooLong.into());
        }
        (owner, false)
    };

    let lock = LockKey::open(ctx, &args[1]);
    let mut holder = lock.holder()?;
    let others_waiting = || waiters::anyone_waiting() && waiters::has_waiters(&lock.queue_key());
    let mut waiting = others_waiting();
    if waiting && lock::live(holder.as_ref(), now).is_none() {
        // The lease ran out a moment ago and the timer has not fired yet: the head goes first.
        expiry::pass_on(&lock, holder.as_ref(), now);
        holder = lock.holder()?;
        waiting = others_waiting();
    }

    let outcome = lock::acquire(holder.as_ref(), waiting, owner, ttl, now, || {
        fencing::issue(clock::now_us())
    })?;
    match outcome {
        Acquire::Granted(granted) | Acquire::Renewed(granted) => {
            if holder.as_ref().is_some_and(|h| h.token == granted.token) {
                STATS.renewed.incr();
            } else {
                STATS.acquired_immediately.incr();
            }
            lock.store(&granted, LockEvent::Acquire, now)?;
            if waiting {
                expiry::settle_at(&lock.queue_key(), granted.deadline);
            }
            Ok(blocking::grant_reply(owner, granted.token, with_owner))
        }
        Acquire::Busy => match wait {
            Some(timeout) if blocking::can_block(ctx) => {
                let key = lock.queue_key();
                if waiters::waiting(&key) >= config::max_waiters() {
                    STATS.queue_full.incr();
                    return Err(LockError::QueueFull.into());
                }
                let Some(mut handle) = blocking::block(ctx) else {
                    STATS.rejected.incr();
                    return Ok(RedisValue::Null);
                };
                let client_id = blocking::client_id(ctx);
                if timeout > 0 {
                    handle.timeout = expiry::time_out_after(client_id, timeout);
                }
                let client = Blocked {
                    client_id,
                    handle,
                    with_owner,
                    since_us: clock::now_us(),
                };
                waiters::join(
                    key.clone(),
                    Waiter {
                        client,
                        owner: crate::owner::Owner::new(owner),
                        ttl,
                    },
                );
                let due = lock::live(holder.as_ref(), now).map_or(now, |h| h.deadline);
                expiry::settle_at(&key, due);
                Ok(RedisValue::NoReply)
            }
            _ => {
                STATS.rejected.incr();
                Ok(RedisValue::Null)
            }
        },
    }
}

/// `LOCK.RELEASE key owner`
pub fn release(ctx: &Context, args: Vec<RedisString>) -> RedisResult {
    let [_, name, owner] = &args[..] else {
        return Err(RedisError::WrongArity);
    };
    refuse_on_replica(ctx)?;
    let owner = parse_owner(owner)?;
    let now = clock::now_ms();
    let lock = LockKey::open(ctx, name);
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
    expiry::pass_on(lock, None, now);
    Ok(RedisValue::Integer(1))
}

/// `LOCK.FORCERELEASE key`: release whoever holds the lock (an operator's tool).
pub fn force_release(ctx: &Context, args: Vec<RedisString>) -> RedisResult {
    let [_, name] = &args[..] else {
        return Err(RedisError::WrongArity);
    };
    refuse_on_replica(ctx)?;
    let now = clock::now_ms();
    let lock = LockKey::open(ctx, name);
    let holder = lock.holder()?;
    if lock::live(holder.as_ref(), now).is_none() {
        return Ok(RedisValue::Integer(0));
    }
    STATS.releases_forced.incr();
    released(&lock, now)
}

/// `LOCK.EXTEND key owner ttl-ms`
pub fn extend(ctx: &Context, args: Vec<RedisString>) -> RedisResult {
    let [_, name, owner, ttl] = &args[..] else {
        return Err(RedisError::WrongArity);
    };
    refuse_on_replica(ctx)?;
    let owner = parse_owner(owner)?;
    let now = clock::now_ms();
    let ttl = parse_ttl(ttl, now)?;
    let lock = LockKey::open(ctx, name);
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

/// Read a lock key's holder without writing (replicas, read-only commands).
fn read_holder(ctx: &Context, name: &RedisString) -> Result<Option<Holder>, LockError> {
    ctx.open_key(name)
        .get_value::<Holder>(&LOCK_TYPE)
        .map(|h| h.cloned())
        .map_err(|_| LockError::WrongType)
}

/// `LOCK.FENCE key [token]`
pub fn fence(ctx: &Context, args: Vec<RedisString>) -> RedisResult {
    let (name, token) = match &args[..] {
        [_, name] => (name, None),
        [_, name, token] => (name, Some(parse_token(token)?)),
        _ => return Err(RedisError::WrongArity),
    };
    let holder = read_holder(ctx, name)?;
    let now = clock::now_ms();
    Ok(match token {
        Some(token) => RedisValue::Integer(i64::from(lock::token_is_current(
            holder.as_ref(),
            token,
            now,
        ))),
        None => lock::fence(holder.as_ref(), now).map_or(RedisValue::Null, token_value),
    })
}

/// `LOCK.INFO key [COUNT n]`: who holds the lock, for how long, and who waits.
pub fn info(ctx: &Context, args: Vec<RedisString>) -> RedisResult {
    if args.len() < 2 {
        return Err(RedisError::WrongArity);
    }
    let count = parse_count(&args[2..])?;
    let holder = read_holder(ctx, &args[1])?;
    let now = clock::now_ms();
    let Some(holder) = lock::live(holder.as_ref(), now) else {
        return Ok(RedisValue::Null);
    };
    let (waiting, queued) = waiters::owners(&queue_key(ctx, &args[1]), count);
    let fields: [(&str, RedisValue); 6] = [
        (
            "owner",
            RedisValue::StringBuffer(holder.owner.bytes().to_vec()),
        ),
        ("token", token_value(holder.token)),
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
    let (name, owner, token, deadline, granted) = match &args[..] {
        [_, name, owner, token, deadline] => (name, owner, token, deadline, None),
        [_, name, owner, token, deadline, granted] => (name, owner, token, deadline, Some(granted)),
        _ => return Err(RedisError::WrongArity),
    };
    let flags = ctx.get_flags();
    if !flags.intersects(ContextFlags::REPLICATED | ContextFlags::LOADING) {
        return Err(LockError::ApplyNotAllowed.into());
    }
    let token = parse_token(token)?;
    if !fencing::in_range(token) {
        return Err(LockError::TokenAboveMax.into());
    }
    let holder = Holder {
        owner: crate::owner::Owner::new(parse_owner(owner)?),
        token,
        deadline: Some(parse_i64(deadline)?)
            .filter(|d| *d > 0)
            .ok_or(LockError::DeadlineNotPositive)?,
        granted: match granted {
            Some(granted) => parse_i64(granted)?,
            None => clock::now_ms(),
        },
    };
    fencing::observe(holder.token);
    LockKey::open(ctx, name).write(&holder, clock::now_ms())?;
    ctx.replicate_verbatim();
    Ok(RedisValue::SimpleStringStatic("OK"))
}
