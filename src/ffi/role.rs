//! The flags a command's role decision reads (`SLAVE`, `REPLICATED`, `LOADING`), without
//! asking the server on a master that is not loading.
//!
//! `GetContextFlags` computes every flag each time (about 95 instructions, twice a lock cycle).
//! Two facts settle the three the lock commands read: whether the server is a replica, and
//! whether it is loading data. A command arrives `REPLICATED` only from a master's link, which
//! exists only on a replica; and a replayed AOF runs only while loading. Both facts come from
//! the server's events, each fired right after the server changed the fact and before any
//! command can run under it (`replicationSetPrimary` / `replicationUnsetPrimary`,
//! `startLoading` / `stopLoading`), and are read at load time for a server that starts as a
//! replica. Whenever either holds, the server is asked, exactly as before.
//!
//! In cluster mode the server is always asked: Redis 8.4's atomic slot migration applies the
//! source's stream on a master through a client flagged as a master link (so `REPLICATED`),
//! with no event for this module to learn it from. Cluster mode is fixed at start-up.

use std::sync::atomic::{AtomicBool, Ordering};

use redis_module::{Context, ContextFlags};

static REPLICA: AtomicBool = AtomicBool::new(true);
static LOADING: AtomicBool = AtomicBool::new(true);
static CLUSTER: AtomicBool = AtomicBool::new(true);

/// Read the facts from the server (when the module loads).
pub fn init(ctx: &Context) {
    let flags = ctx.get_flags();
    REPLICA.store(flags.contains(ContextFlags::SLAVE), Ordering::Relaxed);
    LOADING.store(flags.contains(ContextFlags::LOADING), Ordering::Relaxed);
    CLUSTER.store(flags.contains(ContextFlags::CLUSTER), Ordering::Relaxed);
}

/// The role-change event: the server is now a replica (`true`) or a master.
pub fn set_replica(replica: bool) {
    REPLICA.store(replica, Ordering::Relaxed);
}

/// The loading event: a load started (`true`), ended or failed.
pub fn set_loading(loading: bool) {
    LOADING.store(loading, Ordering::Relaxed);
}

/// The context's flags as far as `SLAVE`, `REPLICATED` and `LOADING` go: none on a standalone
/// master that is not loading, else the server's own (with every other flag; callers read
/// only these).
pub fn role_flags(ctx: &Context) -> ContextFlags {
    let asked = REPLICA.load(Ordering::Relaxed)
        || LOADING.load(Ordering::Relaxed)
        || CLUSTER.load(Ordering::Relaxed);
    if !asked {
        return ContextFlags::empty();
    }
    ctx.get_flags()
}
