"""The holds of one renewal loop (rule 6) and when each falls due, sans-IO: the loop of either
flavour (``redislock._loop_threads``, ``redislock._loop_tasks``) asks which renewals to send,
says when they went and what came back, and is told which holds were lost and why. Not
thread-safe: the threads' loop calls it under its mutex.

A hold falls due a third of its ttl after its last renewal that succeeded (or its grant) was
sent, and is sent with the others due within a tenth of their interval (never later, to wait
for them). Its lease deadline (rule 15) is that send plus the ttl: past it, with no renewal
answered since, the hold is lost. A fixed lease (watchdog off) is only timed: lost at its end.
"""

from __future__ import annotations

import heapq
import itertools
import time
from collections import deque
from typing import Any, Callable, Deque, List, Optional, Tuple, Union

from . import _protocol as p

#: How soon a renewal whose link broke (or that got a retryable reply) is sent again, at most
#: (never later than its interval, nor its deadline).
RETRY = 0.25

#: A loss: the hold's entry and the reason to announce.
Loss = Tuple["Entry", str]

#: Told each renewal's lag (seconds from when it fell due to its reply's arrival), if set:
#: the hook of ``bench/renewals``, a metric of the loop's health.
on_renewed: Optional[Callable[[float], None]] = None


class Entry:
    """One hold in the loop: ``lock``'s hold ``token``, leased for ``ttl`` seconds."""

    __slots__ = ("lock", "token", "ttl", "deadline", "due", "epoch", "renews", "live",
                 "in_flight", "cause", "loop", "encoding", "command", "watched")

    def __init__(self, lock: Any, token: int, ttl: float, lease_from: float, renews: bool,
                 encoding: str = "utf-8"):
        self.lock, self.token, self.renews = lock, token, renews
        self.ttl = ttl
        self.deadline = lease_from + ttl
        self.due = lease_from + ttl / 3 if renews else self.deadline
        self.epoch = 0  # moved on by an extend: a renewal sent before it moves no deadline
        self.live = True
        self.in_flight = False
        self.cause = ""  # the last failure's, for the reason of a loss at the deadline
        self.watched = 0.0  # its item in the deadline heap: at most its deadline
        self.loop: Any = None  # the loop that has it
        self.encoding = encoding
        self.command = self.pack()

    def pack(self) -> bytes:
        """Its renewal, ready to send (packed once per ttl: the loop thread only writes it)."""
        lock = self.lock
        return p.packed(p.extend_args(lock.key, lock.owner, self.ttl, self.token), self.encoding)

    def renewal(self) -> bytes:
        return self.command

    @property
    def interval(self) -> float:
        return self.ttl / 3


