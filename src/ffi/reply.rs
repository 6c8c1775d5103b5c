//! Replies as the server takes them: an error of the one enum (`core::error`), a token, a grant,
//! a blocked client's answer, and the headers of map and array replies built item by item.

use std::os::raw::c_long;

use redis_module::{raw, Context, RedisError, RedisResult, RedisValue};

use crate::core::codec;
use crate::core::error::LockError;
use crate::core::lock::Token;
use crate::core::settle::Answer;

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

/// The reply a blocked client reads.
pub fn answer(answer: &Answer) -> RedisResult {
    match answer {
        Answer::Granted(g) => Ok(grant(&g.owner.bytes(), g.token, g.with_owner)),
        Answer::TimedOut => Ok(RedisValue::Null),
        Answer::Failed(err) => Err((*err).into()),
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
