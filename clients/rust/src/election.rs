//! Elections (rules 21 and 22 of docs/clients.md): a candidate campaigns in the key's FIFO
//! queue for a session hold kept by the watchdog, and leads while it holds it; its term is the
//! hold's fencing token. `leader()` asks who leads now; `observe()` (in `observe.rs`) tells
//! each change.

use std::future::Future;
use std::time::Duration;

use redis::{FromRedisValue, Value};

use crate::guard::LockGuard;
use crate::locker::Locker;
use crate::protocol::{self, FIRST_CURSOR};
use crate::Error;

/// An election's default lease (rule 21): a leader frozen or cut off is replaced this long after
/// its last renewal at the latest; one killed, at once (its session's connection closes).
pub const DEFAULT_ELECTION_TTL: Duration = Duration::from_secs(10);

/// A leader: who (its candidate's identity) and its term (the fencing token of its hold; a
/// later leader's term is always larger).
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Leader {
    pub identity: String,
    pub term: u64,
}

impl Locker {
    /// An election on `key` for a candidate named `identity` (its owner on the server: a host
    /// name, a pod name; each candidate its own: two candidates with one identity would share
    /// one hold). `campaign()` to lead, `leader()` and `observe()` to follow.
    pub fn election(&self, key: impl Into<String>, identity: impl Into<String>) -> Election {
        Election {
            locker: self.clone(),
            key: key.into(),
            identity: identity.into(),
            ttl: DEFAULT_ELECTION_TTL,
        }
    }
}

/// One candidate's view of an election (cheap to clone).
#[derive(Clone)]
pub struct Election {
    pub(crate) locker: Locker,
    pub(crate) key: String,
    identity: String,
    ttl: Duration,
}

impl std::fmt::Debug for Election {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Election")
            .field("key", &self.key)
            .field("identity", &self.identity)
            .field("ttl", &self.ttl)
            .finish()
    }
}

impl Election {
    /// The leader's lease (default 10 s; at least 1 ms): the watchdog renews it every ttl/3
    /// while the leader runs; a frozen leader is replaced when it ends.
    pub fn ttl(mut self, ttl: Duration) -> Self {
        self.ttl = ttl;
        self
    }

    pub fn key(&self) -> &str {
        &self.key
    }

    pub fn identity(&self) -> &str {
        &self.identity
    }

    /// Campaign until elected: `LOCK.ACQUIRE key identity ttl SESSION WAIT 0` in the key's FIFO
    /// queue (no polling), on a connection of its own that the leadership then lives on. Waits
    /// without limit while the server answers; bound it with `campaign_for`, or by dropping the
    /// future (`tokio::time::timeout`, `select!`): the waiting connection closes, which takes
    /// the candidate out of the queue. `Error::Unavailable` when the server cannot be reached
    /// within the locker's bound.
    pub async fn campaign(&self) -> Result<Leadership, Error> {
        loop {
            // A wait without limit answers nil only when unblocked (`CLIENT UNBLOCK`): again.
            if let Some(leadership) = self.try_campaign(None).await? {
                return Ok(leadership);
            }
        }
    }

    /// Campaign for up to `wait`: `Ok(None)` if not elected by then (the server ended the wait
    /// and took the candidate out of the queue). `Duration::ZERO` tries once.
    pub async fn campaign_for(&self, wait: Duration) -> Result<Option<Leadership>, Error> {
        self.try_campaign(Some(wait)).await
    }

    async fn try_campaign(&self, wait: Option<Duration>) -> Result<Option<Leadership>, Error> {
        let builder = self.locker.lock(&self.key).owner(&self.identity);
        let builder = builder.ttl(self.ttl).session();
        let builder = match wait {
            Some(wait) => builder.wait(wait),
            None => builder.wait_forever(),
        };
        let guard = builder.acquire().await?;
        Ok(guard.map(|guard| Leadership { guard }))
    }

    /// Who leads now (one `LOCK.WATCH key`): `None` when nobody holds the key (or what holds
    /// it is not a leader: a plain string, shared holds).
    pub async fn leader(&self) -> Result<Option<Leader>, Error> {
        let reply: Value = self
            .locker
            .call(&protocol::watch(&self.key, FIRST_CURSOR, None), true)
            .await?;
        match protocol::watched(&reply) {
            Ok(Some(watched)) => Ok(leader_of(watched.exclusive)),
            Ok(None) => Ok(None), // never for AFTER 0: nobody holds it
            Err(other) => Err(self.locker.availability.error(format!(
                "not Redis with the redis-lock module (LOCK.WATCH answered {other})"
            ))),
        }
    }
}

/// The leader an exclusive holder (owner, token) is.
pub(crate) fn leader_of(exclusive: Option<(String, u64)>) -> Option<Leader> {
    exclusive.map(|(identity, term)| Leader { identity, term })
}

/// Leading: a session hold on the election's key, renewed by the watchdog on its own
/// connection. Resign with `resign().await`; dropped, it resigns in the background (and a
/// process that dies resigns as its connection closes). `lost()` resolves, once, when the
/// leadership is lost before that (a renewal answered 0, the lease ran out while the server
/// could not be reached or this process was frozen, the session's connection broke).
#[derive(Debug)]
pub struct Leadership {
    guard: LockGuard,
}

impl Leadership {
    /// The term: the hold's fencing token, larger than every earlier leader's. Pass it to
    /// fenced writes (`run`, `fence::begin(&pool, leadership.guard())`).
    pub fn term(&self) -> u64 {
        self.guard.token()
    }

    pub fn identity(&self) -> &str {
        self.guard.owner()
    }

    pub fn key(&self) -> &str {
        self.guard.key()
    }

    /// Resolves with the reason when leadership is lost (rule 8's reasons); pending while it
    /// lasts. Every such future resolves with the same reason; it does not borrow the
    /// leadership (spawn it, `select!` on it beside the work).
    pub fn lost(&self) -> impl Future<Output = String> + Send + 'static {
        self.guard.lost()
    }

    /// Whether leadership was lost (`lost_reason` says why).
    pub fn is_lost(&self) -> bool {
        self.guard.is_lost()
    }

    pub fn lost_reason(&self) -> Option<String> {
        self.guard.lost_reason()
    }

    /// A fenced write: `LOCK.GUARD key term <cmd>` runs `cmd` only while this term is the
    /// live leader's (`Error::Stale` otherwise, at once once the loss is known).
    pub async fn run<T: FromRedisValue>(&self, cmd: &redis::Cmd) -> Result<T, Error> {
        self.guard.run(cmd).await
    }

    /// The hold behind the leadership, for `fence::begin` and the rest of `LockGuard`'s API.
    pub fn guard(&self) -> &LockGuard {
        &self.guard
    }

    /// Step down: the watchdog stops, the hold is released, and the next candidate in the
    /// queue leads at once. `Ok(false)` if leadership had been lost already.
    pub async fn resign(self) -> Result<bool, Error> {
        self.guard.release().await
    }
}
