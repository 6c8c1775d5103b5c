"""Elections (docs/clients.md rules 21 and 22), written once for both flavours, sans-IO.

A candidate's campaign is a session hold of the election's key whose owner is the candidate's
identity (``LOCK.ACQUIRE key identity ttl SESSION WAIT ...``): the flavour's ``Lock`` with
``session=True`` does it, so the FIFO wait, rule 14's bound, the hold's own watchdog on its own
connection and the loss signalled once are the lock's, not written again. A leader killed with
``kill -9`` closes its connection, and the next candidate is leader at once; one frozen past its
lease is replaced at the lease's end and told, once, when it wakes up.

``leader()`` is one ``LOCK.WATCH key``, sent as any command of a lock (rule 14's bound, rule
19's retries). An observation is one connection of its own blocked in ``LOCK.WATCH key AFTER
cursor WAIT ...``; after a broken link or a retryable reply it connects again and passes its
last cursor (``p.Observing``), so the leader it reports next is the server's latest.

The rules are generators yielding I/O steps (see ``redislock._core``); the I/O is the flavour's
``Lock``'s own methods (a lock object that is never acquired: ``ElectionBase._io``), so
``redislock.election`` carries them out with plain calls and ``redislock.aio`` awaits them.
"""

from __future__ import annotations

import threading
from typing import Any, Callable, Optional

from . import _protocol as p
from ._core import Steps
from .errors import LeadershipLost, NotAcquired

Leader = p.Leader

#: The longest pause of an observation between two tries while its server cannot be reached.
OBSERVE_PAUSE_MAX = 1.0


class ElectionBase:
    """An election on ``key`` as seen by one candidate, ``identity``; a flavour sets the class
    attributes below and carries out the rules."""

    #: The flavour's lock class (``redislock.Lock`` or ``redislock.aio.Lock``).
    _Lock: Callable[..., Any]
    #: The flavour's leadership class (a ``LeadershipBase``).
    _Leadership: Callable[..., Any]

    def __init__(self, client: Any, key: str, identity: str, *, ttl: float = p.ELECTION_TTL,
                 unavailable_after: float = p.UNAVAILABLE_AFTER):
        self.client = client
        self.key = key
        #: The candidate's name on the server (its owner): unique among the candidates, since
        #: the server takes two candidates of one identity for one (a retry, the same hold).
        self.identity = p.check_identity(identity)
        self.ttl = p.check_ttl(ttl)
        self.unavailable_after = p.check_bound(unavailable_after)
        #: The I/O of the rules below: a lock object of the flavour, never acquired.
        self._io = self._Lock(client, key, self.ttl, owner=self.identity,
                              unavailable_after=self.unavailable_after)
        self._campaigning = threading.Lock()  # never waited for: one campaign at a time
        self._leadership: Any = None

    def _campaign(self, timeout: Optional[float],
                  on_lost: Optional[Callable[[str], Any]]) -> Steps[Any]:
        """Wait in the key's queue (up to ``timeout`` seconds; None: without limit) and lead:
        the leadership, or ``NotAcquired`` if not elected in time. ``RuntimeError`` while this
        object campaigns already, or has a leadership not resigned (a lost one included: its
        block learns of the loss when it leaves): two campaigns of one identity would be one
        hold to the server."""
        p.patience(True, timeout)  # the arguments are checked before anything is sent
        if not self._campaigning.acquire(False):
            raise RuntimeError(f"{self.identity} is campaigning for {self.key} already")
        try:
            previous = self._leadership
            if previous is not None and previous._lock._depth > 0:  # lost or not: its block
                raise RuntimeError(f"{self.identity} leads {self.key} already: resign first "
                                   "(or leave its block)")
            lock = self._Lock(self.client, self.key, self.ttl, owner=self.identity,
                              session=True, raise_on_lost=False, on_lost=on_lost,
                              unavailable_after=self.unavailable_after)
            if not (yield from lock._acquire(True, timeout)):
                raise NotAcquired(f"{self.identity} was not elected for {self.key} "
                                  f"within {timeout} s")
            self._leadership = self._Leadership(self, lock)
            return self._leadership
        finally:
            self._campaigning.release()

    def _leader(self) -> Steps[Optional[Leader]]:
        """The current leader, or None: one ``LOCK.WATCH key``."""
        pool = p.pool_of(self.client, self.key)
        reply, _ = yield from self._io._call(pool, lambda: p.watch_args(self.key))
        seen = p.watched(reply)
        return None if seen is None else seen.leader()

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self.key!r} identity={self.identity!r}>"


