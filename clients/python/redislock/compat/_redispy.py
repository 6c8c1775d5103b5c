"""What the threading and asyncio twins of redis-py's ``Lock`` share: the settings, the
per-thread hold, the argument rules and the error messages of redis-py, and the one script
they run. The holds themselves are ``redislock.Lock`` / ``redislock.aio.Lock`` objects, one per
acquisition, whose owner is the redis-py token."""

from __future__ import annotations

import threading
import uuid
from contextlib import contextmanager
from types import SimpleNamespace
from typing import Any, Iterator, Optional, Tuple, Type

from redis.exceptions import ConnectionError, LockError, LockNotOwnedError

from ..errors import Unavailable

#: ``extend(additional_time, replace_ttl)`` in one step on the server: the lease of the hold
#: (owner ARGV[1], token ARGV[2]) becomes ARGV[3] ms, or (ARGV[4] "0") what is left of it plus
#: ARGV[3] ms, as redis-py's script does with PTTL. 1 if extended, 0 if not held any more.
EXTEND_SCRIPT = """
local ttl = tonumber(ARGV[3])
if ARGV[4] == '0' then
  local info = redis.call('LOCK.INFO', KEYS[1], 'COUNT', 0)
  if not info then return 0 end
  local left
  for i = 1, #info, 2 do
    local field = info[i]
    if type(field) == 'table' then field = field.ok end  -- field names are status replies
    if field == 'ttl' then left = info[i + 1] break end
  end
  if not left or left < 0 then return 0 end
  ttl = ttl + left
end
if ttl < 1 then ttl = 1 end
return redis.call('LOCK.EXTEND', KEYS[1], ARGV[1], ttl, 'TOKEN', ARGV[2])
"""


def lock_error(cls: Type[LockError], message: str, name: Any) -> LockError:
    """redis-py's error as redis-py raises it (``lock_name`` exists since redis-py 5.1)."""
    try:
        return cls(message, lock_name=name)
    except TypeError:
        return cls(message)


@contextmanager
def redis_py_errors() -> Iterator[None]:
    """``redislock.Unavailable`` as redis-py reports a server it cannot reach: its plain
    ``ConnectionError``, which the ``except LockError`` of code written for redis-py (not
    acquired, not owned) does not catch. (The bound stays: nothing hangs.)"""
    try:
        yield
    except Unavailable as err:
        raise ConnectionError(str(err)) from err


def millis(seconds: Any) -> int:
    """Seconds as the module's milliseconds, truncated as redis-py does (at least 1)."""
    return max(1, int(float(seconds) * 1000))


