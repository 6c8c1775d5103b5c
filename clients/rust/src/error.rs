//! The crate's error, and what a `RedisError` means for a lock: the server refused (stale,
//! deadlock, another error reply), the server could not be reached, or what answered is not
//! Redis with the redis-lock module (rules 5 and 14 of docs/clients.md).

use redis::{ErrorKind, RedisError};

use crate::protocol;

/// What can go wrong.
#[derive(Debug)]
pub enum Error {
    /// The server answered with an error this crate does not name (or the reply did not fit).
    Redis(RedisError),
    /// `run` refused: this hold's token is no longer the live exclusive hold's (the server said
    /// so, or the client already knew the hold was lost).
    Stale(String),
    /// An upgrade from shared to exclusive while other readers hold; or a set
    /// (`Locker::lock_set`) whose owner holds some of its keys while others are busy, asked
    /// to wait (it would wait behind its own holds).
    Deadlock(String),
    /// The keys of a set (`Locker::lock_set`) hash to more than one slot of a cluster: give
    /// them one hash tag (`{account}:1`, `{account}:2`). Not retried.
    CrossSlot(String),
    /// The lock service could not be reached (refused, unresolvable, no answer), or what
    /// answered is not Redis with the redis-lock module, within the caller's deadline or the
    /// locker's bound (`Locker::unavailable_after`, 10 s by default). Not "not granted": the
    /// application decides what to do without the lock (refuse, or fall back knowingly).
    Unavailable {
        /// Where the lock service was asked (`host:port`, a socket path, or Sentinel's master).
        address: String,
        /// What went wrong last (`connection refused`, `no answer within 2s`, ...).
        cause: String,
        /// The Redis client's error behind `cause`, when there was one (`Error::source`).
        source: Option<Box<RedisError>>,
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
            Error::Stale(m) | Error::Deadlock(m) | Error::CrossSlot(m) => f.write_str(m),
            Error::Unavailable { address, cause, .. } => {
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
            Error::Unavailable {
                source: Some(e), ..
            } => Some(e.as_ref()),
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

/// The server's refusals, by their error code (the reply's first word): `STALE` and `DEADLOCK`
/// are this crate's own errors, the rest the Redis client's.
impl From<RedisError> for Error {
    fn from(e: RedisError) -> Self {
        match e.code() {
            Some("STALE") => Error::Stale(e.to_string()),
            Some("DEADLOCK") => Error::Deadlock(e.to_string()),
            Some("CROSSSLOT") => Error::CrossSlot(e.to_string()),
            _ => Error::Redis(e),
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

/// What `e` says, by its kind (the link) or its error code (the server's reply): a retryable
/// code (rule 19) is a server that cannot serve the key now, as a broken link is.
pub(crate) fn failure(e: &RedisError) -> Failure {
    let unknown_command = e.code() == Some("ERR")
        && e.detail()
            .is_some_and(|d| d.to_ascii_lowercase().starts_with("unknown command"));
    if e.kind() == ErrorKind::Parse || unknown_command {
        Failure::NotLockService
    } else if e.is_io_error()
        || e.is_connection_dropped()
        || e.is_timeout()
        || e.is_connection_refusal()
        || e.kind() == ErrorKind::MasterNameNotFoundBySentinel
        || e.kind() == ErrorKind::ClusterConnectionNotFound
        || e.code().is_some_and(protocol::is_retryable)
    {
        Failure::Unreachable
    } else {
        Failure::Refused
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use redis::Value;

    fn reply(text: &str) -> RedisError {
        let Value::ServerError(e) =
            redis::parse_redis_value(format!("-{text}\r\n").as_bytes()).expect("an error reply")
        else {
            panic!("not an error reply")
        };
        RedisError::from(e)
    }

    #[test]
    fn errors_are_classified_by_their_code() {
        assert!(matches!(
            Error::from(reply("STALE token 3 < 4")),
            Error::Stale(_)
        ));
        assert!(matches!(
            Error::from(reply("DEADLOCK upgrade")),
            Error::Deadlock(_)
        ));
        // The word in the message does not make it stale: the code does.
        assert!(matches!(
            Error::from(reply("ERR STALE in text")),
            Error::Redis(_)
        ));
        assert_eq!(failure(&reply("READONLY replica")), Failure::Unreachable);
        assert_eq!(failure(&reply("UNBLOCKED failover")), Failure::Unreachable);
        assert_eq!(failure(&reply("NOPERM no")), Failure::Refused);
        let unknown = reply("ERR unknown command 'LOCK.ACQUIRE'");
        assert_eq!(failure(&unknown), Failure::NotLockService);
    }
}
