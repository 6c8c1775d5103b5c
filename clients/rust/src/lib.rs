//! Locks for the [redis-lock](../../README.md) module, on the `redis` crate with tokio.
//!
//! The server does the hard parts (fair FIFO waits, fencing tokens, leases, shared locks,
//! semaphores, session holds, guarded writes); this crate writes the loop around them: wait
//! without polling, renew the lease while working (a watchdog task), say when a hold is lost
//! (`LockGuard::lost`), never renew a released hold, and carry the token to the write.
//!
//! ```no_run
//! # async fn demo() -> Result<(), redis_lock_client::Error> {
//! use std::time::Duration;
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
//! # use std::time::Duration;
//! let guard = locker.lock("{sku:9}:lock").ttl(Duration::from_secs(30)).wait_forever().acquire().await?.unwrap();
//! let left: i64 = guard.run(redis::cmd("DECRBY").arg("{sku:9}:stock").arg(1)).await?;
//! guard.release().await?;
//! # let _ = left; Ok(()) }
//! ```

/// The README's examples, compiled as doctests.
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
pub struct ReadmeDoctests;

#[cfg(feature = "sqlx")]
pub mod fence;

use std::sync::Arc;
use std::time::{Duration, Instant};

use redis::aio::MultiplexedConnection;
use redis::sentinel::SentinelClient;
use redis::{AsyncConnectionConfig, ErrorKind, FromRedisValue, RedisError, Value};
use tokio::sync::{watch, Mutex};
use tokio::task::JoinHandle;

/// What can go wrong.
#[derive(Debug)]
pub enum Error {
    /// The server or the connection failed (including other error replies).
    Redis(RedisError),
    /// `run` refused: this hold's token is no longer the live exclusive hold's.
    Stale(String),
    /// An upgrade from shared to exclusive while other readers hold.
    Deadlock(String),
    /// The database failed, or refused an argument (`fence`, feature `sqlx-*`).
    #[cfg(feature = "sqlx")]
    Database(sqlx::Error),
}

impl std::fmt::Display for Error {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Error::Redis(e) => write!(f, "{e}"),
            Error::Stale(m) | Error::Deadlock(m) => f.write_str(m),
            #[cfg(feature = "sqlx")]
            Error::Database(e) => write!(f, "{e}"),
        }
    }
}

impl std::error::Error for Error {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            Error::Redis(e) => Some(e),
            Error::Stale(_) | Error::Deadlock(_) => None,
            #[cfg(feature = "sqlx")]
            Error::Database(e) => Some(e),
        }
    }
}

#[cfg(feature = "sqlx")]
impl From<sqlx::Error> for Error {
    fn from(e: sqlx::Error) -> Self {
        Error::Database(e)
    }
}

impl From<RedisError> for Error {
    fn from(e: RedisError) -> Self {
        let text = e.to_string();
        if e.code() == Some("STALE") || text.contains("STALE") {
            Error::Stale(text)
        } else if e.code() == Some("DEADLOCK") || text.contains("DEADLOCK") {
            Error::Deadlock(text)
        } else {
            Error::Redis(e)
        }
    }
}

/// How long a wait pauses before it asks again after a broken link.
const RETRY_PAUSE: Duration = Duration::from_millis(50);

fn millis(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX).max(1)
}

/// The link broke or could not be made (the server is down, or, through Sentinel, the master
/// is changing): a wait asks again with the same owner, a renewal again until the lease ends.
fn unreachable(e: &RedisError) -> bool {
    e.is_io_error()
        || e.is_connection_dropped()
        || e.is_timeout()
        || e.is_connection_refusal()
        || e.kind() == ErrorKind::MasterNameNotFoundBySentinel
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
    async fn connect(
        &self,
        config: &AsyncConnectionConfig,
    ) -> Result<MultiplexedConnection, RedisError> {
        let client = match self {
            Source::Client(client) => client.clone(),
            Source::Sentinel(sentinel) => sentinel.lock().await.async_get_client().await?,
        };
        client
            .get_multiplexed_async_connection_with_config(config)
            .await
    }

    /// Whether `e` says the connection's server is no longer the master: a demoted master
    /// answers `READONLY`; through Sentinel, the next connection finds the new one.
    fn moved(&self, e: &RedisError) -> bool {
        matches!(self, Source::Sentinel(_)) && e.code() == Some("READONLY")
    }
}

