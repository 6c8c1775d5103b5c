//! The pure core: the lock's rules, its queues, the settle decision, argument parsing, the value
//! encoding, and the counters. No FFI and no server: everything here is unit- and
//! property-tested with `cargo test --lib`. Files here import only each other.

pub mod args;
pub mod codec;
pub mod config;
pub mod error;
pub mod fencing;
pub mod guard_rules;
pub mod hot;
pub mod lease_heap;
pub mod lock;
pub mod lock_set;
pub mod metrics;
pub mod owner;
pub mod queue;
pub mod registry;
pub mod restore;
pub mod schedule;
pub mod settle;
pub mod slot;
pub mod tally;
pub mod value;
pub mod version;
pub mod watch;
