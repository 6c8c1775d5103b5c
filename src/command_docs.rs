//! COMMAND DOCS / COMMAND INFO for every LOCK.* command (summary, complexity, arity, key specs,
//! arguments, since), registered with `RedisModule_SetCommandInfo`, which Redis 7.0 and Valkey
//! both have. Redis copies everything it is given, so the C structures here are temporaries.

use std::ffi::CString;
use std::os::raw::c_int;

use redis_module::{raw, Context};

/// The version of redis-lock that introduced these commands.
const SINCE: &str = "0.1.0";

#[derive(Clone, Copy)]
enum Kind {
    Key,
    String,
    Integer,
    UnixTime,
}

struct Arg {
    name: &'static str,
    kind: Kind,
    /// The keyword in front of the value (`WAIT timeout-ms`).
    token: Option<&'static str>,
    optional: bool,
}

const fn arg(name: &'static str, kind: Kind) -> Arg {
    Arg {
        name,
        kind,
        token: None,
        optional: false,
    }
}

const fn option(token: &'static str, name: &'static str, kind: Kind) -> Arg {
    Arg {
        name,
        kind,
        token: Some(token),
        optional: true,
    }
}

pub struct Doc {
    pub name: &'static str,
    summary: &'static str,
    complexity: &'static str,
    arity: c_int,
    key_flags: u32,
    /// ACL categories: the standard ones the command's flags imply, plus `lock`.
    pub acl: &'static str,
    args: &'static [Arg],
}

// Exactly one of RO/RW/OW/RM, and at most one of INSERT/DELETE/UPDATE (Redis validates both).
const RW_UPDATE: u32 = raw::REDISMODULE_CMD_KEY_RW | raw::REDISMODULE_CMD_KEY_UPDATE;
const RW_DELETE: u32 = raw::REDISMODULE_CMD_KEY_RW | raw::REDISMODULE_CMD_KEY_DELETE;
const RO: u32 = raw::REDISMODULE_CMD_KEY_RO | raw::REDISMODULE_CMD_KEY_ACCESS;

pub const DOCS: &[Doc] = &[
    Doc {
        name: "lock.acquire",
        summary: "Takes a lock for ttl-ms milliseconds, optionally waiting in its FIFO queue, and returns the fencing token.",
        complexity: "O(1)",
        arity: -4,
        key_flags: RW_UPDATE,
        acl: "write slow blocking lock",
        args: &[
            arg("key", Kind::Key),
            arg("owner", Kind::String),
            arg("ttl-ms", Kind::Integer),
            option("WAIT", "timeout-ms", Kind::Integer),
        ],
    },
    Doc {
        name: "lock.release",
        summary: "Releases the lock if owner holds it; the next waiter gets it at once.",
        complexity: "O(1)",
        arity: 3,
        key_flags: RW_DELETE,
        acl: "write fast lock",
        args: &[arg("key", Kind::Key), arg("owner", Kind::String)],
    },
    Doc {
        name: "lock.extend",
        summary: "Sets the holder's lease to end ttl-ms from now.",
        complexity: "O(1)",
        arity: 4,
        key_flags: RW_UPDATE,
        acl: "write fast lock",
        args: &[arg("key", Kind::Key), arg("owner", Kind::String), arg("ttl-ms", Kind::Integer)],
    },
    Doc {
        name: "lock.fence",
        summary: "Returns the live holder's fencing token, or tells whether a token is the live one.",
        complexity: "O(1)",
        arity: -2,
        key_flags: RO,
        acl: "read fast lock",
        args: &[arg("key", Kind::Key), Arg { name: "token", kind: Kind::Integer, token: None, optional: true }],
    },
    Doc {
        name: "lock.info",
        summary: "Shows the holder, its token, lease left, time held, and who waits in order.",
        complexity: "O(1) plus O(N) for the N queued owners listed",
        arity: -2,
        key_flags: RO,
        acl: "read slow lock",
        args: &[arg("key", Kind::Key), option("COUNT", "count", Kind::Integer)],
    },
    Doc {
        name: "lock.forcerelease",
        summary: "Releases the lock whoever holds it; the next waiter gets it at once. For operators.",
        complexity: "O(1)",
        arity: 2,
        key_flags: RW_DELETE,
        acl: "write admin dangerous fast lock",
        args: &[arg("key", Kind::Key)],
    },
    Doc {
        name: "lock.apply",
        summary: "Internal: sets a holder exactly as given. Replicas and the AOF replay it; clients are refused.",
        complexity: "O(1)",
        arity: -5,
        key_flags: raw::REDISMODULE_CMD_KEY_OW | raw::REDISMODULE_CMD_KEY_UPDATE,
        acl: "write slow lock",
        args: &[
            arg("key", Kind::Key),
            arg("owner", Kind::String),
            arg("token", Kind::Integer),
            arg("deadline-unix-ms", Kind::UnixTime),
            Arg { name: "granted-unix-ms", kind: Kind::UnixTime, token: None, optional: true },
        ],
    },
];

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
        Kind::Integer => raw::RedisModuleCommandArgType_REDISMODULE_ARG_TYPE_INTEGER,
        Kind::UnixTime => raw::RedisModuleCommandArgType_REDISMODULE_ARG_TYPE_UNIX_TIME,
    }
}