/// The entry point: one per application (it keeps a connection for short commands).
#[derive(Clone)]
pub struct Locker {
    source: Source,
    shared: Arc<Mutex<Option<MultiplexedConnection>>>,
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
        Self {
            source,
            shared: Arc::new(Mutex::new(None)),
        }
    }

    /// A lock on `key`; set it up with the builder, then `acquire().await`.
    pub fn lock(&self, key: impl Into<String>) -> LockBuilder {
        LockBuilder {
            locker: self.clone(),
            key: key.into(),
            ttl: Duration::from_secs(30),
            wait: Wait::No,
            mode: Mode::Exclusive,
            session: false,
            replicas: None,
            watchdog: true,
            owner: None,
        }
    }

    /// The shared connection, made on first use (again once `forget` dropped it).
    async fn conn(&self) -> Result<MultiplexedConnection, RedisError> {
        let mut shared = self.shared.lock().await;
        if let Some(conn) = shared.as_ref() {
            return Ok(conn.clone());
        }
        let conn = self.source.connect(&AsyncConnectionConfig::new()).await?;
        *shared = Some(conn.clone());
        Ok(conn)
    }

    /// A command on the shared connection failed with `e`: if the link is gone or its server
    /// is no longer master, drop it, so the next command connects again (through Sentinel, to
    /// the new master). Whether `e` calls for that.
    async fn forget(&self, e: &RedisError) -> bool {
        let gone = unreachable(e) || self.source.moved(e);
        if gone {
            *self.shared.lock().await = None;
        }
        gone
    }

    /// `cmd` on the shared connection; once more on a fresh one if the link was gone (for
    /// commands that are safe to repeat: a release with its token).
    async fn retried<T: FromRedisValue>(&self, cmd: &redis::Cmd) -> Result<T, RedisError> {
        let first = cmd.query_async(&mut self.conn().await?).await;
        match first {
            Err(e) if self.forget(&e).await => cmd.query_async(&mut self.conn().await?).await,
            other => other,
        }
    }

    /// A connection of its own, with a response timeout of `timeout` (None: wait as long as the
    /// server takes, for a blocking `WAIT`).
    async fn dedicated(
        &self,
        timeout: Option<Duration>,
    ) -> Result<MultiplexedConnection, RedisError> {
        let config = AsyncConnectionConfig::new().set_response_timeout(timeout);
        self.source.connect(&config).await
    }
}

#[derive(Clone, Copy, Debug)]
enum Wait {
    No,
    For(Duration),
    Forever,
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

impl LockBuilder {
    /// The lease (default 30 s); the watchdog renews it every ttl/3.
    pub fn ttl(mut self, ttl: Duration) -> Self {
        self.ttl = ttl;
        self
    }
    /// Wait in the server's queue up to `timeout` (default: do not wait).
    pub fn wait(mut self, timeout: Duration) -> Self {
        self.wait = Wait::For(timeout);
        self
    }
    /// Wait in the server's queue without limit.
    pub fn wait_forever(mut self) -> Self {
        self.wait = Wait::Forever;
        self
    }
    /// A read hold (any number of readers at once; a writer waits for all).
    pub fn shared(mut self) -> Self {
        self.mode = Mode::Shared;
        self
    }
    /// `permits` of a counting semaphore of `limit` permits.
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
            Wait::No => {}
            Wait::Forever => {
                cmd.arg("WAIT").arg(0);
            }
            Wait::For(d) => {
                cmd.arg("WAIT").arg(millis(d));
            }
        }
        cmd
    }

    /// Take the lock: `Some(guard)` when granted, `None` when not (busy without waiting, the
    /// wait timed out, or a durable grant did not reach its replicas). A connection error while
    /// waiting is retried with the same owner, which the server treats as a safe retry.
    pub async fn acquire(self) -> Result<Option<LockGuard>, Error> {
        let owner = self
            .owner
            .clone()
            .unwrap_or_else(|| uuid::Uuid::new_v4().to_string());
        let deadline = match self.wait {
            Wait::For(d) => Some(Instant::now() + d),
            _ => None,
        };
        let mut wait = self.wait;
        let expired = || deadline.is_some_and(|d| Instant::now() >= d);
        let left = |wait: Wait| match deadline {
            Some(d) => Wait::For(
                d.saturating_duration_since(Instant::now())
                    .max(Duration::from_millis(1)),
            ),
            None => wait,
        };
        loop {
            let blocking = !matches!(wait, Wait::No);
            let shared = !(blocking || self.session);
            let conn = if shared {
                self.locker.conn().await
            } else {
                self.locker.dedicated(None).await
            };
            let mut conn = match conn {
                Ok(conn) => conn,
                // Nobody to ask yet (the server is down, or Sentinel names no master up yet):
                // a wait asks again until its deadline; a call that does not wait fails.
                Err(e) if blocking && unreachable(&e) && !expired() => {
                    tokio::time::sleep(RETRY_PAUSE).await;
                    wait = left(wait);
                    continue;
                }
                Err(e) => return Err(e.into()),
            };
            let reply: Result<Value, RedisError> =
                self.command(&owner, wait).query_async(&mut conn).await;
            let token = match reply {
                Ok(Value::Int(t)) => u64::try_from(t).unwrap_or(0),
                Ok(_) => return Ok(None),
                Err(e) if unreachable(&e) || self.locker.source.moved(&e) => {
                    if shared {
                        self.locker.forget(&e).await;
                    }
                    if expired() {
                        return Err(e.into());
                    }
                    tokio::time::sleep(RETRY_PAUSE).await;
                    wait = left(wait);
                    continue;
                }
                Err(e) => return Err(e.into()),
            };
            if let Some((n, timeout)) = self.replicas {
                let acked: usize = redis::cmd("WAIT")
                    .arg(n)
                    .arg(millis(timeout))
                    .query_async(&mut conn)
                    .await?;
                if acked < n {
                    let _: Value = release_cmd(&self.key, &owner, token)
                        .query_async(&mut conn)
                        .await?;
                    return Ok(None);
                }
            }
            return Ok(Some(LockGuard::start(self, owner, token, conn)));
        }
    }
}

