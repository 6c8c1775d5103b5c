//! Lock sets: `LOCK.MACQUIRE` takes several keys in one step or none (`core::lock_set`
//! decides), queueing in every key's queue at once to wait; `LOCK.MRELEASE` releases what the
//! owner holds of them (a waiting set is served by `set_handoff`). Each key keeps its own
//! value, token, replication and events, exactly as a single-key grant or release writes them.

use redis_module::{Context, RedisResult, RedisString, RedisValue};

use crate::core::args::AcquireArgs;
use crate::core::config::Limits;
use crate::core::error::LockError;
use crate::core::fencing;
use crate::core::hot::{self, Signal};
use crate::core::lock::{self, Acquire, Millis, Request};
use crate::core::lock_set::{self, Member, SetAcquire};
use crate::core::metrics::STATS;
use crate::core::owner::Owner;
use crate::core::queue::Waiter;
use crate::core::registry::QueueKey;
use crate::effects::epochs;
use crate::effects::foreign;
use crate::effects::keyspace::{self, LockKey};
use crate::effects::queues;
use crate::effects::timers;
use crate::ffi::clock;
use crate::ffi::reply;
use crate::ffi::server;
use crate::shell::commands::{self, Waiting};
use crate::shell::settling;

/// `LOCK.MACQUIRE numkeys key [key ...] owner ttl-ms [SHARED] [SESSION] [WAIT timeout-ms]`
pub fn macquire(ctx: &Context, args: &[RedisString]) -> RedisResult {
    commands::refuse_on_replica(ctx)?;
    let now = clock::now_ms();
    let limits = Limits::current();
    let (names, parsed) = lock_set::acquire_args(&args[1..], now, &limits)?;
    epochs::ensure(ctx)?;
    let (owner, with_owner) = commands::owner_of(parsed.owner);
    // Each queue goes first where a lease ran out a moment ago, one key at a time: a set served
    // there may take another of these keys, so none is held open meanwhile.
    for name in names {
        let _ = commands::queue_served_first(&LockKey::open(ctx, name), now);
    }
    let locks: Vec<LockKey> = names.iter().map(|n| LockKey::open(ctx, n)).collect();
    let members = locks
        .iter()
        .map(|lock| member(ctx, lock))
        .collect::<Result<Vec<_>, _>>()?;
    let request = Request {
        owner: &owner,
        want: parsed.want,
        ttl: parsed.ttl,
    };
    match lock_set::acquire(&members, &request, now, limits.max_holders, fencing::issue)? {
        SetAcquire::Granted(grants) => {
            let tokens = store(ctx, &locks, grants, &parsed, now)?;
            Ok(reply::grant_set(&owner, tokens.into_iter(), with_owner))
        }
        SetAcquire::Busy { own } => {
            let waiter = Waiter {
                client: (),
                owner: Owner::new(&owner),
                ttl: parsed.ttl,
                want: parsed.want,
            };
            wait(
                ctx,
                (&locks, &members),
                waiter,
                &parsed,
                (own, with_owner),
                &limits,
            )
        }
    }
}

/// One key of the set as the acquire finds it: its state, whether others wait, and whether a
/// plain string (another client's old-style lock) holds the name.
fn member(ctx: &Context, lock: &LockKey) -> Result<Member, LockError> {
    let queued = queues::anyone_waiting() && queues::has_waiters(&lock.queue_key());
    match lock.state() {
        Ok(state) => Ok(Member {
            state,
            queued,
            foreign: false,
        }),
        Err(err) => {
            keyspace::foreign_ttl(ctx, lock.name()).ok_or(err)?;
            Ok(Member {
                state: None,
                queued,
                foreign: true,
            })
        }
    }
}

