//! The command filter is registered only while it has work: a connection keeps session holds
//! (its `RESET` ends them), someone waits behind a plain string (any command may change it), or
//! someone watches a name that holds no lock. Otherwise the module costs the server's other
//! commands nothing (a filter costs each about 200 instructions, 5% of a `GET`).

use redis_module::Context;

use crate::effects::foreign;
use crate::effects::sessions;
use crate::effects::watches;
use crate::ffi::events;

/// Whether the filter has work. Without the client's id (Redis 7.0) it cannot tell whose
/// `RESET` it sees, so session holds give it none there.
fn needed() -> bool {
    (sessions::any() && events::filter_knows_clients()) || foreign::any() || watches::any_unlocked()
}

/// After each of the module's commands (where its work starts): register it if needed.
pub fn register_if_needed(ctx: &Context) {
    if needed() {
        events::watch_commands(ctx, true);
    }
}

/// After each timer run and at the server's cron (the work also ends with a disconnect, a
/// flush, a demotion): register or unregister it. Never under a command, where another
/// module's filter may be running it (see `events::watch_commands`).
pub fn keep_if_needed(ctx: &Context) {
    events::watch_commands(ctx, needed());
}