class LeadershipBase:
    """One term of leadership: the campaign's session hold (``_lock``)."""

    def __init__(self, election: ElectionBase, lock: Any):
        self.election = election
        self._lock = lock
        self.key: str = lock.key
        self.identity: str = lock.owner
        #: The term: the hold's fencing token (a later leader's is always larger). Pass it to
        #: fenced writes (``guard``, ``redislock.db.fenced(conn, leadership)``).
        self.term: int = lock.token

    @property
    def token(self) -> int:
        """The term, by the name the fenced helpers read (``redislock.db.fenced``)."""
        return self.term

    @property
    def lost(self) -> Optional[str]:
        """Why the leadership was lost (None while it leads, or once resigned in time)."""
        return self._lock.lost

    @property
    def leading(self) -> bool:
        """Whether this is the leadership still: not resigned, not known lost."""
        return self._lock.locked()

    def _resign(self) -> Steps[bool]:
        """Release the hold: the next candidate in the queue leads at once. False if the
        leadership was lost first (the work done as leader may have overlapped the next
        leader's), and, with nothing sent, once resigned already."""
        return (yield from self._lock._release())

    def _exit(self, exc_type: Any) -> Steps[None]:
        """Leaving the ``with`` block: resign; ``LeadershipLost`` if it was lost, unless the
        block raised (or resigned already)."""
        if self._lock._depth == 0:
            return
        if not (yield from self._resign()) and exc_type is None:
            raise LeadershipLost(self.lost or p.GONE_AT_RELEASE)

    def __repr__(self) -> str:
        state = "leading" if self.leading else f"lost: {self.lost}" if self.lost else "resigned"
        return f"<{type(self).__name__} {self.key!r} {self.identity!r} term={self.term} {state}>"


class ObservationBase:
    """The leaders of an election as they change (rule 22): the current one (or None) first,
    then each change, never the same one twice in a row, read on one connection of its own
    blocked in ``LOCK.WATCH ... AFTER cursor WAIT``. Each blocking ``WAIT`` lasts at most half
    the election's ``unavailable_after``, and its reply is awaited no longer than the whole
    bound: a server that does not answer is a broken link. A broken link or a retryable reply
    (rule 19) is asked again, on a new connection (through Sentinel: to the master, now), with
    the last cursor, after a pause that doubles from ``p.RETRY_PAUSE`` up to
    ``OBSERVE_PAUSE_MAX`` while the server cannot be reached: as long as the observation is
    iterated (as the other clients' observers do), until it is closed. A service that does not
    answer as Redis with the module is ``Unavailable`` at once, and any other error reply is
    raised: those are not outages that end."""

    #: What ``_next`` answers once the observation is closed: the iteration ends.
    END = object()

    def __init__(self, election: ElectionBase):
        self.election = election
        self.state = p.Observing()
        self._conn: Any = None
        self.closed = False

    def _next(self) -> Steps[Any]:
        """The next leader to report (a ``Leader`` or None), or ``END`` once closed."""
        election, io = self.election, self.election._io
        half = election.unavailable_after / 2
        pool = p.pool_of(election.client, election.key)
        pause = p.RETRY_PAUSE
        while not self.closed:
            if self._conn is None:
                self._conn = p.own_connection(pool, half)
            conn = self._conn
            cursor = self.state.cursor
            wait = None if cursor is None else half
            try:
                yield io._connect, conn, half
                if wait is not None:
                    yield io._connect, conn, wait + half  # (connected: the reply's time)
                yield io._write, conn, p.watch_args(election.key, cursor, wait)
                reply = yield io._read, conn
            except p.NOT_REDIS as err:
                yield from self._drop()
                raise p.unavailable(pool, err) from err
            except p.BROKEN_LINK + (p.ResponseError,) as err:  # (LOADING: a link error to redis-py)
                yield from self._drop()
                if isinstance(err, p.ResponseError) and not p.retryable(p.error_reply(err)):
                    raise p.translate(err, pool) from err
                if self.closed:
                    break
                yield io._pause, pause
                pause = min(OBSERVE_PAUSE_MAX, pause * 2)
                continue
            except BaseException:  # cancelled or interrupted: the reply may still come
                yield from self._drop()
                raise
            pause = p.RETRY_PAUSE
            news = self.state.news(reply)
            if news is not p.Observing.UNSEEN:
                return news
        return self.END

    def _drop(self) -> Steps[None]:
        """Close the connection (a reply may still come on it); the next call makes another."""
        conn, self._conn = self._conn, None
        if conn is not None:
            yield self.election._io._close, conn

    def _close(self) -> Steps[None]:
        self.closed = True
        yield from self._drop()

    def __repr__(self) -> str:
        return (f"<{type(self).__name__} {self.election.key!r} "
                f"cursor={self.state.cursor!r}{' closed' if self.closed else ''}>")
