//! The pure lock state machine: the holds of one lock key (exclusive, shared, or permits of a
//! semaphore), each with its owner, fencing token and lease, and what each command does to them.
//!
//! No FFI here. The Redis layer keeps the holds in the keyspace (they are data: persisted and
//! replicated) and the queues beside them (`queue`, `registry`: waiters are connections, neither
//! persisted nor replicated), and asks these functions what each command does.
//!
//! A stored state may contain holds whose lease ran out; every decision looks only at the live
//! ones (`now < deadline`), and the states it returns contain only live holds.

use crate::core::error::LockError;
use crate::core::owner::Owner;

/// Unix time or a duration, in milliseconds.
pub type Millis = i64;
/// A fencing token: positive, strictly increasing per server (see `fencing`).
pub type Token = u64;

/// One hold: who, under which token, until when.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Holder {
    pub owner: Owner,
    pub token: Token,
    /// The lease ends at this unix-ms instant: the hold is live while `now < deadline`.
    pub deadline: Millis,
    /// When this owner was granted the hold (unix ms); renewals and extensions keep it.
    pub granted: Millis,
}

impl Holder {
    pub fn is_live(&self, now: Millis) -> bool {
        now < self.deadline
    }

    /// Milliseconds left on the lease (0 once it ran out).
    pub fn remaining(&self, now: Millis) -> Millis {
        self.deadline.saturating_sub(now).max(0)
    }

    /// Milliseconds since the grant.
    pub fn held_for(&self, now: Millis) -> Millis {
        now.saturating_sub(self.granted).max(0)
    }

    fn with_deadline(&self, deadline: Millis) -> Holder {
        Holder {
            deadline,
            ..self.clone()
        }
    }
}

/// A semaphore hold: its holder and how many permits it took.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Permit {
    pub holder: Holder,
    pub n: u32,
}

/// Every hold of one lock key, all of one kind.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum LockState {
    /// One exclusive hold.
    Exclusive(Holder),
    /// Read holds (one or more).
    Shared(Vec<Holder>),
    /// A counting semaphore of `limit` permits, and who holds how many.
    Semaphore { limit: u32, holds: Vec<Permit> },
}

/// What a request asks for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Want {
    Exclusive,
    Shared,
    /// `n` permits of a semaphore of `limit` (1 <= n <= limit, checked by the parser).
    Permits {
        limit: u32,
        n: u32,
    },
}

/// The kind of a key: a lock (held exclusive or shared) or a semaphore of some size.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    Lock,
    Semaphore { limit: u32 },
}

impl Want {
    pub fn kind(self) -> Kind {
        match self {
            Want::Exclusive | Want::Shared => Kind::Lock,
            Want::Permits { limit, .. } => Kind::Semaphore { limit },
        }
    }
}

/// The holds of a state, with the permits each takes (1 for locks).
pub struct Holds<'a> {
    single: Option<&'a Holder>,
    shared: std::slice::Iter<'a, Holder>,
    permits: std::slice::Iter<'a, Permit>,
}

impl<'a> Iterator for Holds<'a> {
    type Item = (&'a Holder, u32);

    fn next(&mut self) -> Option<Self::Item> {
        if let Some(h) = self.single.take() {
            return Some((h, 1));
        }
        if let Some(h) = self.shared.next() {
            return Some((h, 1));
        }
        self.permits.next().map(|p| (&p.holder, p.n))
    }
}

impl LockState {
    /// A state of one fresh hold for `want`.
    pub fn first(want: Want, holder: Holder) -> LockState {
        match want {
            Want::Exclusive => LockState::Exclusive(holder),
            Want::Shared => LockState::Shared(vec![holder]),
            Want::Permits { limit, n } => LockState::Semaphore {
                limit,
                holds: vec![Permit { holder, n }],
            },
        }
    }

    pub fn kind(&self) -> Kind {
        match self {
            LockState::Exclusive(_) | LockState::Shared(_) => Kind::Lock,
            LockState::Semaphore { limit, .. } => Kind::Semaphore { limit: *limit },
        }
    }

    /// The name `LOCK.INFO` shows.
    pub fn mode_name(&self) -> &'static str {
        match self {
            LockState::Exclusive(_) => "exclusive",
            LockState::Shared(_) => "shared",
            LockState::Semaphore { .. } => "semaphore",
        }
    }

