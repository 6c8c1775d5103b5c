//! The LOCK.* handlers. Each one parses (`core::args`), decides (`core::lock`), writes through
//! `effects::keyspace` (which replicates and emits events), counts what happened, and replies.
//! Arity is checked before a handler runs (`shell::table`), so each sees its declared count.

use std::borrow::Cow;
use std::num::NonZeroI64;

use redis_module::{Context, ContextFlags, RedisResult, RedisString, RedisValue};

use crate::core::args::{self, ApplyTimes, Arg, OwnerArg};
use crate::core::codec;
use crate::core::config::Limits;
use crate::core::error::LockError;
use crate::core::fencing;
use crate::core::hot::{self, Signal};
use crate::core::lock::{self, Acquire, Holder, LockState, Millis, Request, Token};
use crate::core::metrics::STATS;
use crate::core::owner::{self, Owner};
use crate::core::queue::Waiter;
use crate::core::registry::QueueKey;
use crate::effects::epochs;
use crate::effects::foreign;
use crate::effects::keyspace::{self, LockEvent, LockKey};
use crate::effects::queues::{self, Blocked, BlockedWaiter};
use crate::effects::sessions;
use crate::effects::timers;
use crate::ffi::block;
use crate::ffi::clock;
use crate::ffi::reply;
use crate::ffi::role;
use crate::ffi::server;
use crate::shell::settling;

impl Arg for RedisString {
    fn bytes(&self) -> &[u8] {
        self.as_slice()
    }
}

/// Locks are granted and released by the master only. Redis refuses writes on read-only
/// replicas itself; a replica configured writable gets the same answer from the module.
pub fn refuse_on_replica(ctx: &Context) -> Result<(), LockError> {
    let flags = role::role_flags(ctx);
    if flags.contains(ContextFlags::SLAVE) && !flags.contains(ContextFlags::REPLICATED) {
        return Err(LockError::Replica);
    }
    Ok(())
}

/// `LOCK.ACQUIRE key owner ttl-ms [SHARED | LIMIT max [PERMITS n]] [SESSION] [WAIT timeout-ms]`
pub fn acquire(ctx: &Context, args: &[RedisString]) -> RedisResult {
    let flags = role::role_flags(ctx);
    if flags.intersects(ContextFlags::REPLICATED | ContextFlags::LOADING) {
        return replay_grant(ctx, args);
    }
    if flags.contains(ContextFlags::SLAVE) {
        return Err(LockError::Replica.into());
    }
    let now = clock::now_ms();
    let limits = Limits::current();
    let parsed = args::acquire(&args[2..], now, &limits)?;
    epochs::ensure(ctx)?;
    // Read before the grant issues its token (see `LockKey::set_granted_as_command`).
    let stream_knew = fencing::stream_knows_last();
    let (owner, with_owner) = owner_of(parsed.owner);
    let owner = &*owner;
    let lock = LockKey::open(ctx, &args[1]);
    let waiting = match queue_served_first(&lock, now) {
        Ok(waiting) => waiting,
        Err(err) => return behind_string(&lock, err, now, &parsed, (owner, with_owner), &limits),
    };
    let request = Request {
        owner,
        want: parsed.want,
        ttl: parsed.ttl,
    };
    // Decided on the stored state in place: no copy of it (nor of the decision) to stall on.
    let (outcome, was_free, busy_due) = lock.with_state(|state| {
        let outcome = lock::acquire(
            state,
            waiting,
            &request,
            now,
            limits.max_holders,
            fencing::issue,
        );
        // A busy lock's queue is settled when its first live lease ends.
        let due = || lock::live(state, now).and_then(|s| s.next_deadline(now));
        let busy_due = matches!(outcome, Ok(Acquire::Busy)).then(due).flatten();
        (outcome, state.is_none(), busy_due)
    })?;
    let (granted, token) = match outcome {
        Ok(Acquire::Granted { state, token }) => {
            STATS.acquired_immediately.incr();
            STATS.granted(parsed.want);
            (state, token)
        }
        Ok(Acquire::Renewed { state, token }) => {
            STATS.renewed.incr();
            (state, token)
        }
        Ok(Acquire::Busy) => {
            let due = busy_due.unwrap_or(now);
            return busy(ctx, &lock, due, &parsed, (owner, with_owner), &limits);
        }
        Err(err) => {
            if err == LockError::Deadlock {
                STATS.deadlocks.incr();
            }
            return Err(err.into());
        }
    };
    if stream_knew && was_free && !waiting && !with_owner {
        // A free name nobody waited for: replicas replay the command itself to this state.
        lock.set_granted_as_command(granted, now)?;
        bind_session(ctx, &lock, token, parsed.session);
    } else {
        store_grant(ctx, &lock, granted, token, waiting, parsed.session, now)?;
    }
    if !with_owner {
        return Ok(reply::token(token)); // built in place
    }
    Ok(reply::grant(owner, token, with_owner))
}

