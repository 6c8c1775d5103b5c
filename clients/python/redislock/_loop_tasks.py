"""The renewal loop of ``redislock.aio.Lock``: one task per redis-py connection pool and event
loop (see ``redislock._loop``), which awaits its connection's next bytes (one read, kept across
its waits) or a wake-up event, so a new hold that falls due sooner wakes it."""

from __future__ import annotations

import asyncio
import contextlib
import weakref
from typing import Any, Dict, List, Optional

from . import _protocol as p
from ._core import arun
from ._loop import LoopBase
from ._schedule import Loss


class Link:
    """The loop's connection: a redis-py asyncio connection (it connects, authenticates, asks
    the Sentinels), whose streams the loop then writes and reads itself."""

    def __init__(self, pool: Any):
        self.conn = p.own_connection(pool, None)
        self.reader: Any = None
        self.writer: Any = None
        self.reading: Optional["asyncio.Future[bytes]"] = None
        self.replies = p.Replies()

    def connected(self) -> bool:
        return self.writer is not None


class TaskLoop(LoopBase):
    _Mutex = contextlib.nullcontext  # one thread: the schedule needs no guard

    def __init__(self, pool: Any):
        super().__init__(pool)
        self._wakeup = asyncio.Event()
        self._task: Optional["asyncio.Task[None]"] = None
        self._announcing: set = set()

    def _start(self, pool: Any) -> None:
        self._wakeup = asyncio.Event()
        # Kept (the event loop keeps only weak references to tasks); it ends with the last hold.
        self._task = asyncio.ensure_future(arun(self._loop(Link(pool))))

    def _poke(self) -> None:
        self._wakeup.set()

    async def _connect(self, link: Link, timeout: float) -> None:
        link.conn.socket_timeout = link.conn.socket_connect_timeout = timeout
        await link.conn.connect()  # a Sentinel-managed connection asks for the master here
        link.reader, link.writer = link.conn._reader, link.conn._writer
        link.replies = p.Replies()

    async def _write(self, link: Link, data: bytes, timeout: float) -> None:
        link.writer.write(data)  # before any await: no release can come between
        await asyncio.wait_for(link.writer.drain(), timeout)

    async def _idle(self, link: Link, timeout: float) -> bool:
        if self._wakeup.is_set():
            self._wakeup.clear()
            return False
        waits = [asyncio.ensure_future(self._wakeup.wait())]
        if link.reader is not None:
            if link.reading is None:
                link.reading = asyncio.ensure_future(link.reader.read(1 << 16))
            waits.append(link.reading)
        try:
            await asyncio.wait(waits, timeout=timeout, return_when=asyncio.FIRST_COMPLETED)
        finally:
            waits[0].cancel()
        self._wakeup.clear()
        return link.reading is not None and link.reading.done()

    async def _recv(self, link: Link) -> bytes:
        reading, link.reading = link.reading, None
        return await reading  # type: ignore[misc]

    async def _close(self, link: Link) -> None:
        reading, link.reading = link.reading, None
        if reading is not None:
            reading.cancel()
        link.reader = link.writer = None
        with contextlib.suppress(Exception):  # it is being dropped: nothing to report
            await asyncio.shield(link.conn.disconnect())

    async def _announce(self, losses: List[Loss]) -> None:
        if losses:
            task = asyncio.ensure_future(_announce(losses))
            self._announcing.add(task)
            task.add_done_callback(self._announcing.discard)


async def _announce(losses: List[Loss]) -> None:
    for entry, reason in losses:
        await arun(entry.lock._announce_lost(reason))


_LOOPS: "weakref.WeakKeyDictionary[Any, Dict[Any, TaskLoop]]" = weakref.WeakKeyDictionary()


def loop_of(pool: Any) -> TaskLoop:
    """The renewal loop of ``pool`` on the running event loop."""
    loops = _LOOPS.get(pool)
    if loops is None:
        loops = _LOOPS[pool] = weakref.WeakKeyDictionary()  # type: ignore[assignment]
    event_loop = asyncio.get_running_loop()
    loop = loops.get(event_loop)
    if loop is None:
        loop = loops[event_loop] = TaskLoop(pool)
    return loop
