"""A rolling deploy, as the field reports tell it: the inventory scenario (read the stock,
sleep, write stock - 1; 100 in stock; every worker sells until it reads 0) run at once by
8 workers still on the old lock and 8 already on the module, on the same lock name, with either
group started first (the second once the first has sold 10). Old and new must exclude each
other: exactly 100 sold, never two workers inside at once, and every worker, old waiters blocked
in the old library's own wait included, finishes by itself within ``BOUND``. Each worker does
other work between sales, so the lock goes back and forth between old and new many times."""

import random
import threading
import time

import pytest
import redis

import redislock
from redislock.compat import RedisPyLock
from redislock.compat import redis_lock as compat

STOCK = 100
WORKERS = 8
#: Every worker must be done by then (a run takes about half a second).
BOUND = 15.0


class Shop:
    """The stock in Redis, and what the workers saw: sales per kind of lock, handoffs of the
    lock between old and new, the most workers ever inside at once, errors."""

    def __init__(self, server):
        self.server = server
        server.client().set("stock", STOCK)
        self.sold = {}
        self.handoffs = {"old>new": 0, "new>old": 0}
        self.last = None
        self.inside = 0
        self.most_inside = 0
        self.errors = []
        self.wrongtype = 0
        self.guard = threading.Lock()

    def sell_one(self, c: redis.Redis, group: str, kind: str) -> bool:
        """The critical section: False once the stock reads 0."""
        with self.guard:
            self.inside += 1
            self.most_inside = max(self.most_inside, self.inside)
        try:
            stock = int(c.get("stock"))
            if stock <= 0:
                return False
            time.sleep(0.002)
            c.set("stock", stock - 1)
            with self.guard:
                self.sold[kind] = self.sold.get(kind, 0) + 1
                if self.last not in (None, group):
                    self.handoffs[f"{self.last}>{group}"] += 1
                self.last = group
            return True
        finally:
            with self.guard:
                self.inside -= 1


def worker(shop: Shop, group: str, hold) -> None:
    """Sell until the stock reads 0, each sale under ``hold(c, shop)`` (a context manager)."""
    c = shop.server.client()
    try:
        while True:
            with hold(c, shop):
                if not shop.sell_one(c, group, hold.__name__):
                    return
            time.sleep(random.uniform(0.02, 0.06))  # other work between sales
    except Exception as err:  # reported by the test
        shop.errors.append(f"{hold.__name__}: {type(err).__name__}: {err}")
    finally:
        c.close()


def run(server, old_holds, new_holds, old_first: bool) -> Shop:
    shop = Shop(server)
    groups = [("old", old_holds), ("new", new_holds)]
    if not old_first:
        groups.reverse()
    threads = []
    started = time.monotonic()
    for n, (group, holds) in enumerate(groups):
        while n == 1 and sum(shop.sold.values()) < 10 and time.monotonic() - started < BOUND:
            time.sleep(0.001)
        for i in range(WORKERS):
            t = threading.Thread(target=worker, args=(shop, group, holds[i % len(holds)]), daemon=True)
            t.start()
            threads.append(t)
    for t in threads:
        t.join(max(0.0, BOUND - (time.monotonic() - started)))
    shop.elapsed = time.monotonic() - started
    shop.stuck = sum(t.is_alive() for t in threads)
    print(f"sold {shop.sold} in {shop.elapsed:.2f} s, handoffs {shop.handoffs}, "
          f"old acquires refused with WRONGTYPE: {shop.wrongtype}")
    return shop


def check(shop: Shop, server) -> None:
    assert shop.stuck == 0, f"{shop.stuck} workers still blocked after {BOUND} s"
    assert not shop.errors, shop.errors
    assert shop.most_inside == 1, "two workers were inside at once"
    assert sum(shop.sold.values()) == STOCK
    assert int(server.client().get("stock")) == 0
    # The precondition of the test, not a rate: old and new overlapped, so the lock passed from
    # each to the other at least once. How often it changed hands is the scheduler's.
    assert min(shop.handoffs.values()) >= 1, f"old and new never took turns: {shop.handoffs}"


# -- redis-py's Lock, old; the native client and the RedisPyLock adapter, new --------------------


def redis_py_lock(c, shop):
    return c.lock("sku:9", timeout=5, sleep=0.01)  # redis-py's own: SET NX PX, polling


def native(c, shop):
    return redislock.Lock(c, "sku:9", ttl=5)


def adapter(c, shop):
    return c.lock("sku:9", timeout=5, lock_class=RedisPyLock)


@pytest.mark.parametrize("old_first", [True, False], ids=["old-then-new", "new-then-old"])
def test_redis_py_lock_and_the_module_during_a_rollout(server, old_first):
    shop = run(server, [redis_py_lock], [native, adapter], old_first)
    check(shop, server)
    assert set(shop.sold) == {"redis_py_lock", "native", "adapter"}


# -- python-redis-lock, old; the compat redis_lock.Lock, new -------------------------------------


class python_redis_lock:
    """An old worker's hold: python-redis-lock without expire, so its waiters BLPOP
    lock-signal:sku:9 with no timeout and only a release's signal wakes them. Its ``acquire``
    starts with a GET of the key, which answers WRONGTYPE while a new instance holds it: the
    old code's request fails there and is retried, as a job queue retries a failed job
    (counted in ``shop.wrongtype``)."""

    def __init__(self, c, shop):
        import redis_lock

        self.lock = redis_lock.Lock(c, "sku:9")
        self.shop = shop

    def __enter__(self):
        while True:
            try:
                self.lock.acquire()
                return self
            except redis.ResponseError as err:
                if "WRONGTYPE" not in str(err):
                    raise
                with self.shop.guard:
                    self.shop.wrongtype += 1
                time.sleep(0.005)

    def __exit__(self, *exc):
        self.lock.release()


class python_redis_lock_shimmed(python_redis_lock):
    """An old worker with the shim of docs/migration.md deployed first: its ``get_owner_id``
    reads WRONGTYPE as "not mine", so its ``acquire`` waits in BLPOP (without a timeout) behind
    a new holder too, and only a new release's signal can wake it."""

    def __init__(self, c, shop):
        import redis_lock

        class Lock(redis_lock.Lock):
            def get_owner_id(self):
                try:
                    return super().get_owner_id()
                except redis.ResponseError:  # WRONGTYPE: a new instance holds the lock
                    return None

        self.lock = Lock(c, "sku:9")
        self.shop = shop


def compat_redis_lock(c, shop):
    return compat.Lock(c, "sku:9", expire=5)


@pytest.mark.parametrize("old", [python_redis_lock, python_redis_lock_shimmed],
                         ids=["plain", "shimmed"])
@pytest.mark.parametrize("old_first", [True, False], ids=["old-then-new", "new-then-old"])
def test_python_redis_lock_and_the_adapter_during_a_rollout(server, old_first, old):
    pytest.importorskip("redis_lock")
    shop = run(server, [old], [compat_redis_lock], old_first)
    check(shop, server)
    assert set(shop.sold) == {old.__name__, "compat_redis_lock"}
    if old is python_redis_lock_shimmed:
        assert shop.wrongtype == 0