/// A plain string holds the name (`err` if it is not another client's old-style lock):
/// queue behind it, or answer nil (`busy`).
fn behind_string(
    lock: &LockKey,
    err: LockError,
    now: Millis,
    parsed: &args::AcquireArgs,
    owner: (&[u8], bool),
    limits: &Limits,
) -> RedisResult {
    let ttl = keyspace::foreign_ttl(lock.ctx(), lock.name()).ok_or(err)?;
    let due = foreign::due(ttl, now);
    let reply = busy(lock.ctx(), lock, due, parsed, owner, limits);
    if matches!(reply, Ok(RedisValue::NoReply)) {
        foreign::watch(&lock.queue_key(), due); // queued behind it
    }
    reply
}

/// `LOCK.ACQUIRE` as its master replicated it, from the replication link or the AOF: a fresh
/// grant (`LockKey::set_granted_as_command`), stored as the master stored it, under whatever
/// limits this server has, with the next token and the lease counted from now. The token is
/// counted first, whatever follows: the master issued it.
fn replay_grant(ctx: &Context, args: &[RedisString]) -> RedisResult {
    let token = fencing::replay_issue().ok_or(LockError::TokensExhausted)?;
    // Parsed as of time 0: what the master accepted at its time never overflows here.
    let parsed = args::acquire(&args[2..], 0, &Limits::UNBOUNDED)?;
    let OwnerArg::Given(owner) = parsed.owner else {
        return Err(LockError::BadState.into()); // a master replicates explicit states for `*`
    };
    let now = clock::now_ms();
    let holder = Holder {
        owner: Owner::new(owner),
        token,
        deadline: now.saturating_add(parsed.ttl),
        granted: now,
    };
    LockKey::open(ctx, &args[1]).set_replayed(LockState::first(parsed.want, holder), now)?;
    Ok(reply::grant(owner, token, false))
}

/// An acquire's owner: as given, or one the server makes up for `*` (the reply then names it).
pub fn owner_of(arg: OwnerArg<'_>) -> (Cow<'_, [u8]>, bool) {
    match arg {
        OwnerArg::Given(owner) => (Cow::Borrowed(owner), false),
        OwnerArg::Generate => {
            let generated = owner::uuid_from_random(server::random_bytes());
            (Cow::Owned(generated.into_bytes()), true)
        }
    }
}

/// Whether anyone waits for the lock, once the queue went first where the lock is free but its
/// settle has not run yet (a lease ran out a moment ago, or the value or the plain string that
/// held the name was deleted). `WrongType` where the name holds no lock.
pub fn queue_served_first(lock: &LockKey, now: Millis) -> Result<bool, LockError> {
    let free = lock.with_state(|state| state.is_none_or(|s| s.has_expired(now)))?;
    let others_waiting = || queues::anyone_waiting() && queues::has_waiters(&lock.queue_key());
    let waiting = others_waiting();
    if waiting && free {
        settling::pass_on(lock, lock.state()?.as_ref(), now);
        return Ok(others_waiting());
    }
    Ok(waiting)
}

