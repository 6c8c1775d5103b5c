"""The same locks for asyncio: ``redislock.aio.Lock`` and ``redislock.aio.Semaphore`` over a
``redis.asyncio.Redis`` client, with ``async with``, ``await lock.acquire()`` and a watchdog
task."""

from __future__ import annotations

import asyncio
import logging
import time
from typing import Any, Callable, Optional

from redis.exceptions import ResponseError

from . import _protocol as p
from .errors import LockLost, NotAcquired, Stale

log = logging.getLogger("redislock")


async def _lend(pool: Any) -> Any:
    """A connection lent by the pool (redis-py 5.3+ takes no arguments, earlier ones a name)."""
    try:
        return await pool.get_connection()
    except TypeError:
        return await pool.get_connection("LOCK.ACQUIRE")


async def _call(conn: Any, args: list, wait_forever: bool = False) -> Any:
    """Send ``args`` on ``conn`` and read the reply (without a read timeout for a blocking
    ``WAIT``, whatever the connection's own timeout is)."""
    # Through ``connect()``, which a Sentinel-managed connection overrides to ask the
    # Sentinels for the master (see ``redislock.lock._call``).
    await conn.connect()
    await conn.send_command(*args)
    if not wait_forever:
        return await conn.read_response()
    previous = conn.socket_timeout
    conn.socket_timeout = None
    try:
        return await conn.read_response()
    finally:
        conn.socket_timeout = previous


