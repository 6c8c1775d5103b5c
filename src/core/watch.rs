//! `LOCK.WATCH`: what a watcher saw of a lock (its `Cursor`), what it is told (`Seen`), and who
//! watches which name (`Watchers`, generic over the client handle like `registry`).
//!
//! The order of grants is the order of their tokens, and a lock's holds only ever change by a
//! grant (a new token, above every one before it) or by holds leaving. So the newest live token
//! and the number of live holds name a state exactly: while the newest token stays the same,
//! holds can only leave, and the count only falls. Two states with the same cursor are the same
//! holds, on any server and after any failover (tokens never repeat, see `fencing`); a watcher
//! is answered as soon as the lock's cursor differs from the one it passed.

use std::collections::HashMap;
use std::sync::Arc;

use crate::core::error::LockError;
use crate::core::lock::{LockState, Millis, Token};
use crate::core::registry::{Client, QueueKey};

/// What a watcher last saw of a lock, as `LOCK.WATCH ... AFTER` takes it and its reply gives it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Cursor {
    /// Nothing yet (`AFTER 0`, or no `AFTER`): any state is news.
    Unseen,
    /// No hold and no plain string under the name.
    Free,
    /// A plain string under the name: another client's old-style lock (`lock.foreign-holds`).
    /// A string replaced in one command by another is the same cursor.
    Foreign,
    /// `holders` live holds, the newest of them under `newest`.
    Held { newest: Token, holders: u32 },
}

impl Cursor {
    /// `0`, `free`, `foreign`, `<token>-<holders>`, or a bare token (one holder: the exclusive
    /// holder's token, which is what an election's observer knows as the leader's term).
    pub fn parse(arg: &[u8]) -> Result<Cursor, LockError> {
        if arg == b"0" {
            return Ok(Cursor::Unseen);
        }
        if arg.eq_ignore_ascii_case(b"free") {
            return Ok(Cursor::Free);
        }
        if arg.eq_ignore_ascii_case(b"foreign") {
            return Ok(Cursor::Foreign);
        }
        let text = std::str::from_utf8(arg).map_err(|_| LockError::BadCursor)?;
        let (newest, holders) = match text.split_once('-') {
            Some((token, holders)) => (token, number(holders)?),
            None => (text, 1),
        };
        let newest = number(newest)?;
        if newest == 0 || holders == 0 {
            return Err(LockError::BadCursor);
        }
        let holders = u32::try_from(holders).map_err(|_| LockError::BadCursor)?;
        Ok(Cursor::Held { newest, holders })
    }

    /// The wire form `parse` reads back.
    pub fn render(self) -> String {
        match self {
            Cursor::Unseen => "0".to_owned(),
            Cursor::Free => "free".to_owned(),
            Cursor::Foreign => "foreign".to_owned(),
            Cursor::Held { newest, holders } => format!("{newest}-{holders}"),
        }
    }

    /// Whether a watcher that saw `self` has news when the lock's cursor is `now`.
    pub fn is_news(self, now: Cursor) -> bool {
        self == Cursor::Unseen || self != now
    }
}

/// Decimal digits only (no sign, no spaces), as a token.
fn number(text: &str) -> Result<u64, LockError> {
    let canonical = !text.starts_with('0') || text == "0";
    if text.is_empty() || !canonical || !text.bytes().all(|b| b.is_ascii_digit()) {
        return Err(LockError::BadCursor);
    }
    text.parse().map_err(|_| LockError::BadCursor)
}

/// What stands under a watched name.
#[derive(Clone, Copy, Debug)]
pub enum View<'a> {
    /// Nothing (or a lock whose every lease ran out).
    Free,
    /// A plain string: another client's old-style lock.
    Foreign,
    /// A lock (its holds may include ended ones: only live ones count).
    Lock(&'a LockState),
}

/// One live hold as a watcher is told it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SeenHold {
    pub owner: Box<[u8]>,
    pub token: Token,
    /// Milliseconds left on its lease.
    pub ttl: Millis,
    pub permits: u32,
}

/// What a watcher is told: the cursor to pass back, the mode, and the live holds (newest last).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Seen {
    pub cursor: Cursor,
    /// `free`, `foreign`, `exclusive`, `shared` or `semaphore`.
    pub mode: &'static str,
    pub holds: Vec<SeenHold>,
}

impl Seen {
    /// The newest live hold's token (an exclusive lock's: its holder's), if any.
    pub fn newest(&self) -> Option<Token> {
        match self.cursor {
            Cursor::Held { newest, .. } => Some(newest),
            _ => None,
        }
    }
}

/// The cursor of what stands under a name at `now`.
pub fn cursor_of(view: View<'_>, now: Millis) -> Cursor {
    match view {
        View::Free => Cursor::Free,
        View::Foreign => Cursor::Foreign,
        View::Lock(state) => {
            let live = state.holds().filter(|(h, _)| h.is_live(now));
            let (newest, holders) = live.fold((0, 0u32), |(newest, n), (h, _)| {
                (newest.max(h.token), n.saturating_add(1))
            });
            if holders == 0 {
                Cursor::Free
            } else {
                Cursor::Held { newest, holders }
            }
        }
    }
}

