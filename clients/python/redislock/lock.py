"""Locks for threads: ``Lock`` and ``Semaphore`` over a ``redis.Redis`` (or ``redis.RedisCluster``)
client, with the module's fair FIFO waits, a fencing token per hold, a watchdog that renews the
lease, and a signal when a hold is lost."""

from __future__ import annotations

import logging
import threading
import time
from typing import Any, Callable, Optional

from redis.exceptions import ResponseError

from . import _protocol as p
from .errors import LockLost, NotAcquired, Stale

log = logging.getLogger("redislock")

#: ``on_event(name, fields)``: "acquired" (wait_s, token), "released" (held_s), "lost" (reason).
EventHook = Callable[[str, dict], None]


def _lend(pool: Any) -> Any:
    """A connection lent by the pool (redis-py 5.3+ takes no arguments, earlier ones a name)."""
    try:
        return pool.get_connection()
    except TypeError:
        return pool.get_connection("LOCK.ACQUIRE")


def _call(conn: Any, args: list, socket_timeout: Any = "keep") -> Any:
    """Send ``args`` on ``conn`` and read the reply; ``socket_timeout`` None waits as long as
    the server takes (a blocking ``WAIT``), whatever the connection's own timeout is."""
    # Connected through ``connect()``, which a Sentinel-managed connection overrides to ask
    # the Sentinels for the master (``send_command`` alone would connect to the connection's
    # default host): so a connection of our own follows a failover when it reconnects.
    conn.connect()
    conn.send_command(*args)
    sock = getattr(conn, "_sock", None)
    if socket_timeout == "keep" or sock is None:
        return conn.read_response()
    previous = sock.gettimeout()
    sock.settimeout(socket_timeout)
    try:
        return conn.read_response()
    finally:
        if getattr(conn, "_sock", None) is sock:
            sock.settimeout(previous)


