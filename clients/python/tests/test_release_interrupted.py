"""A release interrupted before it could end the hold (an asyncio task cancelled while the
state lock is busy) still takes the hold out of its renewal loop: the hold ends with its lease
instead of being renewed for as long as the process lives."""

import asyncio
import time

import redis.asyncio

import redislock.aio


def test_a_cancelled_release_stops_the_renewals(server):
    async def scenario():
        r = redis.asyncio.Redis(port=server.port)
        lock = redislock.aio.Lock(r, "k", ttl=0.6)
        assert await lock.acquire()
        entry = lock._entry  # the hold in its pool's renewal loop
        await lock._state.acquire()  # as another call in progress holds it
        release = asyncio.create_task(lock.release())
        await asyncio.sleep(0.05)
        release.cancel()
        try:
            await release
        except asyncio.CancelledError:
            pass
        lock._state.release()
        assert lock.token is None, "the object no longer counts itself as holding"
        assert not entry.live, "the hold left the renewal loop"
        await r.aclose()

    asyncio.run(scenario())
    # Nobody renews it any more: the lease (0.6 s) runs out.
    c = server.client()
    deadline = time.monotonic() + 3.0
    while c.execute_command("LOCK.INFO", "k") is not None:
        assert time.monotonic() < deadline, "the hold is still renewed"
        time.sleep(0.05)
