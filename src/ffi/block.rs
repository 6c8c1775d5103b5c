//! Blocking a client and answering it: the raw block / unblock / disconnect FFI.
//!
//! A blocked `LOCK.ACQUIRE ... WAIT` is answered in exactly one of three ways, each decided by
//! whoever takes the waiter out of its queue (everything runs on the main thread, so only one
//! can):
//! - granted: `answer` unblocks it with the token; the reply callback sends it. If the client
//!   disconnects before the reply went out, the grant is revoked (a `Revoke` job, on the next turn of the event loop), so
//!   the lock never stays with a closed connection;
//! - timed out: the module's own schedule (job `TimeOut`) takes it out and `answer`s nil;
//! - disconnected while queued: Redis calls `on_disconnect`; the shell's handler takes it out.
//!
//! Clients are blocked *without* a server-side timeout. On Redis 7.0 the server's timeout path
//! unblocks a client even when the module has just unblocked it with a grant, so neither the
//! grant nor nil ever reached it (a lost reply, then a desynchronised connection). With the
//! timeout kept in the module, grant and timeout are decided in one place on every server.
//!
//! `CLIENT UNBLOCK` goes through that same server path, so it is offered only where the server
//! skips clients a module already unblocked (Redis 7.2+, Valkey): there `on_unblock` has the
//! shell take the waiter out and answers nil. On Redis 7.0 lock waiters register no timeout callback, so
//! `CLIENT UNBLOCK` answers 0 and leaves them waiting (use their WAIT timeout or CLIENT KILL).
//!
//! Every handle goes back to Redis through `RedisModule_UnblockClient` exactly once: that is what
//! frees Redis's blocked-client record (with its reply buffer).

use std::os::raw::{c_int, c_void};
use std::ptr::NonNull;

use redis_module::{raw, Context, RedisValue};

use crate::core::error::LockError;
use crate::core::metrics::STATS;
use crate::core::settle::{Answer, Job};
use crate::ffi::handlers;
use crate::ffi::panics;
use crate::ffi::reply;
use crate::ffi::server;

/// A client blocked by this module. Only the main thread uses it; the raw handle is moved into
/// the registry, which must be `Send`.
#[derive(Debug)]
pub struct BlockedClient {
    handle: NonNull<raw::RedisModuleBlockedClient>,
}

// SAFETY: the handle is an opaque token owned by Redis; it is only ever used on the main thread.
unsafe impl Send for BlockedClient {}

/// The private data passed through `RedisModule_UnblockClient`.
struct Delivery {
    answer: Answer,
    delivered: bool,
}

/// The first server version whose timeout path skips clients a module already unblocked.
const UNBLOCK_SAFE_VERSION: c_int = 0x00_07_02_00;

/// Whether `CLIENT UNBLOCK` can be offered to lock waiters on this server.
fn client_unblock_is_safe() -> bool {
    server::version() >= UNBLOCK_SAFE_VERSION
}

/// Block the calling client until `answer` (no server-side timeout: see the module docs).
pub fn block(ctx: &Context) -> Option<BlockedClient> {
    let on_unblock: raw::RedisModuleCmdFunc = if client_unblock_is_safe() {
        Some(on_unblock)
    } else {
        None
    };
    // SAFETY: BlockClient / SetDisconnectCallback are called on the main thread from a command
    // context; the callbacks are `extern "C"` functions with the signatures Redis expects.
    unsafe {
        let bc =
            raw::RedisModule_BlockClient?(ctx.ctx, Some(on_reply), on_unblock, Some(on_free), 0);
        let handle = NonNull::new(bc)?;
        if let Some(set) = raw::RedisModule_SetDisconnectCallback {
            set(handle.as_ptr(), Some(on_disconnect));
        }
        Some(BlockedClient { handle })
    }
}

/// Give the handle of a client that is gone (disconnected) back to Redis, so it frees its
/// blocked-client record. No reply is sent: there is nobody to send it to.
pub fn release_handle(client: BlockedClient) {
    // SAFETY: the handle came from BlockClient and was taken out of the queue just now, so this
    // is its only UnblockClient call.
    unsafe {
        if let Some(unblock) = raw::RedisModule_UnblockClient {
            unblock(client.handle.as_ptr(), std::ptr::null_mut());
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
            unblock(client.handle.as_ptr(), delivery.cast::<c_void>());
        }
    }
}

extern "C" fn on_reply(
    ctx: *mut raw::RedisModuleCtx,
    _argv: *mut *mut raw::RedisModuleString,
    _argc: c_int,
) -> c_int {
    let context = Context::new(ctx);
    panics::contain(
        "the reply callback",
        // Not delivered: `on_free` revokes a grant; the client learns it was not served.
        || context.reply(Err(LockError::Internal.into())) as c_int,
        || {
            // SAFETY: the private data is the `Delivery` boxed in `answer`; it stays alive until
            // `on_free`.
            let delivery = unsafe {
                raw::RedisModule_GetBlockedClientPrivateData
                    .map(|f| f(ctx).cast::<Delivery>())
                    .and_then(|p| p.as_mut())
            };
            let Some(delivery) = delivery else {
                return context.reply(Ok(RedisValue::Null)) as c_int;
            };
            let status = reply::send_answer(&context, &delivery.answer) as c_int;
            delivery.delivered = true;
            status
        },
    )
}

/// `CLIENT UNBLOCK` of a waiter (Redis 7.2+ and Valkey only; the server then unblocks it).
extern "C" fn on_unblock(
    ctx: *mut raw::RedisModuleCtx,
    _argv: *mut *mut raw::RedisModuleString,
    _argc: c_int,
) -> c_int {
    let context = Context::new(ctx);
    panics::contain(
        "the unblock callback",
        || context.reply(Err(LockError::Internal.into())) as c_int,
        || {
            if let Some(h) = handlers::get() {
                (h.client_unblocked)(server::client_id(&context));
            }
            context.reply(Ok(RedisValue::Null)) as c_int
        },
    )
}

extern "C" fn on_disconnect(
    ctx: *mut raw::RedisModuleCtx,
    _bc: *mut raw::RedisModuleBlockedClient,
) {
    panics::contain(
        "the disconnect callback",
        || (),
        || {
            if let Some(h) = handlers::get() {
                (h.disconnected)(server::client_id(&Context::new(ctx)));
            }
        },
    );
}

extern "C" fn on_free(_ctx: *mut raw::RedisModuleCtx, privdata: *mut c_void) {
    if privdata.is_null() {
        return;
    }
    // SAFETY: Redis passes back the pointer made by `Box::into_raw` in `answer`, exactly once.
    let delivery = unsafe { Box::from_raw(privdata.cast::<Delivery>()) };
    panics::contain(
        "the free callback",
        || (),
        || {
            if delivery.delivered {
                return;
            }
            // The client went away between the grant and its reply: give the locks back.
            let granted = match delivery.answer {
                Answer::Granted(grant) => vec![(grant.key, grant.token)],
                Answer::GrantedSet(set) => set.members,
                _ => return,
            };
            STATS.grants_revoked.incr();
            if let Some(h) = handlers::get() {
                for (key, token) in granted {
                    (h.revoke)(Job::Revoke { key, token });
                }
            }
        },
    );
}
