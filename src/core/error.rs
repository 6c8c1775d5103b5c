//! Every error the module sends to a client, with its exact wire string in one place.

/// An error reply of a LOCK.* command. `as_wire` is the exact string clients see.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LockError {
    /// A number argument is not a 64-bit integer.
    NotAnInteger,
    /// `ttl-ms` is zero or negative.
    TtlNotPositive,
    /// `now + ttl-ms` does not fit a 64-bit unix-ms deadline.
    TtlTooLarge,
    /// `WAIT` was given a negative timeout.
    TimeoutNegative,
    /// `WAIT` timeout too large to represent.
    TimeoutTooLarge,
    /// The owner argument is the empty string.
    EmptyOwner,
    /// A token argument is zero or negative.
    TokenNotPositive,
    /// An unknown option or a malformed option list.
    Syntax,
    /// The key holds a value of another type.
    WrongType,
    /// LOCK.APPLY sent by an ordinary client.
    ApplyNotAllowed,
    /// A deadline argument of LOCK.APPLY is not a positive unix-ms time.
    DeadlineNotPositive,
    /// `LOCK.APPLY ... PX left held` with a negative time.
    TimeNegative,
    /// A waiter was blocked on a master that became a replica.
    Demoted,
    /// `ttl-ms` above `lock.max-ttl`.
    TtlAboveMax,
    /// The owner is longer than `lock.max-owner-length`.
    OwnerTooLong,
    /// The queue already holds `lock.max-waiters` clients.
    QueueFull,
    /// `COUNT` is negative.
    CountNegative,
    /// A lock write on a (writable) replica.
    Replica,
    /// The lock's slot left this cluster node while the client waited.
    SlotMoved,
    /// A token argument of LOCK.APPLY above the largest token (2^53 - 1).
    TokenAboveMax,
    /// No token above the last one is left: granting would repeat a token.
    TokensExhausted,
    /// A panic was contained inside the module (see `ffi::panics`).
    Internal,
    /// LOCK.GUARD named a command the server does not have (or Redis called a command the
    /// module never registered).
    UnknownCommand,
    /// The server refused to run the command LOCK.GUARD guards (its log says why).
    CallRefused,
    /// A shared holder asked for exclusive while other readers hold.
    Deadlock,
    /// `LOCK.MACQUIRE`'s numkeys is not 1 to `lock.max-set-size`.
    SetSize,
    /// A key appears twice in one `LOCK.MACQUIRE` / `LOCK.MRELEASE`.
    DuplicateKey,
    /// `LOCK.MACQUIRE ... WAIT` by an owner that holds some of the keys already.
    SetWaitsOnItself,
    /// `LOCK.MACQUIRE` with `LIMIT` or `PERMITS`.
    SetOfPermits,
    /// A plain or `SHARED` request on a semaphore, or a `LIMIT` request on a lock.
    WrongKind,
    /// `LIMIT` differs from the live semaphore's.
    LimitMismatch,
    /// The owner holds permits of the semaphore and asked for another number.
    PermitsHeld,
    /// The key already has `lock.max-holders` holds.
    TooManyHolders,
    /// `PERMITS` outside 1..=`LIMIT`, or `LIMIT` below 1.
    PermitsOutOfRange,
    /// An internal `LOCK.APPLYSTATE` payload that does not decode.
    BadState,
    /// `LOCK.GUARD` with a token that is not the live exclusive hold's.
    Stale,
    /// `LOCK.GUARD` of a command whose keys are in another slot than the lock's.
    CrossSlot,
    /// `LOCK.GUARD` of a blocking command.
    GuardBlocking,
    /// `LOCK.GUARD` of a `LOCK.*` command.
    GuardLockCommand,
    /// `LOCK.GUARD` of a command about the connection (SELECT, MULTI, CLIENT, ...).
    GuardConnectionCommand,
    /// `LOCK.GUARD` of FLUSHALL, FLUSHDB, SWAPDB or `COPY ... DB`.
    GuardDatabaseCommand,
    /// `LOCK.GUARD` of a command that would write, move or delete a key holding a lock.
    GuardWritesLock,
    /// LOCK.EPOCH sent by an ordinary client.
    EpochNotAllowed,
    /// The epoch argument of LOCK.EPOCH outside 1 ..= 2^21 - 1.
    EpochOutOfRange,
    /// The fencing epoch could not be stored durably, so no token may be issued.
    EpochNotStored,
    /// `LOCK.WATCH ... AFTER` with something no reply ever gave.
    BadCursor,
}

