//! Running another command from inside a module command (`LOCK.GUARD`): the call itself, its
//! keys, and the key-position requests of a command with movable keys.

use std::ffi::CString;
use std::os::raw::c_int;

use redis_module::{raw, Context, RedisString};

/// The flags of the call: replicate and log the command itself (`!`), as the calling user with
/// ACL checks (`C`), refusing what scripts may not run (`S`) and `deny-oom` commands over the
/// memory limit (`M`), errors as replies (`E`), the caller's protocol (`0`), arguments as a
/// vector (`v`).
const CALL_FORMAT: &std::ffi::CStr = c"!CSEM0v";

/// Why a call did not produce a reply to pass on.
#[derive(Debug)]
pub enum CallFailed {
    /// The command name cannot be a C string (it contains a NUL byte).
    BadName,
    /// The server refused before running it; `errno` says why.
    Refused(i32),
}

/// Run `words` (the command name first) and send its reply to the caller as it is.
pub fn call_and_reply(ctx: &Context, words: &[RedisString]) -> Result<(), CallFailed> {
    let Some((name, args)) = words.split_first() else {
        return Err(CallFailed::BadName);
    };
    let name = CString::new(name.as_slice()).map_err(|_| CallFailed::BadName)?;
    let mut argv: Vec<*mut raw::RedisModuleString> = args.iter().map(|a| a.inner).collect();
    // SAFETY: the format takes a vector of module strings and its length; the strings live in
    // `words` for the whole call; the reply is handed back to Redis (ReplyWithCallReply copies
    // it) and freed exactly once.
    unsafe {
        let (Some(call), Some(reply_with), Some(free)) = (
            raw::RedisModule_Call,
            raw::RedisModule_ReplyWithCallReply,
            raw::RedisModule_FreeCallReply,
        ) else {
            return Err(CallFailed::Refused(0));
        };
        let reply = call(
            ctx.ctx,
            name.as_ptr(),
            CALL_FORMAT.as_ptr(),
            argv.as_mut_ptr(),
            argv.len(),
        );
        if reply.is_null() {
            return Err(CallFailed::Refused(*libc::__errno_location()));
        }
        reply_with(ctx.ctx, reply);
        free(reply);
    }
    Ok(())
}

/// One key of a command, as the server's key specs find it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CommandKey {
    /// Its position in the command's words (the name at 0).
    pub pos: usize,
    /// Whether the command may change or delete it (its flags say RW, OW or RM). `None`: the
    /// server gave no flags (Redis 7.0 to Valkey 9 give them only for commands that find
    /// their keys by code, such as SET or SORT, not for those found by key specs alone).
    pub writes: Option<bool>,
}

/// The key-spec flags that mean the command may change or delete the key.
const WRITE_FLAGS: c_int = (raw::REDISMODULE_CMD_KEY_RW
    | raw::REDISMODULE_CMD_KEY_OW
    | raw::REDISMODULE_CMD_KEY_RM) as c_int;

/// The keys of the command `words`, as the server finds them; empty if it has none, `None` if
/// the server does not know the command or its arity is wrong (running it will say so).
pub fn command_keys(ctx: &Context, words: &[RedisString]) -> Option<Vec<CommandKey>> {
    let mut argv: Vec<*mut raw::RedisModuleString> = words.iter().map(|a| a.inner).collect();
    let argc = c_int::try_from(argv.len()).ok()?;
    let mut count: c_int = 0;
    let mut flags: *mut c_int = std::ptr::null_mut();
    // SAFETY: GetCommandKeysWithFlags (Redis 7.0+) reads `argc` module strings and returns two
    // arrays of `count` entries (positions, flags) that the module frees with RedisModule_Free;
    // NULL with errno 0 for a command without keys.
    unsafe {
        *libc::__errno_location() = 0;
        let with_flags = raw::RedisModule_GetCommandKeysWithFlags?;
        let keys = with_flags(ctx.ctx, argv.as_mut_ptr(), argc, &mut count, &mut flags);
        if keys.is_null() {
            return (*libc::__errno_location() == 0).then(Vec::new);
        }
        let len = usize::try_from(count).unwrap_or(0);
        let positions = std::slice::from_raw_parts(keys, len);
        let found = (0..len)
            .filter_map(|i| {
                let key_flags = if flags.is_null() { 0 } else { *flags.add(i) };
                let writes = (key_flags != 0).then_some(key_flags & WRITE_FLAGS != 0);
                let pos = usize::try_from(positions[i]).ok()?;
                Some(CommandKey { pos, writes })
            })
            .collect();
        if let Some(free) = raw::RedisModule_Free {
            free(keys.cast());
            if !flags.is_null() {
                free(flags.cast());
            }
        }
        Some(found)
    }
}

/// Whether Redis calls the command only to learn its keys (`COMMAND GETKEYS`, cluster routing).
pub fn is_keys_request(ctx: &Context) -> bool {
    // SAFETY: IsKeysPositionRequest only reads the context's flags.
    unsafe { raw::RedisModule_IsKeysPositionRequest.is_some_and(|f| f(ctx.ctx) != 0) }
}

/// Report the argument at `pos` as a key (during a keys request).
pub fn key_at(ctx: &Context, pos: usize) {
    let Ok(pos) = c_int::try_from(pos) else {
        return;
    };
    // SAFETY: KeyAtPos records a position for the running keys request.
    unsafe {
        if let Some(at) = raw::RedisModule_KeyAtPos {
            at(ctx.ctx, pos);
        }
    }
}
