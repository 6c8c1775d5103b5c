"""The LOCK.* commands as argument lists, their replies as values, and the timing rules of waits
and renewals: pure functions, shared by the threading and asyncio APIs so both speak the
module's protocol the same way (what a lock object does with them is ``redislock._core``)."""

from __future__ import annotations

import asyncio
import contextlib
import math
import os
import time
import uuid
import weakref
from dataclasses import dataclass
from typing import Any, List, Optional, Sequence, Tuple, Union

from redis.exceptions import (
    AskError,
    BusyLoadingError,
    ClusterDownError,
    ConnectionError,
    InvalidResponse,
    MasterDownError,
    MovedError,
    ReadOnlyError,
    ResponseError,
    TimeoutError,
    TryAgainError,
)

from .errors import Deadlock, Stale, Unavailable

Number = Union[int, float]

#: The link to the server broke (or a reply took too long): the connection is closed and the
#: call may be retried, by the same owner.
BROKEN_LINK = (ConnectionError, TimeoutError, asyncio.TimeoutError)

#: The service answered, but not as Redis does (an HTTP server, say): unavailable at once.
NOT_REDIS = (InvalidResponse,)

#: Why a hold was lost: rule 8's table, word for word in every client (a ``: <cause>`` follows
#: the ones that end with a colon's worth of cause, see ``unreachable`` and the like).
LEASE_RAN_OUT = "the lease ran out before it was renewed"
UNREACHABLE = "the server could not be reached before the lease ended"
REFUSED = "renewal refused"
WATCHDOG_FAILED = "the watchdog failed"
GONE_AT_RELEASE = "the hold was gone when released (its lease ran out)"
FIXED_LEASE_ENDED = "the lease ended (a fixed lease, not extended in time)"
SESSION_CLOSED = "the session's connection closed"
#: The cause of a loss at the deadline when the renewal in flight got no answer at all.
NO_ANSWER = "no answer in time"

#: Rule 19: an error reply that begins with one of these says the server did not run the command
#: and cannot serve the key now; it is asked again (the watchdog: a broken link), any other
#: error reply is not.
RETRYABLE = ("MOVED", "ASK", "TRYAGAIN", "CLUSTERDOWN", "READONLY", "LOADING", "MASTERDOWN",
             "UNBLOCKED")

#: redis-py's classes of some error replies, whose message it keeps without the code.
_CODE_OF = ((MovedError, "MOVED"), (AskError, "ASK"), (TryAgainError, "TRYAGAIN"),
            (ClusterDownError, "CLUSTERDOWN"), (ReadOnlyError, "READONLY"),
            (BusyLoadingError, "LOADING"), (MasterDownError, "MASTERDOWN"))

#: The default of ``unavailable_after`` (rule 14), in seconds.
UNAVAILABLE_AFTER = 10.0
#: How long the reply of a wait is awaited past its deadline before a PING must answer.
GRACE = 0.5


#: How long a wait pauses before it asks again after a broken link.
RETRY_PAUSE = 0.05


def patience(blocking: bool, timeout: Optional[Number]) -> Optional[float]:
    """How long ``acquire(blocking, timeout)`` may wait, read as ``threading.Lock.acquire`` reads
    its arguments: 0 (not blocking, or a timeout of 0) is one try, None (no timeout, -1, or
    infinite) is without limit, else seconds; any other negative timeout (or NaN) is a
    ``ValueError``."""
    if timeout is not None and timeout != -1 and not timeout >= 0:  # NaN included
        raise ValueError(f"timeout must be at least 0, or -1 or None (without limit): {timeout!r}")
    if not blocking:
        return 0.0
    if timeout is None or timeout == -1 or timeout == math.inf:
        return None
    return float(timeout)


def check_ttl(ttl: Number) -> float:
    """A lease of at least 1 ms (sent rounded up to whole milliseconds), else ``ValueError``."""
    if not (0.001 <= ttl < math.inf):
        raise ValueError(f"ttl must be at least 0.001 s (1 ms): {ttl!r}")
    return float(ttl)


def check_bound(unavailable_after: Number) -> float:
    """A positive ``unavailable_after``, else ``ValueError``."""
    if not (0 < unavailable_after < math.inf):
        raise ValueError(
            f"unavailable_after must be a positive number of seconds: {unavailable_after!r}")
    return float(unavailable_after)


def check_replicas_timeout(timeout: Number) -> float:
    """A durable grant's ``WAIT`` time: finite seconds, 0 or more, else ``ValueError``."""
    if not (0 <= timeout < math.inf):
        raise ValueError(f"replicas_timeout must be a finite number of seconds: {timeout!r}")
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
    """Seconds as the module's whole milliseconds, rounded up (at least 1): a lease is never
    shorter than asked. (Rounded to the nanosecond first, so 0.003 s is 3 ms, not 4.)"""
    return max(1, math.ceil(round(float(seconds) * 1000, 6)))


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


