"""The LOCK.* commands as argument lists, and their replies as values: shared by the
threading and asyncio APIs so both speak the module's protocol the same way."""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from typing import Any, Callable, List, Optional, Sequence, Union

from redis.exceptions import ResponseError

from .errors import Deadlock, LockError, Stale

Number = Union[int, float]


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


class LockSettings:
    """What a lock object is, shared by ``redislock.Lock`` and ``redislock.aio.Lock``."""

    def __init__(
        self,
        client: Any,
        key: str,
        ttl: float = 30.0,
        *,
        owner: Optional[str] = None,
        shared: bool = False,
        session: bool = False,
        replicas: int = 0,
        replicas_timeout: float = 1.0,
        watchdog: bool = True,
        reentrant: bool = False,
        on_lost: Optional[Callable[[str], Any]] = None,
        raise_on_lost: bool = True,
        on_event: Optional[Callable[[str, dict], None]] = None,
        _mode: Optional[Mode] = None,
    ):
        if ttl <= 0:
            raise ValueError("ttl must be positive")
        self.client = client
        self.key = key
        self.ttl = float(ttl)
        self.owner = owner or new_owner()
        self.mode = _mode or Mode(shared=shared)
        self.session = session
        self.replicas = replicas
        self.replicas_timeout = replicas_timeout
        self.watchdog = watchdog
        self.reentrant = reentrant
        self.on_lost = on_lost
        self.raise_on_lost = raise_on_lost
        self.on_event = on_event
        #: The fencing token of the current hold (None when not held).
        self.token: Optional[int] = None
        #: Why the last hold was lost (None while it holds, or if it was released in time).
        self.lost: Optional[str] = None
        self._depth = 0
        self._session_conn: Any = None
        self._granted_at = 0.0

    def locked(self) -> bool:
        """Whether this object holds the lock (and has not lost it)."""
        return self.token is not None and self.lost is None

    def _emit(self, event: str, **fields: Any) -> None:
        if self.on_event is not None:
            try:
                self.on_event(event, fields)
            except Exception:
                import logging

                logging.getLogger("redislock").exception("redislock: on_event hook failed")
