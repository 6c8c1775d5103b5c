"""Locks for threads: ``Lock`` and ``Semaphore`` over a ``redis.Redis`` (or ``redis.RedisCluster``)
client, with the module's fair FIFO waits, a fencing token per hold, a watchdog that renews the
lease, and a signal when a hold is lost.

The rules are ``redislock._core``'s, shared with ``redislock.aio``; this module only does their
I/O with plain calls, and its watchdog is a thread."""

from __future__ import annotations

import threading
import time
from typing import Any, Callable, Optional

from . import _core, _lockset
from . import _protocol as p
from ._core import EventHook, log, run  # noqa: F401  (EventHook, log: this module's names too)
from ._loop_threads import loop_of

__all__ = ["Lock", "Semaphore", "MultiLock", "EventHook"]


class _With:
    """``with``: a lock's (or a hold's) rules for entering and leaving, carried out."""

    def __enter__(self) -> Any:
        return run(self._enter())  # type: ignore[attr-defined]

    def __exit__(self, exc_type: Any, exc: Any, tb: Any) -> None:
        run(self._exit(exc_type))  # type: ignore[attr-defined]


class Hold(_With, _core.HoldBase):
    """``with lock.hold(timeout=5.0):`` (see ``Lock.hold``)."""


class Lock(_With, _core.LockBase):
    """A lock on ``key`` held for ``ttl`` seconds at a time, renewed by a watchdog.

    ``with lock:`` waits in the server's FIFO queue (no polling), then ``lock.token`` is the
    fencing token of the hold. ``shared=True`` takes a read hold; ``session=True`` ties the hold
    to a connection of its own, so it ends when this process dies; ``replicas=n`` grants only
    once ``n`` replicas have the grant (``WAIT``), or not at all; ``on_lost(reason)`` runs once
    if the hold is lost before it is released; ``reentrant=True`` lets the holding thread nest.
    A server that cannot be reached, or does not answer as Redis with the module, is
    ``redislock.Unavailable`` within ``unavailable_after`` seconds (10 by default).
    """

    _NAME = "redislock.Lock"
    _Mutex = threading.Lock
    _Event = threading.Event
    _Hold = Hold
    _WATCHDOG_FAILURES = (BaseException,)  # a thread has nobody to raise to
    _loop_of = staticmethod(loop_of)

    def acquire(self, blocking: bool = True, timeout: Optional[float] = None) -> bool:
        """Take the lock, waiting in the server's queue when ``blocking`` (up to ``timeout``
        seconds; None or -1: without limit; another negative one: ``ValueError``). True if
        granted, as ``threading.Lock.acquire``; ``redislock.Unavailable`` when the server does
        not answer within ``unavailable_after``."""
        return run(self._acquire(blocking, timeout))

    def release(self) -> bool:
        """Release the hold. False if it was lost first (its lease ran out, or the watchdog
        gave it up): the work done under it may have overlapped another holder's; False too,
        and nothing sent, when it was released already."""
        return run(self._release())

    def guard(self, *command: Any) -> Any:
        """Run ``command`` through ``LOCK.GUARD`` with this hold's token: it runs only while the
        hold is the live exclusive one, else ``redislock.Stale``."""
        return run(self._guarded(command))

    def extend(self, ttl: Optional[float] = None) -> bool:
        """``LOCK.EXTEND`` now: the lease ends ``ttl`` seconds from now (longer or shorter than
        before; None: the hold's ttl), and the watchdog, if on, renews it by that ttl from then
        on. True while the hold is live; False when the server answers 0 (the hold is then
        lost, reported once: "the lease ran out before it was renewed"), and, with nothing
        sent, once the hold is known lost or released. How a fixed lease (``watchdog=False``)
        is kept on the caller's schedule. ``redislock.Unavailable`` as ``release``."""
        return run(self._extend_in_turn(ttl))

    # -- the I/O of _core's steps, as plain calls --------------------------------------------

    def _me(self) -> Any:
        return threading.current_thread()

    def _take_local(self, patience: Optional[float]) -> bool:
        if patience == 0:
            return self._local.acquire(False)
        return self._local.acquire(True, -1 if patience is None else patience)

    def _connect(self, conn: Any, timeout: float) -> None:
        conn.socket_timeout = conn.socket_connect_timeout = timeout
        sock = getattr(conn, "_sock", None)
        if sock is not None:
            try:
                stale = conn.can_read()  # an idle connection has nothing to read, unless closed
            except p.BROKEN_LINK:
                stale = True
            if not stale:
                sock.settimeout(timeout)
                return
            conn.disconnect()
        # Through ``connect()``, which a Sentinel-managed connection overrides to ask the
        # Sentinels for the master: so a connection of our own follows a failover.
        conn.connect()

    def _write(self, conn: Any, args: list) -> None:
        conn.send_command(*args)

    def _reply_within(self, conn: Any, seconds: float) -> bool:
        return conn.can_read(timeout=seconds)

    def _read(self, conn: Any) -> Any:
        return conn.read_response()

    def _close(self, conn: Any) -> None:
        conn.disconnect()

    def _pause(self, seconds: float) -> None:
        time.sleep(seconds)

    def _stopped(self, stop: threading.Event, seconds: float) -> bool:
        return stop.wait(seconds)

    def _in_state(self, steps: _core.Steps[Any]) -> Any:
        with self._state:
            return run(steps)

    def _start_watchdog(self, token: int, stop: threading.Event) -> None:
        self._watchdog = threading.Thread(
            target=run, args=(self._watch(token, stop),), daemon=True,
            name=f"redislock-session-{self.key}",
        )
        self._watchdog.start()

    def _in_background(self, steps: _core.Steps[Any]) -> None:
        threading.Thread(target=run, args=(steps,), daemon=True,
                         name=f"redislock-give-back-{self.key}").start()

    def _on_own(self, conn: Any, timeout: float) -> bool:
        sock = getattr(conn, "_sock", None)
        if sock is None:
            return False
        conn.socket_timeout = timeout
        sock.settimeout(timeout)
        return True

    def _call_back(self, fn: Callable[..., Any], *args: Any) -> None:
        fn(*args)