/// What a watcher is told about what stands under a name at `now`.
pub fn seen(view: View<'_>, now: Millis) -> Seen {
    let cursor = cursor_of(view, now);
    let (mode, holds) = match (view, cursor) {
        (View::Lock(state), Cursor::Held { .. }) => {
            let mut holds: Vec<SeenHold> = state
                .holds()
                .filter(|(h, _)| h.is_live(now))
                .map(|(h, permits)| SeenHold {
                    owner: (*h.owner.bytes()).into(),
                    token: h.token,
                    ttl: h.remaining(now),
                    permits,
                })
                .collect();
            holds.sort_by_key(|h| h.token);
            (state.mode_name(), holds)
        }
        (View::Foreign, _) => ("foreign", Vec::new()),
        _ => ("free", Vec::new()),
    };
    Seen {
        cursor,
        mode,
        holds,
    }
}

/// A watcher waiting for news: its handle and the cursor it passed.
struct Watching<C> {
    client: C,
    after: Cursor,
}

/// Who watches which name. Every watcher of a name is looked at together when the name may
/// have changed (`take_news`), so watchers are kept per name; the index finds a client's name
/// when it leaves (timeout, disconnect).
pub struct Watchers<C> {
    names: HashMap<Arc<QueueKey>, HashMap<u64, Watching<C>>>,
    clients: HashMap<u64, Arc<QueueKey>>,
}

impl<C> Default for Watchers<C> {
    fn default() -> Self {
        Self {
            names: HashMap::new(),
            clients: HashMap::new(),
        }
    }
}

impl<C: Client> Watchers<C> {
    /// `client` watches `key` for a cursor other than `after`. A client watches one name at a
    /// time (it is blocked); watching again replaces its earlier watch.
    pub fn watch(&mut self, key: QueueKey, client: C, after: Cursor) {
        let id = client.id();
        self.leave(id);
        let key = match self.names.get_key_value(&key) {
            Some((shared, _)) => Arc::clone(shared),
            None => Arc::new(key),
        };
        self.clients.insert(id, Arc::clone(&key));
        self.names
            .entry(key)
            .or_default()
            .insert(id, Watching { client, after });
    }

    /// Take a client out (its timeout ran out, it disconnected): its handle, if it watched.
    pub fn leave(&mut self, client_id: u64) -> Option<C> {
        let key = self.clients.remove(&client_id)?;
        let watchers = self.names.get_mut(&key)?;
        let left = watchers.remove(&client_id).map(|w| w.client);
        if watchers.is_empty() {
            self.names.remove(&key);
        }
        left
    }

    /// Take out every watcher of `key` for whom `now` is news.
    pub fn take_news(&mut self, key: &QueueKey, now: Cursor) -> Vec<C> {
        let Some(watchers) = self.names.get_mut(key) else {
            return Vec::new();
        };
        let ids: Vec<u64> = watchers
            .iter()
            .filter(|(_, w)| w.after.is_news(now))
            .map(|(id, _)| *id)
            .collect();
        let mut news = Vec::with_capacity(ids.len());
        for id in ids {
            if let Some(w) = watchers.remove(&id) {
                self.clients.remove(&id);
                news.push(w.client);
            }
        }
        if watchers.is_empty() {
            self.names.remove(key);
        }
        news
    }

    pub fn is_watched(&self, key: &QueueKey) -> bool {
        self.names.contains_key(key)
    }

    /// Every watched name of `db` (`None`: of every db).
    pub fn names_in(&self, db: Option<i32>) -> Vec<QueueKey> {
        self.names
            .keys()
            .filter(|k| db.is_none_or(|db| k.db == db))
            .map(|k| (**k).clone())
            .collect()
    }

    /// How many clients watch.
    pub fn count(&self) -> usize {
        self.clients.len()
    }