class RedisPyLockBase:
    """redis-py's ``Lock`` settings and meanings; see ``redislock.compat.RedisPyLock``."""

    #: The lease of a hold taken with ``timeout=None`` ("until released"): the watchdog renews
    #: it every third of this while the process lives, so a crashed holder frees it in time.
    watchdog_ttl = 30.0
    #: Rule 14's bound (``redislock.Lock``'s ``unavailable_after``): a server that does not
    #: answer this long is redis-py's ``ConnectionError`` (a subclass may change it).
    unavailable_after = 10.0

    #: ``redislock.Lock`` or ``redislock.aio.Lock``: set by each twin.
    _native: Any = None
    lua_extend: Any = None

    def __init__(
        self,
        redis: Any,
        name: Any,
        timeout: Optional[float] = None,
        sleep: float = 0.1,
        blocking: bool = True,
        blocking_timeout: Optional[float] = None,
        thread_local: bool = True,
        raise_on_release_error: bool = True,
    ):
        self.redis = redis
        self.name = name
        self.timeout = timeout
        #: Kept for redis-py's signature only: waits are queued on the server, never polled.
        self.sleep = sleep
        self.blocking = blocking
        self.blocking_timeout = blocking_timeout
        self.thread_local = bool(thread_local)
        self.raise_on_release_error = raise_on_release_error
        #: As redis-py's: ``local.token`` is this thread's owner string (bytes) while it holds.
        self.local = threading.local() if self.thread_local else SimpleNamespace()
        self.local.token = None
        cls = type(self)
        if cls.lua_extend is None:
            cls.lua_extend = redis.register_script(EXTEND_SCRIPT)

    # -- the hold of this thread (of every thread with thread_local=False) --------------------

    def _hold(self) -> Any:
        return getattr(self.local, "hold", None)

    def _new_hold(self, token: Optional[Any]) -> Any:
        """The module hold one ``acquire`` asks for: owned by ``token`` (encoded as redis-py
        encodes it) or a fresh UUID, with the lease ``timeout`` (fixed), or without one a
        watchdog-kept lease of ``watchdog_ttl``."""
        owner = str(uuid.uuid4()).encode() if token is None else self._encoder().encode(token)
        if self.timeout:
            # No lease timer: ``extend`` and ``reacquire`` move the lease on the server.
            return self._native(self.redis, self.name, ttl=float(self.timeout), owner=owner,
                                watchdog=False, _lease_timer=False,
                                unavailable_after=self.unavailable_after)
        return self._native(self.redis, self.name, ttl=self.watchdog_ttl, owner=owner,
                            unavailable_after=self.unavailable_after)

    def _encoder(self) -> Any:
        try:
            return self.redis.get_encoder()
        except AttributeError:  # redis.asyncio.Redis keeps it in its pool
            return self.redis.connection_pool.get_encoder()

    def _wait(self, blocking: Optional[bool], blocking_timeout: Optional[float]) -> Tuple[bool, Optional[float]]:
        """``blocking`` and ``blocking_timeout`` (None: this object's) as the ``blocking`` and
        ``timeout`` of the native ``acquire``: a timeout of 0 or less asks once."""
        if blocking is None:
            blocking = self.blocking
        if blocking_timeout is None:
            blocking_timeout = self.blocking_timeout
        if not blocking:
            return False, None
        if blocking_timeout is None:
            return True, None
        return True, max(0.0, float(blocking_timeout))

    def _keep(self, hold: Any) -> None:
        self.local.hold = hold
        self.local.token = hold.owner
        self.local.fencing = hold.token
        self.local.cancelled = False

    def _forget(self) -> None:
        self.local.hold = None
        self.local.token = None
        self.local.fencing = None
        self.local.cancelled = False

    @property
    def fencing_token(self) -> Optional[int]:
        """The module's fencing token of this thread's hold (None when not held): pass it to
        the storage, or write through ``LOCK.GUARD``, to refuse a holder whose lease ran out."""
        return getattr(self.local, "fencing", None) if self._hold() is not None else None

    # -- redis-py's rules and errors ----------------------------------------------------------

    def _not_held(self, action: str) -> LockError:
        if action == "release":
            return lock_error(LockError, "Cannot release a lock that's not owned or is already unlocked.", self.name)
        return lock_error(LockError, f"Cannot {action} an unlocked lock", self.name)

    def _check_extendable(self, action: str) -> Any:
        hold = self._hold()
        if hold is None:
            raise self._not_held(action)
        if not self.timeout:
            raise lock_error(LockError, f"Cannot {action} a lock with no timeout", self.name)
        return hold

    def _not_owned(self, action: str) -> LockNotOwnedError:
        return lock_error(LockNotOwnedError, f"Cannot {action} a lock that's no longer owned", self.name)

    def _unable(self) -> LockError:
        return lock_error(LockError, "Unable to acquire lock within the time specified", self.name)

    def _extend_args(self, hold: Any, additional_time: float, replace_ttl: bool) -> list:
        return [hold.owner, self.local.fencing, millis(additional_time), "1" if replace_ttl else "0"]

    def _reacquire_args(self, hold: Any) -> list:
        return ["LOCK.EXTEND", self.name, hold.owner, millis(self.timeout), "TOKEN", self.local.fencing]

    def __repr__(self) -> str:
        return f"<{type(self).__module__}.{type(self).__name__} {self.name!r} token={getattr(self.local, 'token', None)!r}>"
