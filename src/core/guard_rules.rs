//! What `LOCK.GUARD` refuses to run, known from the command's words alone. The rules that need
//! the server (blocking commands, keys that hold locks, slots) live with the handler.

use crate::core::args::Arg;
use crate::core::error::LockError;

/// Commands about the connection or its transaction: inside a guard they would act on the
/// module call's temporary client (SELECT there selects for nobody), so they mean nothing.
/// Script mode refuses most of them anyway; naming them here gives one clear error.
const CONNECTION_COMMANDS: [&str; 14] = [
    "select",
    "readonly",
    "readwrite",
    "asking",
    "multi",
    "exec",
    "discard",
    "watch",
    "unwatch",
    "reset",
    "auth",
    "hello",
    "quit",
    "client",
];

/// Commands that wipe or swap whole databases: they would take the guarding lock (and every
/// other lock) with them, and no key of theirs says so.
const DATABASE_COMMANDS: [&str; 3] = ["flushall", "flushdb", "swapdb"];

/// Why `command` (its name first) may not run inside `LOCK.GUARD`, if its words alone say so.
pub fn refusal<A: Arg>(command: &[A]) -> Option<LockError> {
    let (name, args) = command.split_first()?;
    let name = name.bytes();
    let is = |list: &[&str]| list.iter().any(|c| c.as_bytes().eq_ignore_ascii_case(name));
    if name
        .get(..5)
        .is_some_and(|p| p.eq_ignore_ascii_case(b"lock."))
    {
        Some(LockError::GuardLockCommand)
    } else if is(&CONNECTION_COMMANDS) {
        Some(LockError::GuardConnectionCommand)
    } else if is(&DATABASE_COMMANDS) || is(&["copy"]) && copies_to_another_db(args) {
        Some(LockError::GuardDatabaseCommand)
    } else {
        None
    }
}

/// `COPY source destination [DB db] [REPLACE]`: with `DB` it writes a database whose locks the
/// guard does not look at.
fn copies_to_another_db<A: Arg>(args: &[A]) -> bool {
    args.iter()
        .skip(2)
        .any(|a| a.bytes().eq_ignore_ascii_case(b"DB"))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn refused(words: &[&'static str]) -> Option<LockError> {
        let words: Vec<&[u8]> = words.iter().map(|w| w.as_bytes()).collect();
        refusal(&words)
    }

    #[test]
    fn refuses_lock_connection_and_database_commands() {
        assert_eq!(
            refused(&["lock.acquire", "k"]),
            Some(LockError::GuardLockCommand)
        );
        assert_eq!(refused(&["LOCK.GUARD"]), Some(LockError::GuardLockCommand));
        for words in [
            &["SELECT", "1"][..],
            &["multi"],
            &["Client", "id"],
            &["WATCH", "k"],
        ] {
            assert_eq!(
                refused(words),
                Some(LockError::GuardConnectionCommand),
                "{words:?}"
            );
        }
        for words in [
            &["FLUSHALL"][..],
            &["flushdb", "ASYNC"],
            &["SWAPDB", "0", "1"],
        ] {
            assert_eq!(
                refused(words),
                Some(LockError::GuardDatabaseCommand),
                "{words:?}"
            );
        }
        assert_eq!(
            refused(&["COPY", "a", "b", "db", "1", "REPLACE"]),
            Some(LockError::GuardDatabaseCommand)
        );
    }

    #[test]
    fn lets_ordinary_commands_through() {
        for words in [
            &["SET", "k", "v"][..],
            &["COPY", "db", "db"],
            &["COPY", "a", "b", "REPLACE"],
            &["LOCKS"],
            &["lock"],
            &["GET", "select"],
            &["MOVE", "k", "1"],
        ] {
            assert_eq!(refused(words), None, "{words:?}");
        }
    }
}
