//! The builder and the acquire: one `LOCK.ACQUIRE` per try, asked again with the same owner
//! after a connection error (rule 4), bounded by the caller's deadline and the locker's
//! unavailability bound (rule 14); a durable grant's `WAIT` (rule 9).

use std::time::{Duration, Instant};

use redis::{RedisError, Value};
use tokio::time::timeout_at;

use crate::cluster::Conn;
use crate::guard::{Granted, LockGuard, Terms};
use crate::hold::HoldState;
use crate::locker::{query, Locker};
use crate::protocol::{self, check_ttl, HoldId, Mode, Wait};
use crate::Error;

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

impl Locker {
    /// A lock on `key`; set it up with the builder, then `acquire().await`.
    pub fn lock(&self, key: impl Into<String>) -> LockBuilder {
        LockBuilder::new(self.clone(), key.into())
    }
}

/// How to take a lock.
pub struct LockBuilder {
    pub(crate) locker: Locker,
    pub(crate) key: String,
    pub(crate) ttl: Duration,
    wait: Wait,
    mode: Mode,
    pub(crate) session: bool,
    replicas: Option<(usize, Duration)>,
    pub(crate) watchdog: bool,
    owner: Option<String>,
    /// A lock set's keys (`key` is the first: it routes the command), or `None`.
    pub(crate) set: Option<Vec<String>>,
}

/// A `LOCK.ACQUIRE` that did not reach the server.
struct Unreached {
    error: RedisError,
    /// Tried on the shared connection made before, which failed at the first poll: its link
    /// had broken while idle (the server restarted since), so not an attempt: asked again on a
    /// new connection (in the rare case it was written after all, the same owner is safe).
    stale: bool,
}

impl LockBuilder {
    pub(crate) fn new(locker: Locker, key: String) -> Self {
        LockBuilder {
            locker,
            key,
            ttl: Duration::from_secs(30),
            wait: Wait::Forever,
            mode: Mode::Exclusive,
            session: false,
            replicas: None,
            watchdog: true,
            owner: None,
            set: None,
        }
    }

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
        check_ttl(self.ttl)?;
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
        match &self.set {
            Some(keys) => {
                let shared = matches!(self.mode, Mode::Shared);
                protocol::macquire(keys, owner, self.ttl, shared, self.session, wait)
            }
            None => protocol::acquire(&self.key, owner, self.ttl, self.mode, self.session, wait),
        }
    }

    /// Take the lock: `Some(guard)` when granted, `None` when not (busy when trying once, the
    /// wait ended, or a durable grant did not reach its replicas). A connection error is
    /// retried with the same owner, which the server treats as a safe retry, until the wait's
    /// deadline or the locker's unavailability bound: then `Error::Unavailable`.
    pub async fn acquire(self) -> Result<Option<LockGuard>, Error> {
        match self.take().await? {
            Some((owner, granted)) => self.grant(owner, granted).await,
            None => Ok(None),
        }
    }

    /// The acquire's loop (for one key or a set): the owner and the grant, or `None`.
    pub(crate) async fn take(&self) -> Result<Option<(String, Granted)>, Error> {
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
                Ok(Some(granted)) => return Ok(Some((owner, granted))),
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
        // A durable grant's `WAIT` goes on the grant's connection: on a cluster, the node's.
        let durable_on_cluster = self.replicas.is_some() && locker.source.is_cluster();
        let shared = !blocking && !self.session && !durable_on_cluster;
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
            timeout_at(connect_by.into(), locker.dedicated(&self.key)).await
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
        let reply = match reply {
            Ok(reply) => reply,
            Err(error) => {
                let stale = reused && unsent;
                return Ok(Err(Unreached { error, stale }));
            }
        };
        self.judge(&reply, conn, lease_start)
    }

    /// What a `LOCK.ACQUIRE` that was answered means: the grant, `None`, or unavailable (the
    /// service answered, but not as Redis with this module).
    fn judge(
        &self,
        reply: &Value,
        conn: Conn,
        lease_start: Instant,
    ) -> Result<Result<Option<Granted>, Unreached>, Error> {
        let availability = &self.locker.availability;
        let (tokens, command) = match &self.set {
            Some(keys) => (protocol::grants(reply, keys.len()), "LOCK.MACQUIRE"),
            None => (
                protocol::grant(reply).map(|t| t.map(|t| vec![t])),
                "LOCK.ACQUIRE",
            ),
        };
        match tokens {
            Ok(Some(tokens)) => Ok(Ok(Some(Granted {
                tokens,
                conn,
                lease_start,
            }))),
            Ok(None) => {
                availability.answered();
                Ok(Ok(None))
            }
            Err(other) => Err(availability.error(format!(
                "not Redis with the redis-lock module ({command} answered {other})"
            ))),
        }
    }

    /// The guard of a grant; for a durable grant, once `n` replicas have it (else released and
    /// `None`; unavailable when `WAIT` fails or is silent, the hold given back in the background).
    async fn grant(self, owner: String, mut granted: Granted) -> Result<Option<LockGuard>, Error> {
        self.locker.availability.answered();
        let id = HoldId {
            key: self.key.clone(),
            owner,
            token: granted.tokens[0],
        };
        if let Some((n, timeout)) = self.replicas {
            match self.replicated(&mut granted.conn, n, timeout).await {
                Ok(true) => {}
                Ok(false) => {
                    self.locker.release_hold(&id, &HoldState::new()).await?;
                    return Ok(None);
                }
                Err(unavailable) => {
                    let locker = self.locker.clone();
                    tokio::spawn(async move { locker.release_hold(&id, &HoldState::new()).await });
                    return Err(unavailable);
                }
            }
        }
        let terms = Terms {
            ttl: self.ttl,
            watchdog: self.watchdog,
            session: self.session,
        };
        Ok(Some(LockGuard::start(self.locker, id, granted, terms)))
    }

    /// `WAIT n timeout`: whether `n` replicas have the grant; its reply is due by the timeout
    /// and min(1 s, bound).
    async fn replicated(
        &self,
        conn: &mut Conn,
        n: usize,
        timeout: Duration,
    ) -> Result<bool, Error> {
        let locker = &self.locker;
        let started = Instant::now();
        let wait = protocol::wait_replicas(n, timeout);
        let reply_by = started + timeout + locker.reply_grace();
        match timeout_at(reply_by.into(), wait.query_async::<usize>(conn)).await {
            Ok(Ok(acked)) => Ok(acked >= n),
            Ok(Err(e)) => Err(locker.settle(e).await),
            Err(_) => Err(locker.silent(started).await),
        }
    }
}
