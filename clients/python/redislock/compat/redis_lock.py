"""python-redis-lock's API (``redis_lock``) on the module's locks: switch with one line,
``import redis_lock`` -> ``from redislock.compat import redis_lock``.

Same key names (``lock:NAME``), so instances still on python-redis-lock and instances on this
exclude each other during a rolling deploy; a release here also wakes the old instances' waiters
(``BLPOP lock-signal:NAME``) as python-redis-lock's own release does. The exceptions have that
library's names and meanings (``NotAcquired``: released or extended a lock this id does not
hold); when python-redis-lock is installed each is a subclass of its namesake there, so
``except redis_lock.NotAcquired`` in code not yet switched catches them too.
"""

from __future__ import annotations

from base64 import b64encode
from os import urandom
from typing import Any, Optional

from redis import StrictRedis

from .. import lock as _lock

try:  # the original's exceptions, to subclass: ``except`` clauses written for it keep working
    import redis_lock as _original
except ImportError:  # pragma: no cover - python-redis-lock is not installed
    _original = None

__all__ = [
    "Lock", "reset_all", "AlreadyAcquired", "NotAcquired", "AlreadyStarted", "TimeoutNotUsable",
    "InvalidTimeout", "TimeoutTooLarge", "NotExpirable",
]


def _base(name: str) -> type:
    return getattr(_original, name, RuntimeError)


class AlreadyAcquired(_base("AlreadyAcquired")):
    """``acquire`` while this id already holds the lock."""


class NotAcquired(_base("NotAcquired")):
    """``release`` or ``extend`` of a lock this id does not hold (never held, expired, reset);
    ``with`` on a ``blocking=False`` lock that someone else holds."""


class AlreadyStarted(_base("AlreadyStarted")):
    """Kept for python-redis-lock's API: the renewal here is the watchdog, never started twice."""


class TimeoutNotUsable(_base("TimeoutNotUsable")):
    """``acquire(blocking=False, timeout=...)``."""


class InvalidTimeout(_base("InvalidTimeout")):
    """A negative ``timeout``."""


class TimeoutTooLarge(_base("TimeoutTooLarge")):
    """A ``timeout`` longer than ``expire`` without ``auto_renewal``."""


class NotExpirable(_base("NotExpirable")):
    """``extend`` of a lock held without ``expire``."""


#: The owner of lock:NAME, whichever kind of lock it is: an old instance's string, or the
#: owner of the module's exclusive hold (nil when free).
OWNER_SCRIPT = """
local kind = redis.call('TYPE', KEYS[1]).ok
if kind == 'none' then return false end
if kind == 'string' then return redis.call('GET', KEYS[1]) end
local info = redis.call('LOCK.INFO', KEYS[1], 'COUNT', 0)
if not info then return false end
for i = 1, #info, 2 do
  local field = info[i]
  if type(field) == 'table' then field = field.ok end  -- field names are status replies
  if field == 'owner' then return info[i + 1] end
end
return false
"""

#: Release by id (KEYS[1] lock, KEYS[2] signal; ARGV[1] id, ARGV[2] signal_expire): the module's
#: hold of that owner, or an old instance's string holding that id; then wake one old waiter,
#: as python-redis-lock's UNLOCK_SCRIPT does. 0 released, 1 not held by this id.
RELEASE_SCRIPT = """
local kind = redis.call('TYPE', KEYS[1]).ok
if kind == 'string' then
  if redis.call('GET', KEYS[1]) ~= ARGV[1] then return 1 end
  redis.call('DEL', KEYS[1])
elseif kind == 'none' or redis.call('LOCK.RELEASE', KEYS[1], ARGV[1]) == 0 then
  return 1
end
redis.call('DEL', KEYS[2])
redis.call('LPUSH', KEYS[2], 1)
redis.call('PEXPIRE', KEYS[2], ARGV[2])
return 0
"""