/// Attach the docs to the registered commands. Servers without the API keep working without them.
pub fn register(ctx: &Context) -> Result<(), String> {
    // SAFETY: both functions exist together from Redis 7.0 on; every pointer handed over lives
    // in `keep` / the local vectors until SetCommandInfo returns, and Redis copies what it needs.
    unsafe {
        let (Some(get_command), Some(set_info)) =
            (raw::RedisModule_GetCommand, raw::RedisModule_SetCommandInfo)
        else {
            return Ok(());
        };
        for doc in DOCS {
            let mut keep = Vec::new();
            let command = get_command(ctx.ctx, cstring(doc.name, &mut keep));
            if command.is_null() {
                return Err(format!("{} is not registered", doc.name));
            }
            let mut key_specs: Vec<raw::RedisModuleCommandKeySpec> = vec![std::mem::zeroed(); 2];
            key_specs[0].flags = u64::from(doc.key_flags);
            key_specs[0].begin_search_type =
                raw::RedisModuleKeySpecBeginSearchType_REDISMODULE_KSPEC_BS_INDEX;
            key_specs[0].bs.index.pos = 1;
            key_specs[0].find_keys_type =
                raw::RedisModuleKeySpecFindKeysType_REDISMODULE_KSPEC_FK_RANGE;
            key_specs[0].fk.range.lastkey = 0;
            key_specs[0].fk.range.keystep = 1;
            key_specs[0].fk.range.limit = 0;

            let mut args: Vec<raw::RedisModuleCommandArg> =
                vec![std::mem::zeroed(); doc.args.len() + 1];
            for (slot, a) in args.iter_mut().zip(doc.args) {
                slot.name = cstring(a.name, &mut keep);
                slot.type_ = arg_type(a.kind);
                slot.key_spec_index = if matches!(a.kind, Kind::Key) { 0 } else { -1 };
                if let Some(token) = a.token {
                    slot.token = cstring(token, &mut keep);
                }
                if a.optional {
                    slot.flags = raw::REDISMODULE_CMD_ARG_OPTIONAL as c_int;
                }
            }

            let version = raw::RedisModuleCommandInfoVersion {
                version: 1,
                sizeof_historyentry: std::mem::size_of::<raw::RedisModuleCommandHistoryEntry>(),
                sizeof_keyspec: std::mem::size_of::<raw::RedisModuleCommandKeySpec>(),
                sizeof_arg: std::mem::size_of::<raw::RedisModuleCommandArg>(),
            };
            let info = raw::RedisModuleCommandInfo {
                version: &version,
                summary: cstring(doc.summary, &mut keep),
                complexity: cstring(doc.complexity, &mut keep),
                since: cstring(SINCE, &mut keep),
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
                if set_acl(command, cstring(doc.acl, &mut keep)) != raw::REDISMODULE_OK as c_int {
                    return Err(format!(
                        "the server refused the ACL categories of {}",
                        doc.name
                    ));
                }
            }
        }
    }
    Ok(())
}
