//! Lock sets (rule 23 of docs/clients.md): several keys taken in one step or none
//! (`LOCK.MACQUIRE`), then one hold per key in the locker's renewal loop, sharing one state:
//! the set is lost, once, when any member is, and the members still held are then released
//! (`LOCK.MRELEASE`).

use std::collections::HashSet;
use std::future::Future;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use redis::FromRedisValue;

use crate::acquire::LockBuilder;
use crate::cluster::Conn;
use crate::hold::HoldState;
use crate::locker::Locker;
use crate::protocol::{self, check_ttl, reason, HoldId, MAX_SET_SIZE};
use crate::renewal::{ExtendTurn, Lease, Renewals};
use crate::schedule::Ticket;
use crate::Error;

impl Locker {
    /// A set of locks on `keys`, taken together or not at all (`LOCK.MACQUIRE`): set it up with
    /// the builder, then `acquire().await`. Two sets naming the same keys in any order never
    /// deadlock: a waiting set queues in every key's queue at once, so the keys need no sorting.
    pub fn lock_set<I, K>(&self, keys: I) -> SetBuilder
    where
        I: IntoIterator<Item = K>,
        K: Into<String>,
    {
        let keys: Vec<String> = keys.into_iter().map(Into::into).collect();
        let first = keys.first().cloned().unwrap_or_default();
        let mut inner = LockBuilder::new(self.clone(), first);
        inner.set = Some(keys);
        SetBuilder { inner }
    }
}

/// How to take a lock set: the builder of `LockBuilder` for every key at once (one ttl, one
/// owner, every key exclusive or every key shared).
pub struct SetBuilder {
    inner: LockBuilder,
}

impl SetBuilder {
    /// Every member's lease (default 30 s; at least 1 ms); the watchdog renews each every ttl/3.
    pub fn ttl(mut self, ttl: Duration) -> Self {
        self.inner = self.inner.ttl(ttl);
        self
    }
    /// Wait in the keys' queues up to `timeout`; `Duration::ZERO` tries once. Without it,
    /// `acquire` waits without limit.
    pub fn wait(mut self, timeout: Duration) -> Self {
        self.inner = self.inner.wait(timeout);
        self
    }
    /// Wait without limit (the default).
    pub fn wait_forever(mut self) -> Self {
        self.inner = self.inner.wait_forever();
        self
    }
    /// Every key shared (read holds).
    pub fn shared(mut self) -> Self {
        self.inner = self.inner.shared();
        self
    }
    /// Every member lives on one connection of the set's own and ends when it closes.
    pub fn session(mut self) -> Self {
        self.inner = self.inner.session();
        self
    }
    /// Renew the leases while held (default true).
    pub fn watchdog(mut self, on: bool) -> Self {
        self.inner = self.inner.watchdog(on);
        self
    }
    /// The owner (default: a fresh UUID).
    pub fn owner(mut self, owner: impl Into<String>) -> Self {
        self.inner = self.inner.owner(owner);
        self
    }

    /// No keys, a key twice, more than 64 keys: refused before anything is sent (rule 23).
    fn check(&self) -> Result<(), Error> {
        let keys = self.inner.set.as_deref().unwrap_or_default();
        if keys.is_empty() {
            return Err(Error::InvalidArgument("a lock set needs keys".to_string()));
        }
        if keys.len() > MAX_SET_SIZE {
            return Err(Error::InvalidArgument(format!(
                "{} keys: a lock set takes 1 to {MAX_SET_SIZE}",
                keys.len()
            )));
        }
        let mut seen = HashSet::with_capacity(keys.len());
        if let Some(twice) = keys.iter().find(|k| !seen.insert(k.as_str())) {
            return Err(Error::InvalidArgument(format!(
                "the key {twice} appears twice in the set"
            )));
        }
        Ok(())
    }

    /// Take every key: `Some(guard)` when granted, `None` when not (a key busy when trying
    /// once, nothing taken; or the wait ended). As `LockBuilder::acquire` otherwise: retried with
    /// the same owner (the server answers a retry with the same tokens), `Error::Unavailable`
    /// within the bound, `Error::Deadlock` when the owner holds some keys while others are busy
    /// and would wait, `Error::CrossSlot` on a cluster when the keys are in several slots.
    pub async fn acquire(self) -> Result<Option<SetGuard>, Error> {
        self.check()?;
        let Some((owner, granted)) = self.inner.take().await? else {
            return Ok(None);
        };
        self.inner.locker.availability.answered();
        let b = self.inner;
        let keys = b.set.unwrap_or_default();
        Ok(Some(SetGuard::start(
            b.locker,
            keys,
            owner,
            granted.tokens,
            granted.conn,
            b.ttl,
            granted.lease_start,
            b.watchdog,
            b.session,
        )))
    }
}

