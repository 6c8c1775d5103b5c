//! The `INFO lock` section: `lock_stats`, rendered from `core::metrics` (Redis prefixes each
//! field with `lock_`).

use redis_module::{InfoContext, RedisResult};

use crate::core::metrics::{INFO_BOUNDS, STATS};
use crate::core::version;
use crate::effects::foreign;
use crate::effects::watches;
use crate::ffi::alloc;
use crate::ffi::events;

fn ms(micros: u64) -> String {
    format!("{:.3}", micros as f64 / 1000.0)
}

pub fn render(ctx: &InfoContext) -> RedisResult<()> {
    let s = &STATS;
    let mut section = ctx
        .builder()
        .add_section("stats")
        .field("version", version::VERSION)?;
    for (name, counter) in s.counters() {
        section = section.field(name, counter.get())?;
    }
    for (name, gauge) in s.gauges() {
        section = section
            .field(name, gauge.get())?
            .field(&format!("{name}_peak"), gauge.peak())?;
    }
    for (name, h) in [("wait_time", &s.wait_time), ("hold_time", &s.hold_time)] {
        section = section
            .field(&format!("{name}_count"), h.count())?
            .field(&format!("{name}_p50_ms"), ms(h.quantile(0.50)))?
            .field(&format!("{name}_p99_ms"), ms(h.quantile(0.99)))?
            .field(&format!("{name}_max_ms"), ms(h.max()))?;
        for b in INFO_BOUNDS {
            let field = format!("{name}_le_{}us", 1u64 << b);
            section = section.field(&field, h.below_pow2(b as usize))?;
        }
    }
    section = section
        .field("module_heap_bytes", alloc::held_bytes() as u64)?
        .field("foreign_waited_names", foreign::watched_count() as u64)?
        .field("watched_names", watches::names() as u64)?
        .field("command_filter", u64::from(events::watching_commands()))?;
    section.build_section()?.build_info()?;
    Ok(())
}
