//! The `Locker`: where connections come from (one server, or the master Sentinel names), its
//! shared connection for short commands, and how a call is asked again or given up (rules 4
//! and 14 of docs/clients.md).

use std::future::Future;
use std::sync::Arc;
use std::time::{Duration, Instant};

use redis::cluster::ClusterClient;
use redis::sentinel::SentinelClient;
use redis::{ErrorKind, FromRedisValue, IntoConnectionInfo, RedisError};
use tokio::sync::Mutex;
use tokio::time::timeout_at;

use crate::availability::{Availability, DEFAULT_UNAVAILABLE_AFTER, REPLY_GRACE, RETRY_PAUSE};
use crate::cluster::Conn;
use crate::error::{self, Failure};
use crate::hold::HoldState;
use crate::protocol::{self, reason, HoldId};
use crate::renewal::{ExtendTurn, Renewals, Turn};
use crate::schedule::Ticket;
use crate::source::{ClusterSource, Source};
use crate::Error;

/// `cmd`'s reply on `conn`, and whether it failed at once: a connection whose link had already
/// broken refuses on the first poll (its driver is gone). Only a hint: on a loaded machine a
/// command may also be written, answered by a broken link and fail within that first poll, so
/// only commands safe to send twice (an acquire with its owner) may act on it.
pub(crate) async fn query<T: FromRedisValue>(
    cmd: &redis::Cmd,
    conn: &mut Conn,
) -> (Result<T, RedisError>, bool) {
    let mut reply = std::pin::pin!(cmd.query_async::<T>(conn));
    let mut first_poll = true;
    let mut unsent = false;
    let reply = std::future::poll_fn(|cx| {
        let poll = reply.as_mut().poll(cx);
        unsent = first_poll && matches!(&poll, std::task::Poll::Ready(Err(_)));
        first_poll = false;
        poll
    })
    .await;
    (reply, unsent)
}

/// Whether `e` is an error reply of rule 19's list (the server did not run the command).
fn is_retryable_reply(e: &RedisError) -> bool {
    e.code().is_some_and(protocol::is_retryable)
}

/// The entry point: one per application. It keeps a connection for short commands, and one
/// renewal loop (a tokio task, on a connection of its own per server) for every watchdog hold
/// taken through it or its clones.
#[derive(Clone)]
pub struct Locker {
    pub(crate) source: Source,
    pub(crate) shared: Arc<Mutex<Option<Conn>>>,
    pub(crate) availability: Arc<Availability>,
    /// The renewal loop of every watchdog hold of this locker (its clones share it).
    pub(crate) renewals: Renewals,
}

impl Locker {
    /// Release `id` on the server unless `state` knows the hold lost (false, nothing sent); a lease
    /// already gone (the server answers 0) marks the hold lost, so its lost signal fires. Never sent
    /// again once written: its reply lost is `Error::Unavailable` (a second try could answer 0 for
    /// a release the first one did).
    pub(crate) async fn release_hold(&self, id: &HoldId, state: &HoldState) -> Result<bool, Error> {
        if !state.is_held() {
            return Ok(false);
        }
        let released: i64 = self.call(&protocol::release(id), true).await?;
        if protocol::was_live(released) {
            state.released();
            return Ok(true);
        }
        state.mark_lost(reason::GONE_WHEN_RELEASED.to_string());
        Ok(false)
    }

