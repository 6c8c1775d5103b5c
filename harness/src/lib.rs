//! Test support for redis-lock, shared by the integration tests, the fault suite and the
//! benchmark: real redis-server / valkey-server processes on free loopback ports, loaded with the
//! freshly built module and stopped by PID (`Server`); clients and small helpers; a Redis Cluster
//! (`cluster`); the fault-injection engine with its history checker (`scenario`); network
//! namespaces for real partitions (`netns`) and Sentinel deployments with their workload
//! (`sentinel`); throwaway PostgreSQL and MariaDB servers for the fenced-write tests
//! (`database`).
//!
//! `LOCK_TEST_SERVER` picks the server binary (default `redis-server`); `LOCK_MODULE` the module
//! (default `target/debug/libredis_lock.so`, built by `make test`); `LOCK_TEST_SLOWDOWN` how much
//! slower than native the server runs (`server_slowdown()`, 10 under qemu).
//!
//! One room a concern; everything a test needs most is re-exported here, so
//! `use redis_lock_harness::*;` is the one import of most tests:
//! - `server`: `Server`, its builder, where the binary and the module come from;
//! - `process`: the one wrapper of a child process (`Process`), signals, kill and reap;
//! - `client`: the one way to connect (`Link`, `connect`), commands and replies;
//! - `wait`: polling until something asynchronous happened;
//! - `stats`: INFO fields and the module's counters;
//! - `rdb`: DUMP payloads read, forged and re-sealed;
//! - `clock`: a server's wall clock moved by libfaketime (`ClockFile`);
//! - `tokens`: token epochs and the epoch check every history uses;
//! - `store`: the fenced store both the fault scenarios and the Sentinel workload write to.

pub mod client;
pub mod clock;
pub mod cluster;
pub mod database;
pub mod netns;
pub mod process;
pub mod rdb;
pub mod scenario;
pub mod sentinel;
pub mod server;
pub mod stats;
pub mod store;
pub mod tokens;
pub mod wait;

pub use redis::{Connection, Value};

pub use client::*;
pub use clock::*;
pub use process::*;
pub use rdb::*;
pub use server::*;
pub use stats::*;
pub use tokens::*;
pub use wait::*;
