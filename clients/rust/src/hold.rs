//! Where a granted hold stands (held, released, lost once with its reason) and its release
//! (rules 7, 8 and 16 of docs/clients.md).

use std::sync::{Arc, Mutex, MutexGuard, OnceLock};

use tokio::sync::watch;

#[derive(Clone, Debug, PartialEq, Eq)]
enum Phase {
    Held,
    Released,
    Lost(String),
}

/// What a set does once lost (its members still held released): called once, at the loss.
pub(crate) type OnLost = Box<dyn Fn() + Send + Sync>;

/// Where a hold stands, shared by its guard, its watchdog and its `lost()` futures. A lock
/// set's members share one: the set is lost, once, when any member is.
pub(crate) struct HoldState {
    phase: Mutex<Phase>,
    /// The loss's reason once lost (a watch: `lost()` futures outlive the guard).
    lost: watch::Sender<Option<String>>,
    /// A set's: a loss names the member's key, and `on_lost` runs.
    set: bool,
    on_lost: OnceLock<OnLost>,
}

impl HoldState {
    pub(crate) fn new() -> Arc<Self> {
        Self::with(false)
    }

    /// The state of a lock set's members.
    pub(crate) fn set() -> Arc<Self> {
        Self::with(true)
    }

    fn with(set: bool) -> Arc<Self> {
        Arc::new(Self {
            phase: Mutex::new(Phase::Held),
            lost: watch::Sender::new(None),
            set,
            on_lost: OnceLock::new(),
        })
    }

    /// Run `f` once the set is lost (at once if it is already).
    pub(crate) fn when_lost(&self, f: OnLost) {
        if self.on_lost.set(f).is_ok() && self.lost_reason().is_some() {
            if let Some(f) = self.on_lost.get() {
                f();
            }
        }
    }

    /// The hold on `key` lost for `reason`, once (see `mark_lost`); a set's reason names the key.
    pub(crate) fn lose(&self, key: &str, reason: String) {
        if self.set {
            self.mark_lost(format!("{key}: {reason}"));
        } else {
            self.mark_lost(reason);
        }
    }

    fn phase(&self) -> MutexGuard<'_, Phase> {
        // Poisoned only by a panic elsewhere; the phase inside is still right.
        self.phase.lock().unwrap_or_else(|p| p.into_inner())
    }

    pub(crate) fn is_held(&self) -> bool {
        *self.phase() == Phase::Held
    }

    pub(crate) fn lost_reason(&self) -> Option<String> {
        self.lost.borrow().clone()
    }

    pub(crate) fn subscribe(&self) -> watch::Receiver<Option<String>> {
        self.lost.subscribe()
    }

    pub(crate) fn released(&self) {
        let mut phase = self.phase();
        if *phase == Phase::Held {
            *phase = Phase::Released;
        }
    }

    /// Lost for `reason`, once: nothing if it was released or lost already.
    pub(crate) fn mark_lost(&self, reason: String) {
        let mut phase = self.phase();
        if *phase == Phase::Held {
            *phase = Phase::Lost(reason.clone());
            self.lost.send_replace(Some(reason));
            drop(phase);
            if let Some(f) = self.on_lost.get() {
                f();
            }
        }
    }
}