    /// Every hold (live or not), with its permits.
    pub fn holds(&self) -> Holds<'_> {
        let (single, shared, permits): (_, &[Holder], &[Permit]) = match self {
            LockState::Exclusive(h) => (Some(h), &[], &[]),
            LockState::Shared(v) => (None, v, &[]),
            LockState::Semaphore { holds, .. } => (None, &[], holds),
        };
        Holds {
            single,
            shared: shared.iter(),
            permits: permits.iter(),
        }
    }

    pub fn any_live(&self, now: Millis) -> bool {
        self.holds().any(|(h, _)| h.is_live(now))
    }

    pub fn live_count(&self, now: Millis) -> usize {
        self.holds().filter(|(h, _)| h.is_live(now)).count()
    }

    /// Whether some hold's lease ran out (it is still stored).
    pub fn has_expired(&self, now: Millis) -> bool {
        self.holds().any(|(h, _)| !h.is_live(now))
    }

    /// The earliest deadline of a live hold: when the state next changes on its own.
    pub fn next_deadline(&self, now: Millis) -> Option<Millis> {
        self.holds()
            .filter(|(h, _)| h.is_live(now))
            .map(|(h, _)| h.deadline)
            .min()
    }

    /// The earliest deadline of any hold, live or not: when the lock next needs a look.
    pub fn first_deadline(&self) -> Millis {
        self.holds().map(|(h, _)| h.deadline).min().unwrap_or(0)
    }

    /// The latest deadline of any hold: when the last lease ends.
    pub fn last_deadline(&self) -> Millis {
        self.holds().map(|(h, _)| h.deadline).max().unwrap_or(0)
    }

    /// The bytes a value takes (MEMORY USAGE): the state, its holds' vector, and owners kept
    /// on the heap.
    pub fn heap_size(&self) -> usize {
        let holds = match self {
            LockState::Exclusive(_) => 0,
            LockState::Shared(v) => v.capacity() * std::mem::size_of::<Holder>(),
            LockState::Semaphore { holds, .. } => holds.capacity() * std::mem::size_of::<Permit>(),
        };
        let owners: usize = self.holds().map(|(h, _)| h.owner.heap_size()).sum();
        std::mem::size_of::<LockState>() + holds + owners
    }

    /// Permits held by live holds (1 per hold for locks).
    pub fn permits_in_use(&self, now: Millis) -> u32 {
        self.holds()
            .filter(|(h, _)| h.is_live(now))
            .fold(0u32, |sum, (_, n)| sum.saturating_add(n))
    }

    /// `owner`'s live hold and its permits.
    pub fn live_hold_of(&self, owner: &[u8], now: Millis) -> Option<(&Holder, u32)> {
        self.holds()
            .find(|(h, _)| h.is_live(now) && h.owner.matches(owner))
    }

    /// The state keeping only the live holds that `keep` accepts, each passed through `map`
    /// (None when nothing is left).
    fn rebuilt(
        &self,
        now: Millis,
        keep: impl Fn(&Holder) -> bool,
        map: impl Fn(&Holder) -> Holder,
    ) -> Option<LockState> {
        let alive = |h: &&Holder| h.is_live(now) && keep(h);
        match self {
            LockState::Exclusive(h) => Some(h).filter(alive).map(|h| LockState::Exclusive(map(h))),
            LockState::Shared(v) => {
                let kept: Vec<Holder> = v.iter().filter(alive).map(&map).collect();
                (!kept.is_empty()).then_some(LockState::Shared(kept))
            }
            LockState::Semaphore { limit, holds } => {
                let kept: Vec<Permit> = holds
                    .iter()
                    .filter(|p| alive(&&p.holder))
                    .map(|p| Permit {
                        holder: map(&p.holder),
                        n: p.n,
                    })
                    .collect();
                (!kept.is_empty()).then_some(LockState::Semaphore {
                    limit: *limit,
                    holds: kept,
                })
            }
        }
    }

    /// Only the live holds (None when none is left).
    pub fn live(&self, now: Millis) -> Option<LockState> {
        self.rebuilt(now, |_| true, Holder::clone)
    }

    /// This state (already live-only) with one more hold for `want`. The kinds must agree.
    pub fn with(self, want: Want, holder: Holder) -> LockState {
        match (self, want) {
            (LockState::Shared(mut v), Want::Shared) => {
                v.push(holder);
                LockState::Shared(v)
            }
            (LockState::Semaphore { limit, mut holds }, Want::Permits { n, .. }) => {
                holds.push(Permit { holder, n });
                LockState::Semaphore { limit, holds }
            }
            // `fits` never lets another kind in beside live holds.
            (_, want) => LockState::first(want, holder),
        }
    }
}

