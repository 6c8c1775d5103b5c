//! Effects: what the shell does to the server on the core's behalf. Reading and writing lock
//! values (each write replicated and logged as a deterministic effect, with its keyspace event
//! and metrics), the server's one queue registry, and the timers that settle queues later.
//! Imports `core` and `ffi`, never `shell`.

pub mod adrift;
pub mod epochs;
pub mod foreign;
pub mod keyspace;
pub mod queues;
pub mod sessions;
pub mod timers;
pub mod watches;