class Lock(p.LockBase):
    """The asyncio twin of ``redislock.Lock`` (same arguments, same rules)."""

    def __init__(self, client: Any, key: str, ttl: float = 30.0, **options: Any):
        super().__init__(client, key, ttl, **options)
        # One holder of this object at a time: tasks never share a hold by accident.
        self._local = asyncio.Lock()
        self._holder: Optional[asyncio.Task] = None
        self._state = asyncio.Lock()
        self._watchdog: Optional[asyncio.Task] = None

    async def acquire(self, blocking: bool = True, timeout: Optional[float] = None) -> bool:
        """Take the lock (see ``redislock.Lock.acquire``)."""
        me = asyncio.current_task()
        if self.reentrant and self._depth > 0 and self._holder is me:
            self._depth += 1
            return True
        started = time.monotonic()
        try:
            if not blocking:
                if self._local.locked():
                    return False
                await self._local.acquire()
            elif timeout is None or timeout < 0:
                timeout = None
                await self._local.acquire()
            else:
                await asyncio.wait_for(self._local.acquire(), timeout)
        except asyncio.TimeoutError:
            return False
        try:
            left = None if timeout is None else max(0.0, timeout - (time.monotonic() - started))
            granted = await self._acquire_on_server(blocking, left)
        except BaseException:
            self._local.release()
            raise
        if not granted:
            self._local.release()
            return False
        self._holder, self._depth = me, 1
        self._emit("acquired", wait_s=time.monotonic() - started, token=self.token)
        return True

    async def _acquire_on_server(self, blocking: bool, timeout: Optional[float]) -> bool:
        wait: Optional[float] = None
        if blocking:
            wait = 0 if timeout is None else timeout
            if timeout is not None and timeout <= 0:
                wait = None
        deadline = None if not wait else time.monotonic() + wait
        pool = p.pool_of(self.client, self.key)
        while True:
            # A session hold lives as long as its connection: one of its own, never the pool's.
            try:
                conn = p.own_connection(pool, None) if self.session else await _lend(pool)
            except p.BROKEN_LINK:
                # Nobody to ask yet (see ``redislock.Lock``): a wait asks again until its
                # deadline; a call that does not wait fails.
                if wait is None or p.expired(deadline):
                    raise
                await asyncio.sleep(p.RETRY_PAUSE)
                wait = p.next_wait(deadline, wait)
                continue
            try:
                args = p.acquire_args(self.key, self.owner, self.ttl, self.mode, self.session, wait)
                token = p.token_of(await _call(conn, args, wait_forever=wait is not None))
                if token is not None and self.replicas:
                    acked = await _call(conn, ["WAIT", self.replicas, p.millis(self.replicas_timeout)])
                    if int(acked) < self.replicas:
                        await _call(conn, p.release_args(self.key, self.owner, token))
                        self._emit("not-durable", replicas=self.replicas)
                        token = None
            except ResponseError as err:
                await self._put_back(pool, conn)
                raise p.translate(err) from err
            except p.BROKEN_LINK:
                await self._put_back(pool, conn, broken=True)
                if p.expired(deadline):
                    raise
                await asyncio.sleep(p.RETRY_PAUSE)
                wait = p.next_wait(deadline, wait)
                continue
            except BaseException:
                # Cancelled (or interrupted) mid-call: the reply may still come, so the
                # connection is closed, which takes the waiter out of the server's queue, before
                # the pool has it back; shielded, so a second cancellation cannot skip that.
                await asyncio.shield(self._put_back(pool, conn, broken=True))
                raise
            if token is None:
                await self._put_back(pool, conn)
                return False
            if self.session:
                self._session_conn = conn
            else:
                await pool.release(conn)
            self.token, self.lost = token, None
            self._granted_at = time.monotonic()
            if self.watchdog:
                self._watchdog = asyncio.create_task(self._renew(token))
            return True

    async def _put_back(self, pool: Any, conn: Any, broken: bool = False) -> None:
        """Give a lent connection back (closed first if ``broken``: a reply may still be on its
        way; the pool reconnects it), or close a session's own."""
        try:
            if broken or self.session:
                await conn.disconnect()
        finally:
            if not self.session:
                await pool.release(conn)

    async def _renew(self, token: int) -> None:
        """The watchdog task (see ``redislock.Lock._renew``); release cancels it."""
        renewals = p.Renewals(self.ttl)
        conn = None
        lost: Optional[str] = None
        try:
            conn = p.own_connection(p.pool_of(self.client, self.key), renewals.timeout)
            while lost is None and self.token == token:
                await asyncio.sleep(renewals.interval)
                lost = await self._renew_once(conn, token, renewals)
        except Exception as err:  # nobody awaits this task: say it, once (cancelling is release)
            log.error("redislock: the watchdog of %s failed", self.key, exc_info=err)
            async with self._state:
                lost = self._lose(token, p.watchdog_failed(err))
        finally:
            if conn is not None:
                await conn.disconnect()
        if lost is not None:
            await self._announce_lost(lost)

    async def _renew_once(self, conn: Any, token: int, renewals: p.Renewals) -> Optional[str]:
        """One renewal, in step with release; the reason to announce if it lost the hold."""
        async with self._state:
            if self.token != token:
                return None  # released: never renew a released hold
            reason = None
            try:
                sent = time.monotonic()
                reason = renewals.answered(
                    sent, await _call(conn, p.extend_args(self.key, self.owner, self.ttl, token)))
            except p.BROKEN_LINK:
                await conn.disconnect()
                reason = renewals.broken()
            except ResponseError as err:
                reason = p.refused(err)
            return self._lose(token, reason)

    async def _announce_lost(self, reason: str) -> None:
        log.warning("redislock: lost %s: %s", self.key, reason)
        self._emit("lost", reason=reason)
        if self.on_lost is not None:
            try:
                result = self.on_lost(reason)
                if asyncio.iscoroutine(result):
                    await result
            except Exception:
                log.exception("redislock: on_lost callback failed")

    async def release(self) -> bool:
        """Release the hold; False if it was lost first (see ``redislock.Lock.release``)."""
        if self.reentrant and self._depth > 1:
            self._depth -= 1
            return True
        if self._depth == 0:
            raise RuntimeError("release of an unheld redislock.aio.Lock")
        try:
            async with self._state:
                token, self.token = self.token, None  # the watchdog stops in this very step
                released = False
                if token is not None:
                    try:
                        released = int(await self.client.execute_command(
                            *p.release_args(self.key, self.owner, token))) == 1
                    except p.BROKEN_LINK:
                        released = False
                newly_lost = not released and self._mark_lost(p.GONE_AT_RELEASE)
                held = time.monotonic() - self._granted_at
            if self._watchdog is not None:
                self._watchdog.cancel()
                self._watchdog = None
            if newly_lost:
                await self._announce_lost(self.lost or "")
            if self._session_conn is not None:
                await self._session_conn.disconnect()
                self._session_conn = None
            self._emit("released", held_s=held, released=released)
            return self.lost is None
        finally:
            self._depth, self._holder = 0, None
            self._local.release()

    async def guard(self, *command: Any) -> Any:
        """``LOCK.GUARD`` with this hold's token (``redislock.Stale`` once it is not live)."""
        args = self._guard_args(command)
        try:
            return await self.client.execute_command(*args)
        except ResponseError as err:
            raise p.translate(err) from err

    async def __aenter__(self) -> "Lock":
        if not await self.acquire():
            raise NotAcquired(f"{self.key} was not granted")
        return self

    async def __aexit__(self, exc_type: Any, exc: Any, tb: Any) -> None:
        depth = self._depth
        released = await self.release()
        if depth <= 1 and not released and self.raise_on_lost and exc_type is None:
            raise LockLost(self.lost or "the hold was gone when released")

    class _Hold:
        def __init__(self, lock: "Lock", timeout: Optional[float], blocking: bool):
            self.lock, self.timeout, self.blocking = lock, timeout, blocking

        async def __aenter__(self) -> "Lock":
            if not await self.lock.acquire(self.blocking, self.timeout):
                raise NotAcquired(f"{self.lock.key} was not granted within {self.timeout} s")
            return self.lock

        async def __aexit__(self, exc_type: Any, exc: Any, tb: Any) -> None:
            await self.lock.__aexit__(exc_type, exc, tb)

    def hold(self, timeout: Optional[float] = None, blocking: bool = True) -> "Lock._Hold":
        """``async with lock.hold(timeout=5.0):`` raises ``NotAcquired`` if not granted in time
        (``blocking=False``: at once, as ``redislock.Lock.hold``)."""
        return Lock._Hold(self, timeout, blocking)



class Semaphore(Lock):
    """The asyncio twin of ``redislock.Semaphore``."""

    def __init__(self, client: Any, key: str, limit: int, ttl: float = 30.0, permits: int = 1, **kw: Any):
        if not 1 <= permits <= limit:
            raise ValueError("need 1 <= permits <= limit")
        super().__init__(client, key, ttl, _mode=p.Mode(limit=limit, permits=permits), **kw)

    async def guard(self, *command: Any) -> Any:
        raise Stale("a semaphore's permits never guard a write; use an exclusive Lock")
