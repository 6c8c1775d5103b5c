"""redislock.compat.RedisPyLock (and its asyncio twin) against redis-py's own Lock: each
parity test runs the same body on ``r.lock(...)`` (redis-py's Lua lock) and on
``r.lock(..., lock_class=RedisPyLock)`` (the module), checking what redis-py documents and
tests of its Lock; the tests after them check what only the adapter does (queued waits,
fencing tokens, the watchdog, old and new locks excluding each other)."""

import asyncio
import logging
import threading
import time

import pytest
import redis
import redis.asyncio as aredis
from redis.exceptions import LockError, LockNotOwnedError

import redislock
from redislock.compat import RedisPyLock
from redislock.compat import aio as compat_aio

from compat_support import calls, eventually, lease_left, owner_of, tries, waiters

SYNC = {"redis-py": None, "compat": RedisPyLock}
ASYNC = {"redis-py": None, "compat": compat_aio.RedisPyLock}


@pytest.fixture(params=list(SYNC))
def lock_class(request):
    """None: redis-py's own Lock; else the adapter."""
    return SYNC[request.param]


def raised(excinfo, cls) -> None:
    """redis-py raises exactly ``cls`` here (LockError, not its LockNotOwnedError subclass)."""
    assert type(excinfo.value) is cls, excinfo.value


# -- parity: the same body on redis-py's Lock and on the adapter ---------------------------------


def test_acquire_locked_owned_release(r, lock_class):
    lock = r.lock("foo", timeout=10, lock_class=lock_class)
    assert not lock.locked() and not lock.owned()
    assert lock.acquire(blocking=False)
    assert lock.locked() and lock.owned()
    assert owner_of(r, "foo") == lock.local.token
    assert 9000 < lease_left(r, "foo") <= 10000
    other = r.lock("foo", timeout=10, lock_class=lock_class)
    assert other.locked(), "locked(): anyone holds it"
    assert not other.owned(), "owned(): this lock holds it"
    assert not other.acquire(blocking=False)
    lock.release()
    assert lock.local.token is None
    assert not lock.locked() and not other.locked() and not lock.owned()
    assert other.acquire(blocking=False)
    other.release()


def test_token_names_the_owner_and_float_timeouts(r, lock_class):
    lock = r.lock("foo", timeout=9.5, lock_class=lock_class)
    assert lock.acquire(token="my-token")
    assert lock.local.token == b"my-token"
    assert owner_of(r, "foo") == b"my-token"
    assert 8500 < lease_left(r, "foo") <= 9500
    lock.release()


def test_blocking_false_and_blocking_timeout(r, lock_class):
    holder = r.lock("foo", timeout=10, lock_class=lock_class)
    assert holder.acquire()
    for blocking_timeout in (0, -1):
        before = tries(r)
        assert not r.lock("foo", lock_class=lock_class).acquire(blocking_timeout=blocking_timeout)
        assert tries(r) == before + 1, f"blocking_timeout={blocking_timeout}: one try"
    non_blocking = r.lock("foo", blocking=False, lock_class=lock_class)
    before = tries(r)
    assert not non_blocking.acquire()
    assert not r.lock("foo", lock_class=lock_class).acquire(blocking=False, blocking_timeout=5)
    assert tries(r) == before + 2, "blocking=False: one try each, whatever blocking_timeout"
    waiter = r.lock("foo", blocking_timeout=0.3, lock_class=lock_class)
    started = time.monotonic()
    assert not waiter.acquire()
    # Up to 1.7 s late for a descheduled thread; a wait past blocking_timeout would last as
    # long as the holder's 10 s lease.
    assert 0.15 <= time.monotonic() - started < 2.0
    holder.release()


def test_a_waiter_gets_the_lock_when_it_is_released(r, lock_class):
    holder = r.lock("foo", timeout=10, lock_class=lock_class)
    assert holder.acquire()
    got = []
    waiter = r.lock("foo", timeout=10, blocking_timeout=5, thread_local=False, lock_class=lock_class)
    thread = threading.Thread(target=lambda: got.append((waiter.acquire(), time.monotonic())))
    thread.start()
    time.sleep(0.2)
    assert not got
    released = time.monotonic()
    holder.release()
    thread.join(5)
    assert got and got[0][0]
    # Woken at once (redis-py: by its next poll, every `sleep` of 0.1 s); 2 s of margin for a
    # descheduled thread, well below the blocking_timeout of 5 s a waiter not woken would wait.
    assert got[0][1] - released < 2.0
    assert waiter.owned()
    waiter.release()


