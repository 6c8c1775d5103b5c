//! Locks for the [redis-lock](../../README.md) module, on the `redis` crate with tokio.
//!
//! The server does the hard parts (fair FIFO waits, fencing tokens, leases, shared locks,
//! semaphores, session holds, guarded writes); this crate writes the loop around them: wait
//! without polling, renew the lease while working (a watchdog task), say when a hold is lost
//! (`LockGuard::lost`), never renew a released hold, carry the token to the write, and say
//! `Error::Unavailable` within a bound when the lock service cannot be reached.
//!
//! The crate re-exports the `redis` crate it is built on (`redis_lock_client::redis`), so an
//! application without a `redis` dependency of its own needs no matching version.
//!
//! ```no_run
//! # async fn demo() -> Result<(), redis_lock_client::Error> {
//! use std::time::Duration;
//! use redis_lock_client::redis;
//! let locker = redis_lock_client::Locker::new(redis::Client::open("redis://127.0.0.1/")?);
//! let guard = locker
//!     .lock("order:42")
//!     .ttl(Duration::from_secs(30))
//!     .wait(Duration::from_secs(5))
//!     .acquire()
//!     .await?
//!     .expect("granted within 5 s");
//! let sold: i64 = guard.run(redis::cmd("DECRBY").arg("{order:42}:stock").arg(1)).await?;
//! guard.release().await?;
//! # let _ = sold; Ok(()) }
//! ```
//!
//! The main README's example (a lock and its data in one cluster slot):
//!
//! ```no_run
//! # async fn demo(locker: redis_lock_client::Locker) -> Result<(), redis_lock_client::Error> {
//! # use redis_lock_client::redis;
//! # use std::time::Duration;
//! let guard = locker.lock("{sku:9}:lock").ttl(Duration::from_secs(30)).wait_forever().acquire().await?.unwrap();
//! let left: i64 = guard.run(redis::cmd("DECRBY").arg("{sku:9}:stock").arg(1)).await?;
//! guard.release().await?;
//! # let _ = left; Ok(()) }
//! ```

/// The README's examples, compiled as doctests (with the feature `sqlx-postgres`, as `make
/// test` runs them: one example is a fenced transaction on PostgreSQL).
#[cfg(all(doctest, feature = "sqlx-postgres"))]
#[doc = include_str!("../README.md")]
pub struct ReadmeDoctests;

mod availability;
mod error;
#[cfg(feature = "sqlx")]
pub mod fence;
mod hold;

/// The `redis` crate this one is built on (1.x): its `Client` makes a `Locker`, its `cmd`
/// builds what `LockGuard::run` sends.
pub use redis;

pub use availability::DEFAULT_UNAVAILABLE_AFTER;
pub use error::Error;

use std::future::Future;
use std::sync::Arc;
use std::time::{Duration, Instant};

use redis::aio::MultiplexedConnection;
use redis::sentinel::SentinelClient;
use redis::{AsyncConnectionConfig, FromRedisValue, RedisError, Value};
use tokio::sync::Mutex;
use tokio::task::JoinHandle;
use tokio::time::timeout_at;

use availability::{Availability, REPLY_GRACE, RETRY_PAUSE};
use error::Failure;
use hold::{HoldId, HoldState, Lease};

/// `d` in whole milliseconds, rounded up (a lease is never shorter than asked).
fn millis(d: Duration) -> u64 {
    u64::try_from(d.as_nanos().div_ceil(1_000_000)).unwrap_or(u64::MAX)
}

