//! The `lock.*` settings as server configuration: registered with their starting values (the
//! module arguments, already checked), then the config file's `lock.*` lines applied over them.

use std::sync::atomic::{AtomicI64, Ordering};

use redis_module::configuration::{
    register_bool_configuration, register_i64_configuration, ConfigurationContext,
    ConfigurationFlags,
};
use redis_module::{raw, ConfigurationValue, Context, RedisError};

use crate::core::config::{Kind, SETTINGS};

/// A yes/no setting kept as 1 or 0 in its `AtomicI64`, as the server's bool configs see it.
struct YesNo(&'static AtomicI64);

impl ConfigurationValue<bool> for YesNo {
    fn get(&self, _: &ConfigurationContext) -> bool {
        self.0.load(Ordering::Relaxed) != 0
    }

    fn set(&self, _: &ConfigurationContext, value: bool) -> Result<(), RedisError> {
        self.0.store(i64::from(value), Ordering::Relaxed);
        Ok(())
    }
}

/// Register every setting of `SETTINGS` starting at `values` (in its order), then let the server
/// apply its config file: a `lock.*` line there wins over a module argument.
pub fn register(ctx: &Context, values: [i64; SETTINGS.len()]) -> Result<(), String> {
    for (setting, value) in SETTINGS.iter().zip(values) {
        let flags = ConfigurationFlags::DEFAULT;
        match setting.kind {
            Kind::Integer { min, max } => register_i64_configuration(
                ctx,
                setting.name,
                setting.value,
                value,
                min,
                max,
                flags,
                None,
            ),
            Kind::YesNo => {
                // Registered once at load and never freed, as the server keeps it.
                let view: &'static YesNo = Box::leak(Box::new(YesNo(setting.value)));
                register_bool_configuration(ctx, setting.name, view, value != 0, flags, None)
            }
        }
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
