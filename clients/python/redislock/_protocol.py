"""The LOCK.* commands as argument lists, their replies as values, and the timing rules of waits
and renewals: pure functions, shared by the threading and asyncio APIs so both speak the
module's protocol the same way (what a lock object does with them is ``redislock._core``)."""

from __future__ import annotations

import asyncio
import time
import uuid
from dataclasses import dataclass
from typing import Any, List, Optional, Sequence, Union

from redis.exceptions import ConnectionError, ResponseError, TimeoutError

from .errors import Deadlock, LockError, Stale

Number = Union[int, float]

#: The link to the server broke (or a reply took too long): the connection is closed and the
#: call may be retried, by the same owner.
BROKEN_LINK = (ConnectionError, TimeoutError, asyncio.TimeoutError)

#: Why a hold was lost, in the words of both clients.
LEASE_RAN_OUT = "the lease ran out before it was renewed"
UNREACHABLE = "the server could not be reached before the lease ended"
GONE_AT_RELEASE = "the hold was gone when released (its lease ran out)"


#: How long a wait pauses before it asks again after a broken link.
RETRY_PAUSE = 0.05


def patience(blocking: bool, timeout: Optional[Number]) -> Optional[float]:
    """How long ``acquire(blocking, timeout)`` may wait, read as ``threading.Lock.acquire`` reads
    its arguments: 0 (not blocking, or a timeout of 0) is one try, None (no timeout, or a
    negative one) is without limit, else seconds."""
    if not blocking:
        return 0.0
    if timeout is None or timeout < 0:
        return None
    return float(timeout)


def left(patience: Optional[float], started: float) -> Optional[float]:
    """What is left of ``patience`` (see ``patience``) since ``started`` (at least 0)."""
    return None if patience is None else max(0.0, patience - (time.monotonic() - started))


def server_wait(patience: Optional[float]) -> Optional[Number]:
    """The ``WAIT`` of ``LOCK.ACQUIRE`` for ``patience`` (see ``acquire_args``): without limit
    (0) for None, no ``WAIT`` (one try: None) for 0, else the seconds."""
    if patience is None:
        return 0
    return None if patience <= 0 else patience


def deadline_of(wait: Optional[Number]) -> Optional[float]:
    """When a wait of ``wait`` (``server_wait``) ends; None: it has no end (or does not wait)."""
    return None if not wait else time.monotonic() + wait


def expired(deadline: Optional[float]) -> bool:
    return deadline is not None and time.monotonic() >= deadline


def next_wait(deadline: Optional[float], wait: Optional[Number]) -> Optional[Number]:
    """The ``WAIT`` of the next try: what is left until ``deadline`` (at least 1 ms), or
    ``wait`` as it was when there is none."""
    return wait if deadline is None else max(0.001, deadline - time.monotonic())


def pool_of(client: Any, key: str) -> Any:
    """The connection pool that serves ``key``: the client's own, or its cluster node's."""
    if hasattr(client, "get_node_from_key"):
        return client.get_node_from_key(key).redis_connection.connection_pool
    return client.connection_pool


def own_connection(pool: Any, timeout: Optional[float]) -> Any:
    """A connection made like ``pool``'s (same class, server, credentials, database, protocol;
    sync or asyncio) but outside it: it takes none of ``max_connections``, so the application's
    use of the pool can never starve it, and it is given back by closing it. ``timeout``
    bounds connecting and each reply (None: replies wait as long as the server takes). It
    connects once per call, without the client's retries and their back-off: its callers
    retry on their own schedule (a watchdog's renewal never waits past the next one)."""
    kwargs = dict(pool.connection_kwargs)
    kwargs["retry"] = None
    kwargs["retry_on_timeout"] = False
    kwargs.pop("retry_on_error", None)
    kwargs["socket_timeout"] = timeout
    kwargs.pop("orig_socket_timeout", None)  # redis-py 7+ restores these after maintenance
    if timeout is not None:
        kwargs["socket_connect_timeout"] = timeout
        kwargs.pop("orig_socket_connect_timeout", None)
    return pool.connection_class(**kwargs)


def new_owner() -> str:
    """A fresh owner for one Lock object: a canonical UUID (the module stores it in 16 bytes)."""
    return str(uuid.uuid4())


