//! The unavailability bound (rule 14 of docs/clients.md): how long a locker keeps asking a lock
//! service that does not answer before it says `Error::Unavailable`, counted from the first
//! failure since the server last answered, shared by every call of one locker (acquires,
//! releases, guarded writes, watchdogs).

use std::sync::Mutex;
use std::time::{Duration, Instant};

use redis::RedisError;

use crate::Error;

/// The bound unless `Locker::unavailable_after` sets one.
pub const DEFAULT_UNAVAILABLE_AFTER: Duration = Duration::from_secs(10);

/// How long a call that asks again pauses first (the server refused the connection, or the link
/// broke).
pub(crate) const RETRY_PAUSE: Duration = Duration::from_millis(50);

/// How late after the caller's deadline a wait's reply may come before the server counts as not
/// answering (the server's own timer ends the wait; its reply may be slow on a loaded machine).
pub(crate) const REPLY_GRACE: Duration = Duration::from_secs(1);

pub(crate) struct Availability {
    /// Where the service is (through Sentinel: the master it named last).
    address: Mutex<String>,
    bound: Duration,
    /// The first failure since the server last answered (None: it answered last).
    failing_since: Mutex<Option<Instant>>,
}

impl Availability {
    pub(crate) fn new(address: String, bound: Duration) -> Self {
        Self {
            address: Mutex::new(address),
            bound,
            failing_since: Mutex::new(None),
        }
    }

    pub(crate) fn bound(&self) -> Duration {
        self.bound
    }

    fn since(&self) -> std::sync::MutexGuard<'_, Option<Instant>> {
        // A poisoned lock only means a panic elsewhere; the instant inside is still right.
        self.failing_since
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// The server answered (a reply, an error reply of its own).
    pub(crate) fn answered(&self) {
        *self.since() = None;
    }

    /// A call failed to reach the server.
    pub(crate) fn failed(&self) {
        self.since().get_or_insert_with(Instant::now);
    }

    /// A call begins: a window of failures that ended before it gives the call a window of its
    /// own (else nothing would ask the server again).
    pub(crate) fn begin(&self) {
        let mut since = self.since();
        if since.is_some_and(|s| s + self.bound <= Instant::now()) {
            *since = None;
        }
    }

    /// When a call that may last until `deadline` (None: no deadline of the caller's) stops
    /// asking: the deadline, or the bound after the first failure since the server last
    /// answered (from now if it answered last), whichever is first.
    pub(crate) fn until(&self, deadline: Option<Instant>) -> Instant {
        let end = self.since().unwrap_or_else(Instant::now) + self.bound;
        deadline.map_or(end, |d| d.min(end))
    }

    /// Sentinel named the master at `address`.
    pub(crate) fn found(&self, address: String) {
        *self.address() = address;
    }

    /// The error naming this service's address and `cause`.
    pub(crate) fn error(&self, cause: impl std::fmt::Display) -> Error {
        self.unavailable(cause.to_string(), None)
    }

    /// The error naming this service's address and the Redis client's error `e` (its source).
    pub(crate) fn error_from(&self, e: RedisError) -> Error {
        self.unavailable(e.to_string(), Some(Box::new(e)))
    }

    fn unavailable(&self, cause: String, source: Option<Box<RedisError>>) -> Error {
        Error::Unavailable {
            address: self.address().clone(),
            cause,
            source,
        }
    }

    fn address(&self) -> std::sync::MutexGuard<'_, String> {
        self.address.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The cause for a call that got no answer in time.
    pub(crate) fn silence(&self, waited: Duration) -> Error {
        self.error(format!("no answer within {} ms", waited.as_millis()))
    }
}
