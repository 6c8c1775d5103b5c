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

/// The positions (in `words`, the command name at 0) of the keys of the command `words`, as the
/// server finds them; `None` if it does not know the command.
pub fn command_keys(ctx: &Context, words: &[RedisString]) -> Option<Vec<usize>> {
    let mut argv: Vec<*mut raw::RedisModuleString> = words.iter().map(|a| a.inner).collect();
    let argc = c_int::try_from(argv.len()).ok()?;
    let mut count: c_int = 0;
    // SAFETY: GetCommandKeys reads `argc` module strings and returns an array of `count`
    // positions that the module frees with RedisModule_Free.
    unsafe {
        let keys = raw::RedisModule_GetCommandKeys?(ctx.ctx, argv.as_mut_ptr(), argc, &mut count);
        if keys.is_null() {
            return None;
        }
        let positions = std::slice::from_raw_parts(keys, usize::try_from(count).unwrap_or(0))
            .iter()
            .filter_map(|&p| usize::try_from(p).ok())
            .collect();
        if let Some(free) = raw::RedisModule_Free {
            free(keys.cast());
        }
        Some(positions)
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