/// The live holds of a stored state (None when it has none).
pub fn live(state: Option<&LockState>, now: Millis) -> Option<&LockState> {
    state.filter(|s| s.any_live(now))
}

/// The deadline of a lease of `ttl` ms that starts `now`; an error if it does not fit.
pub fn deadline(now: Millis, ttl: Millis) -> Result<Millis, LockError> {
    if ttl <= 0 {
        return Err(LockError::TtlNotPositive);
    }
    now.checked_add(ttl).ok_or(LockError::TtlTooLarge)
}

/// Whether a new hold of `owner` for `want` fits beside the live holds of `state` (kind,
/// exclusivity, permits; an owner already holding waits for that hold to end).
pub fn fits(state: Option<&LockState>, owner: &[u8], want: Want, now: Millis) -> bool {
    let Some(state) = live(state, now) else {
        return true;
    };
    if state.live_hold_of(owner, now).is_some() {
        return false;
    }
    match (state, want) {
        (LockState::Shared(_), Want::Shared) => true,
        (LockState::Semaphore { limit, .. }, Want::Permits { limit: l, n }) => {
            *limit == l && state.permits_in_use(now).saturating_add(n) <= l
        }
        _ => false,
    }
}

/// A request to acquire.
#[derive(Clone, Copy, Debug)]
pub struct Request<'a> {
    pub owner: &'a [u8],
    pub want: Want,
    pub ttl: Millis,
}

/// What an acquire attempt does.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Acquire {
    /// A new hold with a fresh token (on a free key, beside compatible holds, or an upgrade).
    Granted { state: LockState, token: Token },
    /// The caller already held it in this mode (or downgraded): same token, the lease restarts.
    Renewed { state: LockState, token: Token },
    /// It does not fit now, or others wait first.
    Busy,
}

/// Refuse a request of another kind than the key's live holds: a plain or `SHARED` request on a
/// semaphore (or the reverse), or a semaphore of another size.
fn check_kind(state: &LockState, want: Want) -> Result<(), LockError> {
    match (state.kind(), want.kind()) {
        (Kind::Semaphore { limit }, Kind::Semaphore { limit: l }) if limit != l => {
            Err(LockError::LimitMismatch)
        }
        (Kind::Lock, Kind::Lock) | (Kind::Semaphore { .. }, Kind::Semaphore { .. }) => Ok(()),
        _ => Err(LockError::WrongKind),
    }
}

/// Decide `req`. `queued`: others wait for this key, so a newcomer may not take it first (the
/// queue is fair). `max_holders` bounds the holds of one key. `issue_token` is called only when
/// a new hold is made.
pub fn acquire(
    current: Option<&LockState>,
    queued: bool,
    req: &Request,
    now: Millis,
    max_holders: usize,
    issue_token: impl FnOnce() -> Option<Token>,
) -> Result<Acquire, LockError> {
    let deadline = deadline(now, req.ttl)?;
    let current = live(current, now);
    if let Some(state) = current {
        check_kind(state, req.want)?;
        if let Some((mine, n)) = state.live_hold_of(req.owner, now) {
            return change_own_hold(state, mine, n, req, deadline, now, issue_token);
        }
    }
    if queued || !fits(current, req.owner, req.want, now) {
        return Ok(Acquire::Busy);
    }
    if current.is_some_and(|s| s.live_count(now) >= max_holders) {
        return Err(LockError::TooManyHolders);
    }
    let token = issue_token().ok_or(LockError::TokensExhausted)?;
    let holder = Holder {
        owner: Owner::new(req.owner),
        token,
        deadline,
        granted: now,
    };
    let state = match current.and_then(|s| s.live(now)) {
        Some(live) => live.with(req.want, holder),
        None => LockState::first(req.want, holder),
    };
    Ok(Acquire::Granted { state, token })
}

