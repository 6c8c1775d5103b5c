//! The C entry point of every command: one per row of the command table the shell declares
//! (`shell::table`) and hands over at load (`register_all`). Each checks the arity, runs the
//! row's handler with panics contained (`panics`) and sends its reply.

use std::os::raw::c_int;
use std::sync::OnceLock;

use redis_module::{raw, Context, RedisError, Status};

use crate::core::error::LockError;
use crate::core::lock_set;
use crate::ffi::command_info::{self, Spec};
use crate::ffi::handlers;
use crate::ffi::panics::{self, Handler};

/// One row of the command table.
pub struct Command {
    pub spec: Spec,
    /// The most arguments (the name included) a command whose optional arguments are all
    /// positional takes (LOCK.FENCE, LOCK.APPLY): more is an arity error, as for a fixed arity.
    /// A command with named options has none: a repeated or extra word there is the parser's
    /// syntax error, as for every built-in command with options.
    pub most: Option<usize>,
    pub handler: Handler,
}

impl Command {
    /// Whether `argc` arguments (the name included) fit this command.
    pub fn takes(&self, argc: usize) -> bool {
        self.spec.arity_allows(argc) && self.most.is_none_or(|most| argc <= most)
    }
}

/// The table, once registered.
static TABLE: OnceLock<&'static [Command]> = OnceLock::new();

/// What Redis calls for row `I` of the table.
extern "C" fn entry<const I: usize>(
    ctx: *mut raw::RedisModuleCtx,
    argv: *mut *mut raw::RedisModuleString,
    argc: c_int,
) -> c_int {
    let command = TABLE.get().and_then(|table| table.get(I));
    let status = serve(ctx, argv, argc, command);
    if let Some(h) = handlers::get() {
        panics::contain(
            "after a command",
            || (),
            || (h.after_command)(&Context::new(ctx)),
        );
    }
    status
}

fn serve(
    ctx: *mut raw::RedisModuleCtx,
    argv: *mut *mut raw::RedisModuleString,
    argc: c_int,
    command: Option<&Command>,
) -> c_int {
    panics::serve(ctx, argv, argc, |ctx: &Context, args| match command {
        // Redis asks where the keys are (cluster routing, ACL): they follow `numkeys`.
        Some(command) if command.spec.counts_keys() && keys_position_request(ctx) => {
            panics::contain(
                command.spec.name,
                || (),
                || {
                    let numkeys = args.get(1).map_or(&[][..], |a| a.as_slice());
                    report_key_positions(ctx, lock_set::key_positions(numkeys, args.len()));
                },
            );
            Status::Ok
        }
        Some(command) if command.takes(args.len()) => {
            panics::command(ctx, command.spec.name, args, command.handler)
        }
        Some(_) => ctx.reply(Err(RedisError::WrongArity)),
        None => ctx.reply(Err(LockError::UnknownCommand.into())),
    })
}

/// Whether Redis calls the command only to learn its keys' positions (`getkeys-api`).
fn keys_position_request(ctx: &Context) -> bool {
    // SAFETY: `ctx` is the live context of this call; the function only reads its flags.
    unsafe { raw::RedisModule_IsKeysPositionRequest.is_some_and(|f| f(ctx.ctx) != 0) }
}

/// Tell Redis where the keys are, in answer to `keys_position_request`.
fn report_key_positions(ctx: &Context, positions: std::ops::Range<usize>) {
    for pos in positions {
        // SAFETY: called on the main thread inside a keys position request, with a position
        // below argc.
        unsafe {
            if let (Some(key_at), Ok(pos)) = (raw::RedisModule_KeyAtPos, c_int::try_from(pos)) {
                key_at(ctx.ctx, pos);
            }
        }
    }
}

/// One entry point per row (a function pointer cannot carry the row): the most rows a table
/// may have.
const ENTRIES: [raw::RedisModuleCmdFunc; 16] = [
    Some(entry::<0>),
    Some(entry::<1>),
    Some(entry::<2>),
    Some(entry::<3>),
    Some(entry::<4>),
    Some(entry::<5>),
    Some(entry::<6>),
    Some(entry::<7>),
    Some(entry::<8>),
    Some(entry::<9>),
    Some(entry::<10>),
    Some(entry::<11>),
    Some(entry::<12>),
    Some(entry::<13>),
    Some(entry::<14>),
    Some(entry::<15>),
];

/// Register every command of `table` with its docs and ACL categories (once, at load).
pub fn register_all(ctx: &Context, table: &'static [Command]) -> Result<(), String> {
    if table.len() > ENTRIES.len() {
        return Err(format!(
            "redis-lock: {} commands, entry points for {}",
            table.len(),
            ENTRIES.len()
        ));
    }
    TABLE
        .set(table)
        .map_err(|_| "redis-lock: commands registered twice".to_string())?;
    for (command, entry) in table.iter().zip(ENTRIES) {
        command_info::register(ctx, &command.spec, entry)?;
    }
    Ok(())
}