def test_with_raises_lock_error_when_not_acquired(r, lock_class):
    with r.lock("foo", timeout=10, lock_class=lock_class) as lock:
        assert lock.owned()
        with pytest.raises(LockError) as excinfo:
            with r.lock("foo", blocking_timeout=0.1, lock_class=lock_class):
                pass
        raised(excinfo, LockError)
    assert not lock.locked()


def test_release_errors(r, lock_class):
    lock = r.lock("foo", timeout=10, lock_class=lock_class)
    with pytest.raises(LockError) as excinfo:
        lock.release()
    raised(excinfo, LockError)
    assert lock.acquire()
    lock.release()
    with pytest.raises(LockError) as excinfo:
        lock.release()  # released twice
    raised(excinfo, LockError)
    assert lock.acquire()
    r.delete("foo")  # someone deleted it: no longer owned
    with pytest.raises(LockNotOwnedError):
        lock.release()
    short = r.lock("foo", timeout=0.1, lock_class=lock_class)
    assert short.acquire()
    time.sleep(0.2)  # the lease ran out
    assert not short.owned()
    with pytest.raises(LockNotOwnedError):
        short.release()


def test_extend(r, lock_class):
    lock = r.lock("foo", timeout=10, lock_class=lock_class)
    assert lock.acquire()
    assert lock.extend(10) is True
    assert 16000 < lease_left(r, "foo") <= 20000
    assert lock.extend(10, replace_ttl=True) is True
    assert 9000 < lease_left(r, "foo") <= 10000
    assert lock.extend(0.5) is True
    assert 9500 < lease_left(r, "foo") <= 10500
    lock.release()
    float_lock = r.lock("foo", timeout=10.5, lock_class=lock_class)
    assert float_lock.acquire()
    float_lock.extend(10.5)
    assert 16000 < lease_left(r, "foo") <= 21000
    float_lock.release()


def test_extend_errors(r, lock_class):
    lock = r.lock("foo", timeout=10, lock_class=lock_class)
    with pytest.raises(LockError) as excinfo:
        lock.extend(10)  # not held
    raised(excinfo, LockError)
    forever = r.lock("bar", lock_class=lock_class)
    assert forever.acquire()
    with pytest.raises(LockError) as excinfo:
        forever.extend(10)  # no timeout
    raised(excinfo, LockError)
    forever.release()
    assert lock.acquire()
    r.delete("foo")
    assert r.lock("foo", timeout=10, lock_class=lock_class).acquire()  # someone else's now
    with pytest.raises(LockNotOwnedError):
        lock.extend(10)


def test_reacquire(r, lock_class):
    lock = r.lock("foo", timeout=10, lock_class=lock_class)
    with pytest.raises(LockError) as excinfo:
        lock.reacquire()
    raised(excinfo, LockError)
    assert lock.acquire()
    lock.extend(5, replace_ttl=True)
    assert lease_left(r, "foo") <= 5000
    assert lock.reacquire() is True
    assert 9000 < lease_left(r, "foo") <= 10000
    r.delete("foo")
    with pytest.raises(LockNotOwnedError):
        lock.reacquire()
    forever = r.lock("bar", lock_class=lock_class)
    assert forever.acquire()
    with pytest.raises(LockError) as excinfo:
        forever.reacquire()
    raised(excinfo, LockError)
    forever.release()


def test_raise_on_release_error(r, lock_class, caplog):
    with pytest.raises(LockNotOwnedError):
        with r.lock("foo", timeout=10, lock_class=lock_class):
            r.delete("foo")
    with caplog.at_level(logging.WARNING):
        with r.lock("foo", timeout=10, raise_on_release_error=False, lock_class=lock_class):
            r.delete("foo")
    assert "no longer owned when exiting context manager" in caplog.text


def test_thread_local_tokens(r, lock_class):
    mine = r.lock("foo", timeout=10, lock_class=lock_class)
    assert mine.acquire()
    errors = []

    def release_elsewhere(lock):
        try:
            lock.release()
        # redis-py: an AttributeError of its threading.local (a thread that never acquired has
        # no token attribute); the adapter: LockError, as for any release of an unheld lock.
        except (LockError, AttributeError) as err:
            errors.append(err)

    thread = threading.Thread(target=release_elsewhere, args=(mine,))
    thread.start()
    thread.join()
    assert len(errors) == 1, "another thread does not see this thread's token"
    assert mine.owned()
    mine.release()
    shared = r.lock("foo", timeout=10, thread_local=False, lock_class=lock_class)
    assert shared.acquire()
    thread = threading.Thread(target=release_elsewhere, args=(shared,))
    thread.start()
    thread.join()
    assert len(errors) == 1 and not shared.locked(), "thread_local=False: any thread releases"


