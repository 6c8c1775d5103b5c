//! `LOCK.GUARD`: a command run only while a token is the live exclusive hold's, and the rules
//! of what it may run. Those known from the words alone are `core::guard_rules`; here are the
//! ones that ask the server: blocking commands, the command's keys (slots, keys holding locks).

use redis_module::{Context, ContextFlags, RedisResult, RedisString, RedisValue};

use crate::core::args;
use crate::core::error::LockError;
use crate::core::guard_rules;
use crate::core::lock;
use crate::core::metrics::STATS;
use crate::core::slot;
use crate::effects::keyspace;
use crate::ffi::call::{self, CallFailed, CommandKey};
use crate::ffi::clock;
use crate::shell::commands::refuse_on_replica;

/// `LOCK.GUARD key token command [arg ...]`: run `command` only while `token` is the token of
/// the live exclusive hold of `key`, as the calling user, replicated and logged as the command
/// itself. Its reply is the command's.
pub fn guard(ctx: &Context, args: &[RedisString]) -> RedisResult {
    if call::is_keys_request(ctx) {
        report_keys(ctx, args);
        return Ok(RedisValue::NoReply);
    }
    refuse_on_replica(ctx)?;
    let (token, command) = args::guard(&args[2..])?;
    check_command(ctx, &args[1], command)?;
    // Another client's plain-string lock: no token of the module's is live there.
    let read = keyspace::read_state(ctx, &args[1]);
    let state = keyspace::unless_foreign(ctx, &args[1], read)?.flatten();
    if !lock::is_exclusive_token(state.as_ref(), token, clock::now_ms()) {
        STATS.guard_stale.incr();
        return Err(LockError::Stale.into());
    }
    STATS.guarded.incr();
    match call::call_and_reply(ctx, command) {
        Ok(()) => Ok(RedisValue::NoReply),
        Err(CallFailed::BadName) => Err(LockError::UnknownCommand.into()),
        Err(CallFailed::Refused(errno)) => {
            ctx.log_warning(&format!(
                "redis-lock: LOCK.GUARD: the server refused to run the command (errno {errno})"
            ));
            Err(LockError::CallRefused.into())
        }
    }
}

/// The lock and the command's own keys (movable keys: cluster clients route by them).
fn report_keys(ctx: &Context, args: &[RedisString]) {
    call::key_at(ctx, 1);
    for key in call::command_keys(ctx, &args[3..]).unwrap_or_default() {
        call::key_at(ctx, 3 + key.pos);
    }
}

/// Refuse what the guard may not run: by its words, blocking, keys in another slot than the
/// lock's, or a write to any key that holds a lock (the guarding one included: a guarded SET
/// of the lock's own key would destroy the lock and its queue). Reads of lock keys are fine.
fn check_command(
    ctx: &Context,
    lock_key: &RedisString,
    command: &[RedisString],
) -> Result<(), LockError> {
    if let Some(refused) = guard_rules::refusal(command) {
        return Err(refused);
    }
    let traits = CommandTraits::of(ctx, command[0].as_slice());
    if traits.blocking {
        return Err(LockError::GuardBlocking);
    }
    let keys = call::command_keys(ctx, command).unwrap_or_default();
    let word = |key: &CommandKey| command.get(key.pos);
    if ctx.get_flags().contains(ContextFlags::CLUSTER) {
        let lock_slot = slot::of(lock_key.as_slice());
        if keys
            .iter()
            .filter_map(word)
            .any(|key| slot::of(key.as_slice()) != lock_slot)
        {
            return Err(LockError::CrossSlot);
        }
    }
    // A key without flags of its own counts as written when the command is a write command.
    let mut written = keys
        .iter()
        .filter(|key| key.writes.unwrap_or(traits.write))
        .filter_map(word);
    if written.any(|key| keyspace::holds_lock(ctx, key)) {
        return Err(LockError::GuardWritesLock);
    }
    Ok(())
}

/// What the server's `COMMAND INFO` flags say of a command.
#[derive(Clone, Copy, Debug, Default)]
struct CommandTraits {
    blocking: bool,
    write: bool,
}

type TraitsByName = std::collections::HashMap<Vec<u8>, CommandTraits>;

/// The traits of each command asked about so far (commands do not change while the server
/// runs, but for modules loaded later, which are asked about when first seen).
static TRAITS: std::sync::Mutex<Option<TraitsByName>> = std::sync::Mutex::new(None);

impl CommandTraits {
    /// The traits of the command `name` (`COMMAND INFO`, asked once per name). An unknown
    /// command has none: running it will say it is unknown.
    fn of(ctx: &Context, name: &[u8]) -> Self {
        let key = name.to_ascii_lowercase();
        let cache = || TRAITS.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(known) = cache().get_or_insert_with(Default::default).get(&key) {
            return *known;
        }
        let info = ctx.create_string("INFO");
        let command = RedisString::create_from_slice(ctx.ctx, &key);
        let Ok(RedisValue::Array(entries)) = ctx.call("COMMAND", &[&info, &command]) else {
            return Self::default();
        };
        let Some(RedisValue::Array(entry)) = entries.first() else {
            return Self::default();
        };
        let flags: Vec<&[u8]> = match entry.get(2) {
            Some(RedisValue::Array(flags)) => flags.iter().filter_map(flag_name).collect(),
            _ => Vec::new(),
        };
        let traits = Self {
            blocking: flags.contains(&b"blocking".as_slice()),
            write: flags.contains(&b"write".as_slice()),
        };
        cache()
            .get_or_insert_with(Default::default)
            .insert(key, traits);
        traits
    }
}

fn flag_name(flag: &RedisValue) -> Option<&[u8]> {
    match flag {
        RedisValue::SimpleString(s) | RedisValue::BulkString(s) => Some(s.as_bytes()),
        RedisValue::StringBuffer(b) => Some(b),
        _ => None,
    }
}