fn release_cmd(key: &str, owner: &str, token: u64) -> redis::Cmd {
    let mut cmd = redis::cmd("LOCK.RELEASE");
    cmd.arg(key).arg(owner).arg("TOKEN").arg(token);
    cmd
}

/// Where a hold stands; the watchdog and the release take turns on it.
#[derive(Clone, Debug, PartialEq, Eq)]
enum Phase {
    Held,
    Released,
    Lost(String),
}

/// A granted hold. Release it with `release().await`; dropped without it, it is released in the
/// background. `lost()` resolves when the hold is lost before its release.
pub struct LockGuard {
    locker: Locker,
    key: String,
    owner: String,
    token: u64,
    phase: Arc<Mutex<Phase>>,
    lost_rx: watch::Receiver<Option<String>>,
    watchdog: Option<JoinHandle<()>>,
    /// For a session hold: the connection it lives on (closing it ends the hold).
    session: Option<MultiplexedConnection>,
    released: bool,
}

impl std::fmt::Debug for LockGuard {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LockGuard")
            .field("key", &self.key)
            .field("owner", &self.owner)
            .field("token", &self.token)
            .finish()
    }
}

impl LockGuard {
    fn start(builder: LockBuilder, owner: String, token: u64, conn: MultiplexedConnection) -> Self {
        let phase = Arc::new(Mutex::new(Phase::Held));
        let (lost_tx, lost_rx) = watch::channel(None);
        let watchdog = builder.watchdog.then(|| {
            tokio::spawn(renew(
                builder.locker.clone(),
                builder.key.clone(),
                owner.clone(),
                token,
                builder.ttl,
                phase.clone(),
                lost_tx,
            ))
        });
        LockGuard {
            locker: builder.locker,
            key: builder.key,
            owner,
            token,
            phase,
            lost_rx,
            watchdog,
            session: builder.session.then_some(conn),
            released: false,
        }
    }

    /// The fencing token of this hold: pass it to the storage with every write.
    pub fn token(&self) -> u64 {
        self.token
    }

    pub fn key(&self) -> &str {
        &self.key
    }

    pub fn owner(&self) -> &str {
        &self.owner
    }

    /// Why the hold was lost, if it was.
    pub fn lost_reason(&self) -> Option<String> {
        self.lost_rx.borrow().clone()
    }

    /// Whether the hold was lost (`lost_reason` says why).
    pub fn is_lost(&self) -> bool {
        self.lost_rx.borrow().is_some()
    }