/// The members of a set as the release after a loss needs them.
struct Members {
    locker: Locker,
    renewals: Renewals,
    owner: String,
    keys: Vec<String>,
    tickets: Vec<Ticket>,
    /// Released (by the guard or after a loss): nothing more to release.
    done: AtomicBool,
}

impl Members {
    /// Take every member out of the loop, once; the keys of those still in it.
    fn leave(&self) -> Option<Vec<String>> {
        if self.done.swap(true, Ordering::SeqCst) {
            return None;
        }
        let held = self.keys.iter().zip(&self.tickets);
        let held = held.filter(|(_, t)| self.renewals.remove(**t));
        Some(held.map(|(k, _)| k.clone()).collect())
    }

    /// After a loss: the members still held leave the loop and are released, in a task of
    /// their own (the loss may be marked under the loop's lock; best effort: their leases end
    /// by themselves otherwise).
    fn release_rest(self: &Arc<Self>) {
        let Ok(handle) = tokio::runtime::Handle::try_current() else {
            return;
        };
        let members = self.clone();
        handle.spawn(async move {
            let Some(keys) = members.leave() else { return };
            if !keys.is_empty() {
                let cmd = protocol::mrelease(&keys, &members.owner);
                let _: Result<i64, Error> = members.locker.call(&cmd, true).await;
            }
        });
    }
}

/// A granted lock set: every key's token, one loss for all, one release. Release it with
/// `release().await`; dropped without it, it is released in the background.
pub struct SetGuard {
    members: Arc<Members>,
    tokens: Vec<u64>,
    state: Arc<HoldState>,
    /// For a session set: the connection its members live on (closing it ends them).
    session: Option<Conn>,
    /// Its extends go one at a time.
    extends: ExtendTurn,
    released: bool,
}

impl std::fmt::Debug for SetGuard {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SetGuard")
            .field("keys", &self.members.keys)
            .field("owner", &self.members.owner)
            .field("tokens", &self.tokens)
            .finish()
    }
}

impl SetGuard {
    #[allow(clippy::too_many_arguments)]
    fn start(
        locker: Locker,
        keys: Vec<String>,
        owner: String,
        tokens: Vec<u64>,
        conn: Conn,
        ttl: Duration,
        start: Instant,
        watchdog: bool,
        session: bool,
    ) -> Self {
        let state = HoldState::set();
        // One loop for every member: the locker's, or the session's own.
        let (renewals, session) = if session {
            let own = Renewals::session(conn.clone(), locker.availability.clone());
            (own, Some(conn))
        } else {
            (locker.renewals.clone(), None)
        };
        let tickets = keys
            .iter()
            .zip(&tokens)
            .map(|(key, &token)| {
                let id = HoldId {
                    key: key.clone(),
                    owner: owner.clone(),
                    token,
                };
                let lease = Lease {
                    ttl,
                    start,
                    renew: watchdog,
                };
                renewals.add(id, state.clone(), lease)
            })
            .collect();
        let members = Arc::new(Members {
            locker,
            renewals,
            owner,
            keys,
            tickets,
            done: AtomicBool::new(false),
        });
        let weak = Arc::downgrade(&members);
        state.when_lost(Box::new(move || {
            if let Some(members) = weak.upgrade() {
                members.release_rest();
            }
        }));
        SetGuard {
            members,
            tokens,
            state,
            session,
            extends: ExtendTurn::default(),
            released: false,
        }
    }

    /// The keys, in the order given.
    pub fn keys(&self) -> &[String] {
        &self.members.keys
    }

    pub fn owner(&self) -> &str {
        &self.members.owner
    }

    /// The fencing tokens, one per key in the order given.
    pub fn tokens(&self) -> &[u64] {
        &self.tokens
    }

    /// The fencing token of `key`, or `None` for a key not in the set.
    pub fn token(&self, key: &str) -> Option<u64> {
        let i = self.members.keys.iter().position(|k| k == key)?;
        Some(self.tokens[i])
    }

    /// Why the set was lost (`<key>: <reason>`), if it was.
    pub fn lost_reason(&self) -> Option<String> {
        self.state.lost_reason()
    }

    /// Whether the set was lost (`lost_reason` says why).
    pub fn is_lost(&self) -> bool {
        self.state.lost_reason().is_some()
    }

