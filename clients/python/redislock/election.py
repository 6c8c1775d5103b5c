"""Elections for threads: ``Election`` over a ``redis.Redis`` client (docs/clients.md rules 21
and 22). The rules are ``redislock._election``'s, shared with ``redislock.aio``; this module
carries them out with plain calls.

    election = redislock.Election(r, "leader:billing", identity=socket.gethostname())
    with election.campaign() as leadership:      # waits in the key's FIFO queue
        ...                                      # lead; fenced writes with leadership.term
    for leader in election.observe():            # the current leader (or None), then each change
        ...
"""

from __future__ import annotations

from typing import Any, Callable, Optional

from . import _election
from . import _protocol as p
from ._core import run
from .lock import Lock

__all__ = ["Election", "Leadership", "Observation", "Leader"]

Leader = p.Leader


class Leadership(_election.LeadershipBase):
    """One term of leadership, from ``Election.campaign``: ``term`` (the fencing token of the
    term: larger for every later leader), ``lost`` (why it ended, if it did), ``leading``,
    ``resign()`` and ``guard(...)``. ``with`` resigns on leaving, and raises
    ``redislock.LeadershipLost`` if the leadership was lost before."""

    def resign(self) -> bool:
        """Give the leadership up: the next candidate in the queue leads at once. False if it
        was lost first, and (nothing sent) once resigned already."""
        return run(self._resign())

    def guard(self, *command: Any) -> Any:
        """Run ``command`` through ``LOCK.GUARD`` with this term: it runs only while this is
        the leadership, else ``redislock.Stale``."""
        return run(self._lock._guarded(command))

    def __enter__(self) -> "Leadership":
        return self

    def __exit__(self, exc_type: Any, exc: Any, tb: Any) -> None:
        run(self._exit(exc_type))


class Observation(_election.ObservationBase):
    """``Election.observe()``: an iterator of leaders (``Leader``, or None while there is
    none); ``close()`` (or leaving ``with``) closes its connection and ends it."""

    def __iter__(self) -> "Observation":
        return self

    def __next__(self) -> Optional[Leader]:
        leader = run(self._next())
        if leader is self.END:
            raise StopIteration
        return leader

    def close(self) -> None:
        run(self._close())

    def __enter__(self) -> "Observation":
        return self

    def __exit__(self, exc_type: Any, exc: Any, tb: Any) -> None:
        self.close()


class Election(_election.ElectionBase):
    """An election on ``key``, as candidate ``identity`` (a host name, a pod name: unique among
    the candidates) and as an observer.

    ``campaign()`` waits in the key's FIFO queue and returns a ``Leadership``; the leadership
    is a session hold of ``ttl`` seconds (10 by default), renewed every ttl/3 by its own
    watchdog on its own connection: a leader killed hands over at once (its connection closes),
    one frozen at its lease's end. ``leader()`` answers the current leader; ``observe()``
    iterates over the leaders as they change. A server that cannot be reached, or does not
    answer as Redis with the module, is ``redislock.Unavailable`` within ``unavailable_after``
    seconds (10 by default).
    """

    _Lock = Lock
    _Leadership = Leadership

    def campaign(self, timeout: Optional[float] = None, *,
                 on_lost: Optional[Callable[[str], Any]] = None) -> Leadership:
        """Wait to lead, in the key's queue, up to ``timeout`` seconds (None, -1 or
        ``math.inf``: without limit; 0: one try): the ``Leadership``, or
        ``redislock.NotAcquired`` when not elected in time. ``on_lost(reason)`` is called once,
        in another thread, if the leadership is lost before it is resigned."""
        return run(self._campaign(timeout, on_lost))

    def leader(self) -> Optional[Leader]:
        """The current leader (``identity``, ``term``), or None: one ``LOCK.WATCH``."""
        return run(self._leader())

    def observe(self) -> Observation:
        """The leaders as they change: the current one (or None) first, then each change."""
        return Observation(self)
