//! redis-lock: fair, fenced, replicated locks as native Redis commands.
//!
//! This file only registers the module: its type, commands, configuration and events.

#![cfg_attr(test, allow(dead_code, unused_imports))]

pub mod blocking;
pub mod clock;
pub mod cluster;
pub mod command_docs;
pub mod commands;
pub mod config;
pub mod data_type;
pub mod error;
pub mod events;
pub mod expiry;
pub mod fencing;
pub mod guard;
pub mod keyspace;
pub mod lock;
pub mod metrics;
pub mod owner;
pub mod resetstat;
pub mod waiters;

#[cfg(not(test))]
mod registration {
    use redis_module::configuration::ConfigurationFlags;
    use redis_module::{redis_module, AclCategory, Context, RedisResult, RedisString, Status};

    use crate::data_type::LOCK_TYPE;
    use crate::guard;
    use crate::{command_docs, commands, config, events, expiry, metrics};

    fn init(ctx: &Context, _args: &[RedisString]) -> Status {
        guard::install_hook();
        ctx.set_module_options(redis_module::raw::ModuleOptions::HANDLE_IO_ERRORS);
        expiry::init(ctx);
        metrics::register_info(ctx, Some(on_info));
        events::watch_commands(ctx);
        let ready = events::subscribe(ctx)
            .map_err(str::to_string)
            .and_then(|()| command_docs::register(ctx))
            .and_then(|()| guard::debug_panics::register(ctx));
        match ready {
            Ok(()) => Status::Ok,
            Err(msg) => {
                ctx.log_warning(&msg);
                Status::Err
            }
        }
    }

    extern "C" fn on_info(
        ctx: *mut redis_module::raw::RedisModuleInfoCtx,
        _for_crash_report: std::os::raw::c_int,
    ) {
        guard::contain(
            "the INFO callback",
            || (),
            || {
                let _ = metrics::add_info(&redis_module::InfoContext::new(ctx));
            },
        );
    }

    // Each command hands off to its handler with panics contained (`guard`).
    fn acquire(ctx: &Context, args: Vec<RedisString>) -> RedisResult {
        guard::command(ctx, "LOCK.ACQUIRE", args, commands::acquire)
    }
    fn release(ctx: &Context, args: Vec<RedisString>) -> RedisResult {
        guard::command(ctx, "LOCK.RELEASE", args, commands::release)
    }
    fn extend(ctx: &Context, args: Vec<RedisString>) -> RedisResult {
        guard::command(ctx, "LOCK.EXTEND", args, commands::extend)
    }
    fn fence(ctx: &Context, args: Vec<RedisString>) -> RedisResult {
        guard::command(ctx, "LOCK.FENCE", args, commands::fence)
    }
    fn info(ctx: &Context, args: Vec<RedisString>) -> RedisResult {
        guard::command(ctx, "LOCK.INFO", args, commands::info)
    }
    fn force_release(ctx: &Context, args: Vec<RedisString>) -> RedisResult {
        guard::command(ctx, "LOCK.FORCERELEASE", args, commands::force_release)
    }
    fn apply(ctx: &Context, args: Vec<RedisString>) -> RedisResult {
        guard::command(ctx, "LOCK.APPLY", args, commands::apply)
    }

    redis_module! {
        name: "lock",
        version: 1,
        allocator: (redis_module::alloc::RedisAlloc, redis_module::alloc::RedisAlloc),
        data_types: [LOCK_TYPE],
        acl_categories: ["lock",],
        init: init,
        // ACL categories are set with the command docs (`command_docs::DOCS`), where the server
        // allows it.
        commands: [
            ["lock.acquire", acquire, "write deny-oom blocking", 1, 1, 1, ""],
            ["lock.release", release, "write fast", 1, 1, 1, ""],
            ["lock.extend", extend, "write deny-oom fast", 1, 1, 1, ""],
            ["lock.fence", fence, "readonly fast", 1, 1, 1, ""],
            ["lock.info", info, "readonly", 1, 1, 1, ""],
            ["lock.forcerelease", force_release, "write admin fast", 1, 1, 1, ""],
            ["lock.apply", apply, "write deny-oom", 1, 1, 1, ""],
        ],
        event_handlers: [
            [@EXPIRED: expiry::on_key_expired],
        ],
        configurations: [
            i64: [
                ["max-waiters", &config::MAX_WAITERS, config::MAX_WAITERS_DEFAULT, config::MAX_WAITERS_MIN, config::MAX_WAITERS_MAX, ConfigurationFlags::DEFAULT, None],
                ["max-ttl", &config::MAX_TTL, config::MAX_TTL_DEFAULT, config::MAX_TTL_MIN, config::MAX_TTL_MAX, ConfigurationFlags::DEFAULT, None],
                ["max-owner-length", &config::MAX_OWNER_LENGTH, config::MAX_OWNER_LENGTH_DEFAULT, config::MAX_OWNER_LENGTH_MIN, config::MAX_OWNER_LENGTH_MAX, ConfigurationFlags::DEFAULT, None],
            ],
            string: [],
            bool: [],
            enum: [],
            module_args_as_configuration: true,
        ]
    }
}
