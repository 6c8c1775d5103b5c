//! Registering a command from its one description (`Spec`, declared in `shell::table`): the
//! command itself (`RedisModule_CreateCommand`), its COMMAND DOCS / COMMAND INFO (summary,
//! complexity, arity, key specs, arguments, since: `RedisModule_SetCommandInfo`, which Redis 7.0
//! and Valkey both have) and its ACL categories where the server takes them. Redis copies
//! everything it is given, so the C structures here are temporaries.

use std::ffi::CString;
use std::os::raw::c_int;

use redis_module::{raw, Context};

/// The version of redis-lock that introduced these commands.
const SINCE: &str = "0.1.0";

#[derive(Clone, Copy)]
pub enum Kind {
    Key,
    /// How many keys follow (`numkeys`): as the command's first argument, its key spec counts
    /// the keys from it (as `LOCK.MACQUIRE` takes them).
    NumKeys,
    String,
    Integer,
    UnixTime,
    /// A keyword alone (`SHARED`).
    PureToken,
}

pub struct Arg {
    name: &'static str,
    kind: Kind,
    /// The keyword in front of the value (`WAIT timeout-ms`).
    token: Option<&'static str>,
    optional: bool,
    /// It may repeat (the arguments of a guarded command).
    multiple: bool,
}

impl Arg {
    /// The words a synopsis shows for it: its keyword, then its name unless it is a keyword
    /// alone (`WAIT timeout-ms`, `SHARED`, `key`).
    pub fn words(&self) -> impl Iterator<Item = &'static str> {
        let name = (!matches!(self.kind, Kind::PureToken)).then_some(self.name);
        self.token.into_iter().chain(name)
    }
}

/// A positional argument.
pub const fn arg(name: &'static str, kind: Kind) -> Arg {
    Arg {
        name,
        kind,
        token: None,
        optional: false,
        multiple: false,
    }
}

/// An optional `TOKEN value` pair.
pub const fn option(token: &'static str, name: &'static str, kind: Kind) -> Arg {
    Arg {
        name,
        kind,
        token: Some(token),
        optional: true,
        multiple: false,
    }
}

/// An optional keyword alone (`SHARED`).
pub const fn flag(token: &'static str) -> Arg {
    Arg {
        name: token,
        kind: Kind::PureToken,
        token: Some(token),
        optional: true,
        multiple: false,
    }
}

/// An optional positional argument.
pub const fn optional(name: &'static str, kind: Kind) -> Arg {
    Arg {
        name,
        kind,
        token: None,
        optional: true,
        multiple: false,
    }
}

/// One or more keys (`key [key ...]`, counted by a `numkeys` before them).
pub const fn keys(name: &'static str) -> Arg {
    Arg {
        name,
        kind: Kind::Key,
        token: None,
        optional: false,
        multiple: true,
    }
}

/// Optional arguments that may repeat (`[arg ...]`).
pub const fn rest(name: &'static str, kind: Kind) -> Arg {
    Arg {
        name,
        kind,
        token: None,
        optional: true,
        multiple: true,
    }
}

/// Everything the server is told about one command.
pub struct Spec {
    /// As users write it (`LOCK.ACQUIRE`); registered in lower case.
    pub name: &'static str,
    /// Command flags for `RedisModule_CreateCommand` ("write deny-oom fast", ...).
    pub flags: &'static str,
    /// Redis's convention: N exactly, -N at least N (the command name counts).
    pub arity: c_int,
    /// Flags of the key spec of the key at position 1 (`NO_KEYS`: the command takes none).
    pub key_flags: u32,
    /// ACL categories: the standard ones the command's flags imply, plus `lock`.
    pub acl: &'static str,
    pub summary: &'static str,
    pub complexity: &'static str,
    pub args: &'static [Arg],
}

impl Spec {
    /// Whether its keys are counted by a `numkeys` first argument (its flags then include
    /// `getkeys-api`: Redis asks the command where its keys are, `ffi::entry`).
    pub fn counts_keys(&self) -> bool {
        matches!(
            self.args.first(),
            Some(Arg {
                kind: Kind::NumKeys,
                ..
            })
        )
    }

