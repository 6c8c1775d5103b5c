//! The crate's error, and what a `RedisError` means for a lock: the server refused (stale,
//! deadlock, another error reply), the server could not be reached, or what answered is not
//! Redis with the redis-lock module (rules 5 and 14 of docs/clients.md).

use redis::{ErrorKind, RedisError, ServerErrorKind};

/// What can go wrong.
#[derive(Debug)]
pub enum Error {
    /// The server answered with an error this crate does not name (or the reply did not fit).
    Redis(RedisError),
    /// `run` refused: this hold's token is no longer the live exclusive hold's (the server said
    /// so, or the client already knew the hold was lost).
    Stale(String),
    /// An upgrade from shared to exclusive while other readers hold.
    Deadlock(String),
    /// The lock service could not be reached (refused, unresolvable, no answer), or what
    /// answered is not Redis with the redis-lock module, within the caller's deadline or the
    /// locker's bound (`Locker::unavailable_after`, 10 s by default). Not "not granted": the
    /// application decides what to do without the lock (refuse, or fall back knowingly).
    Unavailable {
        /// Where the lock service was asked (`host:port`, a socket path, or Sentinel's master).
        address: String,
        /// What went wrong last (`connection refused`, `no answer within 2s`, ...).
        cause: String,
    },
    /// An argument refused before anything was sent (a ttl under 1 ms, permits over the limit).
    InvalidArgument(String),
    /// The database failed, or refused an argument (`fence`, feature `sqlx-*`).
    #[cfg(feature = "sqlx")]
    Database(sqlx::Error),
}

impl std::fmt::Display for Error {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Error::Redis(e) => write!(f, "{e}"),
            Error::Stale(m) | Error::Deadlock(m) => f.write_str(m),
            Error::Unavailable { address, cause } => {
                write!(f, "lock service unavailable at {address}: {cause}")
            }
            Error::InvalidArgument(m) => write!(f, "invalid argument: {m}"),
            #[cfg(feature = "sqlx")]
            Error::Database(e) => write!(f, "{e}"),
        }
    }
}

impl std::error::Error for Error {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            Error::Redis(e) => Some(e),
            #[cfg(feature = "sqlx")]
            Error::Database(e) => Some(e),
            _ => None,
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

/// What a failed call says about the lock service.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Failure {
    /// The link broke or could not be made (the server is down or frozen, or, through Sentinel,
    /// the master is changing): asked again with the same owner until the deadline or the bound.
    Unreachable,
    /// Something answered, but not as Redis with the module (a parse error, an unknown
    /// command): unavailable at once, asking again would not change it.
    NotLockService,
    /// The server answered with an error of its own: the caller's to see.
    Refused,
}

/// What `e` says; `sentinel`: the connection's master was named by Sentinel, so `READONLY`
/// means it was demoted and the next connection finds the new one.
pub(crate) fn failure(e: &RedisError, sentinel: bool) -> Failure {
    let unknown_command = e.code() == Some("ERR")
        && e.detail()
            .is_some_and(|d| d.to_ascii_lowercase().contains("unknown command"));
    if e.kind() == ErrorKind::Parse || unknown_command {
        Failure::NotLockService
    } else if e.is_io_error()
        || e.is_connection_dropped()
        || e.is_timeout()
        || e.is_connection_refusal()
        || e.kind() == ErrorKind::MasterNameNotFoundBySentinel
        || e.kind() == ErrorKind::Server(ServerErrorKind::BusyLoading)
        || (sentinel && e.code() == Some("READONLY"))
    {
        Failure::Unreachable
    } else {
        Failure::Refused
    }
}
