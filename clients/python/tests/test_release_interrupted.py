"""A release interrupted before it could end the hold (an asyncio task cancelled while the
watchdog's renewal holds the state lock) still stops the watchdog: the hold ends with its lease
instead of being renewed for as long as the process lives."""

import asyncio
import time

import redis.asyncio

import redislock.aio


def test_a_cancelled_release_stops_the_watchdog(server):
    async def scenario():
        r = redis.asyncio.Redis(port=server.port)
        lock = redislock.aio.Lock(r, "k", ttl=0.6)
        assert await lock.acquire()
        await lock._state.acquire()  # as a renewal in progress holds it
        release = asyncio.create_task(lock.release())
        await asyncio.sleep(0.05)
        release.cancel()
        try:
            await release
        except asyncio.CancelledError:
            pass
        lock._state.release()
        assert lock.token is None, "the object no longer counts itself as holding"
        await asyncio.wait_for(lock._watchdog, 2.0)  # the watchdog ended
        await r.aclose()

    asyncio.run(scenario())
    # Nobody renews it any more: the lease (0.6 s) runs out.
    c = server.client()
    deadline = time.monotonic() + 3.0
    while c.execute_command("LOCK.INFO", "k") is not None:
        assert time.monotonic() < deadline, "the hold is still renewed"
        time.sleep(0.05)
