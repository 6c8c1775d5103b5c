"""redislock: locks for the redis-lock module.

    lock = redislock.Lock(r, "order:42", ttl=30.0)
    with lock:                    # waits in the server's FIFO queue, no polling
        with redislock.db.fenced(conn, lock) as cur:     # the database checks the token first
            ...

Fenced database transactions (``redislock.db`` on DB-API connections, ``redislock.sqlalchemy``
on SQLAlchemy sessions), shared locks (``shared=True``), semaphores (``Semaphore``), session
holds (``session=True``), lock sets (``MultiLock``: several keys in one step or none), durable
grants (``replicas=n``), guarded writes (``lock.guard(...)``),
a watchdog that renews the lease and says when a hold is lost (``on_lost``, ``LockLost``),
elections (``Election``: campaign, leadership with its term, ``leader()``, ``observe()``);
``redislock.aio`` has the same API for asyncio. ``redislock.compat`` has drop-in adapters for
code written for redis-py's ``Lock`` and for python-redis-lock.
"""

from . import aio
from ._protocol import Leader
from .aio import Election as AsyncElection
from .election import Election, Leadership
from .errors import (Deadlock, LeadershipLost, LockError, LockLost, NotAcquired, Stale,
                     Unavailable)
from .lock import Lock, MultiLock, Semaphore

__all__ = [
    "Lock",
    "Semaphore",
    "MultiLock",
    "Election",
    "AsyncElection",
    "Leadership",
    "Leader",
    "aio",
    "LockError",
    "NotAcquired",
    "LockLost",
    "LeadershipLost",
    "Stale",
    "Unavailable",
    "Deadlock",
    "compat",
    "db",
    "sqlalchemy",
]

#: Imported on first use, so ``import redislock`` alone stays as light as it was (and
#: ``redislock.sqlalchemy`` needs SQLAlchemy only once it is used).
_LAZY = ("compat", "db", "sqlalchemy")


def __getattr__(name: str):
    if name in _LAZY:
        import importlib

        return importlib.import_module(f".{name}", __name__)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
