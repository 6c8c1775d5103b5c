//! The Redis shell: the command table and handlers, settling queues, and the callbacks Redis
//! calls back up through (`callbacks`, the one file that ties upward). Imports `core`,
//! `effects` and `ffi`.

pub mod callbacks;
pub mod cluster;
pub mod commands;
pub mod filter;
pub mod guarded;
pub mod hot;
pub mod info;
pub mod renames;
pub mod resetstat;
pub mod set_handoff;
pub mod sets;
pub mod settling;
pub mod table;
pub mod watch;
