"""The LOCK.* commands as argument lists, and their replies as values: shared by the
threading and asyncio APIs so both speak the module's protocol the same way."""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from typing import Any, List, Optional, Sequence, Union

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
