//! Where a lock goes when `RENAME`, `RENAMENX` or `MOVE` takes it off its name.
//!
//! Its leases were watched in the lease heap under the name it had (`effects::timers`; the
//! unlink took it out), and the server tells a module nothing about where a renamed value
//! went: keyspace events would cost every `DEL`, `EXPIRE` and `SET ... PX` on the server a
//! module context (about 860 instructions each), a command filter every command about 200.
//! So a value the server unlinks but does not free is adrift (`effects::adrift`), and a walk
//! through every db's keys finds it (`STEPS` buckets a turn, a turn every millisecond: a few
//! percent of the server's time while it walks) and watches its leases under the name it has
//! now. Until then every command treats an ended lease as ended (an acquire takes the name
//! over): only the key's deletion at the lease end waits for the walk. A walk that ends without
//! finding a value gives it up (it left the keyspace some other way); a walk that may have
//! missed one (SWAPDB, a load) gives up nothing.

use std::sync::Mutex;

use redis_module::Context;

use crate::core::lock::Millis;
use crate::core::registry::QueueKey;
use crate::effects::adrift;
use crate::effects::timers;
use crate::effects::watches;
use crate::ffi::scan::DbScan;

/// How many hash-table buckets (about as many keys) one turn visits: ~100 µs of work.
const STEPS: usize = 256;
/// The pause between turns: a million keys are walked in about four seconds.
const PAUSE_MS: Millis = 1;

struct Walk {
    scan: DbScan,
    /// `adrift::next_number()` when the walk started.
    started: u64,
}

static WALK: Mutex<Option<Walk>> = Mutex::new(None);

fn walk() -> std::sync::MutexGuard<'static, Option<Walk>> {
    WALK.lock().unwrap_or_else(|p| p.into_inner())
}

/// One step of the walk: watch every value adrift it meets where it met it.
pub fn step(ctx: &Context) {
    adrift::looking();
    let mut found = Vec::new();
    let going_on = {
        let mut walk = walk();
        if walk.is_none() && adrift::any() {
            let started = adrift::next_number();
            *walk = DbScan::new(0).map(|scan| Walk { scan, started });
        }
        if let Some(w) = walk.as_mut() {
            let db = w.scan.db();
            let more = w.scan.step(ctx, STEPS, &mut |name, value| {
                let address = std::ptr::from_ref(value) as usize;
                if adrift::is_adrift(address) {
                    let due = value.state.first_deadline();
                    timers::watch_lease(value, db, name, due);
                    let key = QueueKey {
                        db,
                        name: name.into(),
                    };
                    found.push((key, address));
                }
            });
            // A db done: on to the next. Past the last db (it cannot be selected): over.
            let next = match more {
                Some(true) => None,
                Some(false) => DbScan::new(db + 1),
                None => {
                    adrift::give_up_before(w.started);
                    None
                }
            };
            if let Some(scan) = next {
                w.scan = scan;
            } else if more != Some(true) {
                *walk = None;
            }
        }
        walk.is_some()
    };
    for (key, address) in found {
        adrift::forget(address);
        watches::changed(&key);
    }
    if going_on || adrift::any() {
        adrift::look_after(PAUSE_MS);
    }
}

/// Values may have moved to a db the walk has passed (SWAPDB, a load): this walk gives up
/// nothing it missed; the next one decides.
pub fn dbs_swapped() {
    if let Some(w) = walk().as_mut() {
        w.started = 0;
    }
}
