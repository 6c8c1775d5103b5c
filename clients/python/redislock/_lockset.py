"""Lock sets (rule 23): several keys taken in one step or none with ``LOCK.MACQUIRE``, written
once for both flavours on ``redislock._core``'s rules, sans-IO as they are.

A set is a hold of ``LockBase`` whose token is the tuple of its members' tokens (one per key,
in the order given): waiting, retrying, the unavailability bound, re-entrancy, ``with`` and
``hold()`` are the lock's own. What differs is what a hold is made of: each member is an entry
of the pool's one renewal loop (``_Member``: a key and its token, renewed there with
``LOCK.EXTEND key owner ttl TOKEN token`` in the same pipelines as every other hold), and the
set is lost, once, when any member is, with a reason naming that key; the members still held
are then given back with one ``LOCK.MRELEASE`` (best effort), before the set can be taken again.
"""

from __future__ import annotations

import time
from typing import Any, Dict, List, Optional, Sequence, Tuple

from . import _protocol as p
from ._core import LockBase, Steps, _now, log
from .errors import NotAcquired, Stale, Unavailable


class _Member:
    """One key of a set as its renewal loop sees a lock (``_schedule.Entry.lock``): its key and
    owner, and the set to tell when the loop loses it."""

    __slots__ = ("lockset", "key", "owner")

    def __init__(self, lockset: "LockSetBase", key: Any):
        self.lockset, self.key, self.owner = lockset, key, lockset.owner

    def _lost_in_loop(self, token: int, reason: str) -> bool:
        return self.lockset._member_lost(self.key, token, reason)

    def _announce_lost(self, reason: str) -> Steps[None]:
        return self.lockset._announce_lost(p.member_lost(reason, self.key))