/// The lock is not free for this request: queue the caller (`WAIT`, where it may block; its
/// queue is settled at `due`) or answer nil.
fn busy(
    ctx: &Context,
    lock: &LockKey,
    due: Millis,
    parsed: &args::AcquireArgs,
    (owner, with_owner): (&[u8], bool),
    limits: &Limits,
) -> RedisResult {
    match parsed.wait {
        Some(timeout) if server::can_block(ctx) => {
            let waiter = Waiter {
                client: (),
                owner: Owner::new(owner),
                ttl: parsed.ttl,
                want: parsed.want,
            };
            let how = Waiting {
                with_owner,
                session: parsed.session,
                timeout,
                // The lease heap settles a lock value by then already.
                due: (!lock.watched_by(due)).then_some(due),
            };
            wait_in_queue(ctx, lock.queue_key(), waiter, how, limits)
        }
        _ => {
            STATS.rejected.incr();
            Ok(RedisValue::Null)
        }
    }
}

/// Store a grant (or renewal), bind a `SESSION` hold to the connection, and settle the queue
/// when a downgrade may let readers at its head in, or several holds end one by one.
pub fn store_grant(
    ctx: &Context,
    lock: &LockKey,
    granted: LockState,
    token: Token,
    waiting: bool,
    session: bool,
    now: Millis,
) -> Result<(), LockError> {
    let settle = (waiting || granted.live_count(now) > 1).then(|| granted.clone());
    lock.set_announced(granted, LockEvent::Acquire, now)?;
    bind_session(ctx, lock, token, session);
    if let Some(stored) = settle {
        settling::pass_on(lock, Some(&stored), now);
    }
    Ok(())
}

/// A `SESSION` hold ends with the connection that was granted it.
fn bind_session(ctx: &Context, lock: &LockKey, token: Token, session: bool) {
    if session {
        sessions::bind(server::client_id(ctx), lock.queue_key(), token);
    }
}

/// How a caller waits: its reply's shape, whether its hold will be a session hold, its WAIT
/// timeout, and when the queue is to be settled (the first live lease's end), if nothing
/// else settles it by then.
pub struct Waiting {
    pub with_owner: bool,
    pub session: bool,
    pub timeout: Millis,
    pub due: Option<Millis>,
}

/// Block the caller as `waiter`, to be answered later, with its WAIT timeout in the schedule
/// (`None`, counted as rejected: the server cannot block it here).
pub fn block_as(ctx: &Context, how: &Waiting, waiter: Waiter<()>) -> Option<BlockedWaiter> {
    let Some(client) = block_caller(ctx, how) else {
        STATS.rejected.incr();
        return None;
    };
    STATS.queued(waiter.want);
    Some(waiter.map_client(|()| client))
}

/// The blocked client of the caller, with its WAIT timeout in the schedule.
fn block_caller(ctx: &Context, how: &Waiting) -> Option<Blocked> {
    let handle = block::block(ctx)?;
    let client_id = server::client_id(ctx);
    Some(Blocked {
        client_id,
        handle,
        with_owner: how.with_owner,
        since_us: clock::mono_us(),
        session: how.session,
        timeout: (how.timeout > 0)
            .then(|| NonZeroI64::new(timers::time_out_after(client_id, how.timeout)))
            .flatten(),
    })
}

/// Block the caller in `key`'s queue (its reply comes from `ffi::block` later).
fn wait_in_queue(
    ctx: &Context,
    key: QueueKey,
    waiter: Waiter<()>,
    how: Waiting,
    limits: &Limits,
) -> RedisResult {
    if queues::waiting(&key) >= limits.max_waiters {
        STATS.queue_full.incr();
        return Err(LockError::QueueFull.into());
    }
    let Some(waiter) = block_as(ctx, &how, waiter) else {
        return Ok(RedisValue::Null);
    };
    queues::join(key.clone(), waiter);
    hot::record(Signal::Waits, &key.name);
    if let Some(due) = how.due {
        timers::settle_at(&key, due);
    }
    Ok(RedisValue::NoReply)
}

