"""redislock.aio on real servers."""

import asyncio
import time

import pytest
import redis.asyncio as aredis

import redislock
from conftest import calls, eventually


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
        await a.aclose()

    r.execute_command("LOCK.ACQUIRE", "held", "someone", 60000)
    run(main())
