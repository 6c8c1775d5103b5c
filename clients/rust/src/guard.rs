//! The guard of a granted hold: its token, its loss (a future, a flag, a reason), guarded
//! writes, and its release (now, or in the background when dropped).

use std::future::Future;
use std::sync::Arc;
use std::time::{Duration, Instant};

use redis::FromRedisValue;

use crate::cluster::Conn;
use crate::hold::HoldState;
use crate::locker::Locker;
use crate::protocol::{self, check_ttl, reason, HoldId};
use crate::renewal::{ExtendTurn, Lease, Renewals};
use crate::schedule::Ticket;
use crate::Error;

/// A grant, before its guard.
pub(crate) struct Granted {
    /// One token per key (one for a lock, a set's in the order of its keys).
    pub(crate) tokens: Vec<u64>,
    pub(crate) conn: Conn,
    pub(crate) lease_start: Instant,
}

/// What the builder asked of a grant: its lease, whether the watchdog keeps it, and whether it
/// is a session hold (on a connection of its own).
pub(crate) struct Terms {
    pub(crate) ttl: Duration,
    pub(crate) watchdog: bool,
    pub(crate) session: bool,
}

/// A granted hold. Release it with `release().await`; dropped without it, it is released in the
/// background. `lost()` resolves when the hold is lost before its release.
pub struct LockGuard {
    locker: Locker,
    id: HoldId,
    state: Arc<HoldState>,
    /// The loop that keeps its lease (the locker's; a session hold's own) and its place there.
    renewals: Renewals,
    ticket: Ticket,
    /// For a session hold: the connection it lives on (closing it ends the hold).
    session: Option<Conn>,
    /// Its extends go one at a time.
    extends: ExtendTurn,
    released: bool,
}

impl std::fmt::Debug for LockGuard {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LockGuard")
            .field("key", &self.id.key)
            .field("owner", &self.id.owner)
            .field("token", &self.id.token)
            .finish()
    }
}

impl LockGuard {
    pub(crate) fn start(locker: Locker, id: HoldId, granted: Granted, terms: Terms) -> Self {
        let state = HoldState::new();
        let lease = Lease {
            ttl: terms.ttl,
            start: granted.lease_start,
            renew: terms.watchdog,
        };
        let (renewals, session) = if terms.session {
            let own = Renewals::session(granted.conn.clone(), locker.availability.clone());
            (own, Some(granted.conn))
        } else {
            (locker.renewals.clone(), None)
        };
        let ticket = renewals.add(id.clone(), state.clone(), lease);
        LockGuard {
            locker,
            id,
            state,
            renewals,
            ticket,
            session,
            extends: ExtendTurn::default(),
            released: false,
        }
    }

    /// The fencing token of this hold: pass it to the storage with every write.
    pub fn token(&self) -> u64 {
        self.id.token
    }

    pub fn key(&self) -> &str {
        &self.id.key
    }

    pub fn owner(&self) -> &str {
        &self.id.owner
    }

    /// Why the hold was lost, if it was.
    pub fn lost_reason(&self) -> Option<String> {
        self.state.lost_reason()
    }

    /// Whether the hold was lost (`lost_reason` says why).
    pub fn is_lost(&self) -> bool {
        self.state.lost_reason().is_some()
    }

