//! A granted hold's life: its lease deadline kept by a timer, the watchdog's renewals, the loss
//! reported once, and the release (rules 6-8, 15 and 16 of docs/clients.md).

use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use redis::aio::MultiplexedConnection;
use redis::RedisError;
use tokio::sync::watch;

use crate::availability::RETRY_PAUSE;
use crate::error::Failure;
use crate::{millis, Error, Locker};

/// What names a hold on the server.
#[derive(Clone, Debug)]
pub(crate) struct HoldId {
    pub(crate) key: String,
    pub(crate) owner: String,
    pub(crate) token: u64,
}

impl HoldId {
    fn release_cmd(&self) -> redis::Cmd {
        let mut cmd = redis::cmd("LOCK.RELEASE");
        cmd.arg(&self.key)
            .arg(&self.owner)
            .arg("TOKEN")
            .arg(self.token);
        cmd
    }

    fn extend_cmd(&self, ttl: Duration) -> redis::Cmd {
        let mut cmd = redis::cmd("LOCK.EXTEND");
        cmd.arg(&self.key)
            .arg(&self.owner)
            .arg(millis(ttl))
            .arg("TOKEN")
            .arg(self.token);
        cmd
    }

    /// Release on the server unless `state` knows the hold lost (false, nothing sent); a lease
    /// already gone (the server answers 0) marks the hold lost, so its lost signal fires. Never
    /// sent again once written: its reply lost is `Error::Unavailable` (a second try could
    /// answer 0 for a release the first one did).
    pub(crate) async fn release(&self, locker: &Locker, state: &HoldState) -> Result<bool, Error> {
        if !state.is_held() {
            return Ok(false);
        }
        let released: i64 = locker.call(&self.release_cmd(), true).await?;
        if released == 1 {
            state.released();
            return Ok(true);
        }
        state.mark_lost("the lease ended before the release".to_string());
        Ok(false)
    }
}

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

    fn released(&self) {
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

/// A hold's lease as the client counts it.
pub(crate) struct Lease {
    pub(crate) ttl: Duration,
    /// When the acquire that granted it was sent (for a grant after a wait: when its reply came).
    pub(crate) start: Instant,
    /// The watchdog renews it (false: a fixed lease).
    pub(crate) renew: bool,
}

/// The hold's timer and watchdog, until the hold is lost (the guard aborts it on release): the
/// deadline is the send time of the acquire or of the last renewal that succeeded, plus the
/// ttl; when it passes, the hold is lost at that moment (rule 15). Renewals go every ttl/3 on a
/// connection of their own, each awaited no longer than the deadline; a failed one is tried
/// again after a short pause.
pub(crate) async fn keep(locker: Locker, id: HoldId, state: Arc<HoldState>, lease: Lease) {
    let period = lease.ttl / 3;
    let mut deadline = lease.start + lease.ttl;
    let mut next = lease.start + period;
    let mut conn = None;
    let mut cause: Option<String> = None;
    loop {
        let wake = if lease.renew {
            next.min(deadline)
        } else {
            deadline
        };
        tokio::time::sleep_until(wake.into()).await;
        if Instant::now() >= deadline {
            state.mark_lost(match (lease.renew, cause) {
                (false, _) => "the fixed lease ended".to_string(),
                (true, None) => "the lease ended before it was renewed".to_string(),
                (true, Some(c)) => format!("the lease ended before a renewal succeeded: {c}"),
            });
            return;
        }
        if !state.is_held() {
            return;
        }
        let sent = Instant::now();
        let reply =
            tokio::time::timeout_at(deadline.into(), extend(&locker, &mut conn, &id, lease.ttl));
        match reply.await {
            Ok(Ok(1)) => {
                locker.availability.answered();
                (deadline, next, cause) = (sent + lease.ttl, sent + period, None);
            }
            Ok(Ok(_)) => {
                return state.mark_lost("the lease ran out before it was renewed".to_string());
            }
            Ok(Err(e)) if locker.failure(&e) == Failure::Unreachable => {
                locker.availability.failed();
                (conn, cause, next) = (None, Some(e.to_string()), Instant::now() + RETRY_PAUSE);
            }
            Ok(Err(e)) => return state.mark_lost(format!("renewal refused: {e}")),
            Err(_) => {
                // The deadline passed while waiting: lost on the next turn of the loop.
                locker.availability.failed();
                (conn, cause) = (None, Some("no answer to the renewal".to_string()));
            }
        }
    }
}

/// One renewal on the watchdog's connection (made again if the last one failed).
async fn extend(
    locker: &Locker,
    conn: &mut Option<MultiplexedConnection>,
    id: &HoldId,
    ttl: Duration,
) -> Result<i64, RedisError> {
    let conn = match conn {
        Some(conn) => conn,
        None => conn.insert(locker.dedicated().await?),
    };
    id.extend_cmd(ttl).query_async(conn).await
}
