//! `lock.*` configuration (CONFIG SET/GET, or `loadmodule ... <name> <value>`): named defaults
//! and bounds. Redis enforces the bounds on CONFIG SET and in the config file; the module
//! arguments, which only set the defaults Redis starts from, are checked against the same
//! bounds by `args::module_args`.

use std::sync::atomic::{AtomicI64, Ordering};

/// `lock.max-waiters`: how many clients may queue on one lock.
pub const MAX_WAITERS_DEFAULT: i64 = 100_000;
pub const MAX_WAITERS_MIN: i64 = 1;
pub const MAX_WAITERS_MAX: i64 = 100_000_000;
pub static MAX_WAITERS: AtomicI64 = AtomicI64::new(MAX_WAITERS_DEFAULT);

/// `lock.max-ttl`: the longest lease, in milliseconds (default 30 days; at most 10 years, which
/// also keeps every deadline far from overflow).
pub const MAX_TTL_DEFAULT: i64 = 30 * 24 * 3_600_000;
pub const MAX_TTL_MIN: i64 = 1;
pub const MAX_TTL_MAX: i64 = 10 * 365 * 24 * 3_600_000;
pub static MAX_TTL: AtomicI64 = AtomicI64::new(MAX_TTL_DEFAULT);

/// `lock.max-holders`: how many holds one key may have at once (shared holds, semaphore
/// permits' holders).
pub const MAX_HOLDERS_DEFAULT: i64 = 10_000;
pub const MAX_HOLDERS_MIN: i64 = 1;
pub const MAX_HOLDERS_MAX: i64 = 1 << 20;
pub static MAX_HOLDERS: AtomicI64 = AtomicI64::new(MAX_HOLDERS_DEFAULT);

/// `lock.max-owner-length`: the longest owner, in bytes.
pub const MAX_OWNER_LENGTH_DEFAULT: i64 = 1024;
pub const MAX_OWNER_LENGTH_MIN: i64 = 1;
pub const MAX_OWNER_LENGTH_MAX: i64 = 1 << 20;
pub static MAX_OWNER_LENGTH: AtomicI64 = AtomicI64::new(MAX_OWNER_LENGTH_DEFAULT);

/// `lock.max-set-size`: how many keys one `LOCK.MACQUIRE` may take at once (a set waits in
/// every one of its keys' queues, and is granted in one step: its size bounds that step).
pub const MAX_SET_SIZE_DEFAULT: i64 = 64;
pub const MAX_SET_SIZE_MIN: i64 = 1;
pub const MAX_SET_SIZE_MAX: i64 = 10_000;
pub static MAX_SET_SIZE: AtomicI64 = AtomicI64::new(MAX_SET_SIZE_DEFAULT);

/// `lock.foreign-holds` (yes/no): a plain string under a lock's name (an old-style `SET NX PX`
/// lock of a client not yet moved to the module) counts as held by someone else: `ACQUIRE`
/// answers nil or queues until the string is gone, instead of `WRONGTYPE`.
pub const FOREIGN_HOLDS_DEFAULT: i64 = 1;
pub static FOREIGN_HOLDS: AtomicI64 = AtomicI64::new(FOREIGN_HOLDS_DEFAULT);

/// `lock.hot-names`: how many of the most contended names `LOCK.HOT` lists (0: none, and no
/// names are tracked).
pub const HOT_NAMES_DEFAULT: i64 = 10;
pub const HOT_NAMES_MIN: i64 = 0;
pub const HOT_NAMES_MAX: i64 = 1000;
pub static HOT_NAMES: AtomicI64 = AtomicI64::new(HOT_NAMES_DEFAULT);

/// What values a setting takes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    /// An integer within bounds (inclusive).
    Integer { min: i64, max: i64 },
    /// `yes` or `no`, kept as 1 or 0.
    YesNo,
}

/// One `lock.*` setting: its name without the `lock.` prefix (the server adds it), where its
/// value lives, its default and what values it takes.
pub struct Setting {
    pub name: &'static str,
    pub value: &'static AtomicI64,
    pub default: i64,
    pub kind: Kind,
}

