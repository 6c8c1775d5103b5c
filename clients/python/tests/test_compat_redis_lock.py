"""redislock.compat.redis_lock against python-redis-lock (``redis_lock``) itself: each parity
test runs the same body on both modules (``impl.Lock``, ``impl.NotAcquired``, ...), checking
what python-redis-lock documents and tests; the tests after them check how the adapter and
instances still on python-redis-lock meet on the same names during a rolling deploy."""

import threading
import time

import pytest
import redis

import redislock
from redislock.compat import redis_lock as compat

from compat_support import eventually, lease_left, tries, waiters

original = pytest.importorskip("redis_lock")


@pytest.fixture(params=["python-redis-lock", "compat"])
def impl(request):
    """The module whose ``Lock`` and exceptions the test uses."""
    return original if request.param == "python-redis-lock" else compat


# -- parity: the same body on python-redis-lock and on the adapter ------------------------------


def test_with_locked_and_owner(r, impl):
    lock = impl.Lock(r, "foo")
    assert not lock.locked() and lock.get_owner_id() is None
    with lock:
        assert lock.locked()
        assert lock.get_owner_id() == lock.id
        assert impl.Lock(r, "foo").locked(), "locked(): whoever holds it"
    assert not lock.locked() and lock.get_owner_id() is None
    given = impl.Lock(r, "foo", id="worker-7")
    assert given.id == "worker-7" and impl.Lock(r, "foo", id=b"worker-7").id == "worker-7"
    with given:
        assert r.exists("lock:foo") and given.get_owner_id() == "worker-7"


def test_not_blocking_timeouts_and_expiry(r, impl):
    holder = impl.Lock(r, "foo")
    assert holder.acquire()
    before = tries(r)
    assert not impl.Lock(r, "foo").acquire(blocking=False)
    with pytest.raises(impl.NotAcquired):
        with impl.Lock(r, "foo", blocking=False):
            pass
    assert tries(r) == before + 2, "blocking=False: one try each"
    started = time.monotonic()
    assert not impl.Lock(r, "foo").acquire(timeout=1)  # python-redis-lock: whole seconds
    # Up to 1.5 s late for a descheduled thread; a wait without the timeout would last as long
    # as the holder, which has no expire.
    assert 0.9 <= time.monotonic() - started < 2.5
    holder.release()
    short = impl.Lock(r, "foo", expire=1)
    assert short.acquire()
    time.sleep(1.1)
    assert not short.locked(), "its expire ran out"
    with pytest.raises(impl.NotAcquired):
        short.release()
    assert impl.Lock(r, "foo").acquire(blocking=False)


def test_argument_errors(r, impl):
    lock = impl.Lock(r, "foo", expire=10)
    with pytest.raises(impl.TimeoutNotUsable):
        lock.acquire(blocking=False, timeout=1)
    with pytest.raises(impl.InvalidTimeout):
        lock.acquire(timeout=-1)
    with pytest.raises(impl.TimeoutTooLarge):
        lock.acquire(timeout=30)
    assert impl.Lock(r, "foo", expire=10, auto_renewal=True).acquire(timeout=30)
    with pytest.raises(ValueError):
        impl.Lock(r, "foo", auto_renewal=True)
    with pytest.raises(ValueError):
        impl.Lock(r, "foo", expire=-1)
    with pytest.raises(TypeError):
        impl.Lock(r, "foo", id=12)
    with pytest.raises(ValueError):
        impl.Lock(object(), "foo")


def test_already_acquired(r, impl):
    lock = impl.Lock(r, "foo", id="a")
    assert lock.acquire()
    with pytest.raises(impl.AlreadyAcquired):
        lock.acquire()
    with pytest.raises(impl.AlreadyAcquired):
        impl.Lock(r, "foo", id="a").acquire(blocking=False)
    lock.release()


def test_release_errors_and_release_by_id(r, impl):
    with pytest.raises(impl.NotAcquired):
        impl.Lock(r, "foo").release()
    lock = impl.Lock(r, "foo", id="a")
    assert lock.acquire()
    with pytest.raises(impl.NotAcquired):
        impl.Lock(r, "foo", id="b").release()
    impl.Lock(r, "foo", id="a").release()  # releasing a lock acquired elsewhere, by its id
    assert not lock.locked()
    with pytest.raises(impl.NotAcquired):
        lock.release()


