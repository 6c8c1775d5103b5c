"""The same locks for asyncio: ``redislock.aio.Lock`` and ``redislock.aio.Semaphore`` over a
``redis.asyncio.Redis`` client, with ``async with``, ``await lock.acquire()`` and a watchdog
task.

The rules are ``redislock._core``'s, the very ones of ``redislock.Lock``; this module only does
their I/O by awaiting it, and its watchdog is a task."""

from __future__ import annotations

import asyncio
from typing import Any, Callable, Optional

from . import _core, _election, _lockset
from . import _protocol as p
from ._core import arun, log  # noqa: F401  (log: this module's name too)
from ._loop_tasks import loop_of

__all__ = ["Lock", "Semaphore", "MultiLock", "Election", "Leadership", "Observation", "Leader"]


class _AsyncWith:
    """``async with``: a lock's (or a hold's) rules for entering and leaving, carried out."""

    async def __aenter__(self) -> Any:
        return await arun(self._enter())  # type: ignore[attr-defined]

    async def __aexit__(self, exc_type: Any, exc: Any, tb: Any) -> None:
        await arun(self._exit(exc_type))  # type: ignore[attr-defined]


class Hold(_AsyncWith, _core.HoldBase):
    """``async with lock.hold(timeout=5.0):`` (see ``Lock.hold``)."""


class Lock(_AsyncWith, _core.LockBase):
    """The asyncio twin of ``redislock.Lock``: same arguments, same rules (one implementation,
    ``redislock._core``); one task holds it at a time (``reentrant=True``: that task may nest)."""

    _NAME = "redislock.aio.Lock"
    _Mutex = asyncio.Lock
    _Event = asyncio.Event
    _Hold = Hold
    #: Cancellation and interrupts (``BaseException``) belong to the event loop, not the hold.
    _WATCHDOG_FAILURES = (Exception,)
    _loop_of = staticmethod(loop_of)

    async def acquire(self, blocking: bool = True, timeout: Optional[float] = None) -> bool:
        """Take the lock (see ``redislock.Lock.acquire``)."""
        return await arun(self._acquire(blocking, timeout))

    async def release(self) -> bool:
        """Release the hold; False if it was lost first (see ``redislock.Lock.release``)."""
        return await arun(self._release())

    async def guard(self, *command: Any) -> Any:
        """``LOCK.GUARD`` with this hold's token (``redislock.Stale`` once it is not live)."""
        return await arun(self._guarded(command))

    async def extend(self, ttl: Optional[float] = None) -> bool:
        """``LOCK.EXTEND`` now: the lease ends ``ttl`` from now (see ``redislock.Lock.extend``)."""
        return await arun(self._extend_in_turn(ttl))

    # -- the I/O of _core's steps, awaited ---------------------------------------------------

    def _me(self) -> Any:
        return asyncio.current_task()

    async def _take_local(self, patience: Optional[float]) -> bool:
        if patience == 0:  # one try, as ``threading.Lock.acquire(timeout=0)``
            # (asyncio.Lock has no try-acquire: in the instant between a release and the wake-up
            # of a task waiting for this object, this waits behind that task.)
            if self._local.locked():
                return False
            await self._local.acquire()
            return True
        if patience is None:
            await self._local.acquire()
            return True
        try:
            await asyncio.wait_for(self._local.acquire(), patience)
        except asyncio.TimeoutError:
            return False
        return True

    async def _connect(self, conn: Any, timeout: float) -> None:
        conn.socket_timeout = conn.socket_connect_timeout = timeout
        if conn.is_connected:
            try:
                # Idle: nothing to read, unless closed (``can_read`` since redis-py 8).
                stale = await getattr(conn, "can_read", conn.can_read_destructive)()
            except p.BROKEN_LINK:
                stale = True
            if not stale:
                return
            await conn.disconnect()
        # Through ``connect()``, which a Sentinel-managed connection overrides to ask the
        # Sentinels for the master (see ``redislock.Lock._connect``).
        await conn.connect()

    async def _write(self, conn: Any, args: list) -> None:
        await conn.send_command(*args)

    async def _reply_within(self, conn: Any, seconds: float) -> bool:
        # One read for the whole wait, awaited a slice at a time (never cancelled by a slice).
        reading = conn.__dict__.get("_redislock_reply")
        if reading is None:
            reading = conn._redislock_reply = asyncio.ensure_future(_read_without_timeout(conn))
        done, _ = await asyncio.wait({reading}, timeout=seconds)
        return bool(done)

    async def _read(self, conn: Any) -> Any:
        reading = conn.__dict__.pop("_redislock_reply", None)
        return await (reading if reading is not None else conn.read_response())

    async def _close(self, conn: Any) -> None:
        reading = conn.__dict__.pop("_redislock_reply", None)
        if reading is not None:
            reading.cancel()
        # Shielded: a second cancellation cannot leave the connection open.
        await asyncio.shield(conn.disconnect())

    async def _pause(self, seconds: float) -> None:
        await asyncio.sleep(seconds)

    async def _stopped(self, stop: asyncio.Event, seconds: float) -> bool:
        try:
            await asyncio.wait_for(stop.wait(), seconds)
        except asyncio.TimeoutError:
            pass
        return stop.is_set()

    async def _in_state(self, steps: _core.Steps[Any]) -> Any:
        async with self._state:
            return await arun(steps)

    async def _start_watchdog(self, token: int, stop: asyncio.Event) -> None:
        # Kept in ``_watchdog`` (the loop keeps only weak references to tasks); it ends when
        # release sets ``stop``, so it is never cancelled (an awaited ``on_lost`` runs to its end).
        self._watchdog = asyncio.create_task(arun(self._watch(token, stop)))

    async def _in_background(self, steps: _core.Steps[Any]) -> None:
        task = asyncio.ensure_future(arun(steps))
        _BACKGROUND.add(task)  # (the event loop keeps only weak references to tasks)
        task.add_done_callback(_BACKGROUND.discard)

    async def _on_own(self, conn: Any, timeout: float) -> bool:
        if not conn.is_connected:
            return False
        conn.socket_timeout = timeout
        return True

    async def _call_back(self, fn: Callable[..., Any], *args: Any) -> None:
        result = fn(*args)
        if asyncio.iscoroutine(result):
            await result