/// The owner of `mine` asks again: renew in the same mode, downgrade, or upgrade.
fn change_own_hold(
    state: &LockState,
    mine: &Holder,
    n: u32,
    req: &Request,
    deadline: Millis,
    now: Millis,
    issue_token: impl FnOnce() -> Option<Token>,
) -> Result<Acquire, LockError> {
    let renewed = |state: Option<LockState>| {
        state
            .map(|state| Acquire::Renewed {
                state,
                token: mine.token,
            })
            .ok_or(LockError::Internal)
    };
    let extend_mine = || {
        state.rebuilt(
            now,
            |_| true,
            |h| {
                if h.token == mine.token {
                    h.with_deadline(deadline)
                } else {
                    h.clone()
                }
            },
        )
    };
    match (state, req.want) {
        (LockState::Exclusive(_), Want::Exclusive) | (LockState::Shared(_), Want::Shared) => {
            renewed(extend_mine())
        }
        (LockState::Semaphore { .. }, Want::Permits { n: asked, .. }) if asked == n => {
            renewed(extend_mine())
        }
        (LockState::Semaphore { .. }, Want::Permits { .. }) => Err(LockError::PermitsHeld),
        // Downgrade in place: same token; shared waiters at the head follow (settling).
        (LockState::Exclusive(h), Want::Shared) => {
            renewed(Some(LockState::Shared(vec![h.with_deadline(deadline)])))
        }
        // Upgrade: only the sole reader may, at once and with a fresh token; waiting for the
        // other readers could deadlock two upgraders.
        (LockState::Shared(_), Want::Exclusive) => {
            if state.live_count(now) != 1 {
                return Err(LockError::Deadlock);
            }
            let token = issue_token().ok_or(LockError::TokensExhausted)?;
            Ok(Acquire::Granted {
                state: LockState::Exclusive(Holder {
                    owner: mine.owner.clone(),
                    token,
                    deadline,
                    granted: now,
                }),
                token,
            })
        }
        _ => Err(LockError::WrongKind), // check_kind ruled these out
    }
}

/// What is left when `owner` releases: `None` if `owner` has no live hold (nothing changes),
/// `Some(None)` if the key is then free, `Some(Some(state))` with the other live holds.
/// With `only`, the owner's hold must have exactly that token (a late retry of an old release
/// never frees a newer hold of the same owner).
pub fn release(
    current: Option<&LockState>,
    owner: &[u8],
    only: Option<Token>,
    now: Millis,
) -> Option<Option<LockState>> {
    let state = live(current, now)?;
    let (mine, _) = state.live_hold_of(owner, now)?;
    let token = mine.token;
    if only.is_some_and(|t| t != token) {
        return None;
    }
    Some(state.rebuilt(now, |h| h.token != token, Holder::clone))
}

/// Replaying a release the master made (a replica, the AOF): the exclusive hold this release
/// frees, if `current` is `owner`'s (with token `only`, if given), whatever this server's clock
/// says. The master sends a release itself only when it freed an exclusive lock that way.
pub fn replayed_release<'a>(
    current: Option<&'a LockState>,
    owner: &[u8],
    only: Option<Token>,
) -> Option<&'a Holder> {
    match current {
        Some(LockState::Exclusive(h))
            if h.owner.matches(owner) && only.is_none_or(|t| t == h.token) =>
        {
            Some(h)
        }
        _ => None,
    }
}

/// The live holds of `state` without the one of `token` (None when nothing is left).
pub fn without(state: &LockState, token: Token, now: Millis) -> Option<LockState> {
    state.rebuilt(now, |h| h.token != token, Holder::clone)
}

/// The state with `owner`'s lease ending `ttl` ms from now, if `owner` holds.
pub fn extend(
    current: Option<&LockState>,
    owner: &[u8],
    only: Option<Token>,
    ttl: Millis,
    now: Millis,
) -> Result<Option<LockState>, LockError> {
    let deadline = deadline(now, ttl)?;
    let Some(state) = live(current, now) else {
        return Ok(None);
    };
    let Some((mine, _)) = state.live_hold_of(owner, now) else {
        return Ok(None);
    };
    if only.is_some_and(|t| t != mine.token) {
        return Ok(None);
    }
    let token = mine.token;
    Ok(state.rebuilt(
        now,
        |_| true,
        |h| {
            if h.token == token {
                h.with_deadline(deadline)
            } else {
                h.clone()
            }
        },
    ))
}

/// The live exclusive holder's token (nil for a free key, shared holds or a semaphore).
pub fn fence(current: Option<&LockState>, now: Millis) -> Option<Token> {
    match live(current, now)? {
        LockState::Exclusive(h) => Some(h.token),
        _ => None,
    }
}