    /// An extend's turn among those of its hold (rule 20): once the extends made before it
    /// were answered or failed, waited for within the bound. `Error::Unavailable` when they
    /// were not: nothing is sent then. Held until the extend ends (the turn drops).
    pub(crate) async fn extend_turn<'a>(&self, turn: &'a ExtendTurn) -> Result<Turn<'a>, Error> {
        self.availability.begin();
        let (started, until) = (Instant::now(), self.availability.until(None));
        if let Some(turn) = turn.take(until).await {
            return Ok(turn);
        }
        let waited = started.elapsed().as_millis();
        let cause = format!("no answer within {waited} ms to the extend made before");
        Err(self.availability.error(cause))
    }

    /// Before an extend of `ticket` (in `renewals`) to `ttl` is sent (rule 20): the watchdog
    /// renews by `ttl` from now on, and a renewal already sent by the old ttl is answered first,
    /// waited for within the bound. `Error::Unavailable` when it is not: nothing is sent then.
    pub(crate) async fn before_extend(
        &self,
        renewals: &Renewals,
        ticket: Ticket,
        ttl: Duration,
    ) -> Result<(), Error> {
        self.availability.begin();
        let (started, until) = (Instant::now(), self.availability.until(None));
        if renewals.before_extend(ticket, ttl, until).await {
            return Ok(());
        }
        let waited = started.elapsed().as_millis();
        let cause = format!("no answer within {waited} ms to the renewal sent before the extend");
        Err(self.availability.error(cause))
    }

    pub fn new(client: redis::Client) -> Self {
        Self::from_source(Source::Client(client))
    }

    /// Locks on the master that `sentinel` (a `SentinelClient` for the master, built with
    /// `SentinelServerType::Master`) names. Every connection (the shared one, each wait's,
    /// each watchdog's) is made by asking the Sentinels, so each follows a failover when it
    /// reconnects: a waiter whose link broke asks again on the new master, a watchdog renews
    /// there (or reports the hold lost if the new master does not have it).
    pub fn sentinel(sentinel: SentinelClient) -> Self {
        Self::from_source(Source::Sentinel(Arc::new(Mutex::new(sentinel))))
    }

    /// Locks on a Redis Cluster of these nodes (any of its masters or replicas): short commands
    /// (tries, releases, guarded writes, extends) go on the `redis` crate's async cluster
    /// connection, which follows the slot of each key; waits, sessions and the renewal loop
    /// on connections of their own to the master of the key's slot (one per master for the
    /// loop). A lock and the data it guards belong in one slot: a hash tag, `{order:42}:lock`
    /// and `{order:42}:stock`. `MOVED`, `ASK` and the other retryable replies (rule 19) are
    /// asked again, after the slot map is read again, until the deadline or the bound.
    pub fn cluster<T: IntoConnectionInfo>(
        nodes: impl IntoIterator<Item = T>,
    ) -> Result<Self, RedisError> {
        let nodes = nodes
            .into_iter()
            .map(|n| n.into_connection_info())
            .collect::<Result<Vec<_>, _>>()?;
        let template = nodes.first().cloned().ok_or_else(|| {
            RedisError::from((ErrorKind::InvalidClientConfig, "no cluster node given"))
        })?;
        // No retries of the crate's: a command whose link broke after it was written may have
        // run (a release, a guarded write), and is not sent again (rules 4 and 14 decide).
        let client = ClusterClient::builder(nodes)
            .retries(0)
            .connection_timeout(Duration::from_secs(3600))
            .response_timeout(Duration::from_secs(3600 * 24))
            .build()?;
        let slots = std::sync::Mutex::new(None);
        let source = ClusterSource {
            client,
            template,
            slots,
        };
        Ok(Self::from_source(Source::Cluster(Arc::new(source))))
    }

    fn from_source(source: Source) -> Self {
        let availability = Availability::new(source.address(), DEFAULT_UNAVAILABLE_AFTER);
        Self::with(source, Arc::new(availability))
    }

    fn with(source: Source, availability: Arc<Availability>) -> Self {
        Self {
            renewals: Renewals::new(source.clone(), availability.clone()),
            source,
            shared: Arc::new(Mutex::new(None)),
            availability,
        }
    }

    /// The unavailability bound (default 10 s): a call that cannot reach the lock service (or
    /// gets no answer) asks again with the same owner until the caller's deadline or this long
    /// after the first failure since the server last answered, whichever is first, then fails
    /// with `Error::Unavailable`. A wait longer than this is watched by a `PING` every half
    /// bound on another connection. Zero is refused: `acquire` answers `Error::InvalidArgument`.
    pub fn unavailable_after(self, bound: Duration) -> Self {
        let availability = Availability::new(self.source.address(), bound);
        Self::with(self.source, Arc::new(availability))
    }

    /// The lags of the renewals answered since the last call: each reply's arrival after its
    /// renewal fell due (the last success's send time plus ttl/3). For the bench program.
    #[cfg(feature = "bench")]
    #[doc(hidden)]
    pub fn renewal_lags(&self) -> Vec<Duration> {
        self.renewals.take_lags()
    }

    /// The shared connection, made on first use (again once `forget` dropped it).
    pub(crate) async fn conn(&self) -> Result<Conn, RedisError> {
        Ok(self.reused_conn().await?.0)
    }

    /// The shared connection, and whether it was made before this call (its link may have
    /// broken since, while idle).
    async fn reused_conn(&self) -> Result<(Conn, bool), RedisError> {
        let mut shared = self.shared.lock().await;
        if let Some(conn) = shared.as_ref() {
            return Ok((conn.clone(), true));
        }
        let conn = self.source.shared(&self.availability).await?;
        *shared = Some(conn.clone());
        Ok((conn, false))
    }

    /// Drop the shared connection (its link failed, or its server is no longer the master), so
    /// the next command connects again (through Sentinel, to the new master).
    pub(crate) async fn forget(&self) {
        *self.shared.lock().await = None;
        self.source.forget();
    }

    /// A connection of its own to the server of `key` (a wait's, a session's).
    pub(crate) async fn dedicated(&self, key: &str) -> Result<Conn, RedisError> {
        let conn = self.source.connect(key, &self.availability).await?;
        Ok(Conn::Single(conn))
    }

    pub(crate) fn failure(&self, e: &RedisError) -> Failure {
        error::failure(e)
    }

    /// `cmd` on the shared connection, asked again after a connection error until the bound
    /// (rule 14) only while it was not written: once written it may have run (a guarded write,
    /// a release whose reply was lost), so a broken link then is `Error::Unavailable`. With
    /// `probe`, a connection made before is checked by a `PING` first: one whose link broke
    /// while idle fails that, and `cmd` goes on a new connection.
    pub(crate) async fn call<T: FromRedisValue>(
        &self,
        cmd: &redis::Cmd,
        probe: bool,
    ) -> Result<T, Error> {
        self.availability.begin();
        let mut give_up = self.availability.until(None);
        loop {
            let started = Instant::now();
            let sent = async {
                let (mut conn, reused) = self.reused_conn().await.map_err(|e| (e, true))?;
                if probe && reused {
                    let ping = redis::cmd("PING").query_async::<()>(&mut conn).await;
                    ping.map_err(|e| (e, true))?;
                }
                cmd.query_async::<T>(&mut conn)
                    .await
                    .map_err(|e| (e, false))
            };
            match timeout_at(give_up.into(), sent).await {
                Err(_) => return Err(self.silent(started).await),
                Ok(Ok(value)) => {
                    self.availability.answered();
                    return Ok(value);
                }
                // A retryable reply (rule 19) says the command did not run: asked again.
                Ok(Err((e, unsent))) if unsent || is_retryable_reply(&e) => {
                    give_up = self.after_failure(e, None).await?
                }
                Ok(Err((e, _))) => return Err(self.settle(e).await),
            }
        }
    }

    /// After a failed try of a call that may ask again until `deadline` (the caller's) or the
    /// bound: when the next try must answer by (after a pause), or the error to return.
    pub(crate) async fn after_failure(
        &self,
        e: RedisError,
        deadline: Option<Instant>,
    ) -> Result<Instant, Error> {
        if self.failure(&e) != Failure::Unreachable {
            return Err(self.settle(e).await);
        }
        self.forget().await;
        self.availability.failed();
        // No try that would begin at (or past) the end: it could only fail as silent.
        let (give_up, next) = (
            self.availability.until(deadline),
            Instant::now() + RETRY_PAUSE,
        );
        if next >= give_up {
            return Err(self.availability.error_from(e));
        }
        tokio::time::sleep_until(next.into()).await;
        Ok(give_up)
    }

    /// `e` as the caller sees it, with no try left: the server's own refusal, or unavailable.
    pub(crate) async fn settle(&self, e: RedisError) -> Error {
        match self.failure(&e) {
            Failure::Refused => {
                self.availability.answered();
                e.into()
            }
            Failure::Unreachable => {
                self.forget().await;
                self.availability.failed();
                self.availability.error_from(e)
            }
            Failure::NotLockService => {
                self.forget().await;
                self.availability
                    .error(format!("not Redis with the redis-lock module ({e})"))
            }
        }
    }

    /// How late after the server's own deadline (a wait's end, `WAIT`'s timeout) its reply may
    /// come before the server counts as silent: min(1 s, bound).
    pub(crate) fn reply_grace(&self) -> Duration {
        REPLY_GRACE.min(self.availability.bound())
    }

    /// A call begun at `started` got no answer in time.
    pub(crate) async fn silent(&self, started: Instant) -> Error {
        self.forget().await;
        self.availability.failed();
        self.availability.silence(started.elapsed())
    }

    /// For a wait in the server's queue (rule 14): a `PING` on the shared connection every half
    /// bound; the unavailable error once none has answered for the bound (the waiting
    /// connection may be on a server that froze).
    pub(crate) async fn watch(&self) -> Error {
        let bound = self.availability.bound();
        let mut answered = Instant::now();
        loop {
            tokio::time::sleep((bound / 2).max(Duration::from_millis(10))).await;
            let sent = Instant::now();
            let ping = async {
                redis::cmd("PING")
                    .query_async::<()>(&mut self.conn().await?)
                    .await
            };
            match timeout_at((answered + bound).into(), ping).await {
                Ok(Ok(())) => {
                    answered = sent;
                    self.availability.answered();
                }
                Ok(Err(e)) if self.failure(&e) == Failure::Unreachable => {
                    self.forget().await;
                    self.availability.failed();
                }
                Ok(Err(e)) => return self.settle(e).await,
                Err(_) => return self.silent(answered).await,
            }
        }
    }
}
