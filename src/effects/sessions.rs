//! Session holds (`LOCK.ACQUIRE ... SESSION`): which holds are bound to which connection. The
//! binding is the master's own knowledge: never persisted or replicated (replicas and a
//! promoted replica know no connections; there a session hold simply lives until its lease
//! ends). A binding is dropped when its hold ends for any reason, and all of a connection's
//! bindings are taken when the connection closes (the shell then releases those holds).
//!
//! Like the queue registry, the mutex is held only inside these functions, never across a call
//! into Redis.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{LazyLock, Mutex, MutexGuard};

use crate::core::lock::Token;
use crate::core::registry::QueueKey;

#[derive(Default)]
struct Sessions {
    /// The holds each connection keeps, by the name they were granted under.
    by_client: HashMap<u64, Vec<(QueueKey, Token)>>,
    /// Which connection keeps each bound hold (tokens are unique on a server).
    by_token: HashMap<Token, u64>,
}

static SESSIONS: LazyLock<Mutex<Sessions>> = LazyLock::new(Mutex::default);
/// Whether any hold is bound (the command filter watches for `RESET` only then).
static ANY: AtomicBool = AtomicBool::new(false);

fn sessions() -> MutexGuard<'static, Sessions> {
    SESSIONS.lock().unwrap_or_else(|p| p.into_inner())
}

impl Sessions {
    fn forget(&mut self, token: Token) -> Option<u64> {
        let client = self.by_token.remove(&token)?;
        if let Some(holds) = self.by_client.get_mut(&client) {
            holds.retain(|(_, t)| *t != token);
            if holds.is_empty() {
                self.by_client.remove(&client);
            }
        }
        if self.by_token.is_empty() && self.by_token.capacity() > 0 {
            *self = Sessions::default(); // give a burst's memory back
            ANY.store(false, Ordering::Relaxed);
        }
        Some(client)
    }
}

/// Bind the hold `token` of `key` to the connection `client_id` (from another, it moves).
pub fn bind(client_id: u64, key: QueueKey, token: Token) {
    let mut s = sessions();
    s.forget(token);
    s.by_token.insert(token, client_id);
    s.by_client.entry(client_id).or_default().push((key, token));
    ANY.store(true, Ordering::Relaxed);
}

/// Whether any connection keeps a session hold.
pub fn any() -> bool {
    ANY.load(Ordering::Relaxed)
}

/// The hold `token` ended (released, expired, deleted, replaced): forget its binding.
pub fn unbind(token: Token) {
    if !any() {
        return; // no mutex on the common path
    }
    let mut s = sessions();
    if !s.by_token.is_empty() {
        s.forget(token);
    }
}

/// The connection the hold `token` is bound to, if any.
pub fn client_of(token: Token) -> Option<u64> {
    sessions().by_token.get(&token).copied()
}

/// Whether the connection `client_id` keeps any session hold (checked on every disconnect).
pub fn keeps_any(client_id: u64) -> bool {
    let s = sessions();
    !s.by_client.is_empty() && s.by_client.contains_key(&client_id)
}

/// The connection `client_id` closed: take every hold bound to it.
pub fn take(client_id: u64) -> Vec<(QueueKey, Token)> {
    let mut s = sessions();
    let holds = s.by_client.remove(&client_id).unwrap_or_default();
    for (_, token) in &holds {
        s.by_token.remove(token);
    }
    ANY.store(!s.by_token.is_empty(), Ordering::Relaxed);
    holds
}

/// Forget every binding of one db (`None`: of every db), after a flush.
pub fn forget_db(db: Option<i32>) {
    let mut s = sessions();
    let gone: Vec<Token> = s
        .by_client
        .values()
        .flatten()
        .filter(|(key, _)| db.is_none_or(|d| d == key.db))
        .map(|(_, token)| *token)
        .collect();
    for token in gone {
        s.forget(token);
    }
}

/// Forget every binding (this master became a replica).
pub fn forget_all() {
    *sessions() = Sessions::default();
    ANY.store(false, Ordering::Relaxed);
}
