"""The two flavours of the client as drivers of one test body (``test_locks.py``).

A test body is an ``async def`` written against the asyncio API (``async with lock``, ``await
lock.acquire()``); the ``flavour`` fixture (conftest.py) runs it once per driver:

- ``Tasks``: ``redislock.aio`` as it is, on ``redis.asyncio`` clients; ``spawn`` makes a task.
- ``Threads``: ``redislock.Lock`` on ``redis.Redis`` clients, seen through ``AsAsync`` (each call
  made, blocking, in the calling thread); ``spawn`` runs a coroutine in a thread of its own.

So "another thread" of the threading client is "another task" of the asyncio one, and a behaviour
tested once is tested in both."""

import asyncio
import inspect
import signal
import threading
import time
from typing import Any, Callable, Optional

import pytest
import redis
import redis.asyncio as aredis

import redislock


async def result(value: Any) -> Any:
    """``value``, awaited if it is awaitable: a client's reply in either flavour."""
    return await value if inspect.isawaitable(value) else value


async def soon(cond: Callable[[], Any], timeout: float = 5.0) -> Any:
    """``conftest.eventually`` for test bodies: polls without blocking the event loop (where an
    asyncio watchdog runs)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if cond():
            return True
        await asyncio.sleep(0.01)
    return cond()


async def after(seconds: float, fn: Callable[[], Any]) -> Any:
    """``fn()`` (awaited) after ``seconds``: to spawn."""
    await asyncio.sleep(seconds)
    return await fn()


class AsAsync:
    """A threading lock (or one of its holds) through the asyncio API: the same calls, awaited;
    each is made in the calling thread. Attributes (``token``, ``lost``, ``locked``...) are the
    lock's own."""

    def __init__(self, inner: Any, lock: Optional["AsAsync"] = None):
        self._inner = inner
        self._lock = lock  # a hold's lock: what ``async with lock.hold() as x`` gives as x

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)

    async def acquire(self, *args: Any, **kwargs: Any) -> bool:
        return self._inner.acquire(*args, **kwargs)

    async def release(self) -> bool:
        return self._inner.release()

    async def guard(self, *command: Any) -> Any:
        return self._inner.guard(*command)

    async def extend(self, *args: Any) -> bool:
        return self._inner.extend(*args)

    async def resign(self) -> bool:
        return self._inner.resign()

    def hold(self, *args: Any, **kwargs: Any) -> "AsAsync":
        return AsAsync(self._inner.hold(*args, **kwargs), lock=self)

    async def __aenter__(self) -> "AsAsync":
        self._inner.__enter__()
        return self._lock or self

    async def __aexit__(self, exc_type: Any, exc: Any, tb: Any) -> None:
        self._inner.__exit__(exc_type, exc, tb)


class AsAsyncElection(AsAsync):
    """A threading ``redislock.Election`` through the asyncio API: ``await election.leader()``,
    ``await election.campaign()`` or ``async with election.campaign() as leadership``,
    ``async for leader in election.observe()``; each call made, blocking, in the calling
    thread."""

    def campaign(self, *args: Any, **kwargs: Any) -> "_Campaign":
        return _Campaign(lambda: self._inner.campaign(*args, **kwargs))

    async def leader(self) -> Any:
        return self._inner.leader()

    def observe(self) -> "AsAsyncObservation":
        return AsAsyncObservation(self._inner.observe())


class _Campaign:
    def __init__(self, campaign: Callable[[], Any]):
        self._campaign = campaign
        self._leadership: Optional[AsAsync] = None

    async def _elect(self) -> AsAsync:
        return AsAsync(self._campaign())

    def __await__(self) -> Any:
        return self._elect().__await__()

    async def __aenter__(self) -> AsAsync:
        self._leadership = await self
        return self._leadership

    async def __aexit__(self, exc_type: Any, exc: Any, tb: Any) -> None:
        if self._leadership is not None:
            await self._leadership.__aexit__(exc_type, exc, tb)


class AsAsyncObservation(AsAsync):
    def __aiter__(self) -> "AsAsyncObservation":
        return self

    async def __anext__(self) -> Any:
        try:
            return next(self._inner)
        except StopIteration:
            raise StopAsyncIteration from None

    async def aclose(self) -> None:
        self._inner.close()


class Interrupted(Exception):
    """What the SIGALRM handler raises in the waiting thread (as KeyboardInterrupt would)."""


def _interrupt(signum: int, frame: Any) -> None:
    raise Interrupted()


class _Thread:
    """A coroutine run to its end in a thread of its own (with its own event loop)."""

    def __init__(self, coro: Any):
        self._outcome: Any = None
        self._thread = threading.Thread(target=self._run, args=(coro,), daemon=True)
        self._thread.start()

    def _run(self, coro: Any) -> None:
        try:
            self._outcome = (True, asyncio.run(coro))
        except BaseException as err:
            self._outcome = (False, err)

    def done(self) -> bool:
        return not self._thread.is_alive()

    async def join(self, timeout: float) -> Any:
        if not await soon(self.done, timeout):
            raise TimeoutError("the thread is still running")
        ok, value = self._outcome
        if not ok:
            raise value
        return value


class _Driver:
    name = ""

    def __init__(self, port: int):
        self.port = port
        self._clients: list = []
        self._closers: list = []

    def client(self, server: Any = None, **kw: Any) -> Any:
        """A client of the test server (or of ``server``), closed after the test."""
        made = self._client(port=(server or self).port, **kw)
        self._clients.append(made)
        return made

    def closing(self, close: Callable[[], Any]) -> None:
        """Call ``close()`` (awaited if it is a coroutine) after the test body, in its event
        loop, before its clients are closed: for what a test's fixtures open in that loop."""
        self._closers.append(close)

    def run(self, body: Any) -> Any:
        """Run a test body (a coroutine), then close what it opened and the clients it made."""
        return asyncio.run(self._main(body))

    async def _main(self, body: Any) -> Any:
        try:
            return await body
        finally:
            for close in self._closers:
                await result(close())
            self._closers.clear()
            for made in self._clients:
                await result(self._close(made))
            self._clients.clear()

    def __repr__(self) -> str:
        return self.name


