"""The errors of redislock, one class per thing that can go wrong.

Each is also a ``redis.exceptions.LockError`` (redis-py's lock error), ``LockLost`` a
``redis.exceptions.LockNotOwnedError`` and ``Unavailable`` a ``redis.exceptions.ConnectionError``,
so the ``except`` clauses of code written for redis-py catch them too."""

from redis.exceptions import ConnectionError as _RedisConnectionError
from redis.exceptions import LockError as _RedisLockError
from redis.exceptions import LockNotOwnedError as _RedisLockNotOwnedError


class LockError(_RedisLockError):
    """Base class of every redislock error (a ``redis.exceptions.LockError``)."""

    # redis-py 6+ prints its errors as ``server:ClassName``, without the message: ours keep
    # the message in ``repr`` (and in logs that use ``%r``), as they did before.
    __repr__ = Exception.__repr__


class NotAcquired(LockError):
    """The lock was not granted in time (``with lock.hold(timeout=...)``, ``acquire`` inside
    ``with``), or a durable grant did not reach its replicas. (redis-py raises its
    ``LockError`` when ``with`` cannot take a lock in time: the same meaning.)"""


class LockLost(LockError, _RedisLockNotOwnedError):
    """The hold ended before it was released: its lease ran out (a renewal answered 0, or the
    server could not be reached before the lease would end), or a release found it gone. Raised
    when leaving the ``with`` block, so the work done under the lock can be rolled back. (Also a
    ``redis.exceptions.LockNotOwnedError``: redis-py's word for a release of a lock no longer
    owned.)"""

    def __init__(self, reason: str):
        super().__init__(f"lock lost: {reason}")
        self.reason = reason


class Stale(LockError):
    """``guard`` refused the command: this hold's token is no longer the live exclusive one."""


class Deadlock(LockError):
    """An upgrade from shared to exclusive while other readers hold the lock."""


class Unavailable(LockError, _RedisConnectionError):
    """The lock service cannot be reached (refused, unresolvable, no answer in time) or does not
    answer as Redis with the redis-lock module loaded: neither granted nor refused, the lock's
    state is unknown. Raised within the lock's ``unavailable_after`` bound by acquire (whatever
    its wait), release and guard. ``address`` is the server's, ``cause`` what went wrong.

    Also a ``redis.exceptions.ConnectionError``: what redis-py raises, and applications already
    catch, when Redis is down, so their fallback (refuse the request, or go on knowingly without
    the lock) keeps working."""

    def __init__(self, address: str, cause: str):
        super().__init__(f"lock service unavailable at {address}: {cause}")
        self.address = address
        self.cause = cause


class LeadershipLost(LockLost):
    """An election's leadership ended before it was resigned (rule 21): its lease ran out (the
    process was paused, or the server could not be reached before it ended), a renewal was
    refused, or its session's connection closed. Raised when leaving the ``with`` block of a
    campaign, so the work done as leader can be rolled back; ``on_lost`` was told once
    already. (A ``LockLost``: the leadership is a lock's hold.)"""

    def __init__(self, reason: str):
        LockError.__init__(self, f"leadership lost: {reason}")
        self.reason = reason