    /// Resolves once, with the reason naming the key, when any member is lost (or the release
    /// found one gone); the members still held are then released. Pending forever while the set
    /// lives; does not borrow the guard.
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

    /// `LOCK.GUARD key <key's token> <cmd>`: `cmd` runs only while `key`'s hold is live
    /// (`Error::Stale` otherwise, at once when the set is known lost). A key not in the set is
    /// `Error::InvalidArgument`. Not repeated after a broken link: `Error::Unavailable`.
    pub async fn run<T: FromRedisValue>(&self, key: &str, cmd: &redis::Cmd) -> Result<T, Error> {
        let Some(token) = self.token(key) else {
            return Err(Error::InvalidArgument(format!(
                "{key} is not a key of the set"
            )));
        };
        if let Some(reason) = self.state.lost_reason() {
            return Err(Error::Stale(format!("the set was lost: {reason}")));
        }
        let guarded = protocol::guard(key, token, cmd);
        self.members.locker.call(&guarded, false).await
    }

    /// `LOCK.EXTEND key owner ttl TOKEN token` for every member now (rule 20): `Ok(true)` only
    /// if every one was live; a member answered 0 loses the set (`<key>: the lease ran out
    /// before it was renewed`), and `Ok(false)` without sending anything once the set is known
    /// lost. Extends of one set go one at a time, every member's in turn (as
    /// `LockGuard::extend`'s). Each member's extend is sent after its renewal in flight by the
    /// old ttl, if any, is answered. A ttl under 1 ms is `Error::InvalidArgument`. A
    /// member's extend that fails as `Error::Unavailable` may have run: its lease is counted as
    /// ending no later than `ttl` from when it was sent, as `LockGuard::extend` counts it; so
    /// is one whose answer was not taken because this future was dropped.
    pub async fn extend(&self, ttl: Duration) -> Result<bool, Error> {
        check_ttl(ttl)?;
        if !self.state.is_held() {
            return Ok(false);
        }
        let _turn = self.members.locker.extend_turn(&self.extends).await?;
        let m = &self.members;
        for ((key, &token), &ticket) in m.keys.iter().zip(&self.tokens).zip(&m.tickets) {
            if !self.state.is_held() {
                return Ok(false);
            }
            m.locker.before_extend(&m.renewals, ticket, ttl).await?;
            if !self.state.is_held() {
                return Ok(false);
            }
            let id = HoldId {
                key: key.clone(),
                owner: m.owner.clone(),
                token,
            };
            let extend = m.renewals.extend_sent(ticket, ttl);
            let sent = extend.sent;
            let live: i64 =
                extend.answered(m.locker.call(&protocol::extend(&id, ttl), true).await)?;
            if !protocol::was_live(live) {
                if m.renewals.remove(ticket) {
                    self.state.lose(key, reason::RAN_OUT.to_string());
                }
                return Ok(false);
            }
            m.renewals.extended(ticket, sent, ttl);
        }
        Ok(self.state.is_held())
    }

    /// Release every member (`LOCK.MRELEASE`): `Ok(true)` only if every one was still held.
    /// The members leave the renewal loop first. `Ok(false)` at once, nothing sent, for a set
    /// known lost; a release that finds a member gone answers `Ok(false)` and marks the set lost.
    pub async fn release(mut self) -> Result<bool, Error> {
        self.released = true;
        self.members.leave();
        let released = self.release_on_server().await;
        self.session = None;
        released
    }

    async fn release_on_server(&self) -> Result<bool, Error> {
        let (m, state) = (&self.members, &self.state);
        if !state.is_held() {
            return Ok(false);
        }
        let released: i64 = m
            .locker
            .call(&protocol::mrelease(&m.keys, &m.owner), true)
            .await?;
        if usize::try_from(released).is_ok_and(|n| n == m.keys.len()) {
            state.released();
            return Ok(true);
        }
        let keys = m.keys.join(", ");
        state.mark_lost(format!("{keys}: {}", reason::GONE_WHEN_RELEASED));
        Ok(false)
    }
}

impl Drop for SetGuard {
    fn drop(&mut self) {
        if self.released {
            return;
        }
        self.members.leave();
        if let Ok(handle) = tokio::runtime::Handle::try_current() {
            let (members, state) = (self.members.clone(), self.state.clone());
            let session = self.session.take();
            handle.spawn(async move {
                if state.is_held() {
                    let cmd = protocol::mrelease(&members.keys, &members.owner);
                    let _: Result<i64, Error> = members.locker.call(&cmd, true).await;
                    state.released();
                }
                drop(session);
            });
        }
    }
}