class Threads(_Driver):
    """``redislock.Lock``, its rules carried out by plain calls; concurrency by threads."""

    name = "sync"
    _client = staticmethod(redis.Redis)

    @staticmethod
    def _close(client: Any) -> None:
        client.close()

    def Lock(self, client: Any, key: str, ttl: float = 30.0, **kw: Any) -> AsAsync:
        return AsAsync(redislock.Lock(client, key, ttl, **kw))

    def Semaphore(self, client: Any, key: str, limit: int, ttl: float = 30.0, **kw: Any) -> AsAsync:
        return AsAsync(redislock.Semaphore(client, key, limit, ttl, **kw))

    def MultiLock(self, client: Any, keys: Any, ttl: float = 30.0, **kw: Any) -> AsAsync:
        return AsAsync(redislock.MultiLock(client, keys, ttl, **kw))

    def Election(self, client: Any, key: str, identity: str, **kw: Any) -> AsAsyncElection:
        return AsAsyncElection(redislock.Election(client, key, identity, **kw))

    def spawn(self, coro: Any) -> _Thread:
        """``coro`` in another thread."""
        return _Thread(coro)

    async def join(self, spawned: _Thread, timeout: float) -> Any:
        return await spawned.join(timeout)

    async def interrupted(self, call: Callable[[], Any], after: float) -> None:
        """``call()`` (a lock's call), interrupted after ``after`` s by an exception from a
        signal handler (this thread is the main one, where Python runs signal handlers)."""
        previous = signal.signal(signal.SIGALRM, _interrupt)
        try:
            signal.setitimer(signal.ITIMER_REAL, after)
            with pytest.raises(Interrupted):
                await call()
        finally:
            signal.setitimer(signal.ITIMER_REAL, 0)
            signal.signal(signal.SIGALRM, previous)

    async def abandoned_wait(self, client: Any, key: str) -> None:
        """A blocking acquire of the held ``key``, interrupted after 0.2 s by an exception from
        a signal handler (this thread is the main one, where Python runs signal handlers)."""
        previous = signal.signal(signal.SIGALRM, _interrupt)
        try:
            signal.setitimer(signal.ITIMER_REAL, 0.2)
            with pytest.raises(Interrupted):
                redislock.Lock(client, key, ttl=5).acquire(timeout=5)
        finally:
            signal.setitimer(signal.ITIMER_REAL, 0)
            signal.signal(signal.SIGALRM, previous)

    @staticmethod
    def gated(gate: Callable[[], Any], then: Callable[[str], Any]) -> Callable[[str], None]:
        """A callback that waits (in the watchdog's thread) until ``gate()`` is true, at most
        10 s, before ``then``: it runs for as long as the test says."""

        def callback(reason: str) -> None:
            deadline = time.monotonic() + 10
            while not gate() and time.monotonic() < deadline:
                time.sleep(0.01)
            then(reason)

        return callback


class Tasks(_Driver):
    """``redislock.aio.Lock``, its rules carried out by awaiting; concurrency by tasks."""

    name = "async"
    _client = staticmethod(aredis.Redis)

    @staticmethod
    def _close(client: Any) -> Any:
        return client.aclose()

    def Lock(self, client: Any, key: str, ttl: float = 30.0, **kw: Any) -> redislock.aio.Lock:
        return redislock.aio.Lock(client, key, ttl, **kw)

    def Semaphore(self, client: Any, key: str, limit: int, ttl: float = 30.0,
                  **kw: Any) -> redislock.aio.Semaphore:
        return redislock.aio.Semaphore(client, key, limit, ttl, **kw)

    def MultiLock(self, client: Any, keys: Any, ttl: float = 30.0,
                  **kw: Any) -> redislock.aio.MultiLock:
        return redislock.aio.MultiLock(client, keys, ttl, **kw)

    def Election(self, client: Any, key: str, identity: str, **kw: Any) -> Any:
        return redislock.AsyncElection(client, key, identity, **kw)

    def spawn(self, coro: Any) -> "asyncio.Task[Any]":
        """``coro`` in another task."""
        return asyncio.ensure_future(coro)

    async def join(self, spawned: "asyncio.Task[Any]", timeout: float) -> Any:
        return await asyncio.wait_for(spawned, timeout)

    async def interrupted(self, call: Callable[[], Any], after: float) -> None:
        """``call()`` (a lock's call), cancelled by ``wait_for`` after ``after`` s."""
        with pytest.raises(asyncio.TimeoutError):
            await asyncio.wait_for(call(), after)

    async def abandoned_wait(self, client: Any, key: str) -> None:
        """A blocking acquire of the held ``key``, cancelled by ``wait_for`` after 0.1 s."""
        with pytest.raises(asyncio.TimeoutError):
            await asyncio.wait_for(redislock.aio.Lock(client, key, ttl=5.0).acquire(), 0.1)

    @staticmethod
    def gated(gate: Callable[[], Any], then: Callable[[str], Any]) -> Callable[[str], Any]:
        """A callback that awaits ``gate()`` being true, at most 10 s, before ``then``."""

        async def callback(reason: str) -> None:
            await soon(gate, 10)
            then(reason)

        return callback


FLAVOURS = {driver.name: driver for driver in (Threads, Tasks)}
