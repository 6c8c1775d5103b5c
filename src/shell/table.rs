//! The one command table: every LOCK.* command's name, flags, arity, key spec, ACL categories,
//! summary, complexity, arguments and handler, declared once. It drives registration
//! (`register`), COMMAND DOCS / COMMAND INFO, and the arity check before each handler runs
//! (`ffi::entry`, where Redis calls in).

use redis_module::Context;

use crate::ffi::command_info::{
    arg, flag, keys, option, optional, rest, Kind, Spec, NO_KEYS, OW_UPDATE, RO, RO_INCOMPLETE,
    RW_DELETE, RW_UPDATE,
};
use crate::ffi::entry;
use crate::shell::{commands, guarded, hot, sets, watch};

pub use crate::ffi::entry::Command;

pub static COMMANDS: &[Command] = &[
    Command {
        spec: Spec {
            name: "LOCK.ACQUIRE",
            flags: "write deny-oom blocking",
            arity: -4,
            key_flags: RW_UPDATE,
            acl: "write slow blocking lock",
            summary: "Takes a lock (exclusive, SHARED, or permits of a LIMIT semaphore) for ttl-ms milliseconds, optionally waiting in its FIFO queue, and returns the fencing token.",
            complexity: "O(1) for an exclusive lock; O(N) in the N holders of a shared lock or semaphore",
            args: &[
                arg("key", Kind::Key),
                arg("owner", Kind::String),
                arg("ttl-ms", Kind::Integer),
                flag("SHARED"),
                flag("SESSION"),
                option("LIMIT", "max", Kind::Integer),
                option("PERMITS", "n", Kind::Integer),
                option("WAIT", "timeout-ms", Kind::Integer),
            ],
        },
        most: None,
        handler: commands::acquire,
    },
    Command {
        spec: Spec {
            name: "LOCK.RELEASE",
            flags: "write fast",
            arity: -3,
            key_flags: RW_DELETE,
            acl: "write fast lock",
            summary: "Releases the lock if owner holds it; the next waiter gets it at once.",
            complexity: "O(1)",
            args: &[
                arg("key", Kind::Key),
                arg("owner", Kind::String),
                option("TOKEN", "token", Kind::Integer),
            ],
        },
        most: None,
        handler: commands::release,
    },
    Command {
        spec: Spec {
            name: "LOCK.EXTEND",
            flags: "write deny-oom fast",
            arity: -4,
            key_flags: RW_UPDATE,
            acl: "write fast lock",
            summary: "Sets the holder's lease to end ttl-ms from now.",
            complexity: "O(1)",
            args: &[
                arg("key", Kind::Key),
                arg("owner", Kind::String),
                arg("ttl-ms", Kind::Integer),
                option("TOKEN", "token", Kind::Integer),
            ],
        },
        most: None,
        handler: commands::extend,
    },
    Command {
        spec: Spec {
            name: "LOCK.MACQUIRE",
            flags: "write deny-oom blocking getkeys-api",
            arity: -5,
            key_flags: RW_UPDATE,
            acl: "write slow blocking lock",
            summary: "Takes a set of locks in one step or none (exclusive, or all SHARED), optionally waiting in all their FIFO queues at once, and returns each key's fencing token.",
            complexity: "O(N) for the N keys",
            args: &[
                arg("numkeys", Kind::NumKeys),
                keys("key"),
                arg("owner", Kind::String),
                arg("ttl-ms", Kind::Integer),
                flag("SHARED"),
                flag("SESSION"),
                option("WAIT", "timeout-ms", Kind::Integer),
            ],
        },
        most: None,
        handler: sets::macquire,
    },
    Command {
        spec: Spec {
            name: "LOCK.MRELEASE",
            flags: "write getkeys-api",
            arity: -4,
            key_flags: RW_DELETE,
            acl: "write slow lock",
            summary: "Releases every one of the keys the owner holds; each next waiter gets its key at once.",
            complexity: "O(N) for the N keys",
            args: &[
                arg("numkeys", Kind::NumKeys),
                keys("key"),
                arg("owner", Kind::String),
            ],
        },
        most: None,
        handler: sets::mrelease,
    },
    Command {
        spec: Spec {
            name: "LOCK.FENCE",
            flags: "readonly fast",
            arity: -2,
            key_flags: RO,
            acl: "read fast lock",
            summary: "Returns the live holder's fencing token, or tells whether a token is the live one.",
            complexity: "O(1)",
            args: &[arg("key", Kind::Key), optional("token", Kind::Integer)],
        },
        most: Some(3),
        handler: commands::fence,
    },
    Command {
        spec: Spec {
            name: "LOCK.INFO",
            flags: "readonly",
            arity: -2,
            key_flags: RO,
            acl: "read slow lock",
            summary: "Shows the holder, its token, lease left, time held, and who waits in order.",
            complexity: "O(1) plus O(N) for the N queued owners listed",
            args: &[arg("key", Kind::Key), option("COUNT", "count", Kind::Integer)],
        },
        most: None,
        handler: commands::info,
    },
    Command {
        spec: Spec {
            name: "LOCK.WATCH",
            flags: "readonly blocking",
            arity: -2,
            key_flags: RO,
            acl: "read slow blocking lock",
            summary: "Returns the lock's holders when they differ from the cursor AFTER names, else waits up to WAIT ms until they change.",
            complexity: "O(H) for the H live holds",
            args: &[
                arg("key", Kind::Key),
                option("AFTER", "cursor", Kind::String),
                option("WAIT", "timeout-ms", Kind::Integer),
            ],
        },
        most: None,
        handler: watch::watch,
    },
    Command {
        spec: Spec {
            name: "LOCK.FORCERELEASE",
            flags: "write admin fast",
            arity: 2,
            key_flags: RW_DELETE,
            acl: "write admin dangerous fast lock",
            summary: "Releases the lock whoever holds it; the next waiter gets it at once. For operators.",
            complexity: "O(1)",
            args: &[arg("key", Kind::Key)],
        },
        most: None,
        handler: commands::force_release,
    },
    Command {
        spec: Spec {
            name: "LOCK.APPLY",
            flags: "write deny-oom",
            arity: -5,
            key_flags: OW_UPDATE,
            acl: "write slow lock",
            summary: "Internal: sets a holder exactly as given, its lease counted again from now. Replicas and the AOF replay it; clients are refused. (Earlier versions' form, with deadline-unix-ms [granted-unix-ms] in place of PX left-ms held-ms, is still read.)",
            complexity: "O(1)",
            args: &[
                arg("key", Kind::Key),
                arg("owner", Kind::String),
                arg("token", Kind::Integer),
                option("PX", "left-ms", Kind::Integer),
                arg("held-ms", Kind::Integer),
            ],
        },
        most: Some(7),
        handler: commands::apply,
    },
    Command {
        spec: Spec {
            name: "LOCK.APPLYSTATE",
            flags: "write deny-oom",
            arity: 3,
            key_flags: OW_UPDATE,
            acl: "write slow lock",
            summary: "Internal: sets a lock's shared holds or semaphore permits exactly as encoded. Replicas and the AOF replay it; clients are refused.",
            complexity: "O(N) in the N holds",
            args: &[arg("key", Kind::Key), arg("payload", Kind::String)],
        },
        most: None,
        handler: commands::apply_state,
    },
    Command {
        spec: Spec {
            name: "LOCK.GUARD",
            flags: "write getkeys-api",
            arity: -4,
            key_flags: RO_INCOMPLETE,
            acl: "write slow lock",
            summary: "Runs a command only while token is the token of the lock's live exclusive hold; replicated as the command itself.",
            complexity: "O(1) plus the complexity of the command",
            args: &[
                arg("key", Kind::Key),
                arg("token", Kind::Integer),
                arg("command", Kind::String),
                rest("arg", Kind::String),
            ],
        },
        most: None,
        handler: guarded::guard,
    },
    Command {
        spec: Spec {
            name: "LOCK.EPOCH",
            flags: "write fast",
            arity: 2,
            key_flags: NO_KEYS,
            acl: "write fast lock",
            summary: "Internal: the fencing epoch a master started; replicas and the AOF replay it so a promoted replica starts above it. Clients are refused.",
            complexity: "O(1)",
            args: &[arg("epoch", Kind::Integer)],
        },
        most: None,
        handler: commands::epoch,
    },
    Command {
        spec: Spec {
            name: "LOCK.HOT",
            flags: "readonly",
            arity: -2,
            key_flags: NO_KEYS,
            acl: "read slow lock",
            summary: "Lists the most contended lock names (WAITS: requests that queued, EXPIRED: leases that ran out while held), each with its estimated count and error bound.",
            complexity: "O(C log C) for the C names tracked (four times lock.hot-names)",
            args: &[arg("signal", Kind::String), option("COUNT", "count", Kind::Integer)],
        },
        most: None,
        handler: hot::hot,
    },
];