/// `cmd`'s reply on `conn`, and whether it failed at once: a connection whose link had already
/// broken refuses on the first poll (its driver is gone). Only a hint: on a loaded machine a
/// command may also be written, answered by a broken link and fail within that first poll, so
/// only commands safe to send twice (an acquire with its owner) may act on it.
async fn query<T: FromRedisValue>(
    cmd: &redis::Cmd,
    conn: &mut MultiplexedConnection,
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

/// Where connections come from.
#[derive(Clone)]
enum Source {
    /// One server.
    Client(redis::Client),
    /// Whichever master Sentinel names, asked on every connect.
    Sentinel(Arc<Mutex<SentinelClient>>),
}

impl Source {
    /// A connection without timeouts of its own: each caller bounds its calls (rule 14).
    /// Through Sentinel, `availability` learns the master's address.
    async fn connect(
        &self,
        availability: &Availability,
    ) -> Result<MultiplexedConnection, RedisError> {
        let client = match self {
            Source::Client(client) => client.clone(),
            Source::Sentinel(sentinel) => {
                let client = sentinel.lock().await.async_get_client().await?;
                let master = client.get_connection_info().addr();
                availability.found(format!("{master} (the master Sentinel named)"));
                client
            }
        };
        let config = AsyncConnectionConfig::new()
            .set_connection_timeout(None)
            .set_response_timeout(None);
        client
            .get_multiplexed_async_connection_with_config(&config)
            .await
    }

    /// The address `Error::Unavailable` names.
    fn address(&self) -> String {
        match self {
            Source::Client(client) => client.get_connection_info().addr().to_string(),
            Source::Sentinel(_) => "the master Sentinel names (none named yet)".to_string(),
        }
    }
}

/// The entry point: one per application (it keeps a connection for short commands).
#[derive(Clone)]
pub struct Locker {
    source: Source,
    shared: Arc<Mutex<Option<MultiplexedConnection>>>,
    availability: Arc<Availability>,
}

impl Locker {
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

    fn from_source(source: Source) -> Self {
        let availability = Availability::new(source.address(), DEFAULT_UNAVAILABLE_AFTER);
        Self {
            source,
            shared: Arc::new(Mutex::new(None)),
            availability: Arc::new(availability),
        }
    }

    /// The unavailability bound (default 10 s): a call that cannot reach the lock service (or
    /// gets no answer) asks again with the same owner until the caller's deadline or this long
    /// after the first failure since the server last answered, whichever is first, then fails
    /// with `Error::Unavailable`. A wait longer than this is watched by a `PING` every half
    /// bound on another connection. Zero is refused: `acquire` answers `Error::InvalidArgument`.
    pub fn unavailable_after(mut self, bound: Duration) -> Self {
        self.availability = Arc::new(Availability::new(self.source.address(), bound));
        self
    }

    /// A lock on `key`; set it up with the builder, then `acquire().await`.
    pub fn lock(&self, key: impl Into<String>) -> LockBuilder {
        LockBuilder {
            locker: self.clone(),
            key: key.into(),
            ttl: Duration::from_secs(30),
            wait: Wait::Forever,
            mode: Mode::Exclusive,
            session: false,
            replicas: None,
            watchdog: true,
            owner: None,
        }
    }

    /// The shared connection, made on first use (again once `forget` dropped it).
    async fn conn(&self) -> Result<MultiplexedConnection, RedisError> {
        Ok(self.reused_conn().await?.0)
    }

    /// The shared connection, and whether it was made before this call (its link may have
    /// broken since, while idle).
    async fn reused_conn(&self) -> Result<(MultiplexedConnection, bool), RedisError> {
        let mut shared = self.shared.lock().await;
        if let Some(conn) = shared.as_ref() {
            return Ok((conn.clone(), true));
        }
        let conn = self.source.connect(&self.availability).await?;
        *shared = Some(conn.clone());
        Ok((conn, false))
    }

    /// Drop the shared connection (its link failed, or its server is no longer the master), so
    /// the next command connects again (through Sentinel, to the new master).
    async fn forget(&self) {
        *self.shared.lock().await = None;
    }

    /// A connection of its own (a wait's, a session's, a watchdog's).
    async fn dedicated(&self) -> Result<MultiplexedConnection, RedisError> {
        self.source.connect(&self.availability).await
    }

    fn failure(&self, e: &RedisError) -> Failure {
        error::failure(e, matches!(self.source, Source::Sentinel(_)))
    }

    /// `cmd` on the shared connection, asked again after a connection error until the bound
    /// (rule 14) only while it was not written: once written it may have run (a guarded write,
    /// a release whose reply was lost), so a broken link then is `Error::Unavailable`. With
    /// `probe`, a connection made before is checked by a `PING` first: one whose link broke
    /// while idle fails that, and `cmd` goes on a new connection.
    async fn call<T: FromRedisValue>(&self, cmd: &redis::Cmd, probe: bool) -> Result<T, Error> {
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
                Ok(Err((e, true))) => give_up = self.after_failure(e, None).await?,
                Ok(Err((e, false))) => return Err(self.settle(e).await),
            }
        }
    }

    /// After a failed try of a call that may ask again until `deadline` (the caller's) or the
    /// bound: when the next try must answer by (after a pause), or the error to return.
    async fn after_failure(
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
            return Err(self.availability.error(e));
        }
        tokio::time::sleep_until(next.into()).await;
        Ok(give_up)
    }

    /// `e` as the caller sees it, with no try left: the server's own refusal, or unavailable.
    async fn settle(&self, e: RedisError) -> Error {
        match self.failure(&e) {
            Failure::Refused => {
                self.availability.answered();
                e.into()
            }
            Failure::Unreachable => {
                self.forget().await;
                self.availability.failed();
                self.availability.error(e)
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
    fn reply_grace(&self) -> Duration {
        REPLY_GRACE.min(self.availability.bound())
    }

    /// A call begun at `started` got no answer in time.
    async fn silent(&self, started: Instant) -> Error {
        self.forget().await;
        self.availability.failed();
        self.availability.silence(started.elapsed())
    }

    /// For a wait in the server's queue (rule 14): a `PING` on the shared connection every half
    /// bound; the unavailable error once none has answered for the bound (the waiting
    /// connection may be on a server that froze).
    async fn watch(&self) -> Error {
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

#[derive(Clone, Copy, Debug)]
enum Wait {
    /// Up to this long (zero: try once).
    For(Duration),
    Forever,
}

impl Wait {
    /// The wait left until `deadline` (None: without limit).
    fn until(deadline: Option<Instant>) -> Self {
        deadline.map_or(Wait::Forever, |d| {
            Wait::For(d.saturating_duration_since(Instant::now()))
        })
    }

    fn blocks(self) -> bool {
        !matches!(self, Wait::For(d) if d.is_zero())
    }
}

#[derive(Clone, Copy, Debug)]
enum Mode {
    Exclusive,
    Shared,
    Permits { limit: u32, n: u32 },
}

/// How to take a lock.
pub struct LockBuilder {
    locker: Locker,
    key: String,
    ttl: Duration,
    wait: Wait,
    mode: Mode,
    session: bool,
    replicas: Option<(usize, Duration)>,
    watchdog: bool,
    owner: Option<String>,
}

/// A `LOCK.ACQUIRE` that did not reach the server.
struct Unreached {
    error: RedisError,
    /// Tried on the shared connection made before, which failed at the first poll: its link
    /// had broken while idle (the server restarted since), so not an attempt: asked again on a
    /// new connection (in the rare case it was written after all, the same owner is safe).
    stale: bool,
}

/// A grant, before its guard.
struct Granted {
    token: u64,
    conn: MultiplexedConnection,
    lease_start: Instant,
}

impl LockBuilder {
    /// The lease (default 30 s; at least 1 ms, sent in whole milliseconds rounded up); the
    /// watchdog renews it every ttl/3.
    pub fn ttl(mut self, ttl: Duration) -> Self {
        self.ttl = ttl;
        self
    }
    /// Wait in the server's queue up to `timeout`; `Duration::ZERO` tries once. Without it,
    /// `acquire` waits without limit (while the server answers: see `Locker::unavailable_after`).
    pub fn wait(mut self, timeout: Duration) -> Self {
        self.wait = Wait::For(timeout);
        self
    }
    /// Wait in the server's queue without limit (the default).
    pub fn wait_forever(mut self) -> Self {
        self.wait = Wait::Forever;
        self
    }
    /// A read hold (any number of readers at once; a writer waits for all).
    pub fn shared(mut self) -> Self {
        self.mode = Mode::Shared;
        self
    }
    /// `permits` of a counting semaphore of `limit` permits (1 <= permits <= limit).
    pub fn permits(mut self, limit: u32, permits: u32) -> Self {
        self.mode = Mode::Permits { limit, n: permits };
        self
    }
    /// The hold lives on a connection of its own and ends when it closes (this process dies).
    pub fn session(mut self) -> Self {
        self.session = true;
        self
    }
    /// A durable grant: granted only once `n` replicas have it (`WAIT n timeout`).
    pub fn replicas(mut self, n: usize, timeout: Duration) -> Self {
        self.replicas = Some((n, timeout));
        self
    }
    /// Renew the lease while held (default true).
    pub fn watchdog(mut self, on: bool) -> Self {
        self.watchdog = on;
        self
    }
    /// The owner (default: a fresh UUID).
    pub fn owner(mut self, owner: impl Into<String>) -> Self {
        self.owner = Some(owner.into());
        self
    }

    /// The arguments the server would refuse, refused before anything is sent (rule 17).
    fn check(&self) -> Result<(), Error> {
        if self.locker.availability.bound().is_zero() {
            return Err(Error::InvalidArgument(
                "unavailable_after is zero: no call could wait for an answer".to_string(),
            ));
        }
        if self.ttl < Duration::from_millis(1) {
            let ttl = self.ttl;
            return Err(Error::InvalidArgument(format!("ttl {ttl:?} is under 1 ms")));
        }
        if let Mode::Permits { limit, n } = self.mode {
            if n == 0 || n > limit {
                return Err(Error::InvalidArgument(format!(
                    "{n} permits of a semaphore of {limit}: 1 to {limit}"
                )));
            }
        }
        Ok(())
    }

    fn command(&self, owner: &str, wait: Wait) -> redis::Cmd {
        let mut cmd = redis::cmd("LOCK.ACQUIRE");
        cmd.arg(&self.key).arg(owner).arg(millis(self.ttl));
        match self.mode {
            Mode::Exclusive => {}
            Mode::Shared => {
                cmd.arg("SHARED");
            }
            Mode::Permits { limit, n } => {
                cmd.arg("LIMIT").arg(limit).arg("PERMITS").arg(n);
            }
        }
        if self.session {
            cmd.arg("SESSION");
        }
        match wait {
            Wait::For(d) if d.is_zero() => {}
            Wait::For(d) => {
                cmd.arg("WAIT").arg(millis(d));
            }
            Wait::Forever => {
                cmd.arg("WAIT").arg(0);
            }
        }
        cmd
    }

    /// Take the lock: `Some(guard)` when granted, `None` when not (busy when trying once, the
    /// wait ended, or a durable grant did not reach its replicas). A connection error is
    /// retried with the same owner, which the server treats as a safe retry, until the wait's
    /// deadline or the locker's unavailability bound: then `Error::Unavailable`.
    pub async fn acquire(self) -> Result<Option<LockGuard>, Error> {
        self.check()?;
        let owner = self
            .owner
            .clone()
            .unwrap_or_else(|| uuid::Uuid::new_v4().to_string());
        let deadline = match self.wait {
            Wait::For(d) => Some(Instant::now() + d),
            Wait::Forever => None,
        };
        self.locker.availability.begin();
        let mut reconnected = false;
        loop {
            match self.attempt(&owner, deadline).await? {
                Ok(Some(granted)) => return self.grant(owner, granted).await,
                Ok(None) => return Ok(None),
                Err(Unreached { stale: true, .. }) if !reconnected => {
                    reconnected = true;
                    self.locker.forget().await;
                }
                Err(Unreached { error, .. }) => {
                    _ = self.locker.after_failure(error, deadline).await?
                }
            }
        }
    }

    /// One `LOCK.ACQUIRE`: the grant, `None`, or a failure for `acquire` to judge (inside), or
    /// unavailable at once (outside: the server did not answer in time, or not as Redis).
    async fn attempt(
        &self,
        owner: &str,
        deadline: Option<Instant>,
    ) -> Result<Result<Option<Granted>, Unreached>, Error> {
        let wait = Wait::until(deadline);
        let blocking = wait.blocks();
        let locker = &self.locker;
        let shared = !blocking && !self.session;
        let reused = shared && locker.shared.lock().await.is_some();
        let (started, bound) = (Instant::now(), locker.availability.until(None));
        // A wait's reply is due when its deadline passed, and min(1 s, bound) for its trip; a
        // try's, within the bound (a slow server is not an absent one).
        let reply_by = match deadline {
            Some(d) if blocking => Some(d + locker.reply_grace()),
            Some(_) => Some(bound),
            None => None,
        };
        let connect_by = reply_by.map_or(bound, |by| by.min(bound));
        let conn = if shared {
            timeout_at(connect_by.into(), locker.conn()).await
        } else {
            timeout_at(connect_by.into(), locker.dedicated()).await
        };
        let mut conn = match conn {
            Err(_) => return Err(locker.silent(started).await),
            Ok(Err(error)) => {
                return Ok(Err(Unreached {
                    error,
                    stale: false,
                }))
            }
            Ok(Ok(conn)) => conn,
        };
        let sent = Instant::now();
        let command = self.command(owner, wait);
        let mut unsent = false;
        let watched = async {
            if !blocking {
                let (reply, not_written) = query(&command, &mut conn).await;
                unsent = not_written;
                return Ok(reply);
            }
            tokio::select! {
                reply = command.query_async::<Value>(&mut conn) => Ok(reply),
                unavailable = locker.watch() => Err(unavailable),
            }
        };
        let reply = match reply_by {
            Some(by) => match timeout_at(by.into(), watched).await {
                Ok(reply) => reply?,
                Err(_) => return Err(locker.silent(started).await),
            },
            None => watched.await?,
        };
        // The grant's time is not known after a wait: its reply's arrival stands for it.
        let lease_start = if blocking { Instant::now() } else { sent };
        match reply {
            Ok(Value::Int(token)) => Ok(Ok(Some(Granted {
                token: u64::try_from(token).unwrap_or(0),
                conn,
                lease_start,
            }))),
            Ok(Value::Nil) => {
                locker.availability.answered();
                Ok(Ok(None))
            }
            Ok(other) => Err(locker.availability.error(format!(
                "not Redis with the redis-lock module (LOCK.ACQUIRE answered {other:?})"
            ))),
            Err(error) => Ok(Err(Unreached {
                error,
                stale: reused && unsent,
            })),
        }
    }

    /// The guard of a grant; for a durable grant, once `n` replicas have it (else released and
    /// `None`; unavailable when `WAIT` fails or is silent, the hold given back in the background).
    async fn grant(self, owner: String, mut granted: Granted) -> Result<Option<LockGuard>, Error> {
        self.locker.availability.answered();
        let id = HoldId {
            key: self.key.clone(),
            owner,
            token: granted.token,
        };
        if let Some((n, timeout)) = self.replicas {
            match self.replicated(&mut granted.conn, n, timeout).await {
                Ok(true) => {}
                Ok(false) => {
                    id.release(&self.locker, &HoldState::new()).await?;
                    return Ok(None);
                }
                Err(unavailable) => {
                    let locker = self.locker.clone();
                    tokio::spawn(async move { id.release(&locker, &HoldState::new()).await });
                    return Err(unavailable);
                }
            }
        }
        Ok(Some(LockGuard::start(self, id, granted)))
    }

    /// `WAIT n timeout`: whether `n` replicas have the grant; its reply is due by the timeout
    /// and min(1 s, bound).
    async fn replicated(
        &self,
        conn: &mut MultiplexedConnection,
        n: usize,
        timeout: Duration,
    ) -> Result<bool, Error> {
        let locker = &self.locker;
        let started = Instant::now();
        let wait = redis::cmd("WAIT").arg(n).arg(millis(timeout)).clone();
        let reply_by = started + timeout + locker.reply_grace();
        match timeout_at(reply_by.into(), wait.query_async::<usize>(conn)).await {
            Ok(Ok(acked)) => Ok(acked >= n),
            Ok(Err(e)) => Err(locker.settle(e).await),
            Err(_) => Err(locker.silent(started).await),
        }
    }
}

/// A granted hold. Release it with `release().await`; dropped without it, it is released in the
/// background. `lost()` resolves when the hold is lost before its release.
pub struct LockGuard {
    locker: Locker,
    id: HoldId,
    state: Arc<HoldState>,
    /// The lease's timer and the watchdog (`hold::keep`).
    keeper: Option<JoinHandle<()>>,
    /// For a session hold: the connection it lives on (closing it ends the hold).
    session: Option<MultiplexedConnection>,
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
    fn start(builder: LockBuilder, id: HoldId, granted: Granted) -> Self {
        let state = HoldState::new();
        let lease = Lease {
            ttl: builder.ttl,
            start: granted.lease_start,
            renew: builder.watchdog,
        };
        let keeper = tokio::spawn(hold::keep(
            builder.locker.clone(),
            id.clone(),
            state.clone(),
            lease,
        ));
        LockGuard {
            locker: builder.locker,
            id,
            state,
            keeper: Some(keeper),
            session: builder.session.then_some(granted.conn),
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
        let mut guarded = redis::cmd("LOCK.GUARD");
        guarded.arg(&self.id.key).arg(self.id.token);
        for arg in cmd.args_iter() {
            match arg {
                redis::Arg::Simple(bytes) => {
                    guarded.arg(bytes);
                }
                _ => {
                    guarded.arg(0); // a cursor: scans start at 0
                }
            }
        }
        self.locker.call(&guarded, false).await
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
        if let Some(keeper) = self.keeper.take() {
            keeper.abort();
            let _ = keeper.await; // gone: no renewal, no loss marked after this point
        }
        let released = self.id.release(&self.locker, &self.state).await;
        self.session = None;
        released
    }
}

impl Drop for LockGuard {
    fn drop(&mut self) {
        if self.released {
            return;
        }
        let keeper = self.keeper.take();
        if let Some(keeper) = &keeper {
            keeper.abort();
        }
        // Released in the background, on the runtime this guard lives in (if it still runs);
        // a session's connection closes after it.
        if let Ok(handle) = tokio::runtime::Handle::try_current() {
            let (locker, id, state) = (self.locker.clone(), self.id.clone(), self.state.clone());
            let session = self.session.take();
            handle.spawn(async move {
                if let Some(keeper) = keeper {
                    let _ = keeper.await;
                }
                let _ = id.release(&locker, &state).await;
                drop(session);
            });
        }
    }
}
