//! The watchdog of one hold: its lease deadline kept by a timer, its renewals every ttl/3, the
//! loss reported once (rules 6, 8 and 15 of docs/clients.md).

use std::sync::Arc;
use std::time::{Duration, Instant};

use redis::aio::MultiplexedConnection;
use redis::RedisError;

use crate::availability::RETRY_PAUSE;
use crate::error::Failure;
use crate::hold::HoldState;
use crate::locker::Locker;
use crate::protocol::{self, reason, HoldId};

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
                (false, _) => reason::FIXED_LEASE_ENDED.to_string(),
                (true, None) => reason::unreached("no renewal answered in time"),
                (true, Some(c)) => reason::unreached(&c),
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
                return state.mark_lost(reason::RAN_OUT.to_string());
            }
            Ok(Err(e)) if locker.failure(&e) == Failure::Unreachable => {
                locker.availability.failed();
                (conn, cause, next) = (None, Some(e.to_string()), Instant::now() + RETRY_PAUSE);
            }
            Ok(Err(e)) => return state.mark_lost(reason::refused(&protocol::error_reply(&e))),
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
    protocol::extend(id, ttl).query_async(conn).await
}