/// Whether `token` is the token of the live exclusive hold (what `LOCK.GUARD` requires).
pub fn is_exclusive_token(current: Option<&LockState>, token: Token, now: Millis) -> bool {
    fence(current, now) == Some(token)
}

/// Whether `token` belongs to a live hold of any mode.
pub fn token_is_current(current: Option<&LockState>, token: Token, now: Millis) -> bool {
    live(current, now).is_some_and(|s| s.holds().any(|(h, _)| h.is_live(now) && h.token == token))
}

/// Holds of `before` that are not in `after` (by token): they ended.
pub fn ended<'a>(
    before: &'a LockState,
    after: Option<&LockState>,
) -> impl Iterator<Item = &'a Holder> {
    let kept = Kept::of(after);
    before
        .holds()
        .map(|(h, _)| h)
        .filter(move |h| !kept.contains(h.token))
}

/// The tokens a state keeps, looked up without allocating for one hold (every exclusive lock,
/// on every write) and in O(log H) for many.
enum Kept {
    One(Option<Token>),
    Many(Vec<Token>),
}

impl Kept {
    fn of(state: Option<&LockState>) -> Kept {
        match state {
            None => Kept::One(None),
            Some(LockState::Exclusive(h)) => Kept::One(Some(h.token)),
            Some(s) => {
                let mut tokens: Vec<Token> = s.holds().map(|(h, _)| h.token).collect();
                tokens.sort_unstable();
                Kept::Many(tokens)
            }
        }
    }

    fn contains(&self, token: Token) -> bool {
        match self {
            Kept::One(t) => *t == Some(token),
            Kept::Many(tokens) => tokens.binary_search(&token).is_ok(),
        }
    }
}