#: The most keys of one lock set: the server's default ``lock.max-set-size`` (rule 23).
MAX_SET_SIZE = 64


def check_keys(keys: Any) -> Tuple[Any, ...]:
    """A lock set's keys (rule 23): a sequence of 1 to ``MAX_SET_SIZE`` keys, none twice, else
    ``ValueError`` (``TypeError`` for one string, which is a key, not a sequence of them)."""
    if isinstance(keys, (str, bytes)):
        raise TypeError(f"keys must be a sequence of keys, not one key: {keys!r}")
    keys = tuple(keys)
    if not keys:
        raise ValueError("a lock set needs at least one key")
    if len(keys) > MAX_SET_SIZE:
        raise ValueError(f"a lock set takes at most {MAX_SET_SIZE} keys: {len(keys)} given")
    seen = set()
    for key in keys:
        if not isinstance(key, (str, bytes)):
            raise TypeError(f"a key is a str or bytes: {key!r}")
        if key in seen:
            raise ValueError(f"a key appears twice in the set: {key!r}")
        seen.add(key)
    return keys


def macquire_args(keys: Sequence[Any], owner: str, ttl: Number, shared: bool, session: bool,
                  wait: Optional[Number]) -> List[Any]:
    """``LOCK.MACQUIRE``; ``wait`` as in ``acquire_args``."""
    args: List[Any] = ["LOCK.MACQUIRE", len(keys), *keys, owner, millis(ttl)]
    if shared:
        args.append("SHARED")
    if session:
        args.append("SESSION")
    if wait is not None:
        args += ["WAIT", 0 if wait == 0 else millis(wait)]
    return args


def mrelease_args(keys: Sequence[Any], owner: str) -> List[Any]:
    return ["LOCK.MRELEASE", len(keys), *keys, owner]


def tokens_of(reply: Any) -> Optional[Tuple[int, ...]]:
    """The tokens of a ``LOCK.MACQUIRE`` reply, one per key in their order (nil: not granted)."""
    if reply is None:
        return None
    if len(reply) == 2 and isinstance(reply[1], (list, tuple)):  # owner `*`: [owner, [tokens]]
        reply = reply[1]
    return tuple(int(token) for token in reply)


def member_lost(reason: str, key: Any) -> str:
    """Why a lock set was lost: the reason of the member ``key`` that was (rule 23)."""
    return f"{_text(key)}: {reason}"


class Batch(list):
    """Commands sent together on one connection (a lock set's extend): the replies come back
    as a list, in their order; an error reply is raised once all were read."""


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


def translate(err: ResponseError, pool: Any) -> Exception:
    """The module's error replies as redislock errors (others stay as they are)."""
    text = str(err)
    if text.startswith("STALE"):
        return Stale(text)
    if text.startswith("DEADLOCK"):
        return Deadlock(text)
    if "unknown command" in text.lower() and "lock." in text.lower():
        return Unavailable(address_of(pool), "the redis-lock module is not loaded: " + text)
    return err


def answered(err: BaseException) -> bool:
    """Whether ``err``, raised by a command sent, is the server's error reply (it did not run
    the command); any other failure (no answer, a cancellation, an interrupt) leaves it
    unknown whether the command ran."""
    return isinstance(err, (ResponseError, Stale, Deadlock))


def address_of(pool: Any) -> str:
    """Where ``pool`` connects: host:port, a Unix socket's path, or a Sentinel service."""
    if getattr(pool, "service_name", None):
        return f"the master of {pool.service_name!r} (Sentinel)"
    kwargs = getattr(pool, "connection_kwargs", {})
    if "path" in kwargs:
        return str(kwargs["path"])
    return f"{kwargs.get('host', 'localhost')}:{kwargs.get('port', 6379)}"


def unavailable(pool: Any, err: BaseException, doing: str = "") -> Unavailable:
    """``err`` (a broken link, or an answer that is not Redis's) as rule 14's error; ``doing``
    says what got no answer, if not the command itself."""
    return Unavailable(address_of(pool), doing + cause_of(err))


