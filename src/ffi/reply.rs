//! Replies as the server takes them: an error of the one enum (`core::error`), a token, a grant,
//! a blocked client's answer, and the headers of map and array replies built item by item.

use std::os::raw::c_long;

use redis_module::{raw, Context, RedisError, RedisResult, RedisValue, Status};

use crate::core::codec;
use crate::core::error::LockError;
use crate::core::lock::Token;
use crate::core::settle::Answer;
use crate::core::watch::Seen;

impl From<LockError> for RedisError {
    fn from(err: LockError) -> Self {
        RedisError::Str(err.as_wire())
    }
}

/// A token as an integer reply (tokens stay below 2^53, see `core::fencing`).
pub fn token(token: Token) -> RedisValue {
    RedisValue::Integer(codec::token_i64(token))
}

/// The reply of a granted acquire: the token, or `[owner, token]` for owner `*`.
pub fn grant(owner: &[u8], token: Token, with_owner: bool) -> RedisValue {
    if with_owner {
        RedisValue::Array(vec![
            RedisValue::StringBuffer(owner.to_vec()),
            self::token(token),
        ])
    } else {
        self::token(token)
    }
}

/// The reply of a granted lock set: its tokens in key order, or `[owner, [token ...]]` for
/// owner `*`.
pub fn grant_set(
    owner: &[u8],
    tokens: impl Iterator<Item = Token>,
    with_owner: bool,
) -> RedisValue {
    let tokens = RedisValue::Array(tokens.map(token).collect());
    if with_owner {
        RedisValue::Array(vec![RedisValue::StringBuffer(owner.to_vec()), tokens])
    } else {
        tokens
    }
}

/// The reply a blocked client reads.
pub fn answer(answer: &Answer) -> RedisResult {
    match answer {
        Answer::Granted(g) => Ok(grant(g.owner.bytes(), g.token, g.with_owner)),
        Answer::GrantedSet(g) => Ok(grant_set(
            g.owner.bytes(),
            g.members.iter().map(|(_, t)| *t),
            g.with_owner,
        )),
        Answer::TimedOut => Ok(RedisValue::Null),
        Answer::Failed(err) => Err((*err).into()),
        // Sent by `send_answer`, as a map.
        Answer::Watched(_) => Ok(RedisValue::NoReply),
    }
}

/// Reply `answer` to the blocked client of `ctx` (a watcher's news is a map, built item by item).
pub fn send_answer(ctx: &Context, answer: &Answer) -> Status {
    match answer {
        Answer::Watched(news) => {
            seen(ctx, news);
            Status::Ok
        }
        other => ctx.reply(self::answer(other)),
    }
}

/// `LOCK.WATCH`'s reply: a map of `cursor`, `mode`, `token` (the newest live hold's, or nil)
/// and `holders` (a list of maps of `owner`, `token`, `ttl`, `permits`, oldest first).
pub fn seen(ctx: &Context, seen: &Seen) {
    map_header(ctx, 4);
    let field = |name: &'static str| ctx.reply(Ok(RedisValue::SimpleStringStatic(name)));
    field("cursor");
    ctx.reply(Ok(RedisValue::BulkString(seen.cursor.render())));
    field("mode");
    ctx.reply(Ok(RedisValue::SimpleStringStatic(seen.mode)));
    field("token");
    ctx.reply(Ok(seen.newest().map_or(RedisValue::Null, token)));
    field("holders");
    array_header(ctx, seen.holds.len());
    for hold in &seen.holds {
        map_header(ctx, 4);
        field("owner");
        ctx.reply(Ok(RedisValue::StringBuffer(hold.owner.to_vec())));
        field("token");
        ctx.reply(Ok(token(hold.token)));
        field("ttl");
        ctx.reply(Ok(RedisValue::Integer(hold.ttl)));
        field("permits");
        ctx.reply(Ok(RedisValue::Integer(i64::from(hold.permits))));
    }
}

/// Start a map reply of `len` field/value pairs (a flat array of twice that on RESP2); the
/// caller replies each field and value next.
pub fn map_header(ctx: &Context, len: usize) {
    raw::reply_with_map(ctx.ctx, c_long::try_from(len).unwrap_or(c_long::MAX));
}

/// Start an array reply of `len` items; the caller replies each item next.
pub fn array_header(ctx: &Context, len: usize) {
    raw::reply_with_array(ctx.ctx, c_long::try_from(len).unwrap_or(c_long::MAX));
}