    /// Resolves with the reason when the hold is lost: its lease ended with no renewal since
    /// (the server could not be reached, or did not answer in time), a renewal answered 0, or
    /// the release found the lease already gone. Pending forever while the hold lives. The
    /// future does not borrow the guard: it can be spawned, and outlives a `release`.
    pub fn lost(&self) -> impl Future<Output = String> + Send + 'static {
        let mut rx = self.state.subscribe();
        async move {
            loop {
                if let Some(reason) = rx.borrow_and_update().clone() {
                    return reason;
                }
                if rx.changed().await.is_err() {
                    std::future::pending::<()>().await;
                }
            }
        }
    }

    /// `LOCK.GUARD key token <cmd>`: run `cmd` only while this is the live exclusive hold
    /// (`Error::Stale` otherwise, at once when the hold is known lost); replicated as `cmd`
    /// itself. Not repeated after a broken link (it may have run): `Error::Unavailable`.
    pub async fn run<T: FromRedisValue>(&self, cmd: &redis::Cmd) -> Result<T, Error> {
        if let Some(reason) = self.state.lost_reason() {
            let key = &self.id.key;
            return Err(Error::Stale(format!(
                "the hold on {key} was lost: {reason}"
            )));
        }
        let guarded = protocol::guard(&self.id.key, self.id.token, cmd);
        self.locker.call(&guarded, false).await
    }

    /// `LOCK.EXTEND key owner ttl TOKEN token` now (rule 20): the lease ends `ttl` from now
    /// (longer or shorter than before), and the watchdog, if on, goes on renewing by `ttl`.
    /// `Ok(true)` while the hold is live; `Ok(false)` when the server answers 0 (the hold is
    /// then lost: `the lease ran out before it was renewed`) and, without sending anything,
    /// for a hold known lost. How a fixed lease (`.watchdog(false)`) is kept on the caller's
    /// schedule. Extends of one guard go one at a time, in the order they were made: one made
    /// while another is in flight is sent once that one was answered or failed (or its future
    /// dropped). A renewal sent before the call (by the old ttl) is answered before the extend
    /// is sent, so the two never cross. A ttl under 1 ms is `Error::InvalidArgument`; a server
    /// that cannot be reached (or that extend or renewal not answered) within the locker's
    /// bound, `Error::Unavailable`: the extend may have run, so the client counts the lease as
    /// ending no later than `ttl` from when it was sent (rule 15); the watchdog, if on, renews
    /// by `ttl`, at once when that is sooner than the lease was counted to end, and a fixed
    /// lease is lost then unless extended. The same when this future is dropped after the
    /// extend was sent (a timeout, a `select!`): with no answer taken, it may have run.
    pub async fn extend(&self, ttl: Duration) -> Result<bool, Error> {
        check_ttl(ttl)?;
        if !self.state.is_held() {
            return Ok(false);
        }
        let _turn = self.locker.extend_turn(&self.extends).await?;
        let (renewals, ticket) = (&self.renewals, self.ticket);
        self.locker.before_extend(renewals, ticket, ttl).await?;
        if !self.state.is_held() {
            return Ok(false); // lost while the extend or renewal before it was answered
        }
        let extend = self.renewals.extend_sent(self.ticket, ttl);
        let sent = extend.sent;
        let cmd = protocol::extend(&self.id, ttl);
        let live: i64 = extend.answered(self.locker.call(&cmd, true).await)?;
        if !protocol::was_live(live) {
            if self.renewals.remove(self.ticket) {
                self.state.mark_lost(reason::RAN_OUT.to_string());
            }
            return Ok(false);
        }
        // Lost meanwhile (its deadline passed while the extend was on its way): still lost.
        Ok(self.renewals.extended(self.ticket, sent, ttl))
    }

    /// Release the hold: `Ok(false)` if it had been lost (at once, nothing sent, when that was
    /// known; a release that finds the lease gone marks it lost, and `lost()` resolves). The
    /// watchdog stops first, so a released hold is never renewed. `Error::Unavailable` when the
    /// server cannot be reached within the locker's bound (the lease then ends by itself).
    ///
    /// A second release does not compile (`release` takes the guard):
    ///
    /// ```compile_fail,E0382
    /// async fn twice(guard: redis_lock_client::LockGuard) {
    ///     let _ = guard.release().await;
    ///     let _ = guard.release().await;
    /// }
    /// ```
    pub async fn release(mut self) -> Result<bool, Error> {
        self.released = true;
        self.renewals.remove(self.ticket); // no renewal, no loss marked after this point
        let released = self.locker.release_hold(&self.id, &self.state).await;
        self.session = None;
        released
    }
}

impl Drop for LockGuard {
    fn drop(&mut self) {
        if self.released {
            return;
        }
        self.renewals.remove(self.ticket);
        // Released in the background, on the runtime this guard lives in (if it still runs);
        // a session's connection closes after it.
        if let Ok(handle) = tokio::runtime::Handle::try_current() {
            let (locker, id, state) = (self.locker.clone(), self.id.clone(), self.state.clone());
            let session = self.session.take();
            handle.spawn(async move {
                let _ = locker.release_hold(&id, &state).await;
                drop(session);
            });
        }
    }
}
