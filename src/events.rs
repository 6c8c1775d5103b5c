//! Server events that move or drop locks under waiting clients (FLUSHDB/FLUSHALL, SWAPDB, this
//! master becoming a replica), and `CONFIG RESETSTAT`, seen through a command filter.
//! Every callback contains panics (`guard`).

use std::os::raw::{c_int, c_void};

use redis_module::{raw, Context};

use crate::error::LockError;
use crate::expiry;
use crate::guard;
use crate::waiters;

/// `RedisModuleFlushInfoV1` from redismodule.h.
#[repr(C)]
struct FlushInfo {
    version: u64,
    sync: c_int,
    dbnum: c_int,
}

/// `RedisModuleSwapDbInfoV1` from redismodule.h.
#[repr(C)]
struct SwapDbInfo {
    version: u64,
    dbnum_first: c_int,
    dbnum_second: c_int,
}

const SUBEVENT_NOW_REPLICA: u64 = 1;

pub fn subscribe(ctx: &Context) -> Result<(), &'static str> {
    let events: [(u64, raw::RedisModuleEventCallback); 3] = [
        (raw::REDISMODULE_EVENT_FLUSHDB, Some(on_flush)),
        (raw::REDISMODULE_EVENT_SWAPDB, Some(on_swapdb)),
        (
            raw::REDISMODULE_EVENT_REPLICATION_ROLE_CHANGED,
            Some(on_role_changed),
        ),
    ];
    for (id, callback) in events {
        let event = raw::RedisModuleEvent { id, dataver: 1 };
        // SAFETY: subscribing at load time with callbacks of the expected signature.
        let status = unsafe {
            raw::RedisModule_SubscribeToServerEvent.map_or(raw::REDISMODULE_ERR as c_int, |f| {
                f(ctx.ctx, event, callback)
            })
        };
        if status != raw::REDISMODULE_OK as c_int {
            return Err("failed to subscribe to a server event");
        }
    }
    Ok(())
}

/// After a flush every lock of the flushed db(s) is free: serve their queues.
extern "C" fn on_flush(
    _ctx: *mut raw::RedisModuleCtx,
    _eid: raw::RedisModuleEvent,
    sub: u64,
    data: *mut c_void,
) {
    if sub != raw::REDISMODULE_SUBEVENT_FLUSHDB_END {
        return;
    }
    // SAFETY: for this event Redis passes a RedisModuleFlushInfoV1.
    let db = unsafe { data.cast::<FlushInfo>().as_ref() }.map_or(-1, |info| info.dbnum);
    guard::contain(
        "the flush event",
        || (),
        || {
            for key in waiters::queues_in((db >= 0).then_some(db)) {
                expiry::settle_soon(&key);
            }
        },
    );
}

/// The two dbs traded contents: every queue of either db meets a different holder (or none).
extern "C" fn on_swapdb(
    _ctx: *mut raw::RedisModuleCtx,
    _eid: raw::RedisModuleEvent,
    _sub: u64,
    data: *mut c_void,
) {
    // SAFETY: for this event Redis passes a RedisModuleSwapDbInfoV1.
    let Some(info) = (unsafe { data.cast::<SwapDbInfo>().as_ref() }) else {
        return;
    };
    guard::contain(
        "the swapdb event",
        || (),
        || {
            for db in [info.dbnum_first, info.dbnum_second] {
                for key in waiters::queues_in(Some(db)) {
                    expiry::settle_soon(&key);
                }
            }
        },
    );
}

/// A replica never grants: waiters of a demoted master get an error at once.
extern "C" fn on_role_changed(
    _ctx: *mut raw::RedisModuleCtx,
    _eid: raw::RedisModuleEvent,
    sub: u64,
    _data: *mut c_void,
) {
    if sub == SUBEVENT_NOW_REPLICA {
        guard::contain(
            "the role-change event",
            || (),
            || {
                expiry::fail_everyone(LockError::Demoted);
            },
        );
    }
}

/// Redis has no module event for `CONFIG RESETSTAT`: a command filter notices it (and EXEC /
/// DISCARD, which may run or drop a queued one) go by; `resetstat` checks afterwards whether the
/// server really ran it. Every other command costs one length check of its name.
pub fn watch_commands(ctx: &Context) {
    // SAFETY: registering a filter callback of the expected signature at load time.
    unsafe {
        if let Some(register) = raw::RedisModule_RegisterCommandFilter {
            register(
                ctx.ctx,
                Some(on_command),
                raw::REDISMODULE_CMDFILTER_NOSELF as c_int,
            );
        }
    }
}

extern "C" fn on_command(fctx: *mut raw::RedisModuleCommandFilterCtx) {
    guard::contain("the command filter", || (), || filter(fctx));
}

fn filter(fctx: *mut raw::RedisModuleCommandFilterCtx) {
    // SAFETY: the filter context is valid during the callback; arguments are only borrowed here.
    let (Some(count), Some(arg)) = (unsafe { raw::RedisModule_CommandFilterArgsCount }, unsafe {
        raw::RedisModule_CommandFilterArgGet
    }) else {
        return;
    };
    // SAFETY: as above.
    let total = unsafe { count(fctx) };
    if total < 1 {
        return;
    }
    // SAFETY: as above; `pos` stays below the argument count.
    let arg_at = |pos: c_int| unsafe { redis_module::RedisString::string_as_slice(arg(fctx, pos)) };
    let first = arg_at(0);
    let candidate = match first.len() {
        4 if total == 1 && first.eq_ignore_ascii_case(b"exec") => {
            crate::resetstat::exec_is_candidate()
        }
        7 if total == 1 && first.eq_ignore_ascii_case(b"discard") => {
            crate::resetstat::discard();
            false
        }
        6 if total == 2
            && first.eq_ignore_ascii_case(b"config")
            && arg_at(1).eq_ignore_ascii_case(b"resetstat") =>
        {
            crate::resetstat::candidate();
            true
        }
        _ => false,
    };
    if candidate {
        expiry::check_resetstat_soon();
    }
}
