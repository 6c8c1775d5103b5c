//! Locks for the [redis-lock](../../README.md) module, on the `redis` crate with tokio.
//!
//! The server does the hard parts (fair FIFO waits, fencing tokens, leases, shared locks,
//! semaphores, session holds, guarded writes); this crate writes the loop around them: wait
//! without polling, renew the leases while working (one renewal loop per `Locker`, on one
//! connection of its own per server), say when a hold is lost (`LockGuard::lost`), never renew
//! a released hold, carry the token to the write, and say `Error::Unavailable` within a bound
//! when the lock service cannot be reached. One server, Sentinel (`Locker::sentinel`) or a
//! Redis Cluster (`Locker::cluster`). Elections on top (`Locker::election`): campaign for a
//! leadership whose term is a fencing token, and observe the leaders as a `Stream`.
//!
//! The crate re-exports the `redis` crate it is built on (`redis_lock_client::redis`), so an
//! application without a `redis` dependency of its own needs no matching version.
//!
//! ```no_run
//! # async fn demo() -> Result<(), redis_lock_client::Error> {
//! use std::time::Duration;
//! use redis_lock_client::redis;
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
//! # use redis_lock_client::redis;
//! # use std::time::Duration;
//! let guard = locker.lock("{sku:9}:lock").ttl(Duration::from_secs(30)).wait_forever().acquire().await?.unwrap();
//! let left: i64 = guard.run(redis::cmd("DECRBY").arg("{sku:9}:stock").arg(1)).await?;
//! guard.release().await?;
//! # let _ = left; Ok(()) }
//! ```

// rustc 1.95 reaches its query depth (128) laying out the README election example's future
// in a doctest (not in tests/election.rs, which compiles the same code): more for doctests.
#![doc(test(attr(recursion_limit = "256")))]

/// The README's examples, compiled as doctests (with the feature `sqlx-postgres`, as `make
/// test` runs them: one example is a fenced transaction on PostgreSQL).
#[cfg(all(doctest, feature = "sqlx-postgres"))]
#[doc = include_str!("../README.md")]
pub struct ReadmeDoctests;

mod acquire;
mod availability;
mod cluster;
mod election;
mod error;
#[cfg(feature = "sqlx")]
pub mod fence;
mod guard;
mod hold;
mod link;
mod locker;
mod observe;
mod protocol;
mod renewal;
mod schedule;
mod set;
mod source;

/// The `redis` crate this one is built on (1.x): its `Client` makes a `Locker`, its `cmd`
/// builds what `LockGuard::run` sends.
pub use redis;

pub use acquire::LockBuilder;
pub use availability::DEFAULT_UNAVAILABLE_AFTER;
pub use election::{Election, Leader, Leadership, DEFAULT_ELECTION_TTL};
pub use error::Error;
pub use guard::LockGuard;
pub use locker::Locker;
pub use observe::Observer;
pub use set::{SetBuilder, SetGuard};