def cause_of(err: BaseException) -> str:
    if isinstance(err, (ResponseError, BusyLoadingError)):
        return error_reply(err)  # the server's words, its code first
    for cause in (err, err.__cause__, err.__context__):
        if isinstance(cause, OSError) and (cause.errno or cause.strerror):  # refused, reset...
            text = os.strerror(cause.errno) if cause.errno else cause.strerror
            return text[:1].lower() + text[1:]
    if isinstance(err, NOT_REDIS):
        return f"it does not answer as Redis ({err})"
    if isinstance(err, (TimeoutError, asyncio.TimeoutError)):
        return f"no answer in time ({err or 'timed out'})"
    return str(err) or type(err).__name__


class Outage:
    """Rule 14's clock for one call: an outage counts from the start of the first attempt that
    failed since the server last answered, and the call fails as unavailable once it has
    lasted ``bound`` seconds, or would before another attempt had ``shortest`` seconds (an
    attempt cut shorter would fail for want of time, not say why the server does not answer:
    a refused connection would read as a timeout)."""

    def __init__(self, bound: float):
        self.bound = bound
        self.shortest = min(0.1, bound / 10)
        self.since: Optional[float] = None
        self.tried = time.monotonic()

    def attempt(self) -> None:
        """An attempt starts now (a first failure counts from here)."""
        self.tried = time.monotonic()

    def answered(self) -> None:
        self.since = None

    def failed(self) -> bool:
        """The attempt failed: whether the outage has lasted the bound."""
        if self.since is None:
            self.since = self.tried
        return time.monotonic() + self.shortest >= self.since + self.bound

    def timeout(self) -> float:
        """How long the next attempt may take: what is left of the bound."""
        if self.since is None:
            return self.bound
        return max(self.shortest, self.since + self.bound - time.monotonic())


def watch_slice(half_bound: float, deadline: Optional[float]) -> float:
    """How long a wait's reply is awaited before a PING asks whether the server still answers:
    half the bound, or until ``GRACE`` past the caller's deadline if that comes first."""
    if deadline is None:
        return half_bound
    return max(0.001, min(half_bound, deadline + GRACE - time.monotonic()))


def ping_timeout(half_bound: float, deadline: Optional[float]) -> float:
    """How long that PING may take: half the bound, or ``GRACE`` once the deadline is near."""
    if deadline is None:
        return half_bound
    return max(min(GRACE, half_bound), min(half_bound, deadline + GRACE - time.monotonic()))


class Spares:
    """The idle connections of the locks on one pool of the application's: made like the pool's
    (``own_connection``) but outside it, with rule 14's timeouts, so that no call of a lock
    hangs on the pool's own settings (no timeout by default) and the application's use of the
    pool never starves a lock. At most ``KEPT`` idle ones are kept, closed with the pool
    (``client.close()``, see ``spares_of``); a fork starts afresh."""

    KEPT = 16

    def __init__(self) -> None:
        self.idle: List[Any] = []
        self.pid = os.getpid()

    def take(self, pool: Any, timeout: float) -> Any:
        if self.pid != os.getpid():
            self.idle, self.pid = [], os.getpid()  # the parent's sockets are the parent's
        try:
            return self.idle.pop()
        except IndexError:
            return own_connection(pool, timeout)

    def give(self, conn: Any) -> bool:
        """Keep ``conn`` for the next call (False: too many kept, the caller closes it)."""
        if len(self.idle) >= self.KEPT or self.pid != os.getpid():
            return False
        self.idle.append(conn)
        return True

    def closed(self) -> List[Any]:
        """The idle connections, forgotten: for the caller to close (the pool is closing)."""
        idle, self.idle = self.idle, []
        return idle if self.pid == os.getpid() else []


_SPARES: "weakref.WeakKeyDictionary[Any, Spares]" = weakref.WeakKeyDictionary()


def spares_of(pool: Any) -> Spares:
    """The ``Spares`` of ``pool``: closed when the pool disconnects (``client.close()``), and
    gone when the pool goes."""
    spares = _SPARES.get(pool)
    if spares is None:
        spares = _SPARES.setdefault(pool, Spares())
        _close_with(pool, spares)
    return spares


def _close_with(pool: Any, spares: Spares) -> None:
    """Make ``pool.disconnect()`` (what closing the application's client calls, in both
    flavours) close ``spares``'s idle connections too, so that they do not outlive it."""
    disconnect = pool.disconnect
    if asyncio.iscoroutinefunction(disconnect):

        async def disconnect_with_spares(*args: Any, **kwargs: Any) -> Any:
            try:
                return await disconnect(*args, **kwargs)
            finally:
                for conn in spares.closed():
                    with contextlib.suppress(Exception):  # closing: nothing to report
                        await conn.disconnect()

    else:

        def disconnect_with_spares(*args: Any, **kwargs: Any) -> Any:  # type: ignore[misc]
            try:
                return disconnect(*args, **kwargs)
            finally:
                for conn in spares.closed():
                    with contextlib.suppress(Exception):
                        conn.disconnect()

    try:
        pool.disconnect = disconnect_with_spares
    except AttributeError:  # a pool that takes no attributes: its spares go with it
        pass