class LockSetBase(LockBase):
    """``keys`` taken together, each exclusive (or each ``shared``), each for ``ttl`` seconds at
    a time with its own fencing token, renewed by the pool's renewal loop. Mixed in before a
    flavour's Lock, whose I/O it uses."""

    _NAME = "redislock.MultiLock"

    def __init__(self, client: Any, keys: Sequence[Any], ttl: float = 30.0, *,
                 owner: Optional[str] = None, shared: bool = False, session: bool = False,
                 watchdog: bool = True, reentrant: bool = False, on_lost: Any = None,
                 raise_on_lost: bool = True, on_event: Any = None,
                 unavailable_after: float = p.UNAVAILABLE_AFTER):
        #: The keys, in the order given: ``tokens`` follow it.
        self.keys: Tuple[Any, ...] = p.check_keys(keys)
        super().__init__(client, self.keys[0], ttl, owner=owner, shared=shared, session=session,
                         watchdog=watchdog, reentrant=reentrant, on_lost=on_lost,
                         raise_on_lost=raise_on_lost, on_event=on_event,
                         unavailable_after=unavailable_after)
        self._entries: List[Any] = []  # the members in the renewal loop
        self._by_key: Dict[Any, int] = {}
        self._ttl_now = self.ttl  # the ttl the members are renewed by (extend moves it)
        #: A set lost whose members still held are to be given back (its tokens), once.
        self._give_back_due: Optional[Tuple[int, ...]] = None

    # -- what the application reads ----------------------------------------------------------

    @property
    def tokens(self) -> Optional[Tuple[int, ...]]:
        """The fencing tokens of the hold, one per key in the order of ``keys`` (None when not
        held)."""
        return self.token  # type: ignore[return-value]

    def token_for(self, key: Any) -> Optional[int]:
        """The fencing token of ``key``'s member (None when not held); ``KeyError`` for a key
        not in the set."""
        if key not in self.keys:
            raise KeyError(key)
        return self._by_key.get(key) if self.token is not None else None

    # -- acquiring ---------------------------------------------------------------------------

    def _ask_server(self, patience: Optional[float]) -> Steps[bool]:
        # The members a lost set still held go back first: an ``LOCK.MRELEASE`` arriving after
        # this acquire would release the new hold (the same owner's).
        yield self._in_state, self._give_back_lost()
        wait = p.server_wait(patience)
        deadline = p.deadline_of(wait) if wait is not None else time.monotonic()
        pool = p.pool_of(self.client, self.key)
        sent = 0.0

        def macquire_args() -> list:
            nonlocal sent  # (retries: as ``LockBase._ask_server``)
            left = p.next_wait(deadline, wait) if wait else wait
            sent = time.monotonic()
            return p.macquire_args(self.keys, self.owner, self.ttl, self.mode.shared,
                                   self.session, left)

        reply, conn = yield from self._call(pool, macquire_args, wait=wait, deadline=deadline,
                                            keep=self.session)
        granted = sent if wait is None else time.monotonic()
        tokens = p.tokens_of(reply)
        if tokens is not None and self.session:
            self._session_conn = conn  # kept open while the set lives: it is every member
        elif self.session:
            yield from self._give_back(pool, conn)
        if tokens is None:
            return False
        yield self._in_state, self._grant(tokens, granted)  # type: ignore[arg-type]
        return True

    def _grant(self, tokens: Tuple[int, ...], granted: float) -> Steps[None]:  # type: ignore[override]
        """Hold ``tokens`` from now (with the state lock held): each member in the pool's loop;
        a session set's, renewed together on its own connection by a watchdog of its own."""
        self.token, self.lost = tokens, None  # type: ignore[assignment]
        self._by_key = dict(zip(self.keys, tokens))
        self._granted_at = time.monotonic()
        self._lease_from = granted
        self._stop = self._Event()
        self._give_back_due = None
        self._ttl_now = self.ttl
        self._entries, self._renewals = [], None
        if self.session and self.watchdog:
            self._renewals = p.Renewals(self.ttl, granted)
            yield self._start_watchdog, tokens, self._stop  # type: ignore[arg-type]
        elif self._lease_timer:
            pool = p.pool_of(self.client, self.key)
            loop = self._loop_of(pool)
            for key, token in zip(self.keys, tokens):
                self._entries.append(loop.add(pool, _Member(self, key), token, self.ttl, granted,
                                              self.watchdog))

    # -- losing ------------------------------------------------------------------------------

    def _unwatch(self) -> None:
        entries, self._entries = self._entries, []
        for entry in entries:
            entry.loop.remove(entry)
        if self._stop is not None:
            self._stop.set()

    def _set_lost(self, tokens: Any, reason: str) -> bool:
        """Hold ``tokens`` is lost for ``reason``: whether it is news (then its members still
        held are due to be given back)."""
        if self.token is not tokens or not self._mark_lost(reason):
            return False
        self._give_back_due = tokens
        return True

    def _member_lost(self, key: Any, token: int, reason: str) -> bool:
        """The loop lost ``key``'s member ``token`` (with the loop's mutex held): the set is
        lost if it is this hold's; its other members leave the loop now."""
        if self._by_key.get(key) != token or self.token is None:
            return False
        if not self._set_lost(self.token, p.member_lost(reason, key)):
            return False
        for entry in self._entries:
            entry.loop.schedule.remove(entry)  # (the loop's mutex is held: its schedule's own)
        return True

    def _announce_lost(self, reason: str) -> Steps[None]:
        """A loss said (once), then the members still held given back, if it was not found by
        a release (which gave them back itself)."""
        yield from super()._announce_lost(reason)
        yield self._in_state, self._give_back_lost()

    # -- a session set's watchdog: ``LockBase._watch``, renewing every member -----------------

    def _send_renewal(self, conn: Any, tokens: Any, renewals: p.Renewals) -> Steps[bool]:
        """The renewals of every member of session set ``tokens`` in one write (with the state
        lock held), unless it was released."""
        if self.token is not tokens:
            return False
        ttl = renewals.sending()
        for key, token in zip(self.keys, tokens):
            yield self._write, conn, p.extend_args(key, self.owner, ttl, token)
        return True

    def _renewed(self, conn: Any, sent: float, renewals: p.Renewals) -> Steps[Optional[str]]:
        replies = yield from self._replies(conn, len(self.keys))
        for key, reply in zip(self.keys, replies):
            if not p.extended(reply):
                return p.member_lost(p.LEASE_RAN_OUT, key)
        return renewals.answered(sent, 1)

    def _lose(self, tokens: Any, reason: Optional[str]) -> Optional[str]:  # type: ignore[override]
        """A session set's watchdog found ``reason`` (with the state lock held): named by the key
        it came from, else (a deadline, the connection: every member's) by the first key."""
        if reason is None:
            return None
        if not reason.startswith(p.member_lost(p.LEASE_RAN_OUT, "")[:-1]):
            reason = p.member_lost(reason, self.keys[0])
        return reason if self._set_lost(tokens, reason) else None

    def _give_back_lost(self) -> Steps[None]:
        """Release what a lost set still holds, once (with the state lock held, so before the
        set is asked for again): one ``LOCK.MRELEASE``, best effort (a member not given back
        ends with its lease)."""
        due, self._give_back_due = self._give_back_due, None
        if due is None:
            return
        self._unwatch()
        try:
            yield from self._command(p.mrelease_args(self.keys, self.owner))
        except Exception as err:
            log.info("redislock: could not give back the set %r after its loss: %s",
                     self.keys, p.cause_of(err))

    # -- extend --------------------------------------------------------------------------------

    def _extend(self, ttl: Optional[float]) -> Steps[bool]:
        """Rule 20 for every member, in one round trip: True only if each was still held."""
        tokens = self.token
        if tokens is None or self.lost is not None:
            return False
        ttl = self._ttl_now if ttl is None else ttl
        if not (yield from self._renewals_by(tokens, ttl)):
            return False
        sent = time.monotonic()
        try:
            replies = yield from self._command(p.Batch(p.extend_args(key, self.owner, ttl, token)
                                                       for key, token in zip(self.keys, tokens)))
        except BaseException as err:  # unanswered, cancelled or interrupted: it may have run
            if not p.answered(err):
                yield self._in_state, _now(self._extend_unanswered, tokens, sent + ttl)
            raise
        gone = [key for key, reply in zip(self.keys, replies) if not p.extended(reply)]
        if not gone:
            return (yield self._in_state, _now(self._extended, tokens, ttl, sent))
        reason = p.member_lost(p.LEASE_RAN_OUT, gone[0])
        if (yield self._in_state, _now(self._lose_now, tokens, reason)):
            yield from self._announce_lost(reason)
        return False

    def _extending(self, tokens: Any, ttl: float) -> Optional[bool]:  # type: ignore[override]
        if self.token is not tokens or self.lost is not None:
            return None
        self._ttl_now = ttl
        if self._renewals is not None:
            return self._renewals.extending(ttl)
        return any([entry.loop.extending(entry, ttl) for entry in self._entries])

    def _renewing(self, tokens: Any) -> Optional[bool]:  # type: ignore[override]
        if self.token is not tokens or self.lost is not None:
            return None
        if self._renewals is not None:
            return self._renewals.in_flight is not None
        return any([entry.loop.renewing(entry) for entry in self._entries])

    def _extend_unanswered(self, tokens: Any, ends_by: float) -> None:  # type: ignore[override]
        if self.token is not tokens or self.lost is not None:
            return
        for entry in self._entries:
            entry.loop.extend_unanswered(entry, ends_by)
        if self._renewals is not None and self._renewals.extend_unanswered(ends_by):
            self._stop.set()  # wakes the watchdog (``_hurried``)

    def _extended(self, tokens: Any, ttl: float, sent: float) -> bool:  # type: ignore[override]
        if self.token is not tokens or self.lost is not None:
            return False
        self._ttl_now = ttl
        if self._renewals is not None:
            self._renewals.extended(ttl, sent)
        return all([entry.loop.extended(entry, ttl, sent) for entry in self._entries])

    def _lose_now(self, tokens: Any, reason: str) -> bool:  # type: ignore[override]
        """Hold ``tokens`` lost for ``reason`` (with the state lock held), out of the loop."""
        if self.token is not tokens:
            return False
        for entry in self._entries:
            entry.loop.remove(entry)
        return self._set_lost(tokens, reason)

    # -- releasing -----------------------------------------------------------------------------

    def _end(self) -> Steps[Tuple[bool, bool, float]]:
        """End the hold with one ``LOCK.MRELEASE`` (with the state lock held): released only if
        every member still was. A set known lost answers without the server (its members still
        held are given back by its loss, or here if that has not happened yet)."""
        self._unwatch()
        tokens, self.token = self.token, None
        released = False
        if tokens is not None and self.lost is None:
            count = yield from self._command(p.mrelease_args(self.keys, self.owner))
            released = int(count) == len(self.keys)
        else:
            yield from self._give_back_lost()
        newly_lost = not released and self._mark_lost(p.GONE_AT_RELEASE)
        return released, newly_lost, time.monotonic() - self._granted_at

    # -- guarded writes ----------------------------------------------------------------------

    def _guarded_under(self, key: Any, command: Sequence[Any]) -> Steps[Any]:
        """``command`` through ``LOCK.GUARD`` with ``key``'s token: it runs only while that
        member is the key's live exclusive hold, else ``redislock.Stale``."""
        if key not in self.keys:
            raise KeyError(key)
        if self.token is None:
            raise Stale("this lock set is not held")
        if self.lost is not None:
            raise Stale(f"this lock set was lost: {self.lost}")
        return (yield from self._command(p.guard_args(key, self._by_key[key], command)))

    def _guard_args(self, command: Sequence[Any]) -> list:
        raise TypeError("a lock set's guard names the key it writes under: guard(key, *command)")

    # -- with ----------------------------------------------------------------------------------

    def _enter(self, blocking: bool = True, timeout: Optional[float] = None,
               hold: bool = False) -> Steps[LockBase]:
        if not (yield from self._acquire(blocking, timeout)):
            within = f" within {timeout} s" if hold else ""
            raise NotAcquired(f"the set {list(self.keys)!r} was not granted{within}")
        return self

    def _label(self) -> str:
        return f"the set {list(self.keys)!r}"

    def __repr__(self) -> str:
        return f"<{self._NAME} {list(self.keys)!r} owner={self.owner} tokens={self.token}>"