_BACKGROUND: set = set()


async def _read_without_timeout(conn: Any) -> Any:
    """The reply of a wait: no read timeout cuts it short (rule 2)."""
    previous, conn.socket_timeout = conn.socket_timeout, None
    try:
        return await conn.read_response()
    finally:
        conn.socket_timeout = previous


class Semaphore(_core.SemaphoreBase, Lock):
    """The asyncio twin of ``redislock.Semaphore``."""

    _NAME = "redislock.aio.Semaphore"


class MultiLock(_lockset.LockSetBase, Lock):
    """The asyncio twin of ``redislock.MultiLock`` (a lock set, rule 23): ``async with``,
    ``await acquire()``, ``await release()``, ``await extend()``, ``await guard(key, ...)``."""

    _NAME = "redislock.aio.MultiLock"

    async def guard(self, key: Any, *command: Any) -> Any:  # type: ignore[override]
        """``LOCK.GUARD`` with ``key``'s token (``redislock.Stale`` once the set is not live)."""
        return await arun(self._guarded_under(key, command))


# -- elections (rules 21 and 22): the rules of ``redislock._election``, awaited -------------------

Leader = p.Leader


class Leadership(_election.LeadershipBase):
    """The asyncio twin of ``redislock.election.Leadership``: ``term``, ``lost``, ``leading``,
    ``await resign()``, ``await guard(...)``; ``async with`` resigns on leaving and raises
    ``redislock.LeadershipLost`` if the leadership was lost before."""

    async def resign(self) -> bool:
        """Give the leadership up (see ``redislock.election.Leadership.resign``)."""
        return await arun(self._resign())

    async def guard(self, *command: Any) -> Any:
        """``LOCK.GUARD`` with this term (``redislock.Stale`` once it is not the leadership)."""
        return await arun(self._lock._guarded(command))

    async def __aenter__(self) -> "Leadership":
        return self

    async def __aexit__(self, exc_type: Any, exc: Any, tb: Any) -> None:
        await arun(self._exit(exc_type))


class Campaign:
    """``Election.campaign()``: awaited, the ``Leadership``; or ``async with`` it, which resigns
    on leaving."""

    def __init__(self, election: "Election", timeout: Optional[float],
                 on_lost: Optional[Callable[[str], Any]]):
        self._steps = election._campaign(timeout, on_lost)  # checks the arguments now
        self._leadership: Optional[Leadership] = None

    def __await__(self) -> Any:
        return arun(self._steps).__await__()

    async def __aenter__(self) -> Leadership:
        self._leadership = await self
        return self._leadership

    async def __aexit__(self, exc_type: Any, exc: Any, tb: Any) -> None:
        if self._leadership is not None:
            await self._leadership.__aexit__(exc_type, exc, tb)


class Observation(_election.ObservationBase):
    """``Election.observe()``: an async iterator of leaders (``Leader``, or None while there is
    none); ``await aclose()`` (or leaving ``async with``) closes its connection and ends it."""

    def __aiter__(self) -> "Observation":
        return self

    async def __anext__(self) -> Optional[Leader]:
        leader = await arun(self._next())
        if leader is self.END:
            raise StopAsyncIteration
        return leader

    async def aclose(self) -> None:
        await arun(self._close())

    async def __aenter__(self) -> "Observation":
        return self

    async def __aexit__(self, exc_type: Any, exc: Any, tb: Any) -> None:
        await self.aclose()


class Election(_election.ElectionBase):
    """The asyncio twin of ``redislock.Election`` (also ``redislock.AsyncElection``), over a
    ``redis.asyncio.Redis`` client: ``await election.campaign()`` or ``async with
    election.campaign() as leadership:``, ``await election.leader()``, ``async for leader in
    election.observe():``. The leadership's watchdog is a task of the event loop."""

    _Lock = Lock
    _Leadership = Leadership

    def campaign(self, timeout: Optional[float] = None, *,
                 on_lost: Optional[Callable[[str], Any]] = None) -> Campaign:
        """Wait to lead (see ``redislock.Election.campaign``); ``on_lost`` may be a coroutine
        function."""
        p.patience(True, timeout)  # a ValueError at the call, not at its await
        return Campaign(self, timeout, on_lost)

    async def leader(self) -> Optional[Leader]:
        """The current leader (``identity``, ``term``), or None: one ``LOCK.WATCH``."""
        return await arun(self._leader())

    def observe(self) -> Observation:
        """The leaders as they change: the current one (or None) first, then each change."""
        return Observation(self)
