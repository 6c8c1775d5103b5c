"""The errors of redislock, one class per thing that can go wrong."""


class LockError(Exception):
    """Base class of every redislock error."""


class NotAcquired(LockError):
    """The lock was not granted in time (``with lock.hold(timeout=...)``, ``acquire`` inside
    ``with``), or a durable grant did not reach its replicas."""


class LockLost(LockError):
    """The hold ended before it was released: its lease ran out (a renewal answered 0, or the
    server could not be reached before the lease would end), or a release found it gone. Raised
    when leaving the ``with`` block, so the work done under the lock can be rolled back."""

    def __init__(self, reason: str):
        super().__init__(f"lock lost: {reason}")
        self.reason = reason


class Stale(LockError):
    """``guard`` refused the command: this hold's token is no longer the live exclusive one."""


class Deadlock(LockError):
    """An upgrade from shared to exclusive while other readers hold the lock."""