    /// Resolves with the reason when the hold is lost (a renewal answered 0, or the server could
    /// not be reached before the lease would end). Pending forever while the hold lives.
    pub async fn lost(&self) -> String {
        let mut rx = self.lost_rx.clone();
        loop {
            if let Some(reason) = rx.borrow_and_update().clone() {
                return reason;
            }
            if rx.changed().await.is_err() {
                std::future::pending::<()>().await;
            }
        }
    }

    /// `LOCK.GUARD key token <cmd>`: run `cmd` only while this is the live exclusive hold
    /// (`Error::Stale` otherwise); replicated as `cmd` itself.
    pub async fn run<T: FromRedisValue>(&self, cmd: &redis::Cmd) -> Result<T, Error> {
        let mut guarded = redis::cmd("LOCK.GUARD");
        guarded.arg(&self.key).arg(self.token);
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
        let mut conn = self.locker.conn().await?;
        match guarded.query_async(&mut conn).await {
            Ok(v) => Ok(v),
            Err(e) => {
                // Not repeated (the command may have run); the next call connects again.
                self.locker.forget(&e).await;
                Err(e.into())
            }
        }
    }

    /// Release the hold: `Ok(false)` if it had been lost (its lease ran out first). The watchdog
    /// stops in the same step, so a released hold is never renewed.
    pub async fn release(mut self) -> Result<bool, Error> {
        self.released = true;
        let mut phase = self.phase.lock().await;
        let was = std::mem::replace(&mut *phase, Phase::Released);
        if let Some(w) = self.watchdog.take() {
            w.abort();
        }
        let released: i64 = self
            .locker
            .retried(&release_cmd(&self.key, &self.owner, self.token))
            .await?;
        drop(phase);
        self.session = None;
        Ok(released == 1 && was == Phase::Held)
    }
}

impl Drop for LockGuard {
    fn drop(&mut self) {
        if self.released {
            return;
        }
        if let Some(w) = self.watchdog.take() {
            w.abort();
        }
        // Released in the background, on the runtime this guard lives in (if it still runs).
        if let Ok(handle) = tokio::runtime::Handle::try_current() {
            let (locker, key, owner, token) = (
                self.locker.clone(),
                self.key.clone(),
                self.owner.clone(),
                self.token,
            );
            handle.spawn(async move {
                let _: Result<Value, _> = locker.retried(&release_cmd(&key, &owner, token)).await;
            });
        }
    }
}

/// The watchdog: every ttl/3, `LOCK.EXTEND ... TOKEN` on a connection of its own; the hold is
/// lost when a renewal answers 0, or when the server cannot be reached before the lease ends.
async fn renew(
    locker: Locker,
    key: String,
    owner: String,
    token: u64,
    ttl: Duration,
    phase: Arc<Mutex<Phase>>,
    lost: watch::Sender<Option<String>>,
) {
    let interval = ttl / 3;
    let mut lease_end = Instant::now() + ttl;
    let mut conn: Option<MultiplexedConnection> = None;
    loop {
        tokio::time::sleep(interval).await;
        let sent = Instant::now();
        let mut phase = phase.lock().await;
        if *phase != Phase::Held {
            return;
        }
        if conn.is_none() {
            // Bounded as a renewal is: asking the Sentinels must not outlast it either.
            let timeout = interval.max(Duration::from_millis(50));
            conn = tokio::time::timeout(timeout, locker.dedicated(Some(timeout)))
                .await
                .ok()
                .and_then(Result::ok);
        }
        let reply: Result<i64, RedisError> = match conn.as_mut() {
            Some(c) => {
                redis::cmd("LOCK.EXTEND")
                    .arg(&key)
                    .arg(&owner)
                    .arg(millis(ttl))
                    .arg("TOKEN")
                    .arg(token)
                    .query_async(c)
                    .await
            }
            None => Err(RedisError::from((redis::ErrorKind::Io, "no connection"))),
        };
        let reason = match reply {
            Ok(1) => {
                lease_end = sent + ttl;
                None
            }
            Ok(_) => Some("the lease ran out before it was renewed".to_string()),
            Err(e) if unreachable(&e) || locker.source.moved(&e) => {
                conn = None;
                (Instant::now() >= lease_end)
                    .then(|| "the server could not be reached before the lease ended".to_string())
            }
            Err(e) => Some(format!("renewal refused: {e}")),
        };
        if let Some(reason) = reason {
            *phase = Phase::Lost(reason.clone());
            let _ = lost.send(Some(reason));
            return;
        }
    }
}
