"""redislock.aio on real servers."""

import asyncio
import time

import pytest
import redis.asyncio as aredis

import redislock
from conftest import calls, eventually, idle_pool, waiters


def run(coro):
    return asyncio.run(coro)


def test_async_with_waits_renews_guards_and_releases(server, r):
    async def main():
        a = aredis.Redis(port=server.port)
        b = aredis.Redis(port=server.port, socket_timeout=0.2)
        r.set("stock", 5)
        first = redislock.aio.Lock(a, "job", ttl=0.6)
        async with first:
            assert await first.guard("DECRBY", "stock", 1) == 4
            second = redislock.aio.Lock(b, "job", ttl=0.3)
            task = asyncio.create_task(second.acquire(timeout=5))
            await asyncio.sleep(1.5)  # more than two leases: the watchdog keeps the hold
            assert r.execute_command("LOCK.FENCE", "job") == first.token
            assert not task.done()
        assert await task
        assert second.token > 0
        await second.release()
        await a.aclose()
        await b.aclose()

    run(main())
    assert calls(r, "lock.extend") >= 2


def test_async_lost_hold_and_tasks_do_not_share(server, r):
    async def main():
        a = aredis.Redis(port=server.port)
        reasons = []
        lock = redislock.aio.Lock(a, "w", ttl=0.3, on_lost=reasons.append)
        with pytest.raises(redislock.LockLost):
            async with lock:
                other = await asyncio.gather(lock.acquire(timeout=0.1))
                assert other == [False], "another task waits for this hold"
                r.execute_command("LOCK.FORCERELEASE", "w")
                for _ in range(200):
                    if reasons:
                        break
                    await asyncio.sleep(0.01)
        assert len(reasons) == 1
        sem = redislock.aio.Semaphore(a, "pool", limit=1, ttl=5)
        async with sem:
            assert not await redislock.aio.Semaphore(a, "pool", limit=1, ttl=5).acquire(blocking=False)
        with pytest.raises(redislock.NotAcquired):
            async with redislock.aio.Lock(a, "held", ttl=5).hold(timeout=0.2):
                pass
        started = time.monotonic()
        with pytest.raises(redislock.NotAcquired):
            async with redislock.aio.Lock(a, "held", ttl=5).hold(blocking=False):
                pass
        assert time.monotonic() - started < 0.15, "blocking=False asks once"
        async with redislock.aio.Lock(a, "free", ttl=5).hold(blocking=False) as free:
            assert free.token is not None
        await a.aclose()

    r.execute_command("LOCK.ACQUIRE", "held", "someone", 60000)
    run(main())


# -- small pools, failing watchdogs and cancelled waits ---------------------------------------


async def _cancelled_wait(client, key: str) -> None:
    """A blocking acquire of the held ``key``, cancelled by ``wait_for`` after 0.1 s."""
    with pytest.raises(asyncio.TimeoutError):
        await asyncio.wait_for(redislock.aio.Lock(client, key, ttl=5.0).acquire(), 0.1)


def test_async_cancelled_waits_leave_the_queue_and_give_their_connections_back(server, r):
    async def main():
        a = aredis.Redis(port=server.port, max_connections=3)
        for _ in range(5):
            await _cancelled_wait(a, "h")
        assert eventually(lambda: waiters(r, "h") == 0, 2), "the waiters left the queue"
        assert await a.ping() and idle_pool(a)
        assert r.execute_command("LOCK.RELEASE", "h", "someone") == 1
        assert r.exists("h") == 0, "the release granted nobody"
        assert await redislock.aio.Lock(a, "h", ttl=5).acquire(blocking=False)
        await a.aclose()

    r.execute_command("LOCK.ACQUIRE", "h", "someone", 60000)
    run(main())


def test_async_unexpected_watchdog_failure_loses_the_hold_at_once(server, r, monkeypatch):
    def broken(*args):
        raise RuntimeError("injected")

    async def main():
        a = aredis.Redis(port=server.port)
        lost = []
        lock = redislock.aio.Lock(a, "k", 3.0, on_lost=lost.append)
        with pytest.raises(redislock.LockLost, match="injected"):
            async with lock:
                monkeypatch.setattr(redislock._protocol, "extend_args", broken)
                for _ in range(250):  # the first renewal (after 1 s) fails: lost then
                    if lost:
                        break
                    await asyncio.sleep(0.01)
                assert lost and not lock.locked()
                with pytest.raises(redislock.Stale, match="lost"):
                    await lock.guard("SET", "x", 1)
        assert len(lost) == 1 and "injected" in lost[0]
        await a.aclose()

    run(main())


def test_async_lock_cycles_on_a_pool_of_two(server, r):
    async def main():
        small = aredis.Redis(port=server.port, max_connections=2)
        for _ in range(3):
            async with redislock.aio.Lock(small, "c", ttl=0.3) as lock:
                await asyncio.sleep(0.4)  # renewed by the watchdog
                assert await small.execute_command("LOCK.FENCE", "c") == lock.token
            async with redislock.aio.Lock(small, "s", ttl=5, session=True) as session:
                assert await small.execute_command("LOCK.FENCE", "s") == session.token
            async with redislock.aio.Lock(small, "h", ttl=5, owner="holder"):
                assert await redislock.aio.Lock(small, "h", ttl=5).acquire(timeout=0.1) is False
                await _cancelled_wait(small, "h")
        assert await small.ping()
        for _ in range(10):
            async with redislock.aio.Lock(small, "c", ttl=5, session=True):
                async with redislock.aio.Lock(small, "d", ttl=5):
                    pass
        assert idle_pool(small)
        await small.aclose()

    run(main())