#: python-redis-lock's own: a DEL frees a module lock as it frees a string (the module's
#: waiters are granted at once), and the signal wakes an old waiter.
RESET_SCRIPT = """
redis.call('DEL', KEYS[2])
redis.call('LPUSH', KEYS[2], 1)
redis.call('PEXPIRE', KEYS[2], ARGV[2])
return redis.call('DEL', KEYS[1])
"""

RESET_ALL_SCRIPT = """
local locks = redis.call('KEYS', 'lock:*')
local signal
for _, lock in pairs(locks) do
  signal = 'lock-signal:' .. string.sub(lock, 6)
  redis.call('DEL', signal)
  redis.call('LPUSH', signal, 1)
  redis.call('EXPIRE', signal, 1)
  redis.call('DEL', lock)
end
return #locks
"""


def _millis(seconds: float) -> int:
    return max(1, int(round(float(seconds) * 1000)))


class Lock:
    """python-redis-lock's ``Lock(redis_client, name, expire=None, id=None, auto_renewal=False,
    strict=True, signal_expire=1000, blocking=True)`` on the module.

    ``expire`` is the lease in seconds (fractions kept); without it the lock does not expire
    while this process lives (a watchdog renews a lease of ``watchdog_ttl``), so a crashed
    holder no longer blocks the name forever. ``auto_renewal`` renews an ``expire`` lease
    every third of it. A blocking ``acquire`` waits in the server's FIFO queue (a ``timeout``
    in seconds, fractions kept; None or 0: no limit). ``fencing_token`` is the module's token
    of this object's hold.
    """

    #: The lease of a lock without ``expire``, renewed by the watchdog every third of it.
    watchdog_ttl = 30.0

    _scripts: dict = {}

    def __init__(
        self,
        redis_client: Any,
        name: str,
        expire: Optional[float] = None,
        id: Any = None,
        auto_renewal: bool = False,
        strict: bool = True,
        signal_expire: int = 1000,
        blocking: bool = True,
    ):
        if strict and not isinstance(redis_client, StrictRedis):
            raise ValueError("redis_client must be instance of StrictRedis. "
                             "Use strict=False if you know what you're doing.")
        if auto_renewal and expire is None:
            raise ValueError("Expire may not be None when auto_renewal is set")
        self._client = redis_client
        if expire:
            expire = float(expire)
            if expire < 0:
                raise ValueError("A negative expire is not acceptable.")
        else:
            expire = None
        self._expire = expire
        self._signal_expire = signal_expire
        if id is None:
            self._id = b64encode(urandom(18)).decode("ascii")
        elif isinstance(id, bytes):
            try:
                self._id = id.decode("ascii")
            except UnicodeDecodeError:
                self._id = b64encode(id).decode("ascii")
        elif isinstance(id, str):
            self._id = id
        else:
            raise TypeError(f"Incorrect type for `id`. Must be bytes/str not {type(id)}.")
        self._name = "lock:" + name
        self._signal = "lock-signal:" + name
        self._lock_renewal_interval = float(expire) * 2 / 3 if auto_renewal else None
        self.blocking = blocking
        # The module hold of this object: a fixed lease of `expire`, or one the watchdog renews.
        self._hold = _lock.Lock(redis_client, self._name, ttl=expire or self.watchdog_ttl,
                                owner=self._id, watchdog=auto_renewal or expire is None,
                                _lease_timer=False)  # ``extend`` moves it on the server
        self._acquired = False

    def _script(self, text: str) -> Any:
        script = Lock._scripts.get(text)
        if script is None:
            script = Lock._scripts[text] = self._client.register_script(text)
        return script(keys=(self._name, self._signal), args=(self._id, self._signal_expire),
                      client=self._client)

    @property
    def _held(self) -> bool:
        return self.id == self.get_owner_id()

    @property
    def id(self) -> str:
        return self._id

    @property
    def fencing_token(self) -> Optional[int]:
        """The module's fencing token of this object's hold (None when it holds none)."""
        return self._hold.token if self._acquired else None

    def get_owner_id(self) -> Optional[str]:
        """The id that holds the lock (an old instance's or a new one's), None when free."""
        owner = self._script(OWNER_SCRIPT)
        if isinstance(owner, bytes):
            owner = owner.decode("ascii", "replace")
        return owner

    def acquire(self, blocking: bool = True, timeout: Optional[float] = None) -> bool:
        """Take the lock: True, or False when ``blocking=False`` and it is held, or after
        ``timeout`` seconds. ``AlreadyAcquired`` if this id holds it already."""
        if self._held:
            raise AlreadyAcquired("Already acquired from this Lock instance.")
        if not blocking and timeout is not None:
            raise TimeoutNotUsable("Timeout cannot be used if blocking=False")
        if timeout:
            timeout = float(timeout)
            if timeout < 0:
                raise InvalidTimeout(f"Timeout ({timeout}) cannot be less than or equal to 0")
            if self._expire and not self._lock_renewal_interval and timeout > self._expire:
                raise TimeoutTooLarge(f"Timeout ({timeout}) cannot be greater than expire ({self._expire})")
        if self._acquired:
            # The last hold of this object ended on the server (expired, reset): close it here.
            self._acquired = False
            self._hold.release()
        if not self._hold.acquire(blocking, timeout or None):
            return False
        self._acquired = True
        return True

    def extend(self, expire: Optional[float] = None) -> None:
        """Make the lease ``expire`` seconds from now (default: this lock's ``expire``)."""
        if expire:
            expire = float(expire)
            if expire < 0:
                raise ValueError("A negative expire is not acceptable.")
        elif self._expire is not None:
            expire = self._expire
        else:
            raise TypeError("To extend a lock 'expire' must be provided as an argument to extend() "
                            "method or at initialization time.")
        if self._acquired and self._expire is None and self._hold.locked():
            raise NotExpirable(f"Lock {self._name} has no assigned expiration time")
        if not int(self._client.execute_command("LOCK.EXTEND", self._name, self._id, _millis(expire))):
            raise NotAcquired(f"Lock {self._name} is not acquired or it already expired.")

    def release(self) -> None:
        """Release the lock held by this id (``NotAcquired`` if it holds none) and wake one
        waiter of the old instances. ``Lock(conn, name, id=the_id).release()`` releases a
        lock acquired elsewhere, as with python-redis-lock."""
        if self._acquired:
            self._acquired = False
            if not self._hold.release():
                raise NotAcquired(f"Lock({self._name}) is not acquired or it already expired.")
            pipe = self._client.pipeline(transaction=True)
            pipe.delete(self._signal)
            pipe.lpush(self._signal, 1)
            pipe.pexpire(self._signal, self._signal_expire)
            pipe.execute()
            return
        if self._script(RELEASE_SCRIPT) == 1:
            raise NotAcquired(f"Lock({self._name}) is not acquired or it already expired.")

    def locked(self) -> bool:
        """Whether anyone holds the lock (this id or another)."""
        return self._client.exists(self._name) == 1

    def reset(self) -> None:
        """Forcibly delete the lock, whoever holds it (the next waiter gets it). With care."""
        self._script(RESET_SCRIPT)

    def __enter__(self) -> "Lock":
        acquired = self.acquire(blocking=self.blocking)
        if not acquired:
            if self.blocking:
                raise AssertionError(f"Lock({self._name}) wasn't acquired, but blocking=True was used!")
            raise NotAcquired(f"Lock({self._name}) is not acquired or it already expired.")
        return self

    def __exit__(self, exc_type: Any = None, exc_value: Any = None, traceback: Any = None) -> None:
        self.release()

    def __repr__(self) -> str:
        return f"<redislock.compat.redis_lock.Lock {self._name!r} id={self._id!r}>"


def reset_all(redis_client: Any) -> None:
    """Forcibly delete every ``lock:*`` lock, of old and new instances. With care."""
    script = Lock._scripts.get(RESET_ALL_SCRIPT)
    if script is None:
        script = Lock._scripts[RESET_ALL_SCRIPT] = redis_client.register_script(RESET_ALL_SCRIPT)
    script(client=redis_client)