def test_without_timeout_it_is_held_until_released(r, lock_class):
    lock = r.lock("foo", lock_class=lock_class)
    assert lock.acquire()
    time.sleep(0.3)
    assert lock.owned()
    lock.release()
    assert not lock.locked()


# -- parity, asyncio: redis.asyncio's Lock and compat.aio.RedisPyLock ----------------------------


@pytest.fixture(params=list(ASYNC))
def alock_class(request):
    return ASYNC[request.param]


def test_async_acquire_wait_extend_and_errors(server, alock_class):
    async def main():
        a = aredis.Redis(port=server.port)
        lock = a.lock("foo", timeout=10, lock_class=alock_class)
        assert not await lock.locked()
        with pytest.raises(LockError):
            await lock.release()
        with pytest.raises(LockError):
            lock.extend(1)  # raises at the call, as redis-py's
        assert await lock.acquire(token="t1")
        assert lock.local.token == b"t1"
        assert await lock.locked() and await lock.owned()
        other = a.lock("foo", timeout=10, lock_class=alock_class)
        assert await other.locked() and not await other.owned()
        assert not await other.acquire(blocking=False)
        started = time.monotonic()
        assert not await other.acquire(blocking_timeout=0.2)
        # Up to 1.8 s late for a descheduled loop; a wait past blocking_timeout would last as
        # long as the holder's 10 s lease.
        assert 0.1 <= time.monotonic() - started < 2.0
        waiting = asyncio.ensure_future(other.acquire(blocking_timeout=5))
        await asyncio.sleep(0.1)
        assert await lock.extend(10) is True
        assert 16000 < lease_left(sync, "foo") <= 20000
        assert await lock.reacquire() is True
        assert 9000 < lease_left(sync, "foo") <= 10000
        await lock.release()
        assert await asyncio.wait_for(waiting, 5)
        assert await other.owned()
        await a.delete("foo")
        with pytest.raises(LockNotOwnedError):
            await other.extend(1)
        with pytest.raises(LockNotOwnedError):
            await other.release()
        with pytest.raises(LockError):
            await other.release()  # the token was cleared by the failed release
        forever = a.lock("bar", lock_class=alock_class)
        assert await forever.acquire()
        with pytest.raises(LockError):
            forever.reacquire()
        await forever.release()
        await a.aclose()

    sync = server.client()
    asyncio.run(main())


def test_async_with(server, alock_class, caplog):
    async def main():
        a = aredis.Redis(port=server.port)
        async with a.lock("foo", timeout=10, lock_class=alock_class) as lock:
            assert await lock.owned()
            with pytest.raises(LockError) as excinfo:
                async with a.lock("foo", blocking_timeout=0.1, lock_class=alock_class):
                    pass
            raised(excinfo, LockError)
        assert not await lock.locked()
        with pytest.raises(LockNotOwnedError):
            async with a.lock("foo", timeout=10, lock_class=alock_class):
                await a.delete("foo")
        with caplog.at_level(logging.WARNING):
            async with a.lock("foo", timeout=10, raise_on_release_error=False, lock_class=alock_class):
                await a.delete("foo")
        assert "no longer owned" in caplog.text
        await a.aclose()

    asyncio.run(main())


# -- what only the adapter does --------------------------------------------------------------------


def test_waits_are_queued_on_the_server_not_polled(r):
    holder = r.lock("foo", timeout=10, lock_class=RedisPyLock)
    assert holder.acquire()
    before = calls(r, "lock.acquire")
    waiter = r.lock("foo", timeout=10, thread_local=False, lock_class=RedisPyLock)
    thread = threading.Thread(target=waiter.acquire)
    thread.start()
    assert eventually(lambda: waiters(r, "foo") == 1)
    time.sleep(0.5)  # redis-py's Lock would have asked 5 times by now
    holder.release()
    thread.join(5)
    assert waiter.owned()
    assert calls(r, "lock.acquire") == before + 1  # (Valkey counts a blocked call once done)
    waiter.release()


def test_fencing_tokens_increase_and_name_the_live_hold(r):
    lock = r.lock("foo", timeout=10, lock_class=RedisPyLock)
    assert lock.fencing_token is None
    tokens = []
    for _ in range(3):
        with lock:
            tokens.append(lock.fencing_token)
            assert r.execute_command("LOCK.FENCE", "foo") == lock.fencing_token
    assert tokens == sorted(tokens) and len(set(tokens)) == 3
    assert lock.fencing_token is None