/// Store every key of a set granted at once; its tokens, in key order.
fn store(
    ctx: &Context,
    locks: &[LockKey],
    grants: Vec<Acquire>,
    parsed: &AcquireArgs,
    now: Millis,
) -> Result<Vec<u64>, LockError> {
    let mut tokens = Vec::with_capacity(grants.len());
    let mut granted = 0;
    for (lock, grant) in locks.iter().zip(grants) {
        let (state, token) = match grant {
            Acquire::Granted { state, token } => {
                granted += 1;
                (state, token)
            }
            Acquire::Renewed { state, token } => (state, token),
            Acquire::Busy => return Err(LockError::Internal), // a granted set has none
        };
        commands::store_grant(ctx, lock, state, token, false, parsed.session, now)?;
        tokens.push(token);
    }
    if granted == 0 {
        STATS.renewed.incr();
    } else {
        STATS.acquired_immediately.incr();
        STATS.granted(parsed.want);
        STATS.set_grants.incr();
        STATS.set_keys_granted.add(granted);
    }
    Ok(tokens)
}

/// The set is not free for the caller: queue it in every key's queue at once (`WAIT`, where
/// it may block), or answer nil.
fn wait(
    ctx: &Context,
    (locks, members): (&[LockKey], &[Member]),
    waiter: Waiter<()>,
    parsed: &AcquireArgs,
    (own, with_owner): (bool, bool),
    limits: &Limits,
) -> RedisResult {
    let Some(timeout) = parsed.wait.filter(|_| server::can_block(ctx)) else {
        STATS.rejected.incr();
        return Ok(RedisValue::Null);
    };
    if own {
        return Err(LockError::SetWaitsOnItself.into());
    }
    let keys: Vec<QueueKey> = locks.iter().map(LockKey::queue_key).collect();
    if keys
        .iter()
        .any(|k| queues::waiting(k) >= limits.max_waiters)
    {
        STATS.queue_full.incr();
        return Err(LockError::QueueFull.into());
    }
    let now = clock::now_ms();
    let how = Waiting {
        with_owner,
        session: parsed.session,
        timeout,
        due: None, // each key is watched below
    };
    let Some(waiter) = commands::block_as(ctx, &how, waiter) else {
        return Ok(RedisValue::Null);
    };
    queues::join_set(keys.clone(), waiter);
    keys.iter()
        .for_each(|k| hot::record(Signal::Waits, &k.name));
    for ((key, member), lock) in keys.iter().zip(members).zip(locks) {
        watch_member(ctx, key, member, lock, now);
    }
    Ok(RedisValue::NoReply)
}

/// Have a waiting set's key settled when it may change: its first live lease's end, or the
/// plain string's (another client's lock) end.
fn watch_member(ctx: &Context, key: &QueueKey, member: &Member, lock: &LockKey, now: Millis) {
    if member.foreign {
        if let Some(ttl) = keyspace::foreign_ttl(ctx, lock.name()) {
            foreign::watch(key, foreign::due(ttl, now));
        }
        return;
    }
    let due = lock::live(member.state.as_ref(), now)
        .and_then(|s| s.next_deadline(now))
        .unwrap_or(now);
    if !lock.watched_by(due) {
        timers::settle_at(key, due);
    }
}

/// `LOCK.MRELEASE numkeys key [key ...] owner`: release each of the keys the owner holds (every
/// hold of its there), handing each to its next waiter; the number of keys released. Nothing
/// is released if a key holds another type.
pub fn mrelease(ctx: &Context, args: &[RedisString]) -> RedisResult {
    commands::refuse_on_replica(ctx)?;
    let (names, owner) = lock_set::release_args(&args[1..], &Limits::current())?;
    for name in names {
        keyspace::unless_foreign(ctx, name, keyspace::read_state(ctx, name))?;
    }
    let now = clock::now_ms();
    let mut released = 0;
    for name in names {
        // One key open at a time: a handoff here may grant a set holding another of them.
        let lock = LockKey::open(ctx, name);
        let Ok(Some(state)) = lock.state() else {
            STATS.release_not_owner.incr();
            continue;
        };
        let Some(rest) = lock::release(Some(&state), owner, None, now) else {
            STATS.release_not_owner.incr();
            continue;
        };
        STATS.releases.incr();
        settling::release_hold(&lock, rest, now)?;
        released += 1;
    }
    Ok(RedisValue::Integer(released))
}
