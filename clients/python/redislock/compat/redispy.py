"""``RedisPyLock``: redis-py's ``Lock`` (``redis.lock.Lock``) on the module's locks."""

from __future__ import annotations

import logging
from typing import Any, Literal, Optional

from redis.exceptions import LockError

from .. import lock as _lock
from ._redispy import RedisPyLockBase, redis_py_errors

log = logging.getLogger("redislock.compat")


class RedisPyLock(RedisPyLockBase):
    """redis-py's ``Lock``, same arguments and meanings, on the module::

        lock = r.lock("order:42", timeout=30, blocking_timeout=5, lock_class=RedisPyLock)

    ``timeout`` is the lease in seconds (None: held until released, the watchdog renewing a
    lease of ``watchdog_ttl``), ``blocking_timeout`` the longest wait; a blocking ``acquire``
    waits in the server's FIFO queue instead of polling every ``sleep`` seconds. ``locked()``
    says whether anyone holds the name, ``owned()`` whether this lock (this thread, with
    ``thread_local``) does; ``release``, ``extend`` and ``reacquire`` raise redis-py's
    ``LockError`` and ``LockNotOwnedError`` where redis-py does. ``fencing_token`` is the
    module's token of the hold. Old-style locks (redis-py's own ``Lock`` on the same name)
    and these exclude each other.
    """

    _native = _lock.Lock
    lua_extend = None

    def __enter__(self) -> "RedisPyLock":
        if self.acquire():
            return self
        raise self._unable()

    def __exit__(self, exc_type: Any, exc_value: Any, traceback: Any) -> None:
        try:
            self.release()
        except LockError:
            if self.raise_on_release_error:
                raise
            log.warning("Lock was unlocked or no longer owned when exiting context manager.")

    def acquire(
        self,
        sleep: Optional[float] = None,
        blocking: Optional[bool] = None,
        blocking_timeout: Optional[float] = None,
        token: Optional[Any] = None,
    ) -> bool:
        """Take the lock (True), or False when not granted: at once when not ``blocking``,
        else after ``blocking_timeout`` seconds (None: waits until granted). ``token`` is the
        owner string to hold it under (default: a fresh UUID); ``sleep`` is not used."""
        blocking, timeout = self._wait(blocking, blocking_timeout)
        hold = self._new_hold(token)
        with redis_py_errors():
            if not hold.acquire(blocking, timeout):
                return False
        self._keep(hold)
        return True

    def locked(self) -> bool:
        """Whether anyone holds the name: a module lock, or an old-style string lock."""
        return self.redis.execute_command("LOCK.INFO", self.name, "COUNT", 0) is not None

    def owned(self) -> bool:
        """Whether this lock holds it: this thread's hold is the live one on the server."""
        if self._hold() is None:
            return False
        return int(self.redis.execute_command("LOCK.FENCE", self.name, self.local.fencing)) == 1

    def release(self) -> None:
        """Release this thread's hold: ``LockError`` if it holds none, ``LockNotOwnedError`` if
        the hold was gone (its lease ran out, or it was deleted)."""
        hold = self._hold()
        if hold is None:
            raise self._not_held("release")
        self._forget()
        with redis_py_errors():
            released = hold.release()
        if not released:
            raise self._not_owned("release")

    def extend(self, additional_time: float, replace_ttl: bool = False) -> Literal[True]:
        """Add ``additional_time`` seconds to the lease (``replace_ttl``: make the lease that
        long from now)."""
        self._check_extendable("extend")
        return self.do_extend(additional_time, replace_ttl)

    def do_extend(self, additional_time: float, replace_ttl: bool) -> Literal[True]:
        hold = self._hold()
        if not int(self.lua_extend(keys=[self.name], args=self._extend_args(hold, additional_time, replace_ttl),
                                   client=self.redis)):
            raise self._not_owned("extend")
        return True

    def reacquire(self) -> Literal[True]:
        """Restart the lease at ``timeout`` seconds."""
        hold = self._check_extendable("reacquire")
        if not int(self.redis.execute_command(*self._reacquire_args(hold))):
            raise self._not_owned("reacquire")
        return True
