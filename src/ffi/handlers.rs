//! The shell's functions that Redis reaches through the trampolines of this layer. The shell
//! installs them once at load (`lib.rs` with `shell::callbacks::HANDLERS`); a callback that
//! fires before that (none can) would do nothing.

use std::sync::OnceLock;

use std::os::raw::c_int;

use redis_module::{raw, Context, InfoContext, RedisString};

use crate::core::settle::Job;
use crate::core::value::LockValue;

/// A command the filter saw. Arguments are read on demand: the filter sees every command on
/// the server, and most need only their name looked at.
pub struct CommandArgs {
    fctx: *mut raw::RedisModuleCommandFilterCtx,
    count: usize,
}

impl CommandArgs {
    /// # Safety
    /// `fctx` must be the filter context of the running filter callback, and `count` its
    /// argument count; the value must not outlive the callback.
    pub unsafe fn new(fctx: *mut raw::RedisModuleCommandFilterCtx, count: usize) -> Self {
        Self { fctx, count }
    }

    pub fn count(&self) -> usize {
        self.count
    }

    /// The id of the client running the command, where the server tells (Redis 7.2+, Valkey).
    pub fn client_id(&self) -> Option<u64> {
        // SAFETY: the filter context is valid for the callback this value lives in (see `new`).
        unsafe { raw::RedisModule_CommandFilterGetClientId.map(|get| get(self.fctx)) }
    }

    /// The argument at `pos` (empty past the end).
    pub fn get(&self, pos: usize) -> &[u8] {
        let (Ok(at), true) = (c_int::try_from(pos), pos < self.count) else {
            return &[];
        };
        // SAFETY: the filter context is valid for the callback this value lives in (see `new`),
        // `at` is below the argument count, and the bytes are borrowed only as long as `self`.
        unsafe {
            raw::RedisModule_CommandFilterArgGet
                .map_or(&[], |get| RedisString::string_as_slice(get(self.fctx, at)))
        }
    }
}

/// Where a value sits: its db and key name (borrowed for the callback).
#[derive(Clone, Copy, Debug)]
pub struct Place<'a> {
    pub db: i32,
    pub name: &'a [u8],
}

pub struct Handlers {
    /// The module's timer fired: run what is due.
    pub alarm: fn(&Context),
    /// The server's cron ran (`hz` times a second, on the monotonic clock).
    pub cron: fn(&Context),
    /// A granted waiter's reply never went out: run this `Job::Revoke` soon.
    pub revoke: fn(Job),
    /// A blocked waiter's connection closed.
    pub disconnected: fn(client_id: u64),
    /// `CLIENT UNBLOCK` of a blocked waiter (the server then unblocks it with nil).
    pub client_unblocked: fn(client_id: u64),
    /// A lock value joined the keyspace, loaded (RDB, AOF, full sync, DEBUG RELOAD, RESTORE)
    /// or copied, at `(db, name)` where the server tells: count it, let the token source see
    /// its tokens, end its leases on time there.
    pub arrived: fn(place: Option<Place<'_>>, value: &mut LockValue),
    /// A lock value left the keyspace (DEL, expiry, overwrite, RENAME, MOVE); `freed` has it
    /// next if the server frees it.
    pub unlinked: fn(db: i32, name: &[u8], value: &LockValue),
    /// The server frees this lock value (possibly on a lazy-free thread): the handler lets it go.
    pub freed: fn(value: Box<LockValue>),
    /// A db is about to be flushed (`None`: every db); its values are still there.
    pub flush_starting: fn(db: Option<i32>),
    /// A db was flushed (`None`: every db).
    pub flushed: fn(db: Option<i32>),
    /// Two dbs traded contents.
    pub swapped: fn(first: i32, second: i32),
    /// This master became a replica.
    pub demoted: fn(),
    /// This replica became a master.
    pub promoted: fn(),
    /// A client connection closed.
    pub client_closed: fn(client_id: u64),
    /// A load that replaces the data started (start-up, full sync, `DEBUG RELOAD`/`LOADAOF`).
    pub load_started: fn(),
    /// That load failed: the server keeps the data it had.
    pub load_failed: fn(),
    /// `CONFIG SET` changed these settings (their names as the server gives them).
    pub config_changed: fn(&Context, &[&[u8]]),
    /// The command filter saw a command, of any length: one or two flags read while nobody
    /// waits behind a plain string or watches a name without a lock.
    pub any_command: fn(),
    /// The command filter saw a command of at most `command_seen_words` words (the name
    /// included): every such command on the server comes by, so keep it cheap.
    pub command_seen: fn(&CommandArgs),
    /// The most words of a command `command_seen` cares about: the filter drops longer ones
    /// before anything else (most commands on a busy server).
    pub command_seen_words: usize,
    /// One of the module's commands ran (it may have started work for the command filter).
    pub after_command: fn(&Context),
    /// `INFO lock` is being rendered (for a crash report: read nothing more of the server).
    pub info: fn(&InfoContext, bool),
}

static HANDLERS: OnceLock<&'static Handlers> = OnceLock::new();

/// Install the shell's handlers (once, at load).
pub fn install(handlers: &'static Handlers) {
    let _ = HANDLERS.set(handlers);
}

pub fn get() -> Option<&'static Handlers> {
    HANDLERS.get().copied()
}