    /// Whether `argc` arguments (the name included) match the arity.
    pub fn arity_allows(&self, argc: usize) -> bool {
        let argc = c_int::try_from(argc).unwrap_or(c_int::MAX);
        if self.arity >= 0 {
            argc == self.arity
        } else {
            argc >= -self.arity
        }
    }
}

// Key spec flags: exactly one of RO/RW/OW/RM, and at most one of INSERT/DELETE/UPDATE (Redis
// validates both).
pub const RW_UPDATE: u32 = raw::REDISMODULE_CMD_KEY_RW | raw::REDISMODULE_CMD_KEY_UPDATE;
pub const RW_DELETE: u32 = raw::REDISMODULE_CMD_KEY_RW | raw::REDISMODULE_CMD_KEY_DELETE;
pub const RO: u32 = raw::REDISMODULE_CMD_KEY_RO | raw::REDISMODULE_CMD_KEY_ACCESS;
pub const OW_UPDATE: u32 = raw::REDISMODULE_CMD_KEY_OW | raw::REDISMODULE_CMD_KEY_UPDATE;
/// A command without keys (internal records such as `LOCK.EPOCH`).
pub const NO_KEYS: u32 = 0;
/// A key read, with more keys the spec cannot point at (the server then asks the command).
pub const RO_INCOMPLETE: u32 = RO | raw::REDISMODULE_CMD_KEY_INCOMPLETE;

/// The one key spec of a command with keys: the key at position 1, or (`counted`) the keys
/// after a `numkeys` at position 1, as many as it says.
fn set_first_key_spec(spec: &mut raw::RedisModuleCommandKeySpec, flags: u32, counted: bool) {
    spec.flags = u64::from(flags);
    spec.begin_search_type = raw::RedisModuleKeySpecBeginSearchType_REDISMODULE_KSPEC_BS_INDEX;
    // The union members the search and find types just chosen select.
    spec.bs.index.pos = 1;
    if counted {
        spec.find_keys_type = raw::RedisModuleKeySpecFindKeysType_REDISMODULE_KSPEC_FK_KEYNUM;
        spec.fk.keynum.keynumidx = 0;
        spec.fk.keynum.firstkey = 1;
        spec.fk.keynum.keystep = 1;
    } else {
        spec.find_keys_type = raw::RedisModuleKeySpecFindKeysType_REDISMODULE_KSPEC_FK_RANGE;
        spec.fk.range.lastkey = 0;
        spec.fk.range.keystep = 1;
        spec.fk.range.limit = 0;
    }
}

fn cstring(s: &str, keep: &mut Vec<CString>) -> *const std::os::raw::c_char {
    let c = CString::new(s).unwrap_or_default();
    let ptr = c.as_ptr();
    keep.push(c); // moving a CString does not move its heap buffer
    ptr
}

fn arg_type(kind: Kind) -> raw::RedisModuleCommandArgType {
    match kind {
        Kind::Key => raw::RedisModuleCommandArgType_REDISMODULE_ARG_TYPE_KEY,
        Kind::String => raw::RedisModuleCommandArgType_REDISMODULE_ARG_TYPE_STRING,
        Kind::Integer | Kind::NumKeys => {
            raw::RedisModuleCommandArgType_REDISMODULE_ARG_TYPE_INTEGER
        }
        Kind::UnixTime => raw::RedisModuleCommandArgType_REDISMODULE_ARG_TYPE_UNIX_TIME,
        Kind::PureToken => raw::RedisModuleCommandArgType_REDISMODULE_ARG_TYPE_PURE_TOKEN,
    }
}

/// Create the command `spec` with `entry` as its handler, then attach its docs and ACL
/// categories. Servers without the docs API keep working without them.
pub fn register(ctx: &Context, spec: &Spec, entry: raw::RedisModuleCmdFunc) -> Result<(), String> {
    let mut keep = Vec::new();
    let name = cstring(&spec.name.to_ascii_lowercase(), &mut keep);
    // Keys counted by numkeys are found by the key spec alone (SetCommandInfo below).
    let key_step = c_int::from(spec.key_flags != NO_KEYS && !spec.counts_keys());
    // SAFETY: registering at load time with C strings kept alive in `keep`; Redis copies them.
    let created = unsafe {
        raw::RedisModule_CreateCommand.map_or(raw::REDISMODULE_ERR as c_int, |create| {
            create(
                ctx.ctx,
                name,
                entry,
                cstring(spec.flags, &mut keep),
                key_step,
                key_step,
                key_step,
            )
        })
    };
    if created != raw::REDISMODULE_OK as c_int {
        return Err(format!("failed to create the command {}", spec.name));
    }
    describe(ctx, name, spec, &mut keep)
}

