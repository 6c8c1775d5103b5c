//! Where a granted hold stands (held, released, lost once with its reason) and its release
//! (rules 7, 8 and 16 of docs/clients.md).

use std::sync::{Arc, Mutex, MutexGuard};

use tokio::sync::watch;

#[derive(Clone, Debug, PartialEq, Eq)]
enum Phase {
    Held,
    Released,
    Lost(String),
}

/// Where a hold stands, shared by its guard, its watchdog and its `lost()` futures.
pub(crate) struct HoldState {
    phase: Mutex<Phase>,
    /// The loss's reason once lost (a watch: `lost()` futures outlive the guard).
    lost: watch::Sender<Option<String>>,
}

impl HoldState {
    pub(crate) fn new() -> Arc<Self> {
        Arc::new(Self {
            phase: Mutex::new(Phase::Held),
            lost: watch::Sender::new(None),
        })
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
        }
    }
}
