"""The renewal loop of ``redislock.Lock``: one daemon thread per redis-py connection pool (see
``redislock._loop``), waiting in ``select`` on its connection and on a wake-up socket, so a
new hold that falls due sooner than the loop planned wakes it."""

from __future__ import annotations

import contextlib
import os
import select
import socket
import threading
import weakref
from typing import Any, List, Optional

from . import _protocol as p
from ._core import run
from ._loop import LoopBase
from ._schedule import Loss


class Link:
    """The loop's connection: a redis-py connection (it connects, authenticates, asks the
    Sentinels), whose socket the loop then writes and reads itself."""

    def __init__(self, pool: Any):
        self.conn = p.own_connection(pool, None)
        self.sock: Optional[socket.socket] = None
        self.replies = p.Replies()

    def connected(self) -> bool:
        return self.sock is not None


class ThreadLoop(LoopBase):
    _Mutex = threading.Lock

    def __init__(self, pool: Any):
        super().__init__(pool)
        self.pid = os.getpid()
        self._wakeup: Optional[socket.socket] = None
        self._waker: Optional[socket.socket] = None

    def _start(self, pool: Any) -> None:
        self._wakeup, self._waker = socket.socketpair()
        self._waker.setblocking(False)
        threading.Thread(target=self._main, args=(Link(pool), self._wakeup, self._waker),
                         daemon=True, name="redislock-renewals").start()

    def _main(self, link: Link, wakeup: socket.socket, waker: socket.socket) -> None:
        try:
            run(self._loop(link))
        finally:
            wakeup.close()
            waker.close()

    def _poke(self) -> None:
        with contextlib.suppress(OSError):  # full: it is awake already
            self._waker.send(b"!")  # type: ignore[union-attr]

    def _connect(self, link: Link, timeout: float) -> None:
        link.conn.socket_timeout = link.conn.socket_connect_timeout = timeout
        link.conn.connect()  # a Sentinel-managed connection asks for the master here
        link.sock = link.conn._sock
        link.replies = p.Replies()

    def _write(self, link: Link, data: bytes, timeout: float) -> None:
        link.sock.settimeout(timeout)  # type: ignore[union-attr]
        link.sock.sendall(data)  # type: ignore[union-attr]

    def _idle(self, link: Link, timeout: float) -> bool:
        wakeup = self._wakeup
        if link.sock is not None and getattr(link.sock, "pending", lambda: 0)():
            return True  # TLS has decrypted bytes that select cannot see
        fds = [wakeup] if link.sock is None else [wakeup, link.sock]
        readable, _, _ = select.select(fds, [], [], timeout)
        if wakeup in readable:
            with contextlib.suppress(OSError):
                wakeup.recv(4096)
        return link.sock is not None and link.sock in readable

    def _recv(self, link: Link) -> bytes:
        link.sock.settimeout(1.0)  # type: ignore[union-attr]  # (select said it is readable)
        return link.sock.recv(1 << 16)  # type: ignore[union-attr]

    def _close(self, link: Link) -> None:
        link.sock = None
        with contextlib.suppress(Exception):  # it is being dropped: nothing to report
            link.conn.disconnect()

    def _announce(self, losses: List[Loss]) -> None:
        if losses:
            threading.Thread(target=_announce, args=(losses,), daemon=True,
                             name="redislock-lost").start()


def _announce(losses: List[Loss]) -> None:
    for entry, reason in losses:
        run(entry.lock._announce_lost(reason))


_LOOPS: "weakref.WeakKeyDictionary[Any, ThreadLoop]" = weakref.WeakKeyDictionary()
_LOOPS_MUTEX = threading.Lock()


def loop_of(pool: Any) -> ThreadLoop:
    """The renewal loop of ``pool`` in this process (a fork starts its own)."""
    with _LOOPS_MUTEX:
        loop = _LOOPS.get(pool)
        if loop is None or loop.pid != os.getpid():
            loop = _LOOPS[pool] = ThreadLoop(pool)
        return loop
