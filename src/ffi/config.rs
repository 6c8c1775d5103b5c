//! The `lock.*` settings as server configuration: registered with their starting values (the
//! module arguments, already checked), then the config file's `lock.*` lines applied over them.

use redis_module::configuration::{register_i64_configuration, ConfigurationFlags};
use redis_module::{raw, Context};

use crate::core::config::SETTINGS;

/// Register every setting of `SETTINGS` starting at `values` (in its order), then let the server
/// apply its config file: a `lock.*` line there wins over a module argument.
pub fn register(ctx: &Context, values: [i64; SETTINGS.len()]) -> Result<(), String> {
    for (setting, value) in SETTINGS.iter().zip(values) {
        register_i64_configuration(
            ctx,
            setting.name,
            setting.value,
            value,
            setting.min,
            setting.max,
            ConfigurationFlags::DEFAULT,
            None,
        );
    }
    // SAFETY: LoadConfigs is called once, from OnLoad, after every config is registered (the
    // server requires exactly that and refuses the module otherwise).
    let loaded = unsafe { raw::RedisModule_LoadConfigs.map(|load| load(ctx.ctx)) };
    match loaded {
        Some(status) if status == raw::Status::Ok as i32 => Ok(()),
        Some(_) => Err("the server refused a lock.* line of its config file".into()),
        None => Err("this server has no module configuration API (Redis 7.0+ needed)".into()),
    }
}