def millis(seconds: Number) -> int:
    """Seconds as the module's milliseconds (at least 1)."""
    return max(1, int(round(float(seconds) * 1000)))


@dataclass(frozen=True)
class Mode:
    """What a hold is: exclusive, shared, or ``permits`` of a semaphore of ``limit``."""

    shared: bool = False
    limit: Optional[int] = None
    permits: int = 1

    @classmethod
    def semaphore(cls, limit: int, permits: int) -> "Mode":
        """``permits`` of a semaphore of ``limit`` (``ValueError`` unless 1 <= permits <= limit)."""
        if not 1 <= permits <= limit:
            raise ValueError("need 1 <= permits <= limit")
        return cls(limit=limit, permits=permits)

    def words(self) -> List[Any]:
        if self.limit is not None:
            return ["LIMIT", self.limit, "PERMITS", self.permits]
        return ["SHARED"] if self.shared else []


def acquire_args(
    key: str,
    owner: str,
    ttl: Number,
    mode: Mode,
    session: bool,
    wait: Optional[Number],
) -> List[Any]:
    """``LOCK.ACQUIRE``; ``wait`` None: do not wait, 0: wait without limit, else seconds."""
    args: List[Any] = ["LOCK.ACQUIRE", key, owner, millis(ttl), *mode.words()]
    if session:
        args.append("SESSION")
    if wait is not None:
        args += ["WAIT", 0 if wait == 0 else millis(wait)]
    return args


def extend_args(key: str, owner: str, ttl: Number, token: int) -> List[Any]:
    return ["LOCK.EXTEND", key, owner, millis(ttl), "TOKEN", token]


def release_args(key: str, owner: str, token: int) -> List[Any]:
    return ["LOCK.RELEASE", key, owner, "TOKEN", token]


def wait_args(replicas: int, timeout: Number) -> List[Any]:
    """``WAIT`` for a durable grant: ``replicas`` must have it within ``timeout`` seconds."""
    return ["WAIT", replicas, millis(timeout)]


def replicated(acked: Any, replicas: int) -> bool:
    """Whether ``WAIT`` answered that ``replicas`` have the grant."""
    return int(acked) >= replicas


def released(reply: Any) -> bool:
    """Whether ``LOCK.RELEASE`` found the hold (1) or not (0: it was gone)."""
    return int(reply) == 1


def guard_args(key: str, token: int, command: Sequence[Any]) -> List[Any]:
    return ["LOCK.GUARD", key, token, *command]


def token_of(reply: Any) -> Optional[int]:
    """The token of an ``LOCK.ACQUIRE`` reply (nil: not granted)."""
    if reply is None:
        return None
    if isinstance(reply, (list, tuple)):  # owner `*`: [owner, token]
        return int(reply[1])
    return int(reply)


def translate(err: ResponseError) -> Exception:
    """The module's error replies as redislock errors (others stay as they are)."""
    text = str(err)
    if text.startswith("STALE"):
        return Stale(text)
    if text.startswith("DEADLOCK"):
        return Deadlock(text)
    if "unknown command" in text.lower() and "lock." in text.lower():
        return LockError("the redis-lock module is not loaded on this server: " + text)
    return err


def refused(err: ResponseError) -> str:
    return f"renewal refused: {err}"


def watchdog_failed(err: BaseException) -> str:
    return f"the watchdog failed: {type(err).__name__}: {err}"


class Renewals:
    """The watchdog's rule, the same in both clients: renew every ``ttl / 3``; the hold is lost
    when a renewal answers 0 or is refused, or when the link stays broken until the lease would
    have ended (a broken link before that is retried); any other failure loses it at once."""

    def __init__(self, ttl: float):
        self.ttl = ttl
        self.interval = ttl / 3
        #: For connecting and for each reply: a renewal never waits past the next one.
        self.timeout = max(0.05, self.interval)
        self.lease_end = time.monotonic() + ttl

    def answered(self, sent: float, renewed: Any) -> Optional[str]:
        """A renewal sent at ``sent`` answered ``renewed``: None while the hold lives."""
        if int(renewed) != 1:
            return LEASE_RAN_OUT
        self.lease_end = sent + self.ttl
        return None

    def broken(self) -> Optional[str]:
        """The link broke: retried (None) until the lease would have ended."""
        return UNREACHABLE if time.monotonic() >= self.lease_end else None