/// `LOCK.RELEASE key owner [TOKEN token]`
///
/// A release that frees an exclusive lock is replicated (and logged to the AOF) as the command
/// itself, which replays as that key's deletion (`replay_release`): the same effect as a `DEL`,
/// at a fraction of the server's cost of building one. Any other release replicates the holds
/// left (`LOCK.APPLYSTATE`), and a handoff that follows replicates the new holder after it.
pub fn release(ctx: &Context, args: &[RedisString]) -> RedisResult {
    let flags = role::role_flags(ctx);
    if flags.intersects(ContextFlags::REPLICATED | ContextFlags::LOADING) {
        return replay_release(ctx, args);
    }
    if flags.contains(ContextFlags::SLAVE) {
        return Err(LockError::Replica.into());
    }
    let (owner, only) = args::release(&args[2..])?;
    let now = clock::now_ms();
    let lock = LockKey::open(ctx, &args[1]);
    // Decided on the stored state in place: the holds left, and whether it was exclusive.
    let decided = lock.with_state(|state| {
        let exclusive = matches!(state, Some(LockState::Exclusive(_)));
        lock::release(state, owner, only, now).map(|rest| (rest, exclusive))
    });
    let Some(Some((rest, exclusive))) = keyspace::unless_foreign(ctx, &args[1], decided)? else {
        STATS.release_not_owner.incr();
        return Ok(RedisValue::Integer(0));
    };
    STATS.releases.incr();
    if rest.is_none() && exclusive {
        lock.replicate_command_as_deletion();
    }
    settling::release_hold(&lock, rest, now)?;
    Ok(RedisValue::Integer(1))
}

/// `LOCK.RELEASE` from the master or the AOF: the master freed this exclusive lock, so the
/// replay deletes it, whatever this server's clock says of the lease (and passes the command
/// on to its own replicas and AOF).
fn replay_release(ctx: &Context, args: &[RedisString]) -> RedisResult {
    let (owner, only) = args::release(&args[2..])?;
    let lock = LockKey::open(ctx, &args[1]);
    let state = lock.state()?;
    let Some(holder) = lock::replayed_release(state.as_ref(), owner, only) else {
        return Ok(RedisValue::Integer(0));
    };
    // The master released it while its lease lasted: account for it as such here too.
    let now = clock::now_ms().min(holder.deadline.saturating_sub(1));
    lock.replicate_command_as_deletion();
    lock.remove(now);
    lock.notify(LockEvent::Release);
    Ok(RedisValue::Integer(1))
}

/// `LOCK.FORCERELEASE key`: release every hold, whoever holds it (an operator's tool).
pub fn force_release(ctx: &Context, args: &[RedisString]) -> RedisResult {
    refuse_on_replica(ctx)?;
    let now = clock::now_ms();
    let lock = LockKey::open(ctx, &args[1]);
    // Another client's plain-string lock is not the module's to release.
    let state = keyspace::unless_foreign(ctx, &args[1], lock.state())?.flatten();
    if lock::live(state.as_ref(), now).is_none() {
        return Ok(RedisValue::Integer(0));
    }
    STATS.releases_forced.incr();
    settling::release_hold(&lock, None, now)?;
    Ok(RedisValue::Integer(1))
}

/// `LOCK.EXTEND key owner ttl-ms [TOKEN token]`
pub fn extend(ctx: &Context, args: &[RedisString]) -> RedisResult {
    refuse_on_replica(ctx)?;
    let now = clock::now_ms();
    let (owner, ttl, only) = args::extend(&args[2..], now, &Limits::current())?;
    let lock = LockKey::open(ctx, &args[1]);
    let Some(state) = keyspace::unless_foreign(ctx, &args[1], lock.state())? else {
        STATS.extend_not_owner.incr();
        return Ok(RedisValue::Integer(0));
    };
    match lock::extend(state.as_ref(), owner, only, ttl, now)? {
        Some(extended) => {
            STATS.extends.incr();
            lock.set_announced(extended, LockEvent::Extend, now)?;
            Ok(RedisValue::Integer(1))
        }
        None => {
            STATS.extend_not_owner.incr();
            Ok(RedisValue::Integer(0))
        }
    }
}