class Lock(p.LockBase):
    """A lock on ``key`` held for ``ttl`` seconds at a time, renewed by a watchdog.

    ``with lock:`` waits in the server's FIFO queue (no polling), then ``lock.token`` is the
    fencing token of the hold. ``shared=True`` takes a read hold; ``session=True`` ties the hold
    to a connection of its own, so it ends when this process dies; ``replicas=n`` grants only
    once ``n`` replicas have the grant (``WAIT``), or not at all; ``on_lost(reason)`` runs once
    if the hold is lost before it is released.
    """

    def __init__(self, client: Any, key: str, ttl: float = 30.0, **options: Any):
        super().__init__(client, key, ttl, **options)
        # One holder of this object at a time, as a threading.Lock (RLock when reentrant).
        self._local = threading.RLock() if self.reentrant else threading.Lock()
        # Serializes the watchdog's renewals with release and loss.
        self._state = threading.Lock()
        self._stop = threading.Event()
        self._watchdog: Optional[threading.Thread] = None

    # -- acquiring ---------------------------------------------------------------------------

    def acquire(self, blocking: bool = True, timeout: Optional[float] = None) -> bool:
        """Take the lock, waiting in the server's queue when ``blocking`` (up to ``timeout``
        seconds; None: without limit). True if granted, as ``threading.Lock.acquire``."""
        if timeout is not None and timeout < 0:
            timeout = None
        started = time.monotonic()
        if not self._local.acquire(blocking, -1 if timeout is None or not blocking else timeout):
            return False
        if self.reentrant and self._depth > 0:
            self._depth += 1
            return True
        try:
            left = None if timeout is None else max(0.0, timeout - (time.monotonic() - started))
            granted = self._acquire_on_server(blocking, left)
        except BaseException:
            self._local.release()
            raise
        if not granted:
            self._local.release()
            return False
        self._depth = 1
        self._emit("acquired", wait_s=time.monotonic() - started, token=self.token)
        return True

    def _acquire_on_server(self, blocking: bool, timeout: Optional[float]) -> bool:
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
                conn = p.own_connection(pool, None) if self.session else _lend(pool)
            except p.BROKEN_LINK:
                # Nobody to ask yet (the server is down, or Sentinel names a master that is not
                # up yet): a wait asks again until its deadline; a call that does not wait fails.
                if wait is None or p.expired(deadline):
                    raise
                time.sleep(p.RETRY_PAUSE)
                wait = p.next_wait(deadline, wait)
                continue
            try:
                args = p.acquire_args(self.key, self.owner, self.ttl, self.mode, self.session, wait)
                reply = _call(conn, args, socket_timeout=None if wait is not None else "keep")
                token = p.token_of(reply)
                if token is not None and self.replicas and not self._replicated(conn):
                    # Not durable: give it back and report no grant.
                    _call(conn, p.release_args(self.key, self.owner, token))
                    self._emit("not-durable", replicas=self.replicas)
                    token = None
            except ResponseError as err:
                self._put_back(pool, conn)
                raise p.translate(err) from err
            except p.BROKEN_LINK:
                # The connection broke while waiting: the same owner asks again, which the
                # server treats as a safe retry (a grant whose reply never went out is revoked).
                self._put_back(pool, conn, broken=True)
                if p.expired(deadline):
                    raise
                time.sleep(p.RETRY_PAUSE)
                wait = p.next_wait(deadline, wait)
                continue
            except BaseException:
                # Interrupted mid-call (a signal handler's exception, KeyboardInterrupt): the
                # reply may still come, so the connection is closed, which takes the waiter out
                # of the server's queue, before the pool has it back.
                self._put_back(pool, conn, broken=True)
                raise
            if token is None:
                self._put_back(pool, conn)
                return False
            if self.session:
                self._session_conn = conn  # kept open while the hold lives
            else:
                pool.release(conn)
            self._granted(token)
            return True

    def _put_back(self, pool: Any, conn: Any, broken: bool = False) -> None:
        """Give a lent connection back (closed first if ``broken``: a reply may still be on its
        way; the pool reconnects it), or close a session's own."""
        try:
            if broken or self.session:
                conn.disconnect()
        finally:
            if not self.session:
                pool.release(conn)

    def _replicated(self, conn: Any) -> bool:
        acked = _call(conn, ["WAIT", self.replicas, p.millis(self.replicas_timeout)])
        return int(acked) >= self.replicas

    def _granted(self, token: int) -> None:
        with self._state:
            self.token = token
            self.lost = None
            self._granted_at = time.monotonic()
            self._stop = threading.Event()
            if self.watchdog:
                self._watchdog = threading.Thread(
                    target=self._renew, args=(token, self._stop), daemon=True,
                    name=f"redislock-watchdog-{self.key}",
                )
                self._watchdog.start()

    # -- the watchdog ------------------------------------------------------------------------

    def _renew(self, token: int, stop: threading.Event) -> None:
        """Renew the lease by the rules of ``p.Renewals`` on a connection of its own, outside
        the pool (see ``p.own_connection``), closed when the watchdog ends. Whatever fails, the
        hold is marked lost and announced: renewals never end silently."""
        renewals = p.Renewals(self.ttl)
        conn = None
        lost: Optional[str] = None
        try:
            conn = p.own_connection(p.pool_of(self.client, self.key), renewals.timeout)
            while lost is None and not stop.wait(renewals.interval):
                lost = self._renew_once(conn, token, renewals)
        except BaseException as err:  # a thread has nobody to raise to: say it, once
            log.error("redislock: the watchdog of %s failed", self.key, exc_info=err)
            with self._state:
                lost = self._lose(token, p.watchdog_failed(err))
        finally:
            if conn is not None:
                conn.disconnect()
        if lost is not None:
            self._announce_lost(lost)

    def _renew_once(self, conn: Any, token: int, renewals: p.Renewals) -> Optional[str]:
        """One renewal, in step with release; the reason to announce if it lost the hold."""
        with self._state:
            if self.token != token:
                return None  # released in the same step: never renew a released hold
            reason = None
            try:
                sent = time.monotonic()
                reason = renewals.answered(
                    sent, _call(conn, p.extend_args(self.key, self.owner, self.ttl, token)))
            except p.BROKEN_LINK:
                conn.disconnect()
                reason = renewals.broken()
            except ResponseError as err:
                reason = p.refused(err)
            return self._lose(token, reason)

    def _announce_lost(self, reason: str) -> None:
        log.warning("redislock: lost %s: %s", self.key, reason)
        self._emit("lost", reason=reason)
        if self.on_lost is not None:
            try:
                self.on_lost(reason)
            except Exception:  # the application's callback must not kill the watchdog
                log.exception("redislock: on_lost callback failed")

    # -- releasing ---------------------------------------------------------------------------

    def release(self) -> bool:
        """Release the hold. False if it was lost first (its lease ran out, or the watchdog
        gave it up): the work done under it may have overlapped another holder's."""
        if self.reentrant and self._depth > 1:
            self._depth -= 1
            return True
        if self._depth == 0:
            raise RuntimeError("release of an unheld redislock.Lock")
        try:
            with self._state:
                self._stop.set()  # the watchdog stops in this very step
                token, self.token = self.token, None
                released = False
                newly_lost = False
                if token is not None:
                    try:
                        released = int(self.client.execute_command(
                            *p.release_args(self.key, self.owner, token))) == 1
                    except p.BROKEN_LINK:
                        released = False
                newly_lost = not released and self._mark_lost(p.GONE_AT_RELEASE)
                held = time.monotonic() - self._granted_at
            if newly_lost:
                self._announce_lost(self.lost or "")
            if self._session_conn is not None:
                self._session_conn.disconnect()  # closing it ends the session hold in any case
                self._session_conn = None
            self._emit("released", held_s=held, released=released)
            return self.lost is None
        finally:
            self._depth = 0
            self._local.release()

    # -- guarded writes ----------------------------------------------------------------------

    def guard(self, *command: Any) -> Any:
        """Run ``command`` through ``LOCK.GUARD`` with this hold's token: it runs only while the
        hold is the live exclusive one, else ``redislock.Stale``."""
        args = self._guard_args(command)
        try:
            return self.client.execute_command(*args)
        except ResponseError as err:
            raise p.translate(err) from err

    # -- context managers --------------------------------------------------------------------

    def __enter__(self) -> "Lock":
        if not self.acquire():
            raise NotAcquired(f"{self.key} was not granted")
        return self

    def __exit__(self, exc_type: Any, exc: Any, tb: Any) -> None:
        depth = self._depth
        released = self.release()
        if depth <= 1 and not released and self.raise_on_lost and exc_type is None:
            raise LockLost(self.lost or "the hold was gone when released")

    class _Hold:
        def __init__(self, lock: "Lock", timeout: Optional[float], blocking: bool):
            self.lock, self.timeout, self.blocking = lock, timeout, blocking

        def __enter__(self) -> "Lock":
            if not self.lock.acquire(self.blocking, self.timeout):
                raise NotAcquired(f"{self.lock.key} was not granted within {self.timeout} s")
            return self.lock

        def __exit__(self, exc_type: Any, exc: Any, tb: Any) -> None:
            self.lock.__exit__(exc_type, exc, tb)

    def hold(self, timeout: Optional[float] = None, blocking: bool = True) -> "Lock._Hold":
        """``with lock.hold(timeout=5.0):`` raises ``NotAcquired`` if not granted in time."""
        return Lock._Hold(self, timeout, blocking)

    def __repr__(self) -> str:
        return f"<redislock.Lock {self.key!r} owner={self.owner} token={self.token}>"


class Semaphore(Lock):
    """``permits`` of a counting semaphore of ``limit`` permits at ``key``: never more than
    ``limit`` held at once, waiters served in order (a big request is never passed by smaller
    ones), each holder with its own lease and token."""

    def __init__(self, client: Any, key: str, limit: int, ttl: float = 30.0, permits: int = 1, **kw: Any):
        if not 1 <= permits <= limit:
            raise ValueError("need 1 <= permits <= limit")
        super().__init__(client, key, ttl, _mode=p.Mode(limit=limit, permits=permits), **kw)

    def guard(self, *command: Any) -> Any:
        raise Stale("a semaphore's permits never guard a write; use an exclusive Lock")

