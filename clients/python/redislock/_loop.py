"""One renewal loop per redis-py connection pool (rule 6), written once for both flavours as
``redislock._core`` writes a lock: each turn of the loop is a generator that yields I/O steps,
carried out by the threads' loop (``redislock._loop_threads``: a daemon thread per pool) or
the tasks' (``redislock._loop_tasks``: a task per pool and event loop).

The loop renews every live watchdog hold of the pool's locks (and times their fixed leases) on
one connection of its own, made like the pool's but outside it (``p.own_connection``; through
Sentinel, the current master), connected when a renewal is due and again after it breaks. The
renewals due together go out in one write; their replies are read as they come, in order. A
release takes its hold out (``remove``) before it sends ``LOCK.RELEASE``, and the loop only
writes, under its mutex, renewals of holds still in: none is sent after. The loop ends, and
closes its connection, when it has no hold left; the next hold starts it again.
"""

from __future__ import annotations

import time
from typing import Any, List, Optional, Tuple

from . import _protocol as p
from ._core import Steps, log
from ._schedule import Entry, Loss, Schedule


class LoopBase:
    """The loop of one pool; a flavour sets ``_Mutex`` and does the I/O steps."""

    #: Guards the schedule: ``threading.Lock``, or a no-op for tasks (one thread).
    _Mutex: Any

    def __init__(self, pool: Any):
        self.encoding = pool.connection_kwargs.get("encoding", "utf-8")
        self.mutex = self._Mutex()
        self.schedule = Schedule()
        self.running = False
        #: When the loop waits until, while it waits (None: busy; it reads the schedule anew).
        self.wake_at: Optional[float] = None

    # -- what locks call -----------------------------------------------------------------------

    def add(self, pool: Any, lock: Any, token: int, ttl: float, lease_from: float,
            renews: bool) -> Entry:
        """Put hold ``token`` of ``lock`` in the loop (renewed if ``renews``, else only timed)."""
        entry = Entry(lock, token, ttl, lease_from, renews, self.encoding)
        entry.loop = self
        with self.mutex:
            self.schedule.add(entry)
            if not self.running:
                self.running = True
                self._start(pool)
            elif self.wake_at is not None and min(entry.due, entry.deadline) < self.wake_at:
                self._poke()
        return entry

    def remove(self, entry: Entry) -> None:
        """Take ``entry`` out: nothing of it is sent after this returns."""
        with self.mutex:
            self.schedule.remove(entry)

    def lose(self, entry: Entry, reason: str) -> Optional[Loss]:
        with self.mutex:
            return self.schedule.lose(entry, reason)

    def extending(self, entry: Entry, ttl: float) -> bool:
        with self.mutex:
            return self.schedule.extending(entry, ttl)

    def renewing(self, entry: Entry) -> bool:
        with self.mutex:
            return self.schedule.renewing(entry)

    def extend_unanswered(self, entry: Entry, ends_by: float) -> None:
        with self.mutex:
            moved = self.schedule.extend_unanswered(entry, ends_by, time.monotonic())
            if moved and self.wake_at is not None:
                self._poke()

    def extended(self, entry: Entry, ttl: float, sent: float) -> bool:
        with self.mutex:
            done = self.schedule.extended(entry, ttl, sent)
            if done and self.wake_at is not None and entry.due < self.wake_at:
                self._poke()
            return done

    # -- the loop, as steps --------------------------------------------------------------------

    def _loop(self, link: Any) -> Steps[None]:
        """Turns until no hold is left; whatever fails unexpectedly loses every hold, said."""
        try:
            while (yield from self._turn(link)):
                pass
        except Exception as err:  # nobody would hear of it: said, and every hold lost
            log.error("redislock: the renewal loop failed", exc_info=err)
            with self.mutex:
                self.running = False
                losses = self.schedule.fail_all(p.watchdog_failed(err))
            yield self._announce, losses
        except BaseException:  # the event loop (or the process) is closing: no more renewals
            with self.mutex:
                self.running = False
            raise
        finally:
            yield self._close, link

    def _turn(self, link: Any) -> Steps[bool]:
        with self.mutex:
            if not self.schedule:
                self.running = False
                self.schedule.clear()
                return False
            now = time.monotonic()
            losses = self.schedule.expired(now)
            stalled = self.schedule.stalled
            batch = self.schedule.batch(now)
        if stalled:
            losses += yield from self._broken(link, p.NO_ANSWER)
        if losses:
            yield self._announce, losses
        if batch:
            yield from self._send(link, batch)
        yield from self._wait(link)
        return True

    def _send(self, link: Any, batch: List[Entry]) -> Steps[None]:
        """``batch``'s renewals in one write, connecting first if need be."""
        if not link.connected():
            with self.mutex:
                timeout = self._time_left(batch)
            try:
                yield self._connect, link, timeout
            except Exception as err:
                yield self._close, link
                with self.mutex:
                    losses = self.schedule.not_sent(batch, time.monotonic(), p.cause_of(err))
                yield self._announce, losses
                return
        failed: Optional[Exception] = None
        with self.mutex:  # held while writing: a release waits, or finds its hold not sent
            live, data, losses = self._renewals(batch)
            if live:
                sent = time.monotonic()
                try:
                    yield self._write, link, b"".join(data), self._time_left(live)
                    self.schedule.sent(live, sent)
                except Exception as err:
                    losses += self.schedule.not_sent(live, sent, p.cause_of(err))
                    failed = err
        if failed is not None:
            losses += yield from self._broken(link, p.cause_of(failed))
        yield self._announce, losses

    def _renewals(self, batch: List[Entry]) -> Tuple[List[Entry], List[bytes], List[Loss]]:
        """The entries of ``batch`` still in the loop, their renewals, and the losses of those
        whose renewal could not even be made (with the mutex held)."""
        live, data, losses = [], [], []
        for entry in batch:
            if entry.live:
                try:
                    data.append(entry.renewal())
                    live.append(entry)
                except Exception as err:  # nobody else would hear of it: lost, said
                    log.error("redislock: a renewal of %s failed", entry.lock.key, exc_info=err)
                    losses += filter(None, [self.schedule.lose(entry, p.watchdog_failed(err))])
        return live, data, losses

    def _time_left(self, entries: List[Entry]) -> float:
        """How long connecting or writing may take: until the first deadline of the loop's holds
        (a thread blocked on it checks none), at most the shortest interval of ``entries``
        (with the mutex held)."""
        now = time.monotonic()
        first = self.schedule.first_deadline()
        bound = min([e.interval for e in entries] + [first - now if first else 1.0])
        return max(0.001, bound)

    def _wait(self, link: Any) -> Steps[None]:
        """Until a reply comes, a renewal falls due, a deadline passes or a hold comes in."""
        with self.mutex:
            wake = self.schedule.next_wake() if self.schedule else None
            self.wake_at = wake
        timeout = 0.0 if wake is None else max(0.0, wake - time.monotonic())
        try:
            readable = yield self._idle, link, timeout
        finally:
            with self.mutex:
                self.wake_at = None
        if readable:
            yield from self._read(link)

    def _read(self, link: Any) -> Steps[None]:
        try:
            data = yield self._recv, link
            if not data:
                raise ConnectionError("the server closed the connection")
            replies = link.replies.feed(data)
        except Exception as err:
            losses = yield from self._broken(link, p.cause_of(err))
            yield self._announce, losses
            return
        with self.mutex:
            losses, relink = self._answered(replies)
        if relink is not None:  # a demoted master, a moved slot...: connect again (Sentinel:
            losses += yield from self._broken(link, relink)  # the master, now)
        yield self._announce, losses

    def _answered(self, replies: list) -> Any:
        """``replies`` given to their renewals (with the mutex held): the losses, and why the
        link must be made again, if it must (a retryable reply, or one to nothing sent)."""
        losses: List[Loss] = []
        relink: Optional[str] = None
        for reply in replies:
            if not self.schedule.in_flight:
                return losses, f"a reply to no renewal: {reply!r}"
            loss = self.schedule.answered(reply)
            if loss is not None:
                losses.append(loss)
            if relink is None and isinstance(reply, str) and p.retryable(reply):
                relink = reply
        return losses, relink

    def _broken(self, link: Any, cause: str) -> Steps[List[Loss]]:
        """The link is dropped: the renewals in flight on it are retried on a new one."""
        yield self._close, link
        with self.mutex:
            return self.schedule.broken(time.monotonic(), cause)

    # -- the flavour's I/O -----------------------------------------------------------------------

    def _start(self, pool: Any) -> None:
        """Start carrying out ``_loop`` on a new link to ``pool``'s server (with the mutex held)."""
        raise NotImplementedError

    def _poke(self) -> None:
        """Wake the waiting loop early (with the mutex held)."""
        raise NotImplementedError

    def _connect(self, link: Any, timeout: float) -> None:
        raise NotImplementedError

    def _write(self, link: Any, data: bytes, timeout: float) -> None:
        raise NotImplementedError

    def _idle(self, link: Any, timeout: float) -> bool:
        """Wait up to ``timeout`` for a reply (True) or a poke (False)."""
        raise NotImplementedError

    def _recv(self, link: Any) -> bytes:
        raise NotImplementedError

    def _close(self, link: Any) -> None:
        raise NotImplementedError

    def _announce(self, losses: List[Loss]) -> None:
        """Run each lost hold's ``_announce_lost`` (its ``on_lost``) away from the loop."""
        raise NotImplementedError