/// `LOCK.FENCE key [token]`
pub fn fence(ctx: &Context, args: &[RedisString]) -> RedisResult {
    let token = args::fence(&args[2..])?;
    // Another client's plain-string lock has no token.
    let read = keyspace::read_state(ctx, &args[1]);
    let state = keyspace::unless_foreign(ctx, &args[1], read)?.flatten();
    let now = clock::now_ms();
    Ok(match token {
        Some(token) => RedisValue::Integer(i64::from(lock::token_is_current(
            state.as_ref(),
            token,
            now,
        ))),
        None => lock::fence(state.as_ref(), now).map_or(RedisValue::Null, reply::token),
    })
}

/// One hold as LOCK.INFO lists it.
fn hold_fields(holder: &Holder, permits: u32, now: Millis) -> [(&'static str, RedisValue); 6] {
    let session = sessions::client_of(holder.token).map_or(RedisValue::Null, |id| {
        RedisValue::Integer(i64::try_from(id).unwrap_or(i64::MAX))
    });
    [
        (
            "owner",
            RedisValue::StringBuffer(holder.owner.bytes().to_vec()),
        ),
        ("token", reply::token(holder.token)),
        ("ttl", RedisValue::Integer(holder.remaining(now))),
        ("held", RedisValue::Integer(holder.held_for(now))),
        ("permits", RedisValue::Integer(i64::from(permits))),
        ("session", session),
    ]
}

/// Reply `fields` as a map in this order: a RESP3 map, or a flat field/value array on RESP2.
fn reply_map<const N: usize>(ctx: &Context, fields: [(&'static str, RedisValue); N]) {
    reply::map_header(ctx, N);
    for (field, value) in fields {
        ctx.reply(Ok(RedisValue::SimpleStringStatic(field)));
        ctx.reply(Ok(value));
    }
}

/// `LOCK.INFO key [COUNT count]`: the mode, every live hold, and who waits in order. For an
/// exclusive hold, its owner, token, ttl and held also stand at the top, as before.
pub fn info(ctx: &Context, args: &[RedisString]) -> RedisResult {
    let count = args::info(&args[2..])?;
    let queue = QueueKey {
        db: server::selected_db(ctx),
        name: args[1].as_slice().into(),
    };
    let state = match keyspace::read_state(ctx, &args[1]) {
        Ok(state) => state,
        Err(err) => {
            let ttl = keyspace::foreign_ttl(ctx, &args[1]).ok_or(err)?;
            foreign_info(ctx, &queue, ttl, count);
            return Ok(RedisValue::NoReply);
        }
    };
    let now = clock::now_ms();
    let Some(state) = lock::live(state.as_ref(), now) else {
        return Ok(RedisValue::Null);
    };
    let [waiters, queue_owners] = queue_fields(&queue, count);
    let live: Vec<(&Holder, u32)> = state.holds().filter(|(h, _)| h.is_live(now)).collect();
    let limit = match state {
        LockState::Semaphore { limit, .. } => RedisValue::Integer(i64::from(*limit)),
        _ => RedisValue::Null,
    };
    let common: [(&'static str, RedisValue); 6] = [
        ("mode", RedisValue::SimpleStringStatic(state.mode_name())),
        ("limit", limit),
        (
            "permits",
            RedisValue::Integer(i64::from(state.permits_in_use(now))),
        ),
        waiters,
        queue_owners,
        // Rendered below: a list of maps.
        ("holders", RedisValue::NoReply),
    ];
    let top: Vec<(&'static str, RedisValue)> = match state {
        LockState::Exclusive(h) => hold_fields(h, 1, now)
            .into_iter()
            .filter(|(f, _)| *f != "permits" && *f != "session")
            .collect(),
        _ => Vec::new(),
    };
    reply::map_header(ctx, top.len() + common.len());
    for (field, value) in top.into_iter().chain(common) {
        ctx.reply(Ok(RedisValue::SimpleStringStatic(field)));
        if field == "holders" {
            reply::array_header(ctx, live.len());
            for (holder, permits) in &live {
                reply_map(ctx, hold_fields(holder, *permits, now));
            }
        } else {
            ctx.reply(Ok(value));
        }
    }
    Ok(RedisValue::NoReply)
}

/// LOCK.INFO's `waiters` (how many) and `queue` (the first `count` owners, in order).
fn queue_fields(queue: &QueueKey, count: usize) -> [(&'static str, RedisValue); 2] {
    let (waiting, queued) = queues::owners(queue, count);
    let owners = queued
        .into_iter()
        .map(|o| RedisValue::StringBuffer(o.into()));
    [
        (
            "waiters",
            RedisValue::Integer(i64::try_from(waiting).unwrap_or(i64::MAX)),
        ),
        ("queue", RedisValue::Array(owners.collect())),
    ]
}

/// `LOCK.INFO` of a name another client's plain-string lock holds: mode `foreign`, the string's
/// TTL (-1: none), no holds the module knows, and who waits behind it.
fn foreign_info(ctx: &Context, queue: &QueueKey, ttl: Option<Millis>, count: usize) {
    let [waiters, queue_owners] = queue_fields(queue, count);
    reply_map(
        ctx,
        [
            ("mode", RedisValue::SimpleStringStatic("foreign")),
            ("ttl", RedisValue::Integer(ttl.unwrap_or(-1))),
            ("limit", RedisValue::Null),
            ("permits", RedisValue::Integer(0)),
            waiters,
            queue_owners,
            ("holders", RedisValue::Array(Vec::new())),
        ],
    );
}

/// Only the master link and the AOF may send the internal commands.
fn internal_only(ctx: &Context, refused: LockError) -> Result<(), LockError> {
    let flags = role::role_flags(ctx);
    if flags.intersects(ContextFlags::REPLICATED | ContextFlags::LOADING) {
        Ok(())
    } else {
        Err(refused)
    }
}

/// `LOCK.APPLY key owner token PX left-ms held-ms`: the effect replicas and the AOF replay for
/// an exclusive hold, its lease counted again from now. The form of earlier versions,
/// `... deadline-unix-ms [granted-unix-ms]`, is read against this server's wall clock (without
/// the grant time, as the first version wrote it, `held` counts from now).
pub fn apply(ctx: &Context, args: &[RedisString]) -> RedisResult {
    internal_only(ctx, LockError::ApplyNotAllowed)?;
    let parsed = args::apply(&args[2..])?;
    let at = clock::clocks();
    let (deadline, granted) = match parsed.times {
        ApplyTimes::Left { left, held } => {
            (at.now.saturating_add(left), at.now.saturating_sub(held))
        }
        ApplyTimes::Unix { deadline, granted } => (
            at.from_unix(deadline),
            granted.map_or(at.now, |g| at.from_unix(g)),
        ),
    };
    let holder = Holder {
        owner: Owner::new(parsed.owner),
        token: parsed.token,
        deadline,
        granted,
    };
    fencing::observe(holder.token);
    LockKey::open(ctx, &args[1]).set_local(LockState::Exclusive(holder), clock::now_ms())?;
    ctx.replicate_verbatim();
    Ok(RedisValue::SimpleStringStatic("OK"))
}

/// `LOCK.EPOCH epoch`: a master started this fencing epoch (see `core::fencing`); a replica
/// (and a server replaying its AOF) will start above it.
pub fn epoch(ctx: &Context, args: &[RedisString]) -> RedisResult {
    internal_only(ctx, LockError::EpochNotAllowed)?;
    let epoch = args::epoch(&args[1..])?;
    fencing::observe(fencing::first_of(epoch));
    ctx.replicate_verbatim();
    Ok(RedisValue::SimpleStringStatic("OK"))
}

/// `LOCK.APPLYSTATE key payload`: the effect replicas and the AOF replay for any other state
/// (shared holds, a semaphore): the state encoded by `core::codec::to_bytes`.
pub fn apply_state(ctx: &Context, args: &[RedisString]) -> RedisResult {
    internal_only(ctx, LockError::ApplyNotAllowed)?;
    let state =
        codec::from_bytes(args[2].as_slice(), clock::clocks()).map_err(|_| LockError::BadState)?;
    for (holder, _) in state.holds() {
        fencing::observe(holder.token);
    }
    LockKey::open(ctx, &args[1]).set_local(state, clock::now_ms())?;
    ctx.replicate_verbatim();
    Ok(RedisValue::SimpleStringStatic("OK"))
}