/// Every setting, in the order they are registered and documented.
pub static SETTINGS: [Setting; 7] = [
    Setting {
        name: "max-waiters",
        value: &MAX_WAITERS,
        default: MAX_WAITERS_DEFAULT,
        kind: Kind::Integer {
            min: MAX_WAITERS_MIN,
            max: MAX_WAITERS_MAX,
        },
    },
    Setting {
        name: "max-ttl",
        value: &MAX_TTL,
        default: MAX_TTL_DEFAULT,
        kind: Kind::Integer {
            min: MAX_TTL_MIN,
            max: MAX_TTL_MAX,
        },
    },
    Setting {
        name: "max-holders",
        value: &MAX_HOLDERS,
        default: MAX_HOLDERS_DEFAULT,
        kind: Kind::Integer {
            min: MAX_HOLDERS_MIN,
            max: MAX_HOLDERS_MAX,
        },
    },
    Setting {
        name: "max-owner-length",
        value: &MAX_OWNER_LENGTH,
        default: MAX_OWNER_LENGTH_DEFAULT,
        kind: Kind::Integer {
            min: MAX_OWNER_LENGTH_MIN,
            max: MAX_OWNER_LENGTH_MAX,
        },
    },
    Setting {
        name: "max-set-size",
        value: &MAX_SET_SIZE,
        default: MAX_SET_SIZE_DEFAULT,
        kind: Kind::Integer {
            min: MAX_SET_SIZE_MIN,
            max: MAX_SET_SIZE_MAX,
        },
    },
    Setting {
        name: "foreign-holds",
        value: &FOREIGN_HOLDS,
        default: FOREIGN_HOLDS_DEFAULT,
        kind: Kind::YesNo,
    },
    Setting {
        name: "hot-names",
        value: &HOT_NAMES,
        default: HOT_NAMES_DEFAULT,
        kind: Kind::Integer {
            min: HOT_NAMES_MIN,
            max: HOT_NAMES_MAX,
        },
    },
];

/// Why the module arguments (`loadmodule path name value ...`) were refused: the log line the
/// server shows before it refuses the module. The value errors use `CONFIG SET`'s wording.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum LoadArgError {
    Unknown(String),
    NoValue(String),
    Repeated(String),
    NotAnInteger(String, String),
    OutOfBounds(String, String, i64, i64),
    NotYesNo(String, String),
}

impl std::fmt::Display for LoadArgError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Unknown(name) => {
                let known: Vec<&str> = SETTINGS.iter().map(|s| s.name).collect();
                write!(
                    f,
                    "unknown module argument '{name}': the arguments are name value pairs of {}",
                    known.join(", ")
                )
            }
            Self::NoValue(name) => write!(f, "module argument '{name}' has no value"),
            Self::Repeated(name) => write!(f, "module argument '{name}' is given twice"),
            Self::NotAnInteger(name, value) => write!(
                f,
                "module argument '{name}' ('{value}'): argument couldn't be parsed into an integer"
            ),
            Self::OutOfBounds(name, value, min, max) => write!(
                f,
                "module argument '{name}' ('{value}'): argument must be between {min} and {max} inclusive"
            ),
            Self::NotYesNo(name, value) => write!(
                f,
                "module argument '{name}' ('{value}'): argument must be 'yes' or 'no'"
            ),
        }
    }
}

pub fn max_waiters() -> usize {
    usize::try_from(MAX_WAITERS.load(Ordering::Relaxed)).unwrap_or(usize::MAX)
}

pub fn max_holders() -> usize {
    usize::try_from(MAX_HOLDERS.load(Ordering::Relaxed)).unwrap_or(usize::MAX)
}

pub fn max_set_size() -> usize {
    usize::try_from(MAX_SET_SIZE.load(Ordering::Relaxed)).unwrap_or(usize::MAX)
}

pub fn max_ttl() -> i64 {
    MAX_TTL.load(Ordering::Relaxed)
}

/// Whether a plain string under a lock's name counts as a hold of another owner.
pub fn foreign_holds() -> bool {
    FOREIGN_HOLDS.load(Ordering::Relaxed) != 0
}

pub fn max_owner_length() -> usize {
    usize::try_from(MAX_OWNER_LENGTH.load(Ordering::Relaxed)).unwrap_or(usize::MAX)
}

/// How many of the most contended names `LOCK.HOT` lists.
pub fn hot_names() -> usize {
    usize::try_from(HOT_NAMES.load(Ordering::Relaxed)).unwrap_or(0)
}

/// The limits a command checks its arguments against, read once per command.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Limits {
    pub max_ttl: i64,
    pub max_owner_length: usize,
    pub max_waiters: usize,
    pub max_holders: usize,
    pub max_set_size: usize,
}

impl Limits {
    /// No bounds: for replaying what a master granted under its own settings.
    pub const UNBOUNDED: Self = Self {
        max_ttl: i64::MAX,
        max_owner_length: usize::MAX,
        max_waiters: usize::MAX,
        max_holders: usize::MAX,
        max_set_size: usize::MAX,
    };

    pub fn current() -> Self {
        Self {
            max_ttl: max_ttl(),
            max_owner_length: max_owner_length(),
            max_waiters: max_waiters(),
            max_holders: max_holders(),
            max_set_size: max_set_size(),
        }
    }
}