    /// How many names are watched.
    pub fn names(&self) -> usize {
        self.names.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::core::lock::{Holder, Permit};
    use crate::core::owner::Owner;
    use proptest::prelude::*;

    fn holder(token: Token, deadline: Millis) -> Holder {
        Holder {
            owner: Owner::new(format!("o{token}").as_bytes()),
            token,
            deadline,
            granted: 0,
        }
    }

    #[test]
    fn cursors_read_back_what_they_render() {
        for c in [
            Cursor::Unseen,
            Cursor::Free,
            Cursor::Foreign,
            Cursor::Held {
                newest: 9_007_199_254_740_991,
                holders: 3,
            },
        ] {
            assert_eq!(Cursor::parse(c.render().as_bytes()), Ok(c));
        }
        assert_eq!(
            Cursor::parse(b"42"),
            Ok(Cursor::Held {
                newest: 42,
                holders: 1
            })
        );
        assert_eq!(Cursor::parse(b"FREE"), Ok(Cursor::Free));
    }

    #[test]
    fn malformed_cursors_are_refused() {
        for bad in [
            &b""[..],
            b"-1",
            b"+5",
            b"5-",
            b"-5",
            b"5-0",
            b"0-1",
            b"00",
            b"07-1",
            b"5-1-1",
            b" 5",
            b"5-4294967296",
            b"99999999999999999999",
            b"\xff",
        ] {
            assert_eq!(Cursor::parse(bad), Err(LockError::BadCursor), "{bad:?}");
        }
    }

    #[test]
    fn the_cursor_counts_only_live_holds() {
        let now = 100;
        let state = LockState::Shared(vec![holder(5, 50), holder(7, 200), holder(6, 300)]);
        assert_eq!(
            cursor_of(View::Lock(&state), now),
            Cursor::Held {
                newest: 7,
                holders: 2
            }
        );
        let ended = LockState::Exclusive(holder(5, 50));
        assert_eq!(cursor_of(View::Lock(&ended), now), Cursor::Free);
        let seen = seen(View::Lock(&state), now);
        assert_eq!(seen.mode, "shared");
        assert_eq!(
            seen.holds.iter().map(|h| h.token).collect::<Vec<_>>(),
            [6, 7]
        );
        assert_eq!(seen.holds[0].ttl, 200);
    }

    #[test]
    fn a_semaphore_shows_each_holds_permits() {
        let state = LockState::Semaphore {
            limit: 5,
            holds: vec![Permit {
                holder: holder(3, 10),
                n: 4,
            }],
        };
        let seen = seen(View::Lock(&state), 0);
        assert_eq!(seen.mode, "semaphore");
        assert_eq!(seen.holds[0].permits, 4);
        assert_eq!(seen.newest(), Some(3));
    }

    #[test]
    fn unseen_is_always_news_and_the_same_state_never() {
        let held = Cursor::Held {
            newest: 3,
            holders: 1,
        };
        assert!(Cursor::Unseen.is_news(Cursor::Free));
        assert!(Cursor::Unseen.is_news(held));
        assert!(!held.is_news(held));
        assert!(!Cursor::Free.is_news(Cursor::Free));
        assert!(held.is_news(Cursor::Free));
        assert!(Cursor::Free.is_news(Cursor::Foreign));
    }

    // `u64` is a `Client` in the tests (see `registry`'s).

    fn key(n: u8) -> QueueKey {
        QueueKey {
            db: i32::from(n % 2),
            name: vec![n].into(),
        }
    }

    fn cursor(n: u8) -> Cursor {
        match n % 4 {
            0 => Cursor::Unseen,
            1 => Cursor::Free,
            2 => Cursor::Foreign,
            _ => Cursor::Held {
                newest: u64::from(n),
                holders: 1,
            },
        }
    }

    #[derive(Clone, Debug)]
    enum Op {
        Watch { client: u64, key: u8, after: u8 },
        Leave { client: u64 },
        Look { key: u8, now: u8 },
    }

    fn op() -> impl Strategy<Value = Op> {
        prop_oneof![
            (0..12u64, 0..4u8, 0..16u8).prop_map(|(client, key, after)| Op::Watch {
                client,
                key,
                after
            }),
            (0..12u64).prop_map(|client| Op::Leave { client }),
            (0..4u8, 0..16u8).prop_map(|(key, now)| Op::Look { key, now }),
        ]
    }

    proptest! {
        /// Against a list of (client, name, cursor): the same clients leave and are told news,
        /// and the counts agree after every step.
        #[test]
        fn watchers_match_a_model(ops in proptest::collection::vec(op(), 1..200)) {
            let mut watchers: Watchers<u64> = Watchers::default();
            let mut model: Vec<(u64, QueueKey, Cursor)> = Vec::new();
            for op in ops {
                match op {
                    Op::Watch { client, key: k, after } => {
                        model.retain(|(c, _, _)| *c != client);
                        model.push((client, key(k), cursor(after)));
                        watchers.watch(key(k), client, cursor(after));
                    }
                    Op::Leave { client } => {
                        let expected = model.iter().any(|(c, _, _)| *c == client);
                        model.retain(|(c, _, _)| *c != client);
                        prop_assert_eq!(watchers.leave(client).is_some(), expected);
                    }
                    Op::Look { key: k, now } => {
                        let now = cursor(now);
                        let mut expected: Vec<u64> = model
                            .iter()
                            .filter(|(_, n, after)| *n == key(k) && after.is_news(now))
                            .map(|(c, _, _)| *c)
                            .collect();
                        model.retain(|(c, _, _)| !expected.contains(c));
                        let mut got = watchers.take_news(&key(k), now);
                        got.sort_unstable();
                        expected.sort_unstable();
                        prop_assert_eq!(got, expected);
                    }
                }
                prop_assert_eq!(watchers.count(), model.len());
                for k in 0..4 {
                    prop_assert_eq!(
                        watchers.is_watched(&key(k)),
                        model.iter().any(|(_, n, _)| *n == key(k))
                    );
                }
            }
        }
    }
}
