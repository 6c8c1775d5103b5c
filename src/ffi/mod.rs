//! The Redis boundary: every raw module-API call, each behind a safe function, and the
//! `extern "C"` trampolines Redis calls. All of the crate's `unsafe` lives here, each block with
//! a `SAFETY:` comment.
//!
//! Trampolines contain panics (`panics`) and hand over to the `Handlers` the shell installs at
//! load (`handlers`): that is how Redis calls back up into the shell while every `use crate::`
//! line here names only `core` or `ffi`.

pub mod alloc;
pub mod block;
pub mod call;
pub mod clock;
pub mod command_info;
pub mod config;
pub mod data_type;
pub mod entry;
pub mod events;
pub mod handlers;
pub mod key;
pub mod lease_values;
pub mod panics;
pub mod reply;
pub mod role;
pub mod scan;
pub mod server;
pub mod server_locked;
pub mod timer;