def error_reply(err: BaseException) -> str:
    """The server's error reply as it sent it (redis-py drops the code of some: put back)."""
    text = str(err)
    code = getattr(err, "status_code", None)
    if not code:
        code = next((c for cls, c in _CODE_OF if isinstance(err, cls)), None)
    if code and not text.startswith(code):
        return f"{code} {text}"
    return text


def retryable(reply: str) -> bool:
    """Whether the error reply ``reply`` (its text, code first) is one of rule 19's."""
    return reply.split(" ", 1)[0] in RETRYABLE


def refused(reply: str) -> str:
    return f"{REFUSED}: {reply}"


def watchdog_failed(err: BaseException) -> str:
    return f"{WATCHDOG_FAILED}: {type(err).__name__}: {err}"


def unreachable(cause: str) -> str:
    return f"{UNREACHABLE}: {cause or NO_ANSWER}"


def session_closed(err: BaseException) -> str:
    return f"{SESSION_CLOSED}: {cause_of(err)}"


class Renewals:
    """The renewals of a session hold (not in the loop: it renews on its own connection, which
    is the hold): every ``ttl / 3``; lost when a renewal answers 0 or is refused, at once when
    its connection breaks (the server ended the session hold with it), and at its lease
    deadline (rule 15: when the acquire or the last renewal that succeeded was sent, plus the
    ttl) when no answer came by then."""

    def __init__(self, ttl: float, granted: float):
        self.ttl = ttl
        self.interval = ttl / 3
        self.deadline = granted + ttl
        #: The ttl of the renewal in flight (sent, not answered), if one is.
        self.in_flight: Optional[float] = None
        #: The next renewal goes at once (an extend got no answer: ``extend_unanswered``).
        self.hurry = False

    def extending(self, ttl: float) -> bool:
        """An extend to ``ttl`` is about to be sent (rule 20): renewed by it from now on.
        Whether a renewal is in flight (the extend waits for its answer)."""
        self.ttl, self.interval = ttl, ttl / 3
        return self.in_flight is not None

    def extended(self, ttl: float, sent: float) -> None:
        """An extend sent at ``sent`` made the lease ``ttl`` long."""
        self.ttl, self.interval = ttl, ttl / 3
        self.deadline = sent + ttl

    def extend_unanswered(self, ends_by: float) -> bool:
        """An extend got no answer: it may have run, so the lease may end by ``ends_by``. If
        that is sooner than the deadline, the deadline moves there and the next renewal is
        hurried. Whether it moved."""
        if ends_by >= self.deadline:
            return False
        self.deadline, self.hurry = ends_by, True
        return True

    def sending(self) -> float:
        """A renewal goes now: the ttl it carries."""
        self.in_flight = self.ttl
        return self.ttl

    def pause(self) -> float:
        """Until the next renewal, or the deadline if that comes first."""
        return max(0.0, min(self.interval, self.deadline - time.monotonic()))

    def timeout(self) -> float:
        """For the reply: no longer than the time left to the deadline."""
        return max(0.001, self.deadline - time.monotonic())

    def answered(self, sent: float, renewed: Any) -> Optional[str]:
        """A renewal sent at ``sent`` answered ``renewed``: None while the hold lives. The lease
        ends the ttl that renewal carried after it (an extend may have changed the ttl since)."""
        ttl, self.in_flight = self.in_flight, None
        if not extended(renewed):
            return LEASE_RAN_OUT
        self.deadline = sent + (self.ttl if ttl is None else ttl)
        return None

    def unanswered(self) -> None:
        """The renewal in flight will not be answered (its connection broke)."""
        self.in_flight = None

    def ended(self) -> Optional[str]:
        """The reason of the loss once the deadline has passed."""
        return unreachable(NO_ANSWER) if time.monotonic() >= self.deadline else None


def extended(reply: Any) -> bool:
    """Whether ``LOCK.EXTEND`` found the hold (1) or not (0: its lease ran out)."""
    return int(reply) == 1


def packed(args: Sequence[Any], encoding: str = "utf-8") -> bytes:
    """``args`` as one RESP command, ready to pipeline."""
    out = [b"*%d\r\n" % len(args)]
    for arg in args:
        if isinstance(arg, str):
            arg = arg.encode(encoding)
        elif isinstance(arg, int):
            arg = b"%d" % arg
        out.append(b"$%d\r\n%s\r\n" % (len(arg), arg))
    return b"".join(out)