impl LockError {
    /// Every variant, so tests can check every wire string.
    pub const ALL: [LockError; 46] = [
        Self::NotAnInteger,
        Self::TtlNotPositive,
        Self::TtlTooLarge,
        Self::TimeoutNegative,
        Self::TimeoutTooLarge,
        Self::EmptyOwner,
        Self::TokenNotPositive,
        Self::Syntax,
        Self::WrongType,
        Self::ApplyNotAllowed,
        Self::DeadlineNotPositive,
        Self::TimeNegative,
        Self::Demoted,
        Self::TtlAboveMax,
        Self::OwnerTooLong,
        Self::QueueFull,
        Self::CountNegative,
        Self::Replica,
        Self::SlotMoved,
        Self::TokenAboveMax,
        Self::TokensExhausted,
        Self::Internal,
        Self::UnknownCommand,
        Self::CallRefused,
        Self::Deadlock,
        Self::SetSize,
        Self::DuplicateKey,
        Self::SetWaitsOnItself,
        Self::SetOfPermits,
        Self::WrongKind,
        Self::LimitMismatch,
        Self::PermitsHeld,
        Self::TooManyHolders,
        Self::PermitsOutOfRange,
        Self::BadState,
        Self::Stale,
        Self::CrossSlot,
        Self::GuardBlocking,
        Self::GuardLockCommand,
        Self::GuardConnectionCommand,
        Self::GuardDatabaseCommand,
        Self::GuardWritesLock,
        Self::EpochNotAllowed,
        Self::EpochOutOfRange,
        Self::EpochNotStored,
        Self::BadCursor,
    ];

