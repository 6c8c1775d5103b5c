//! Server events that move or drop locks under waiting clients (FLUSHDB/FLUSHALL, SWAPDB, this
//! master becoming a replica), the server's cron, loads that replace the data, `CONFIG SET`, and
//! the command filter (registered only while the shell has work for it).
//! Every callback contains panics (`panics`) and hands over to the shell's handlers.

use std::os::raw::{c_int, c_void};
use std::sync::atomic::{AtomicPtr, Ordering};

use redis_module::{raw, Context};

use crate::ffi::handlers::{self, CommandArgs};
use crate::ffi::panics;
use crate::ffi::role;

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

const SUBEVENT_NOW_MASTER: u64 = 0;
const SUBEVENT_NOW_REPLICA: u64 = 1;

pub fn subscribe(ctx: &Context) -> Result<(), &'static str> {
    let events: [(u64, raw::RedisModuleEventCallback); 7] = [
        (raw::REDISMODULE_EVENT_FLUSHDB, Some(on_flush)),
        (raw::REDISMODULE_EVENT_SWAPDB, Some(on_swapdb)),
        (
            raw::REDISMODULE_EVENT_REPLICATION_ROLE_CHANGED,
            Some(on_role_changed),
        ),
        (raw::REDISMODULE_EVENT_CLIENT_CHANGE, Some(on_client_change)),
        (raw::REDISMODULE_EVENT_CRON_LOOP, Some(on_cron)),
        (raw::REDISMODULE_EVENT_CONFIG, Some(on_config_change)),
        (raw::REDISMODULE_EVENT_LOADING, Some(on_loading)),
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

/// A flush starts: the lease heap lets go of the values it frees. After it every lock of the
/// flushed db(s) is free: serve their queues.
extern "C" fn on_flush(
    _ctx: *mut raw::RedisModuleCtx,
    _eid: raw::RedisModuleEvent,
    sub: u64,
    data: *mut c_void,
) {
    // SAFETY: for this event Redis passes a RedisModuleFlushInfoV1.
    let db = unsafe { data.cast::<FlushInfo>().as_ref() }.map_or(-1, |info| info.dbnum);
    let db = (db >= 0).then_some(db);
    panics::contain(
        "the flush event",
        || (),
        || match (handlers::get(), sub) {
            (Some(h), raw::REDISMODULE_SUBEVENT_FLUSHDB_START) => (h.flush_starting)(db),
            (Some(h), raw::REDISMODULE_SUBEVENT_FLUSHDB_END) => (h.flushed)(db),
            _ => {}
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
    panics::contain(
        "the swapdb event",
        || (),
        || {
            if let Some(h) = handlers::get() {
                (h.swapped)(info.dbnum_first, info.dbnum_second);
            }
        },
    );
}

/// A master became a replica, or a replica a master: the shell answers its waiters or starts
/// its epoch.
extern "C" fn on_role_changed(
    _ctx: *mut raw::RedisModuleCtx,
    _eid: raw::RedisModuleEvent,
    sub: u64,
    _data: *mut c_void,
) {
    panics::contain(
        "the role-change event",
        || (),
        || {
            // Before the handlers: whatever they run reads the new role.
            match sub {
                SUBEVENT_NOW_REPLICA => role::set_replica(true),
                SUBEVENT_NOW_MASTER => role::set_replica(false),
                _ => {}
            }
            match (handlers::get(), sub) {
                (Some(h), SUBEVENT_NOW_REPLICA) => (h.demoted)(),
                (Some(h), SUBEVENT_NOW_MASTER) => (h.promoted)(),
                _ => {}
            }
        },
    );
}

/// A client connected or disconnected: the shell ends the session holds of a closed one.
extern "C" fn on_client_change(
    _ctx: *mut raw::RedisModuleCtx,
    _eid: raw::RedisModuleEvent,
    sub: u64,
    data: *mut c_void,
) {
    if sub != raw::REDISMODULE_SUBEVENT_CLIENT_CHANGE_DISCONNECTED {
        return;
    }
    // SAFETY: for this event Redis passes a RedisModuleClientInfoV1 (its id is the third field).
    let Some(info) = (unsafe { data.cast::<raw::RedisModuleClientInfo>().as_ref() }) else {
        return;
    };
    panics::contain(
        "the client-change event",
        || (),
        || {
            if let Some(h) = handlers::get() {
                (h.client_closed)(info.id);
            }
        },
    );
}

/// A load that replaces the data started (an RDB or AOF at start-up or by `DEBUG`, a full
/// sync), or failed (the server keeps the data it had).
extern "C" fn on_loading(
    _ctx: *mut raw::RedisModuleCtx,
    _eid: raw::RedisModuleEvent,
    sub: u64,
    _data: *mut c_void,
) {
    panics::contain(
        "the loading event",
        || (),
        || {
            role::set_loading(!matches!(
                sub,
                raw::REDISMODULE_SUBEVENT_LOADING_ENDED | raw::REDISMODULE_SUBEVENT_LOADING_FAILED
            ));
            match (handlers::get(), sub) {
                (
                    Some(h),
                    raw::REDISMODULE_SUBEVENT_LOADING_RDB_START
                    | raw::REDISMODULE_SUBEVENT_LOADING_AOF_START
                    | raw::REDISMODULE_SUBEVENT_LOADING_REPL_START,
                ) => (h.load_started)(),
                (Some(h), raw::REDISMODULE_SUBEVENT_LOADING_FAILED) => (h.load_failed)(),
                _ => {}
            }
        },
    );
}

/// `CONFIG SET` changed settings: the shell hears their names.
extern "C" fn on_config_change(
    ctx: *mut raw::RedisModuleCtx,
    _eid: raw::RedisModuleEvent,
    sub: u64,
    data: *mut c_void,
) {
    if sub != raw::REDISMODULE_SUBEVENT_CONFIG_CHANGE {
        return;
    }
    // SAFETY: for this event Redis passes a RedisModuleConfigChangeV1: `num_changes` C strings
    // in `config_names`, alive during the callback.
    let names: Vec<&[u8]> = unsafe {
        let Some(change) = data.cast::<raw::RedisModuleConfigChange>().as_ref() else {
            return;
        };
        if change.config_names.is_null() {
            return;
        }
        let count = usize::try_from(change.num_changes).unwrap_or(0);
        std::slice::from_raw_parts(change.config_names, count)
            .iter()
            .filter(|name| !name.is_null())
            .map(|name| std::ffi::CStr::from_ptr(*name).to_bytes())
            .collect()
    };
    panics::contain(
        "the config-change event",
        || (),
        || {
            if let Some(h) = handlers::get() {
                (h.config_changed)(&Context::new(ctx), &names);
            }
        },
    );
}

/// The server's cron: the shell checks that the module's timer will fire on time.
extern "C" fn on_cron(
    ctx: *mut raw::RedisModuleCtx,
    _eid: raw::RedisModuleEvent,
    _sub: u64,
    _data: *mut c_void,
) {
    panics::contain(
        "the cron event",
        || (),
        || {
            if let Some(h) = handlers::get() {
                (h.cron)(&Context::new(ctx));
            }
        },
    );
}

/// The command filter, while registered (the shell decides when: `shell::filter`).
static FILTER: AtomicPtr<raw::RedisModuleCommandFilter> = AtomicPtr::new(std::ptr::null_mut());

/// Whether the command filter is registered.
pub fn watching_commands() -> bool {
    !FILTER.load(Ordering::Relaxed).is_null()
}

/// Whether the server names the client to the filter (Redis 7.2+, Valkey; not Redis 7.0).
pub fn filter_knows_clients() -> bool {
    // SAFETY: reading a function pointer the API set at load.
    let get_client_id = unsafe { raw::RedisModule_CommandFilterGetClientId };
    get_client_id.is_some()
}

/// Register the command filter (`on`) or unregister it, unless it already is (or is not).
/// Registering is safe anywhere on the main thread (a filter added while the server runs the
/// filters is simply not called for that command); unregistering frees the list node the
/// server's loop over the filters may be about to read, so the caller does it only from a
/// timer or the cron, never under a command (another module's filter may be running it).
pub fn watch_commands(ctx: &Context, on: bool) {
    let current = FILTER.load(Ordering::Relaxed);
    let registered = !current.is_null();
    if on == registered {
        return;
    }
    // SAFETY: registering a callback of the expected signature, or unregistering the filter
    // this module registered, on the main thread outside any filter loop (see above).
    unsafe {
        if on {
            if let Some(register) = raw::RedisModule_RegisterCommandFilter {
                let filter = register(
                    ctx.ctx,
                    Some(on_command),
                    raw::REDISMODULE_CMDFILTER_NOSELF as c_int,
                );
                FILTER.store(filter, Ordering::Relaxed);
            }
        } else if let Some(unregister) = raw::RedisModule_UnregisterCommandFilter {
            unregister(ctx.ctx, current);
            FILTER.store(std::ptr::null_mut(), Ordering::Relaxed);
        }
    }
}

extern "C" fn on_command(fctx: *mut raw::RedisModuleCommandFilterCtx) {
    panics::contain("the command filter", || (), || filter(fctx));
}

fn filter(fctx: *mut raw::RedisModuleCommandFilterCtx) {
    // SAFETY: the filter context is valid during the callback.
    let total = unsafe { raw::RedisModule_CommandFilterArgsCount.map_or(0, |count| count(fctx)) };
    let (Ok(total @ 1..), Some(h)) = (usize::try_from(total), handlers::get()) else {
        return;
    };
    (h.any_command)();
    if total > h.command_seen_words {
        return;
    }
    // SAFETY: the context and its count, used only during this callback.
    let args = unsafe { CommandArgs::new(fctx, total) };
    (h.command_seen)(&args);
}
