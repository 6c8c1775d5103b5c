//! redis-lock: fair, fenced, replicated locks as native Redis commands.
//!
//! This file only registers the module: its type, commands (from `shell::table`), configuration
//! and events, and installs the shell's callbacks into the FFI layer. The layers and what may
//! call what: `docs/architecture.md`.

#![cfg_attr(test, allow(dead_code, unused_imports))]

pub mod core;
pub mod effects;
pub mod ffi;
pub mod shell;

#[cfg(not(test))]
mod registration {
    use redis_module::configuration::ConfigurationFlags;
    use redis_module::{redis_module, AclCategory, Context, RedisString, Status};

    use crate::core::config;
    use crate::ffi::data_type::LOCK_TYPE;
    use crate::ffi::events;
    use crate::ffi::guard;
    use crate::ffi::handlers;
    use crate::ffi::server;
    use crate::ffi::timer;
    use crate::shell::callbacks;
    use crate::shell::table;

    fn init(ctx: &Context, _args: &[RedisString]) -> Status {
        guard::install_hook();
        ctx.set_module_options(redis_module::raw::ModuleOptions::HANDLE_IO_ERRORS);
        handlers::install(&callbacks::HANDLERS);
        timer::init(ctx);
        server::register_info(ctx);
        events::watch_commands(ctx);
        let ready = events::subscribe(ctx)
            .map_err(str::to_string)
            .and_then(|()| table::register(ctx))
            .and_then(|()| guard::debug_panics::register(ctx));
        match ready {
            Ok(()) => Status::Ok,
            Err(msg) => {
                ctx.log_warning(&msg);
                Status::Err
            }
        }
    }

    redis_module! {
        name: "lock",
        version: 1,
        allocator: (crate::ffi::alloc::Counting<redis_module::alloc::RedisAlloc>, crate::ffi::alloc::Counting(redis_module::alloc::RedisAlloc)),
        data_types: [LOCK_TYPE],
        acl_categories: ["lock",],
        init: init,
        event_handlers: [
            [@EXPIRED: callbacks::on_key_expired],
        ],
        configurations: [
            i64: [
                ["max-waiters", &config::MAX_WAITERS, config::MAX_WAITERS_DEFAULT, config::MAX_WAITERS_MIN, config::MAX_WAITERS_MAX, ConfigurationFlags::DEFAULT, None],
                ["max-ttl", &config::MAX_TTL, config::MAX_TTL_DEFAULT, config::MAX_TTL_MIN, config::MAX_TTL_MAX, ConfigurationFlags::DEFAULT, None],
                ["max-holders", &config::MAX_HOLDERS, config::MAX_HOLDERS_DEFAULT, config::MAX_HOLDERS_MIN, config::MAX_HOLDERS_MAX, ConfigurationFlags::DEFAULT, None],
                ["max-owner-length", &config::MAX_OWNER_LENGTH, config::MAX_OWNER_LENGTH_DEFAULT, config::MAX_OWNER_LENGTH_MIN, config::MAX_OWNER_LENGTH_MAX, ConfigurationFlags::DEFAULT, None],
            ],
            string: [],
            bool: [],
            enum: [],
            module_args_as_configuration: true,
        ]
    }
}
