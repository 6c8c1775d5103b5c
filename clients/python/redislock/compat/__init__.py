"""Drop-in adapters for code written for other Redis locks, on the module's locks.

- ``RedisPyLock``: redis-py's ``Lock``, via its ``lock_class`` hook:
  ``r.lock(name, timeout=..., blocking_timeout=..., lock_class=redislock.compat.RedisPyLock)``;
  ``redislock.compat.aio.RedisPyLock`` for ``redis.asyncio``.
- ``redislock.compat.redis_lock``: python-redis-lock's ``redis_lock`` module (``Lock``,
  ``reset_all``, its exceptions): ``from redislock.compat import redis_lock``.

Both keep the key names and the meanings of the library they replace, so old and new instances
exclude each other during a rolling deploy (see docs/migration.md), and add ``fencing_token``.
"""

from . import aio, redis_lock
from .redispy import RedisPyLock

__all__ = ["RedisPyLock", "aio", "redis_lock"]
