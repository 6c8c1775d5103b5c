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
    use redis_module::{redis_module, AclCategory, Context, RedisString, Status};

    use crate::core::args;
    use crate::core::tally;
    use crate::effects::timers;
    use crate::ffi::clock;
    use crate::ffi::config;
    use crate::ffi::data_type::LOCK_TYPE;
    use crate::ffi::events;
    use crate::ffi::handlers;
    use crate::ffi::panics;
    use crate::ffi::role;
    use crate::ffi::server;
    use crate::ffi::timer;
    use crate::shell::callbacks;
    use crate::shell::resetstat;
    use crate::shell::table;

    fn init(ctx: &Context, module_args: &[RedisString]) -> Status {
        // OnLoad runs on the server's main thread.
        tally::claim_main_thread();
        // Checked before anything is registered: bad arguments refuse the module, one log line.
        let settings = match args::module_args(module_args) {
            Ok(values) => values,
            Err(err) => {
                ctx.log_warning(&format!("redis-lock refused to load: {err}"));
                return Status::Err;
            }
        };
        if let Err(msg) = config::register(ctx, settings) {
            ctx.log_warning(&format!("redis-lock refused to load: {msg}"));
            return Status::Err;
        }
        panics::install_hook();
        ctx.set_module_options(redis_module::raw::ModuleOptions::HANDLE_IO_ERRORS);
        handlers::install(&callbacks::HANDLERS);
        resetstat::catch_up(); // the first look at the server's statistics
        clock::start();
        role::init(ctx);
        timer::init(ctx);
        timers::start_epoch_soon(); // runs once start-up has loaded the data
        server::register_info(ctx);
        let ready = events::subscribe(ctx)
            .map_err(str::to_string)
            .and_then(|()| table::register(ctx))
            .and_then(|()| panics::debug_panics::register(ctx));
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
        version: crate::core::version::MODULE_VERSION,
        allocator: (
            crate::ffi::alloc::Counting<crate::ffi::alloc::MallocAligned<redis_module::alloc::RedisAlloc>>,
            crate::ffi::alloc::Counting(crate::ffi::alloc::MallocAligned(redis_module::alloc::RedisAlloc))
        ),
        data_types: [LOCK_TYPE],
        acl_categories: ["lock",],
        init: init,
    }
}
