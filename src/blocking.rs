//! The only place with raw block / unblock / timeout / disconnect FFI.
//!
//! A blocked `LOCK.ACQUIRE ... WAIT` is answered in one of three ways:
//! - granted: `answer` unblocks it with the token; the reply callback sends it. If the client
//!   disconnects before the reply went out, the grant is revoked (`expiry::revoke_later`), so
//!   the lock never stays with a closed connection;
//! - timed out: Redis calls `on_timeout`, which leaves the queue and replies nil;
//! - disconnected while queued: Redis calls `on_disconnect`, which leaves the queue.
//!
//! Every handle goes back to Redis through `RedisModule_UnblockClient` exactly once, even after
//! a timeout or a disconnect: that is what frees Redis's blocked-client record (with its reply
//! buffer). A handle is unblocked by whoever takes it out of the queue.

use std::os::raw::{c_int, c_void};
use std::ptr::NonNull;

use redis_module::{raw, Context};

use crate::error::LockError;
use crate::lock::Token;
use crate::waiters::QueueKey;

/// A client blocked by this module. Only the main thread uses it; the raw handle is moved
/// into the registry, which must be `Send`.
#[derive(Debug)]
pub struct BlockedClient(NonNull<raw::RedisModuleBlockedClient>);

// SAFETY: the handle is an opaque token owned by Redis; it is only ever used on the main thread.
unsafe impl Send for BlockedClient {}

/// The lock handed to a waiter.
#[derive(Debug)]
pub struct Grant {
    pub key: QueueKey,
    pub owner: crate::owner::Owner,
    pub token: Token,
    /// The waiter asked with owner `*`: the reply is `[owner, token]`.
    pub with_owner: bool,
}

/// How a blocked client is answered.
#[derive(Debug)]
pub enum Answer {
    Granted(Grant),
    Failed(LockError),
}

/// The private data passed through `RedisModule_UnblockClient`.
struct Delivery {
    answer: Answer,
    delivered: bool,
}

/// The id of the calling client (for a callback of a blocked client: that client).
pub fn client_id(ctx: &Context) -> u64 {
    // SAFETY: GetClientId is part of the module API since Redis 5 and takes any context.
    unsafe { raw::RedisModule_GetClientId.map_or(0, |f| f(ctx.ctx)) }
}

/// Whether the caller may block (not in MULTI, Lua, functions, RM_Call, ...).
pub fn can_block(ctx: &Context) -> bool {
    !ctx.get_flags()
        .contains(redis_module::ContextFlags::DENY_BLOCKING)
}

/// Block the calling client until `answer` or the timeout (0 = none).
pub fn block(ctx: &Context, timeout_ms: i64) -> Option<BlockedClient> {
    // SAFETY: BlockClient / SetDisconnectCallback are called on the main thread from a command
    // context; the callbacks are `extern "C"` functions with the signatures Redis expects.
    unsafe {
        let bc = raw::RedisModule_BlockClient?(
            ctx.ctx,
            Some(on_reply),
            Some(on_timeout),
            Some(on_free),
            timeout_ms,
        );
        let bc = NonNull::new(bc)?;
        if let Some(set) = raw::RedisModule_SetDisconnectCallback {
            set(bc.as_ptr(), Some(on_disconnect));
        }
        Some(BlockedClient(bc))
    }
}

/// Give the handle of a client that Redis already answered (timeout, disconnect) back to Redis,
/// so it frees its blocked-client record. No reply is sent: Redis has detached the client.
fn release_handle(client: BlockedClient) {
    // SAFETY: the handle came from BlockClient and was taken out of the queue just now, so this
    // is its only UnblockClient call.
    unsafe {
        if let Some(unblock) = raw::RedisModule_UnblockClient {
            unblock(client.0.as_ptr(), std::ptr::null_mut());
        }
    }
}

/// Unblock `client` with `answer`; its reply goes out at the end of this event-loop turn.
pub fn answer(client: BlockedClient, answer: Answer) {
    let delivery = Box::into_raw(Box::new(Delivery {
        answer,
        delivered: false,
    }));
    // SAFETY: the handle came from BlockClient and is answered exactly once (it is moved in).
    // Redis hands `delivery` back to `on_reply` and then to `on_free`, which frees it.
    unsafe {
        if let Some(unblock) = raw::RedisModule_UnblockClient {
            unblock(client.0.as_ptr(), delivery.cast::<c_void>());
        }
    }
}

extern "C" fn on_reply(
    ctx: *mut raw::RedisModuleCtx,
    _argv: *mut *mut raw::RedisModuleString,
    _argc: c_int,
) -> c_int {
    let context = Context::new(ctx);
    // SAFETY: the private data is the `Delivery` boxed in `answer`; it stays alive until `on_free`.
    let delivery = unsafe {
        raw::RedisModule_GetBlockedClientPrivateData
            .map(|f| f(ctx).cast::<Delivery>())
            .and_then(|p| p.as_mut())
    };
    let Some(delivery) = delivery else {
        return context.reply(Ok(redis_module::RedisValue::Null)) as c_int;
    };
    delivery.delivered = true;
    let reply = match &delivery.answer {
        Answer::Granted(grant) => Ok(crate::commands::grant_reply(
            &grant.owner.bytes(),
            grant.token,
            grant.with_owner,
        )),
        Answer::Failed(err) => Err((*err).into()),
    };
    context.reply(reply) as c_int
}

extern "C" fn on_timeout(
    ctx: *mut raw::RedisModuleCtx,
    _argv: *mut *mut raw::RedisModuleString,
    _argc: c_int,
) -> c_int {
    let context = Context::new(ctx);
    if let Some(handle) = crate::waiters::leave(client_id(&context)) {
        crate::metrics::STATS.wait_timeouts.incr();
        release_handle(handle);
    }
    context.reply(Ok(redis_module::RedisValue::Null)) as c_int
}

extern "C" fn on_disconnect(
    ctx: *mut raw::RedisModuleCtx,
    _bc: *mut raw::RedisModuleBlockedClient,
) {
    if let Some(handle) = crate::waiters::leave(client_id(&Context::new(ctx))) {
        crate::metrics::STATS.waiters_disconnected.incr();
        release_handle(handle);
    }
}

extern "C" fn on_free(_ctx: *mut raw::RedisModuleCtx, privdata: *mut c_void) {
    if privdata.is_null() {
        return;
    }
    // SAFETY: Redis passes back the pointer made by `Box::into_raw` in `answer`, exactly once.
    let delivery = unsafe { Box::from_raw(privdata.cast::<Delivery>()) };
    if let Answer::Granted(grant) = delivery.answer {
        if !delivery.delivered {
            // The client went away (timed out, disconnected) between the grant and its reply:
            // give the lock back.
            crate::metrics::STATS.grants_revoked.incr();
            crate::expiry::revoke_later(grant.key, grant.token);
        }
    }
}