    pub const fn as_wire(self) -> &'static str {
        match self {
            Self::NotAnInteger => "ERR value is not an integer or out of range",
            Self::TtlNotPositive => "ERR invalid ttl: must be a positive integer of milliseconds",
            Self::TtlTooLarge => "ERR invalid ttl: the deadline would overflow",
            Self::TimeoutNegative => "ERR timeout is negative",
            Self::TimeoutTooLarge => "ERR timeout is out of range",
            Self::EmptyOwner => "ERR invalid owner: must not be empty",
            Self::TokenNotPositive => "ERR invalid token: must be a positive integer",
            Self::Syntax => "ERR syntax error",
            Self::WrongType => "WRONGTYPE Operation against a key holding the wrong kind of value",
            Self::ApplyNotAllowed => {
                "ERR LOCK.APPLY is internal: it is accepted only from the master link or the AOF"
            }
            Self::DeadlineNotPositive => "ERR invalid deadline: must be a positive unix time in milliseconds",
            Self::TimeNegative => "ERR invalid time: the time left and the time held must not be negative",
            Self::TtlAboveMax => "ERR invalid ttl: above lock.max-ttl",
            Self::OwnerTooLong => "ERR invalid owner: longer than lock.max-owner-length",
            Self::QueueFull => "ERR lock queue is full: lock.max-waiters clients already wait",
            Self::CountNegative => "ERR COUNT must be zero or positive",
            Self::Replica => "READONLY You can't write against a read only replica.",
            Self::SlotMoved => "TRYAGAIN the lock's slot moved to another node while waiting; retry",
            Self::TokenAboveMax => "ERR invalid token: above the largest token 9007199254740991 (2^53-1)",
            Self::TokensExhausted => {
                "ERR fencing tokens exhausted: the last token is 2^53-1, and a grant would repeat it"
            }
            Self::Internal => {
                "ERR redis-lock internal error: the command was interrupted; the server log has the details"
            }
            Self::UnknownCommand => "ERR unknown command",
            Self::CallRefused => "ERR LOCK.GUARD: the server refused to run the command",
            Self::Deadlock => {
                "DEADLOCK other owners hold this lock shared: upgrading would wait for them forever; release and acquire exclusive"
            }
            Self::SetSize | Self::DuplicateKey | Self::SetWaitsOnItself | Self::SetOfPermits => {
                self.set_wire()
            }
            Self::WrongKind => {
                "ERR the key holds another kind of lock: a semaphore takes LIMIT, a plain or SHARED lock does not"
            }
            Self::LimitMismatch => "ERR LIMIT differs from the limit of the live semaphore at this key",
            Self::PermitsHeld => {
                "ERR this owner already holds a different number of permits: release them first"
            }
            Self::TooManyHolders => "ERR too many holders: lock.max-holders already hold this key",
            Self::PermitsOutOfRange => "ERR invalid PERMITS or LIMIT: need 1 <= permits <= limit",
            Self::BadState => "ERR LOCK.APPLYSTATE payload is corrupt or from a newer redis-lock",
            Self::Stale => {
                "STALE the token is not the live exclusive holder's token: nothing was run"
            }
            Self::CrossSlot => "CROSSSLOT Keys in request don't hash to the same slot",
            Self::GuardBlocking => "ERR LOCK.GUARD cannot run a blocking command",
            Self::GuardLockCommand => "ERR LOCK.GUARD cannot run LOCK.* commands",
            Self::GuardConnectionCommand => {
                "ERR LOCK.GUARD cannot run a command about the connection (SELECT, MULTI, CLIENT, ...)"
            }
            Self::GuardDatabaseCommand => {
                "ERR LOCK.GUARD cannot run a command that flushes, swaps or copies into another database"
            }
            Self::GuardWritesLock => {
                "ERR LOCK.GUARD cannot run a command that writes, moves or deletes a key holding a lock"
            }
            Self::EpochNotAllowed => {
                "ERR LOCK.EPOCH is internal: it is accepted only from the master link or the AOF"
            }
            Self::EpochOutOfRange => "ERR invalid epoch: must be 1 to 2097151",
            Self::EpochNotStored => {
                "ERR redis-lock cannot store its fencing epoch, so it grants nothing (the server log says why)"
            }
            Self::BadCursor => {
                "ERR invalid cursor: AFTER takes 0, free, foreign, a token, or a cursor LOCK.WATCH returned"
            }
            Self::Demoted => {
                "UNBLOCKED force unblock from blocking operation, instance state changed (master -> replica?)"
            }
        }
    }
}

impl LockError {
    /// The errors of lock sets (`LOCK.MACQUIRE`, `LOCK.MRELEASE`).
    const fn set_wire(self) -> &'static str {
        match self {
            Self::SetSize => "ERR invalid numkeys: must be 1 to lock.max-set-size",
            Self::DuplicateKey => "ERR a key appears twice in the set",
            Self::SetWaitsOnItself => {
                "DEADLOCK this owner holds some of these locks already: waiting for the others would wait for itself; release them first, or acquire without WAIT"
            }
            _ => {
                "ERR LOCK.MACQUIRE takes exclusive or SHARED locks, not semaphore permits (LIMIT, PERMITS)"
            }
        }
    }
}

impl std::fmt::Display for LockError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_wire())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_wire_string_has_a_redis_error_prefix() {
        for e in LockError::ALL {
            let prefix = e.as_wire().split(' ').next().unwrap_or("");
            assert!(
                matches!(
                    prefix,
                    "ERR"
                        | "WRONGTYPE"
                        | "UNBLOCKED"
                        | "READONLY"
                        | "TRYAGAIN"
                        | "DEADLOCK"
                        | "STALE"
                        | "CROSSSLOT"
                ),
                "{e:?} has prefix {prefix}"
            );
            assert!(!e.as_wire().contains('\n') && !e.as_wire().contains('\r'));
        }
    }
}
