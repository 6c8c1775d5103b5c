//! redis-lock: fair, fenced, replicated locks as native Redis commands.
//!
//! This file only registers the module: its type, commands and events.

#![cfg_attr(test, allow(dead_code, unused_imports))]

pub mod blocking;
pub mod clock;
pub mod commands;
pub mod data_type;
pub mod error;
pub mod events;
pub mod expiry;
pub mod fencing;
pub mod keyspace;
pub mod lock;
pub mod owner;
pub mod waiters;

#[cfg(not(test))]
mod registration {
    use redis_module::{redis_module, Context, RedisString, Status};

    use crate::data_type::LOCK_TYPE;
    use crate::{commands, events, expiry};

    fn init(ctx: &Context, _args: &[RedisString]) -> Status {
        ctx.set_module_options(redis_module::raw::ModuleOptions::HANDLE_IO_ERRORS);
        expiry::init(ctx);
        match events::subscribe(ctx) {
            Ok(()) => Status::Ok,
            Err(msg) => {
                ctx.log_warning(msg);
                Status::Err
            }
        }
    }

    redis_module! {
        name: "lock",
        version: 1,
        allocator: (redis_module::alloc::RedisAlloc, redis_module::alloc::RedisAlloc),
        data_types: [LOCK_TYPE],
        init: init,
        commands: [
            ["lock.acquire", commands::acquire, "write deny-oom blocking", 1, 1, 1, ""],
            ["lock.release", commands::release, "write fast", 1, 1, 1, ""],
            ["lock.extend", commands::extend, "write deny-oom fast", 1, 1, 1, ""],
            ["lock.fence", commands::fence, "readonly fast", 1, 1, 1, ""],
            ["lock.apply", commands::apply, "write deny-oom", 1, 1, 1, ""],
        ],
    }
}
