//! `LOCK.WATCH key [AFTER cursor] [WAIT timeout-ms]`: who holds a lock, told at once when it
//! differs from what the caller last saw (`core::watch::Cursor`), else when it changes. The
//! watchers of a name are looked at together once a command or timer may have changed it
//! (`effects::watches`), so a thousand watchers of one lock cost one read of it per change.

use std::num::NonZeroI64;

use redis_module::{Context, ContextFlags, RedisResult, RedisString, RedisValue};

use crate::core::args;
use crate::core::error::LockError;
use crate::core::lock::Millis;
use crate::core::metrics::STATS;
use crate::core::registry::QueueKey;
use crate::core::settle::Answer;
use crate::core::watch::{self, Seen, View};
use crate::effects::keyspace;
use crate::effects::timers;
use crate::effects::watches::{self, Watching};
use crate::ffi::block;
use crate::ffi::clock;
use crate::ffi::reply;
use crate::ffi::server;
use crate::shell::cluster;

/// `LOCK.WATCH key [AFTER cursor] [WAIT timeout-ms]`
pub fn watch(ctx: &Context, args: &[RedisString]) -> RedisResult {
    let now = clock::now_ms();
    let parsed = args::watch(&args[2..], now)?;
    let found = what_stands(ctx, &args[1])?;
    let seen = watch::seen(found.view(), now);
    if parsed.after.is_news(seen.cursor) {
        STATS.watch_news.incr();
        reply::seen(ctx, &seen);
        return Ok(RedisValue::NoReply);
    }
    match parsed.wait {
        // Never blocks inside MULTI, Lua or a module's call: nothing new is nil there.
        Some(timeout) if server::can_block(ctx) => {
            block_watcher(ctx, &args[1], parsed.after, timeout, found, now)
        }
        _ => Ok(RedisValue::Null),
    }
}

fn block_watcher(
    ctx: &Context,
    name: &RedisString,
    after: watch::Cursor,
    timeout: Millis,
    found: Found,
    now: Millis,
) -> RedisResult {
    let Some(handle) = block::block(ctx) else {
        return Ok(RedisValue::Null);
    };
    let client_id = server::client_id(ctx);
    let key = QueueKey {
        db: server::selected_db(ctx),
        name: name.as_slice().into(),
    };
    let timeout = (timeout > 0)
        .then(|| NonZeroI64::new(timers::time_out_after(client_id, timeout)))
        .flatten();
    watches::watch(
        key.clone(),
        Watching {
            client_id,
            handle,
            timeout,
        },
        after,
    );
    watches::looked(&key, found.unlocked(), found.string_ttl(), now);
    Ok(RedisValue::NoReply)
}

/// What stands under a name, as read for a watcher.
enum Found {
    Lock(Option<crate::core::lock::LockState>),
    /// A plain string (another client's old-style lock) with its TTL, if any.
    Foreign(Option<Millis>),
}

impl Found {
    fn view(&self) -> View<'_> {
        match self {
            Found::Lock(Some(state)) => View::Lock(state),
            Found::Lock(None) => View::Free,
            Found::Foreign(_) => View::Foreign,
        }
    }

    /// No lock value stands there: no module callback tells when that changes.
    fn unlocked(&self) -> bool {
        !matches!(self, Found::Lock(Some(_)))
    }

    fn string_ttl(&self) -> Option<Option<Millis>> {
        match self {
            Found::Foreign(ttl) => Some(*ttl),
            Found::Lock(_) => None,
        }
    }
}

/// Read `name` in the selected db: a lock, nothing, or a plain string standing for another
/// client's hold; another type is `WRONGTYPE`.
fn what_stands(ctx: &Context, name: &RedisString) -> Result<Found, LockError> {
    match keyspace::read_state(ctx, name) {
        Ok(state) => Ok(Found::Lock(state)),
        Err(err) => Ok(match keyspace::foreign_or_gone(ctx, name, err)? {
            Some(ttl) => Found::Foreign(ttl),
            None => Found::Lock(None),
        }),
    }
}

/// Names may have changed: answer each watcher for whom what stands there now is news.
pub fn look(ctx: &Context, names: Vec<QueueKey>) {
    for key in names {
        look_at(ctx, &key);
    }
}

fn look_at(ctx: &Context, key: &QueueKey) {
    server::select_db(ctx, key.db);
    let name = RedisString::create_from_slice(ctx.ctx, &key.name);
    let now = clock::now_ms();
    let found = match what_stands(ctx, &name) {
        Ok(found) => found,
        Err(err) => {
            // Another type now lives under the name: its watchers get the error.
            answer_all(key, watch::Cursor::Unseen, || Answer::Failed(err));
            watches::looked(key, true, None, now);
            return;
        }
    };
    if matches!(found, Found::Lock(None)) && moved_away(ctx, &name) {
        // The slot left this node (resharding): watchers retry and follow the redirect.
        answer_all(key, watch::Cursor::Unseen, || {
            Answer::Failed(LockError::SlotMoved)
        });
        return;
    }
    let seen: Seen = watch::seen(found.view(), now);
    let cursor = seen.cursor;
    answer_all(key, cursor, || {
        STATS.watch_news.incr();
        Answer::Watched(Box::new(seen.clone()))
    });
    watches::looked(key, found.unlocked(), found.string_ttl(), now);
}

/// Answer every watcher of `key` for whom `now` is news (`Unseen`: every one).
fn answer_all(key: &QueueKey, now: watch::Cursor, answer: impl Fn() -> Answer) {
    for watcher in watches::take_news(key, now) {
        block::answer(watcher.handle, answer());
    }
}

/// In a cluster, whether this node no longer serves `name`'s slot (a lock gone from a node is
/// looked at here; a lock still here is answered whatever the slot).
fn moved_away(ctx: &Context, name: &RedisString) -> bool {
    let flags = ctx.get_flags();
    flags.contains(ContextFlags::CLUSTER)
        && !flags.contains(ContextFlags::SLAVE)
        && !cluster::may_grant(ctx, name)
}