class Schedule:
    """The live entries of one loop, by due time and by deadline, and the renewals in flight on
    its connection, in the order they were sent. The heaps' stale items are skipped; an entry's
    item in the deadline heap is pushed again only when it comes up and the deadline has moved
    on since (a renewal that succeeded pushes none: they are many)."""

    def __init__(self) -> None:
        self.count = 0
        self._dues: List[Tuple[float, int, Entry]] = []
        self._deadlines: List[Tuple[float, int, Entry]] = []
        self._seq = itertools.count()
        #: (entry, its epoch, when sent): the replies come back in this order.
        self.in_flight: Deque[Tuple[Entry, int, float]] = deque()
        #: A renewal in flight outlived its hold's deadline (see ``expired``).
        self.stalled = False

    def __bool__(self) -> bool:
        return self.count > 0

    def clear(self) -> None:
        """Forget the stale items (the loop ends with its last hold): they hold their locks."""
        self._dues.clear()
        self._deadlines.clear()
        self.in_flight.clear()
        self.stalled = False

    def add(self, entry: Entry) -> None:
        self.count += 1
        self._watch(entry)
        self._push_due(entry)

    def remove(self, entry: Entry) -> bool:
        """Take ``entry`` out (release, or loss): nothing of it is sent after. Whether it was in."""
        if not entry.live:
            return False
        entry.live = False
        self.count -= 1
        return True

    def lose(self, entry: Entry, reason: str) -> Optional[Loss]:
        """``entry`` lost for ``reason``: the loss to announce, if it is news to its lock."""
        if self.remove(entry) and entry.lock._lost_in_loop(entry.token, reason):
            return entry, reason
        return None

    def extending(self, entry: Entry, ttl: float) -> bool:
        """An extend to ``ttl`` is about to be sent (rule 20): the renewals sent from now on carry
        ``ttl``. Whether one sent before is still in flight: the extend waits for its answer, as
        on another connection the two could reach the server in either order."""
        entry.ttl, entry.epoch = ttl, entry.epoch + 1
        entry.command = entry.pack()
        return self.renewing(entry)

    @staticmethod
    def renewing(entry: Entry) -> bool:
        """Whether a renewal of ``entry`` is in flight (taken for sending, not yet answered)."""
        return entry.live and entry.in_flight

    def extend_unanswered(self, entry: Entry, ends_by: float, now: float) -> bool:
        """An extend got no answer: it may have run, so the lease may end by ``ends_by`` (its
        send plus its ttl). If that is sooner than the deadline, the deadline moves there and,
        renewed, the hold's next renewal goes at once. Whether the deadline moved."""
        if not entry.live or ends_by >= entry.deadline:
            return False
        entry.deadline = ends_by
        self._watch(entry)
        if entry.renews:
            entry.due = now
            self._push_due(entry)
        return True

    def extended(self, entry: Entry, ttl: float, sent: float) -> bool:
        """``extend(ttl)`` sent at ``sent`` was answered 1: the lease ends ``ttl`` from then and
        the hold is renewed by it. False if the loop had lost it meanwhile."""
        if not entry.live:
            return False
        entry.deadline = sent + ttl
        entry.due = sent + ttl / 3 if entry.renews else entry.deadline
        if entry.deadline < entry.watched:
            self._watch(entry)
        self._push_due(entry)
        return True

    def _push_due(self, entry: Entry) -> None:
        if entry.renews:
            heapq.heappush(self._dues, (entry.due, next(self._seq), entry))

    def _watch(self, entry: Entry) -> None:
        entry.watched = entry.deadline
        heapq.heappush(self._deadlines, (entry.deadline, next(self._seq), entry))

    def _next_due(self) -> Optional[Entry]:
        """The live entry due first, not in flight (dropping stale items)."""
        heap = self._dues
        while heap:
            at, _, entry = heap[0]
            if entry.live and entry.due == at and not entry.in_flight:
                return entry
            heapq.heappop(heap)
        return None

    def _next_watched(self) -> Optional[Entry]:
        """The live entry watched first (dropping stale items): its deadline is then or later."""
        heap = self._deadlines
        while heap:
            at, _, entry = heap[0]
            if entry.live and entry.watched == at:
                return entry
            heapq.heappop(heap)
        return None

    def next_wake(self) -> Optional[float]:
        """When something falls due or a deadline may pass (None: no entry)."""
        due, end = self._next_due(), self._next_watched()
        times = [e.due for e in (due,) if e is not None]
        times += [e.watched for e in (end,) if e is not None]
        return min(times) if times else None

    def first_deadline(self) -> Optional[float]:
        """The first deadline of the loop's holds, or a moment before it."""
        entry = self._next_watched()
        return None if entry is None else entry.watched

    def fail_all(self, reason: str) -> List[Loss]:
        """The loop itself failed: every hold is lost (nobody renews them any more)."""
        entries = [entry for _, _, entry in self._deadlines if entry.live]
        return [loss for loss in map(lambda e: self.lose(e, reason), entries) if loss]

    def batch(self, now: float) -> List[Entry]:
        """The renewals to send now: those due, and those due within a tenth of their interval."""
        out = []
        while True:
            entry = self._next_due()
            if entry is None or entry.due > now + entry.interval / 10:
                return out
            heapq.heappop(self._dues)
            entry.in_flight = True
            out.append(entry)

    def sent(self, entries: List[Entry], at: float) -> None:
        self.in_flight.extend((e, e.epoch, at) for e in entries)

    def answered(self, reply: Union[int, str]) -> Optional[Loss]:
        """The reply to the oldest renewal in flight; a loss if it lost its hold."""
        entry, epoch, sent = self.in_flight.popleft()
        if not entry.live:
            return None  # released meanwhile: the reply is ignored
        entry.in_flight = False
        if isinstance(reply, str):
            if not p.retryable(reply):
                return self.lose(entry, p.refused(reply))
            return self._retry(entry, sent, reply)
        if not p.extended(reply):
            return self.lose(entry, p.LEASE_RAN_OUT)
        if on_renewed is not None:
            on_renewed(time.monotonic() - (entry.deadline - entry.ttl + entry.interval))
        if epoch == entry.epoch:  # (one sent before an extend moves nothing: the extend did)
            entry.deadline, entry.due, entry.cause = sent + entry.ttl, sent + entry.interval, ""
        self._push_due(entry)
        return None

    def not_sent(self, entries: List[Entry], now: float, cause: str) -> List[Loss]:
        """``entries`` were to be sent but the link broke (or would not connect): retried."""
        losses = []
        for entry in entries:
            if entry.live:
                entry.in_flight = False
                loss = self._retry(entry, now, cause)
                if loss is not None:
                    losses.append(loss)
        return losses

    def broken(self, now: float, cause: str) -> List[Loss]:
        """The loop's link broke: every renewal in flight is retried, on a new one."""
        entries = [entry for entry, _, _ in self.in_flight]
        self.in_flight.clear()
        self.stalled = False
        return self.not_sent(entries, now, cause)

    def _retry(self, entry: Entry, now: float, cause: str) -> Optional[Loss]:
        entry.cause = cause
        if now >= entry.deadline:
            return self.lose(entry, p.unreachable(cause))
        entry.due = min(now + min(RETRY, entry.interval), entry.deadline)
        self._push_due(entry)
        return None

    def expired(self, now: float) -> List[Loss]:
        """The holds whose deadline has passed with no renewal answered: lost now. If one of
        them had a renewal in flight, ``stalled`` is set: the link is taken as broken (a reply
        is awaited no longer than the time left)."""
        losses = []
        while True:
            entry = self._next_watched()
            if entry is None or entry.watched > now:
                return losses
            heapq.heappop(self._deadlines)
            if entry.deadline > now:
                self._watch(entry)  # renewed since it was watched: watched at its new deadline
                continue
            self.stalled = self.stalled or entry.in_flight
            reason = p.unreachable(entry.cause) if entry.renews else p.FIXED_LEASE_ENDED
            loss = self.lose(entry, reason)
            if loss is not None:
                losses.append(loss)