class Replies:
    """The replies of pipelined ``LOCK.EXTEND`` commands, read off the renewal loop's connection
    as bytes: integers (``:1``) and error replies (``-NOPERM ...``, kept as their text), the
    only two it answers; anything else is ``InvalidResponse`` (the link is then dropped)."""

    def __init__(self) -> None:
        self.rest = b""

    def feed(self, data: bytes) -> List[Union[int, str]]:
        lines = (self.rest + data).split(b"\r\n")
        self.rest = lines.pop()
        out: List[Union[int, str]] = []
        for line in lines:
            kind = line[:1]
            if kind == b":":
                out.append(int(line[1:]))
            elif kind == b"-":
                out.append(line[1:].decode("utf-8", "replace"))
            else:
                raise InvalidResponse(f"unexpected reply to LOCK.EXTEND: {line[:40]!r}")
        return out


# -- elections (rules 21 and 22): LOCK.WATCH and its replies ----------------------------------

#: An election's lease by default (rule 21), in seconds.
ELECTION_TTL = 10.0


def watch_args(key: str, after: Optional[str] = None, wait: Optional[Number] = None) -> List[Any]:
    """``LOCK.WATCH``: answered at once without ``after``; with it, nil (``wait`` None) or a
    block of up to ``wait`` seconds (0: without limit) until the holders differ from the ones
    that cursor names."""
    args: List[Any] = ["LOCK.WATCH", key]
    if after is not None:
        args += ["AFTER", after]
        if wait is not None:
            args += ["WAIT", 0 if wait == 0 else millis(wait)]
    return args


@dataclass(frozen=True)
class Leader:
    """An election's leader: its candidate's ``identity`` and its ``term`` (the hold's fencing
    token: a later leader's term is always larger)."""

    identity: str
    term: int


@dataclass(frozen=True)
class Watched:
    """A ``LOCK.WATCH`` reply: the ``cursor`` to pass as ``AFTER`` next, the lock's ``mode``,
    the newest live hold's ``token`` and the live holds, oldest first, as (owner, token)."""

    cursor: str
    mode: str
    token: Optional[int]
    holders: Tuple[Tuple[str, int], ...]

    def leader(self) -> Optional[Leader]:
        """The exclusive holder as an election's leader; None when the lock is free (or held
        in another way: shared, a semaphore's permits, a plain string under the name)."""
        if self.mode != "exclusive" or not self.holders:
            return None
        owner, token = self.holders[0]
        return Leader(owner, token)


def _text(value: Any) -> str:
    return value.decode("utf-8", "replace") if isinstance(value, bytes) else str(value)


def _fields(reply: Any) -> dict:
    """A map reply (RESP3 map, or RESP2 flat field/value array) as a dict of text keys."""
    if isinstance(reply, dict):
        items = reply.items()
    else:
        items = zip(reply[::2], reply[1::2])
    return {_text(k): v for k, v in items}


def watched(reply: Any) -> Optional[Watched]:
    """A ``LOCK.WATCH`` reply parsed (None: nil, nothing new); bytes or text, RESP2 or RESP3."""
    if reply is None:
        return None
    fields = _fields(reply)
    holders = []
    for holder in fields.get("holders") or []:
        h = _fields(holder)
        holders.append((_text(h["owner"]), int(h["token"])))
    token = fields.get("token")
    return Watched(
        cursor=_text(fields["cursor"]),
        mode=_text(fields["mode"]),
        token=None if token is None else int(token),
        holders=tuple(holders),
    )


def check_identity(identity: Any) -> str:
    """A candidate's identity: a non-empty string (its owner on the server), else
    ``ValueError``."""
    if not isinstance(identity, str) or not identity:
        raise ValueError(f"identity must be a non-empty string: {identity!r}")
    return identity


class Observing:
    """The state of one observer (rule 22): its last cursor (None before its first answer),
    passed again after a reconnect so that it is told the server's latest holders and never
    a change that did not happen; and the last leader it reported, never reported twice in a
    row."""

    UNSEEN = object()

    def __init__(self) -> None:
        self.cursor: Optional[str] = None
        self.last: Any = self.UNSEEN

    def news(self, reply: Any) -> Any:
        """A ``LOCK.WATCH`` reply: the leader to report (a ``Leader`` or None), or ``UNSEEN``
        when there is nothing to (nil, or the same leader as the last one reported)."""
        seen = watched(reply)
        if seen is None:
            return self.UNSEEN
        self.cursor = seen.cursor
        leader = seen.leader()
        if self.last is not self.UNSEEN and leader == self.last:
            return self.UNSEEN
        self.last = leader
        return leader