/// The argument list of `doc` for SetCommandInfo, ending with a zeroed entry.
fn arg_list(doc: &Spec, keep: &mut Vec<CString>) -> Vec<raw::RedisModuleCommandArg> {
    // SAFETY: a zeroed RedisModuleCommandArg is its documented "unset" value (null pointers,
    // no flags): the list's terminator, and the start of every entry filled in below.
    let mut args: Vec<raw::RedisModuleCommandArg> =
        vec![unsafe { std::mem::zeroed() }; doc.args.len() + 1];
    for (slot, a) in args.iter_mut().zip(doc.args) {
        slot.name = cstring(a.name, keep);
        slot.type_ = arg_type(a.kind);
        slot.key_spec_index = if matches!(a.kind, Kind::Key) { 0 } else { -1 };
        if let Some(token) = a.token {
            slot.token = cstring(token, keep);
        }
        if a.optional {
            slot.flags |= raw::REDISMODULE_CMD_ARG_OPTIONAL as c_int;
        }
        if a.multiple {
            slot.flags |= raw::REDISMODULE_CMD_ARG_MULTIPLE as c_int;
        }
    }
    args
}

/// Attach the COMMAND DOCS / COMMAND INFO and ACL categories of `doc` to the command `name`.
fn describe(
    ctx: &Context,
    name: *const std::os::raw::c_char,
    doc: &Spec,
    keep: &mut Vec<CString>,
) -> Result<(), String> {
    // SAFETY: both functions exist together from Redis 7.0 on; every pointer handed over lives
    // in `keep` / the local vectors until SetCommandInfo returns, and Redis copies what it needs.
    unsafe {
        let (Some(get_command), Some(set_info)) =
            (raw::RedisModule_GetCommand, raw::RedisModule_SetCommandInfo)
        else {
            return Ok(());
        };
        let command = get_command(ctx.ctx, name);
        if command.is_null() {
            return Err(format!("{} is not registered", doc.name));
        }
        // The list ends with a zeroed entry; a command without keys has only that.
        let mut key_specs: Vec<raw::RedisModuleCommandKeySpec> = vec![std::mem::zeroed(); 2];
        if doc.key_flags == NO_KEYS {
            key_specs.truncate(1);
        } else {
            set_first_key_spec(&mut key_specs[0], doc.key_flags, doc.counts_keys());
        }
        let mut args = arg_list(doc, keep);
        let version = raw::RedisModuleCommandInfoVersion {
            version: 1,
            sizeof_historyentry: std::mem::size_of::<raw::RedisModuleCommandHistoryEntry>(),
            sizeof_keyspec: std::mem::size_of::<raw::RedisModuleCommandKeySpec>(),
            sizeof_arg: std::mem::size_of::<raw::RedisModuleCommandArg>(),
        };
        let info = raw::RedisModuleCommandInfo {
            version: &version,
            summary: cstring(doc.summary, keep),
            complexity: cstring(doc.complexity, keep),
            since: cstring(SINCE, keep),
            history: std::ptr::null_mut(),
            tips: std::ptr::null(),
            arity: doc.arity,
            key_specs: key_specs.as_mut_ptr(),
            args: args.as_mut_ptr(),
        };
        if set_info(command, &info) != raw::REDISMODULE_OK as c_int {
            return Err(format!("SetCommandInfo refused the docs of {}", doc.name));
        }
        // Redis 7.0 has no SetCommandACLCategories: its module commands have no categories
        // (the README gives the per-command ACL rules to use there).
        if let Some(set_acl) = raw::RedisModule_SetCommandACLCategories {
            if set_acl(command, cstring(doc.acl, keep)) != raw::REDISMODULE_OK as c_int {
                return Err(format!(
                    "the server refused the ACL categories of {}",
                    doc.name
                ));
            }
        }
    }
    Ok(())
}