def test_extend(r, impl):
    lock = impl.Lock(r, "foo", expire=100, id="a")
    with pytest.raises(impl.NotAcquired):
        lock.extend()
    assert lock.acquire()
    assert 99000 < lease_left(r, "lock:foo") <= 100000
    lock.extend(1000)
    assert 999000 < lease_left(r, "lock:foo") <= 1000000
    lock.extend()
    assert 99000 < lease_left(r, "lock:foo") <= 100000
    impl.Lock(r, "foo", id="a").extend(500)  # another instance with the same id
    assert 499000 < lease_left(r, "lock:foo") <= 500000
    with pytest.raises(impl.NotAcquired):
        impl.Lock(r, "foo", id="b").extend(500)
    with pytest.raises(ValueError):
        lock.extend(-1)
    lock.release()
    forever = impl.Lock(r, "bar")
    assert forever.acquire()
    with pytest.raises(impl.NotExpirable):
        forever.extend(10)
    with pytest.raises(TypeError):
        forever.extend()
    forever.release()


def test_reset_and_reset_all(r, impl):
    lock = impl.Lock(r, "foo")
    assert lock.acquire()
    impl.Lock(r, "foo").reset()
    assert not lock.locked()
    with pytest.raises(impl.NotAcquired):
        lock.release()
    assert impl.Lock(r, "a").acquire() and impl.Lock(r, "b", expire=10).acquire()
    impl.reset_all(r)
    assert not impl.Lock(r, "a").locked() and not impl.Lock(r, "b").locked()


def test_auto_renewal(r, impl):
    # Renewed every 2 s (python-redis-lock) or 1 s (the adapter's watchdog): a renewal may
    # come 1 s late before the lease ends.
    lock = impl.Lock(r, "foo", expire=3, auto_renewal=True)
    assert lock.acquire()
    time.sleep(3.5)  # past its expire: renewed
    assert lock.locked() and lock.get_owner_id() == lock.id
    lock.release()
    assert not lock.locked()


def test_a_release_wakes_a_waiter(r, impl):
    holder = impl.Lock(r, "foo")
    assert holder.acquire()
    got = []
    waiter = impl.Lock(r, "foo")
    thread = threading.Thread(target=lambda: got.append((waiter.acquire(), time.monotonic())))
    thread.start()
    time.sleep(0.2)
    assert not got
    released = time.monotonic()
    holder.release()
    thread.join(5)
    # Woken at once (python-redis-lock: by the signal its release pushes); 2 s of margin for a
    # descheduled thread. A waiter not woken would wait for ever (no expire, no timeout).
    assert got and got[0][0] and got[0][1] - released < 2.0
    waiter.release()


# -- old and new instances on the same names --------------------------------------------------


def test_old_waiters_are_woken_by_a_new_release(r):
    """An old instance blocked in BLPOP lock-signal:NAME (no expire: no timeout) behind an old
    holder, a new instance queued behind it in the module: the old holder's release hands the
    name to the new one (the old waiter wakes, finds it taken, waits on), and the new one's
    release wakes the old waiter, which gets the lock. With a native ``redislock.Lock`` in the
    new one's place nothing pushes the signal, and the old waiter stays blocked."""
    for new_lock, wakes in ((lambda: compat.Lock(r, "foo", expire=10), True),
                            (lambda: redislock.Lock(r, "lock:foo", ttl=10), False)):
        old_holder = original.Lock(r, "foo")
        assert old_holder.acquire()
        old_done = []
        old_waiter = original.Lock(r, "foo")
        old = threading.Thread(target=lambda: old_done.append(old_waiter.acquire()), daemon=True)
        old.start()
        assert eventually(lambda: r.execute_command("CLIENT", "LIST").count(b"cmd=blpop") == 1)
        new = new_lock()
        granted = []
        thread = threading.Thread(target=lambda: granted.append(new.acquire()))
        thread.start()
        assert eventually(lambda: waiters(r, "lock:foo") == 1)
        old_holder.release()
        thread.join(5)
        assert granted == [True]
        time.sleep(0.1)
        assert not old_done, "woken, the old waiter found the name taken and waits on"
        new.release()
        old.join(5 if wakes else 0.5)  # woken at once, or (not woken) still blocked after 0.5 s
        assert bool(old_done) == wakes
        if not wakes:
            r.lpush("lock-signal:foo", 1)  # what the adapter's release does
            old.join(5)
        assert old_done == [True]
        old_waiter.release()


def test_old_and_new_instances_exclude_each_other(r):
    old = original.Lock(r, "foo", expire=10)
    new = compat.Lock(r, "foo", expire=10)
    assert old.acquire()
    assert new.locked() and new.get_owner_id() == old.id
    assert not new.acquire(blocking=False)
    old.release()
    assert new.acquire(blocking=False)
    assert new.fencing_token == r.execute_command("LOCK.FENCE", "lock:foo")
    with pytest.raises(redis.ResponseError, match="WRONGTYPE"):
        # python-redis-lock's acquire starts with a GET of the key (for AlreadyAcquired): on a
        # module lock that is WRONGTYPE, so an old instance fails instead of waiting.
        original.Lock(r, "foo").acquire(blocking=False)
    assert original.Lock(r, "foo").locked()  # EXISTS works on both kinds
    new.release()
    assert original.Lock(r, "foo").acquire(blocking=False)