class Semaphore(_core.SemaphoreBase, Lock):
    """``permits`` of a counting semaphore of ``limit`` permits at ``key``: never more than
    ``limit`` held at once, waiters served in order (a big request is never passed by smaller
    ones), each holder with its own lease and token. ``guard`` raises ``redislock.Stale``:
    permits never guard a write."""

    _NAME = "redislock.Semaphore"


class MultiLock(_lockset.LockSetBase, Lock):
    """A lock set (rule 23): ``keys`` taken in one step or none (``LOCK.MACQUIRE``), each
    exclusive (or each read-held: ``shared=True``) for ``ttl`` seconds at a time, renewed by
    the watchdog. Waiting sets queue in every key's queue at once, so two sets never deadlock
    whatever order their keys are named in: nobody sorts them.

    ``with lock:`` takes them all, then ``lock.tokens`` are the fencing tokens, one per key in
    the order given (``lock.token_for(key)``: one of them), and ``lock.guard(key, *command)``
    writes under one key with its token. The set is lost (``lost``, ``on_lost`` once,
    ``LockLost`` on leaving ``with``) when any member is, the reason naming that key; the
    members still held are then released. ``release()`` is True only if every member was still
    held. Arguments as ``Lock``'s (``session=True`` too; no ``replicas``); no keys, a key twice or
    more than 64 keys is a ``ValueError``, before anything is sent. In a cluster the keys must
    hash to one slot (``{account}:1``, ``{account}:2``).
    """

    _NAME = "redislock.MultiLock"

    def guard(self, key: Any, *command: Any) -> Any:  # type: ignore[override]
        """Run ``command`` through ``LOCK.GUARD`` with ``key``'s token: it runs only while that
        member is the key's live exclusive hold, else ``redislock.Stale``."""
        return run(self._guarded_under(key, command))
