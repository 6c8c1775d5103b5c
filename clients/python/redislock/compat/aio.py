"""``redislock.compat.aio.RedisPyLock``: redis-py's asyncio ``Lock`` (``redis.asyncio.lock.Lock``)
on the module's locks."""

from __future__ import annotations

import asyncio
import logging
from typing import Any, Awaitable, Literal, Optional

from redis.exceptions import LockError

from .. import aio as _aio
from ._redispy import RedisPyLockBase, redis_py_errors

log = logging.getLogger("redislock.compat")


class RedisPyLock(RedisPyLockBase):
    """The asyncio twin of ``redislock.compat.RedisPyLock``, for
    ``redis.asyncio.Redis.lock(name, ..., lock_class=redislock.compat.aio.RedisPyLock)``:
    the API of ``redis.asyncio.lock.Lock`` (``await lock.acquire()``, ``async with``)."""

    _native = _aio.Lock
    lua_extend = None

    async def __aenter__(self) -> "RedisPyLock":
        if await self.acquire():
            return self
        raise self._unable()

    async def __aexit__(self, exc_type: Any, exc_value: Any, traceback: Any) -> None:
        try:
            await self.release()
        except LockError:
            if self.raise_on_release_error:
                raise
            log.warning("Lock was unlocked or no longer owned when exiting context manager.")

    async def acquire(
        self,
        blocking: Optional[bool] = None,
        blocking_timeout: Optional[float] = None,
        token: Optional[Any] = None,
    ) -> bool:
        """Take the lock (see ``redislock.compat.RedisPyLock.acquire``). A cancelled wait
        leaves the server's queue."""
        blocking, timeout = self._wait(blocking, blocking_timeout)
        hold = self._new_hold(token)
        with redis_py_errors():
            if not await hold.acquire(blocking, timeout):
                return False
        self._keep(hold)
        return True

    async def locked(self) -> bool:
        """Whether anyone holds the name: a module lock, or an old-style string lock."""
        return await self.redis.execute_command("LOCK.INFO", self.name, "COUNT", 0) is not None

    async def owned(self) -> bool:
        """Whether this lock's hold is the live one on the server."""
        if self._hold() is None:
            return False
        return int(await self.redis.execute_command("LOCK.FENCE", self.name, self.local.fencing)) == 1

    async def release(self) -> None:
        """Release the hold (``LockError`` if none, ``LockNotOwnedError`` if it was gone). As
        redis-py's, a release that is cancelled keeps the token, so it can be called again."""
        hold = self._hold()
        if hold is None:
            raise self._not_held("release")
        if self.local.cancelled:
            # A release of this hold was cancelled midway: finish it by its token.
            released = int(await self.redis.execute_command(
                "LOCK.RELEASE", self.name, hold.owner, "TOKEN", self.local.fencing)) == 1
        else:
            try:
                with redis_py_errors():
                    released = await hold.release()
            except asyncio.CancelledError:
                self.local.cancelled = True
                raise
        self._forget()
        if not released:
            raise self._not_owned("release")

    def extend(self, additional_time: float, replace_ttl: bool = False) -> Awaitable[Literal[True]]:
        """Add ``additional_time`` seconds to the lease (``replace_ttl``: make it that long).
        As redis-py's, an unheld lock or one without ``timeout`` raises at the call."""
        self._check_extendable("extend")
        return self.do_extend(additional_time, replace_ttl)

    async def do_extend(self, additional_time: float, replace_ttl: bool) -> Literal[True]:
        hold = self._hold()
        if not int(await self.lua_extend(keys=[self.name],
                                         args=self._extend_args(hold, additional_time, replace_ttl),
                                         client=self.redis)):
            raise self._not_owned("extend")
        return True

    def reacquire(self) -> Awaitable[Literal[True]]:
        """Restart the lease at ``timeout`` seconds."""
        hold = self._check_extendable("reacquire")
        return self._reacquire(hold)

    async def _reacquire(self, hold: Any) -> Literal[True]:
        if not int(await self.redis.execute_command(*self._reacquire_args(hold))):
            raise self._not_owned("reacquire")
        return True