/// Register every command of the table with its docs and ACL categories.
pub fn register(ctx: &Context) -> Result<(), String> {
    entry::register_all(ctx, COMMANDS)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn arity_follows_the_redis_convention() {
        let force = &COMMANDS
            .iter()
            .find(|c| c.spec.name == "LOCK.FORCERELEASE")
            .expect("in the table")
            .spec;
        assert!(force.arity_allows(2));
        assert!(!force.arity_allows(1) && !force.arity_allows(3));
        let release = &COMMANDS[1];
        // Named options: extra words are the parser's syntax error, not an arity error.
        assert!(release.takes(3) && release.takes(7) && !release.takes(2));
        let acquire = &COMMANDS[0].spec;
        assert!(!acquire.arity_allows(3));
        assert!(acquire.arity_allows(4) && acquire.arity_allows(6));
        let fence = COMMANDS
            .iter()
            .find(|c| c.spec.name == "LOCK.FENCE")
            .expect("in the table");
        assert!(fence.takes(2) && fence.takes(3) && !fence.takes(4));
    }

    #[test]
    fn names_are_unique_and_arguments_match_arity() {
        let mut names: Vec<&str> = COMMANDS.iter().map(|c| c.spec.name).collect();
        names.sort_unstable();
        names.dedup();
        assert_eq!(names.len(), COMMANDS.len());
        for c in COMMANDS {
            assert!(c.spec.name.starts_with("LOCK."));
            assert!(c.spec.acl.ends_with("lock"), "{}", c.spec.name);
        }
    }

    /// Every synopsis in a doc comment (`` `LOCK.RELEASE key owner [TOKEN token]` ``) names the
    /// same words as the command's arguments in this table, so none can omit one.
    #[test]
    fn synopses_in_comments_name_the_table_arguments() {
        let src = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
        let mut checked = 0;
        for (path, text) in rust_files(&src) {
            for line in text.lines().filter(|l| l.trim_start().starts_with("//")) {
                for c in COMMANDS {
                    let Some(synopsis) = synopsis_in(line, c) else {
                        continue;
                    };
                    let mut shown: Vec<&str> = synopsis
                        .split(|ch: char| ch.is_whitespace() || "[]|".contains(ch))
                        .filter(|w| !w.is_empty() && *w != "...")
                        .collect();
                    let mut table: Vec<&str> = c.spec.args.iter().flat_map(|a| a.words()).collect();
                    // `key [key ...]` names one argument that repeats.
                    shown.sort_unstable();
                    shown.dedup();
                    table.sort_unstable();
                    assert_eq!(shown, table, "{}: {line}", path.display());
                    checked += 1;
                }
            }
        }
        assert!(checked >= COMMANDS.len(), "only {checked} synopses found");
    }

    /// The words after the name in `` `LOCK.NAME first ...` `` where `first` is the command's
    /// first argument (so `LOCK.ACQUIRE ... WAIT` and `LOCK.APPLY key ...` are mentions, not
    /// synopses).
    fn synopsis_in<'a>(line: &'a str, c: &Command) -> Option<&'a str> {
        let start = format!("`{} ", c.spec.name);
        let at = line.find(&start)? + start.len();
        let rest = &line[at..];
        let synopsis = &rest[..rest.find('`')?];
        let first = c.spec.args.first()?.words().next()?;
        let elided = synopsis.ends_with(" ...");
        (synopsis.split_whitespace().next() == Some(first) && !elided).then_some(synopsis)
    }

    fn rust_files(dir: &std::path::Path) -> Vec<(std::path::PathBuf, String)> {
        let mut files = Vec::new();
        for entry in std::fs::read_dir(dir).expect("read src").flatten() {
            let path = entry.path();
            if path.is_dir() {
                files.extend(rust_files(&path));
            } else if path.extension().is_some_and(|e| e == "rs") {
                let text = std::fs::read_to_string(&path).expect("read a source file");
                files.push((path, text));
            }
        }
        files
    }
}