/// A holder for tests: `owner`'s hold under `token` until `deadline`, granted at 0.
#[cfg(test)]
pub(crate) fn holder(owner: &str, token: Token, deadline: Millis) -> Holder {
    Holder {
        owner: Owner::new(owner.as_bytes()),
        token,
        deadline,
        granted: 0,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::core::fencing::TokenSource;
    use proptest::prelude::*;

    fn req(owner: &str, want: Want, ttl: Millis) -> Request<'_> {
        Request {
            owner: owner.as_bytes(),
            want,
            ttl,
        }
    }

    const X: Want = Want::Exclusive;
    const S: Want = Want::Shared;

    fn exclusive(owner: &str, token: Token, deadline: Millis) -> LockState {
        LockState::Exclusive(holder(owner, token, deadline))
    }

    #[test]
    fn a_state_holding_one_exclusive_hold_stays_small() {
        // The README's memory per lock: one exclusive hold costs what one holder did.
        assert_eq!(std::mem::size_of::<Holder>(), 64);
        assert_eq!(
            std::mem::size_of::<LockState>(),
            64,
            "the enum tag fits in the owner's niche"
        );
    }

    #[test]
    fn a_replayed_release_frees_the_named_exclusive_hold_whatever_the_clock() {
        let held = exclusive("a", 7, 1_000);
        // Long after the deadline here: the master released it while it was live.
        assert!(release(Some(&held), b"a", None, 5_000).is_none());
        assert_eq!(
            replayed_release(Some(&held), b"a", None).map(|h| h.token),
            Some(7)
        );
        assert!(replayed_release(Some(&held), b"a", Some(7)).is_some());
        assert!(replayed_release(Some(&held), b"a", Some(8)).is_none());
        assert!(replayed_release(Some(&held), b"b", None).is_none());
        assert!(replayed_release(None, b"a", None).is_none());
        let shared = LockState::Shared(vec![holder("a", 7, 1_000)]);
        assert!(replayed_release(Some(&shared), b"a", None).is_none());
    }

    #[test]
    fn free_lock_is_granted_with_a_fresh_token() {
        let got = acquire(None, false, &req("a", X, 100), 1_000, 10, || Some(7)).unwrap();
        let expected = LockState::Exclusive(Holder {
            granted: 1_000,
            ..holder("a", 7, 1_100)
        });
        assert_eq!(
            got,
            Acquire::Granted {
                state: expected,
                token: 7
            }
        );
    }

    #[test]
    fn without_a_token_left_nothing_is_granted() {
        assert_eq!(
            acquire(None, false, &req("a", X, 100), 1_000, 10, || None),
            Err(LockError::TokensExhausted)
        );
    }

    #[test]
    fn same_owner_renews_with_the_same_token() {
        let s = exclusive("a", 7, 1_100);
        let got = acquire(
            Some(&s),
            true,
            &req("a", X, 500),
            1_050,
            10,
            || unreachable!(),
        )
        .unwrap();
        assert_eq!(
            got,
            Acquire::Renewed {
                state: exclusive("a", 7, 1_550),
                token: 7
            }
        );
    }

    #[test]
    fn other_owner_is_busy_until_the_deadline() {
        let s = exclusive("a", 7, 1_100);
        assert_eq!(
            acquire(Some(&s), false, &req("b", X, 10), 1_099, 10, || Some(8)).unwrap(),
            Acquire::Busy
        );
        assert!(matches!(
            acquire(Some(&s), false, &req("b", X, 10), 1_100, 10, || Some(8)).unwrap(),
            Acquire::Granted { token: 8, .. }
        ));
    }

    #[test]
    fn newcomer_never_overtakes_the_queue() {
        assert_eq!(
            acquire(None, true, &req("b", X, 10), 0, 10, || Some(1)).unwrap(),
            Acquire::Busy
        );
        let readers = LockState::Shared(vec![holder("r", 1, 100)]);
        assert_eq!(
            acquire(Some(&readers), true, &req("s", S, 10), 0, 10, || Some(2)).unwrap(),
            Acquire::Busy,
            "a reader behind a queued writer waits"
        );
    }

    #[test]
    fn ttl_must_be_positive_and_fit() {
        assert_eq!(
            acquire(None, false, &req("a", X, 0), 0, 10, || Some(1)),
            Err(LockError::TtlNotPositive)
        );
        assert_eq!(
            acquire(None, false, &req("a", X, -5), 0, 10, || Some(1)),
            Err(LockError::TtlNotPositive)
        );
        assert_eq!(
            acquire(None, false, &req("a", X, i64::MAX), 10, 10, || Some(1)),
            Err(LockError::TtlTooLarge)
        );
        assert_eq!(
            extend(None, b"a", None, i64::MAX, 10),
            Err(LockError::TtlTooLarge)
        );
    }

    #[test]
    fn only_a_live_holder_releases_or_extends() {
        let s = exclusive("a", 3, 100);
        assert_eq!(release(Some(&s), b"a", None, 99), Some(None));
        assert_eq!(release(Some(&s), b"b", None, 99), None);
        assert_eq!(release(Some(&s), b"a", None, 100), None);
        assert_eq!(release(None, b"a", None, 0), None);
        assert_eq!(
            extend(Some(&s), b"a", None, 50, 60).unwrap(),
            Some(exclusive("a", 3, 110))
        );
        assert_eq!(extend(Some(&s), b"b", None, 50, 60).unwrap(), None);
        assert_eq!(extend(Some(&s), b"a", None, 50, 100).unwrap(), None);
    }

    #[test]
    fn a_release_or_extend_with_an_old_token_changes_nothing() {
        let s = exclusive("a", 3, 100);
        assert_eq!(release(Some(&s), b"a", Some(2), 50), None, "an old token");
        assert_eq!(release(Some(&s), b"a", Some(3), 50), Some(None));
        assert_eq!(extend(Some(&s), b"a", Some(2), 10, 50).unwrap(), None);
        assert_eq!(
            extend(Some(&s), b"a", Some(3), 10, 50).unwrap(),
            Some(exclusive("a", 3, 60))
        );
    }

    #[test]
    fn fence_reports_only_the_live_exclusive_token() {
        let s = exclusive("a", 3, 100);
        assert_eq!(fence(Some(&s), 99), Some(3));
        assert_eq!(fence(Some(&s), 100), None);
        assert!(token_is_current(Some(&s), 3, 0));
        assert!(!token_is_current(Some(&s), 2, 0));
        assert!(!token_is_current(None, 3, 0));
        let readers = LockState::Shared(vec![holder("r", 4, 100), holder("q", 5, 50)]);
        assert_eq!(fence(Some(&readers), 0), None, "no exclusive holder");
        assert!(token_is_current(Some(&readers), 5, 49));
        assert!(
            !token_is_current(Some(&readers), 5, 50),
            "that lease ran out"
        );
    }

    #[test]
    fn readers_share_and_writers_need_the_lock_free() {
        let mut tokens = TokenSource::started();
        let Acquire::Granted { state, .. } =
            acquire(None, false, &req("r1", S, 100), 0, 10, || tokens.issue()).unwrap()
        else {
            panic!()
        };
        let Acquire::Granted { state, .. } =
            acquire(Some(&state), false, &req("r2", S, 100), 0, 10, || {
                tokens.issue()
            })
            .unwrap()
        else {
            panic!()
        };
        assert_eq!(state.live_count(0), 2);
        assert_eq!(
            acquire(Some(&state), false, &req("w", X, 100), 0, 10, || tokens
                .issue())
            .unwrap(),
            Acquire::Busy
        );
        assert_eq!(
            acquire(Some(&state), false, &req("r3", S, 100), 0, 2, || tokens
                .issue()),
            Err(LockError::TooManyHolders)
        );
        let left = release(Some(&state), b"r1", None, 1).unwrap().unwrap();
        assert_eq!(left.live_count(1), 1);
    }

    #[test]
    fn downgrade_keeps_the_token_and_upgrade_needs_to_be_alone() {
        let s = exclusive("a", 3, 100);
        assert_eq!(
            acquire(Some(&s), true, &req("a", S, 50), 10, 10, || unreachable!()).unwrap(),
            Acquire::Renewed {
                state: LockState::Shared(vec![holder("a", 3, 60)]),
                token: 3
            }
        );
        let alone = LockState::Shared(vec![holder("a", 3, 100)]);
        assert!(matches!(
            acquire(Some(&alone), true, &req("a", X, 50), 10, 10, || Some(9)).unwrap(),
            Acquire::Granted {
                token: 9,
                state: LockState::Exclusive(_)
            }
        ));
        let two = LockState::Shared(vec![holder("a", 3, 100), holder("b", 4, 100)]);
        assert_eq!(
            acquire(Some(&two), false, &req("a", X, 50), 10, 10, || Some(9)),
            Err(LockError::Deadlock)
        );
        let other_expired = LockState::Shared(vec![holder("a", 3, 100), holder("b", 4, 5)]);
        assert!(matches!(
            acquire(
                Some(&other_expired),
                false,
                &req("a", X, 50),
                10,
                10,
                || Some(9)
            )
            .unwrap(),
            Acquire::Granted { token: 9, .. }
        ));
    }

    #[test]
    fn semaphores_count_permits_and_refuse_other_kinds() {
        let p = |n| Want::Permits { limit: 3, n };
        let sem = LockState::Semaphore {
            limit: 3,
            holds: vec![Permit {
                holder: holder("a", 1, 100),
                n: 2,
            }],
        };
        assert!(matches!(
            acquire(Some(&sem), false, &req("b", p(1), 10), 0, 10, || Some(2)).unwrap(),
            Acquire::Granted { .. }
        ));
        assert_eq!(
            acquire(Some(&sem), false, &req("b", p(2), 10), 0, 10, || Some(2)).unwrap(),
            Acquire::Busy
        );
        assert_eq!(
            acquire(
                Some(&sem),
                false,
                &req("b", Want::Permits { limit: 4, n: 1 }, 10),
                0,
                10,
                || Some(2)
            ),
            Err(LockError::LimitMismatch)
        );
        assert_eq!(
            acquire(Some(&sem), false, &req("b", X, 10), 0, 10, || Some(2)),
            Err(LockError::WrongKind)
        );
        assert_eq!(
            acquire(Some(&sem), false, &req("a", p(1), 10), 0, 10, || Some(2)),
            Err(LockError::PermitsHeld)
        );
        let lock = exclusive("a", 1, 100);
        assert_eq!(
            acquire(Some(&lock), false, &req("b", p(1), 10), 0, 10, || Some(2)),
            Err(LockError::WrongKind)
        );
        // Once every hold ran out, the key may change kind.
        assert!(matches!(
            acquire(Some(&lock), false, &req("b", p(1), 10), 100, 10, || Some(2)).unwrap(),
            Acquire::Granted {
                state: LockState::Semaphore { .. },
                ..
            }
        ));
    }

    #[test]
    fn ended_holds_are_the_ones_that_left() {
        let before = LockState::Shared(vec![holder("a", 1, 10), holder("b", 2, 10)]);
        let after = LockState::Shared(vec![holder("b", 2, 20)]);
        let gone: Vec<Token> = ended(&before, Some(&after)).map(|h| h.token).collect();
        assert_eq!(gone, [1]);
        assert_eq!(ended(&before, None).count(), 2);
        let renewed = exclusive("a", 3, 50);
        assert_eq!(ended(&exclusive("a", 3, 10), Some(&renewed)).count(), 0);
        assert_eq!(ended(&exclusive("b", 2, 10), Some(&renewed)).count(), 1);
    }

    /// One key driven by random requests of every mode, checked against the invariants.
    #[derive(Debug, Clone)]
    enum Op {
        Advance(i64),
        Acquire { owner: u8, want: Want, ttl: i64 },
        Release(u8),
        Extend(u8, i64),
    }

    fn want() -> impl Strategy<Value = Want> {
        prop_oneof![
            Just(Want::Exclusive),
            Just(Want::Shared),
            (1u32..4).prop_map(|n| Want::Permits { limit: 3, n }),
        ]
    }

    fn op() -> impl Strategy<Value = Op> {
        prop_oneof![
            (0i64..50).prop_map(Op::Advance),
            (0u8..5, want(), -2i64..40).prop_map(|(owner, want, ttl)| Op::Acquire {
                owner,
                want,
                ttl
            }),
            (0u8..5).prop_map(Op::Release),
            (0u8..5, -2i64..40).prop_map(|(o, t)| Op::Extend(o, t)),
        ]
    }

    fn check_invariants(state: &LockState, now: Millis) -> Result<(), TestCaseError> {
        let live: Vec<(&Holder, u32)> = state.holds().filter(|(h, _)| h.is_live(now)).collect();
        for (i, (a, _)) in live.iter().enumerate() {
            for (b, _) in &live[i + 1..] {
                prop_assert!(a.owner != b.owner, "one hold per owner");
            }
        }
        match state {
            LockState::Exclusive(_) => prop_assert!(live.len() <= 1),
            LockState::Semaphore { limit, .. } => prop_assert!(state.permits_in_use(now) <= *limit),
            LockState::Shared(v) => prop_assert!(!v.is_empty()),
        }
        Ok(())
    }

    proptest! {
        #[test]
        fn random_histories_keep_every_mode_safe(ops in proptest::collection::vec(op(), 1..150)) {
            let mut now: Millis = 1_000;
            let mut tokens = TokenSource::started();
            let mut state: Option<LockState> = None;
            let mut last_token = 0;
            for op in ops {
                let before = state.clone();
                match op {
                    Op::Advance(ms) => now += ms,
                    Op::Acquire { owner, want, ttl } => {
                        let name = [owner];
                        let r = Request { owner: &name, want, ttl };
                        match acquire(state.as_ref(), false, &r, now, 3, || tokens.issue()) {
                            Err(_) => prop_assert_eq!(&state, &before),
                            Ok(Acquire::Granted { state: s, token }) => {
                                prop_assert!(token > last_token, "tokens increase");
                                last_token = token;
                                prop_assert!(s.holds().any(|(h, _)| h.token == token && h.owner.matches(&name)));
                                if let Some(b) = live(before.as_ref(), now) {
                                    // Beside live holds only a compatible one, or an upgrade.
                                    let upgrade = matches!(s, LockState::Exclusive(_));
                                    prop_assert!(upgrade || b.kind() == s.kind());
                                }
                                state = Some(s);
                            }
                            Ok(Acquire::Renewed { state: s, token }) => {
                                let (h, _) = s.live_hold_of(&name, now).expect("still holds");
                                prop_assert_eq!(h.token, token);
                                prop_assert!(before.as_ref().is_some_and(|b| b.holds().any(|(h, _)| h.token == token)));
                                state = Some(s);
                            }
                            Ok(Acquire::Busy) => {
                                prop_assert!(!fits(before.as_ref(), &name, want, now));
                            }
                        }
                    }
                    Op::Release(owner) => {
                        if let Some(left) = release(state.as_ref(), &[owner], None, now) {
                            prop_assert!(left.as_ref().is_none_or(|l| l.live_hold_of(&[owner], now).is_none()));
                            state = left;
                        }
                    }
                    Op::Extend(owner, ttl) => {
                        if let Ok(Some(s)) = extend(state.as_ref(), &[owner], None, ttl, now) {
                            state = Some(s);
                        } else {
                            prop_assert_eq!(&state, &before);
                        }
                    }
                }
                if let Some(s) = &state {
                    check_invariants(s, now)?;
                }
            }
        }
    }
}