def test_old_and_new_locks_exclude_each_other(r):
    """redis-py's own Lock (a string) and the adapter on one name, in both orders."""
    old = r.lock("order:42", timeout=10)
    new = r.lock("order:42", timeout=10, thread_local=False, lock_class=RedisPyLock)
    assert old.acquire()
    assert new.locked() and not new.owned()
    assert not new.acquire(blocking=False)
    got = []
    thread = threading.Thread(target=lambda: got.append((new.acquire(blocking_timeout=5), time.monotonic())))
    thread.start()
    assert eventually(lambda: waiters(r, "order:42") == 1)
    released = time.monotonic()
    old.release()  # its Lua DEL hands the name to the module's queue at once
    thread.join(5)
    # 2 s: margin for a descheduled thread, well below the blocking_timeout of 5 s and the
    # string's 10 s lease. (The module also looks at a waited-on string's name every second,
    # so this does not tell "at once" from that: tests/foreign.rs does, with a shorter WAIT.)
    assert got and got[0][0] and got[0][1] - released < 2.0
    assert not old.acquire(blocking=False), "SET NX fails on a module lock"
    with pytest.raises(redis.ResponseError, match="WRONGTYPE"):
        old.locked()  # redis-py's locked() and owned() GET the key: WRONGTYPE on a module lock
    new.release()
    assert old.acquire(blocking=False)
    old.release()
    late = r.lock("order:42", timeout=0.2)  # an old holder whose lease runs out
    started = time.monotonic()  # before the string is set: its 0.2 s end after this
    assert late.acquire()
    assert new.acquire(blocking_timeout=5)  # granted the moment the string expires
    # Not before the string expired (50 ms for the server's millisecond clock), nor later than
    # the module's 1 s look at a waited-on name, with 1 s of margin for a descheduled thread.
    assert 0.15 < time.monotonic() - started < 2.0
    with pytest.raises(redis.ResponseError, match="WRONGTYPE"):
        late.release()  # its script's GET fails on the module lock: nothing deleted
    assert new.owned()
    new.release()


def test_timeout_none_is_kept_alive_by_the_watchdog(r):
    class ShortLease(RedisPyLock):
        watchdog_ttl = 1.5  # renewed every 0.5 s: a renewal may come ~1 s late

    lock = r.lock("foo", lock_class=ShortLease)
    assert lock.acquire()
    granted = time.monotonic()
    while time.monotonic() - granted < 2.0:  # past its lease: only the watchdog keeps it
        time.sleep(0.25)
        assert r.execute_command("LOCK.FENCE", "foo") == lock.fencing_token
    assert lock.owned()
    assert calls(r, "lock.extend") >= 1, "renewed by LOCK.EXTEND"
    lock.release()
    assert not lock.locked()


def test_a_cancelled_async_wait_leaves_the_queue(server, r):
    async def main():
        a = aredis.Redis(port=server.port)
        holder = a.lock("foo", timeout=10, lock_class=compat_aio.RedisPyLock)
        assert await holder.acquire()
        waiter = a.lock("foo", timeout=10, lock_class=compat_aio.RedisPyLock)
        with pytest.raises(asyncio.TimeoutError):
            await asyncio.wait_for(waiter.acquire(), 0.2)
        assert eventually(lambda: waiters(r, "foo") == 0, 2)
        assert waiter.fencing_token is None and not await waiter.owned()
        await holder.release()
        await a.aclose()

    asyncio.run(main())


def test_an_unreachable_server_is_redis_pys_connection_error(lock_class):
    """As redis-py's Lock: a plain ``ConnectionError``, never a ``LockError`` (which code
    written for redis-py catches as not acquired); the adapter's within its bound."""
    from redis.backoff import NoBackoff
    from redis.retry import Retry

    from conftest import free_port

    # Nothing listens there; redis-py's own retries (3, with back-off) left out, for time.
    r = redis.Redis(port=free_port(), retry=Retry(NoBackoff(), 0))
    for blocking in (True, False):
        lock = r.lock("foo", timeout=10, blocking=blocking, blocking_timeout=0.5,
                      lock_class=lock_class)
        with pytest.raises(redis.ConnectionError) as excinfo:
            lock.acquire()
        assert not isinstance(excinfo.value, LockError), repr(excinfo.value)


def test_native_errors_are_redis_py_lock_errors(r):
    assert issubclass(redislock.LockError, LockError)
    assert issubclass(redislock.NotAcquired, LockError)
    assert issubclass(redislock.LockLost, LockNotOwnedError)
    holder = redislock.Lock(r, "foo", ttl=10)
    with holder:
        with pytest.raises(LockError):  # an `except LockError` written for redis-py catches it
            with redislock.Lock(r, "foo", ttl=10).hold(timeout=0.05):
                pass
    with pytest.raises(LockNotOwnedError):
        with redislock.Lock(r, "foo", ttl=10):
            r.delete("foo")
