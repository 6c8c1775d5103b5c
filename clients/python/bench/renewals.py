"""What the renewal loop costs (scripts/bench_renewals.py runs it through ``bench/renewals``):
N holds (``renew:<i>``, watchdog on) on one client, kept S seconds, then hold 0 released and
the others checked; one JSON line last on stdout. REDISLOCK_BENCH_FLAVOUR=asyncio (or
``--flavour asyncio``) runs ``redislock.aio`` on ``redis.asyncio`` instead of threads."""

import argparse
import asyncio
import inspect
import json
import os
import sys
import time

import redis
import redis.asyncio as aredis

import redislock
import redislock.aio
from redislock import _schedule


async def done(value):
    """``value``, awaited if the flavour's call returned an awaitable."""
    return await value if inspect.isawaitable(value) else value


def percentile(values, q):
    if not values:
        return 0.0
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


class Run:
    def __init__(self, args):
        self.args = args
        self.asyncio = args.flavour == "asyncio"
        self.monitor = redis.Redis(port=args.port, single_connection_client=True)
        self.lags = []
        self.lost = []
        _schedule.on_renewed = self.lags.append

    def connections(self) -> int:
        return int(self.monitor.info("clients")["connected_clients"])

    async def aside(self, fn, *args):
        """``fn(*args)``, a blocking call on the monitor connection, in a thread: it never
        holds up the event loop that renews the asyncio flavour's holds."""
        return await asyncio.get_running_loop().run_in_executor(None, fn, *args)

    def lock(self, client, i):
        flavour = redislock.aio if self.asyncio else redislock
        return flavour.Lock(client, f"renew:{i}", ttl=self.args.ttl_ms / 1000,
                            on_lost=self.lost.append, raise_on_lost=False)

    async def hold_all(self, client):
        locks = [self.lock(client, i) for i in range(self.args.holds)]
        for lock in locks:
            if not await done(lock.acquire(blocking=False)):
                raise SystemExit(f"{lock.key} was not granted")
        return locks

    async def keep(self) -> int:
        """The most connections seen, sampled each second for the run's seconds."""
        most = await self.aside(self.connections)
        for _ in range(self.args.seconds):
            await asyncio.sleep(1.0)
            most = max(most, await self.aside(self.connections))
        return most

    def live_on_server(self, keys) -> bool:
        pipe = self.monitor.pipeline(transaction=False)
        for key in keys:
            pipe.execute_command("LOCK.INFO", key)
        return all(info is not None for info in pipe.execute())

    async def main(self) -> dict:
        client = (aredis.Redis if self.asyncio else redis.Redis)(port=self.args.port)
        await done(client.ping())
        before = self.connections()
        locks = await self.hold_all(client)
        after = await self.keep()
        await done(locks[0].release())
        await asyncio.sleep(2 * self.args.ttl_ms / 3000)  # two renewal intervals
        others = not self.lost and await self.aside(self.live_on_server,
                                                    [lock.key for lock in locks[1:]])
        for lock in locks[1:]:
            await done(lock.release())
        await done(client.aclose() if self.asyncio else client.close())
        lags = [lag * 1000 for lag in self.lags]
        return {
            "client": "python" if not self.asyncio else "python-asyncio",
            "holds": self.args.holds, "connections_before": before, "connections_after": after,
            "lost": len(self.lost),
            "lag_ms": {"p50": round(percentile(lags, 0.5), 2),
                       "p99": round(percentile(lags, 0.99), 2), "max": round(max(lags or [0]), 2)},
            "renewals": len(lags), "others_live_after_release": bool(others),
        }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--holds", type=int, default=1000)
    parser.add_argument("--ttl-ms", type=int, default=3000)
    parser.add_argument("--seconds", type=int, default=30)
    parser.add_argument("--flavour", choices=["threads", "asyncio"],
                        default=os.environ.get("REDISLOCK_BENCH_FLAVOUR", "threads"))
    result = asyncio.run(Run(parser.parse_args()).main())
    print(json.dumps(result))
    sys.stdout.flush()
    return 0


if __name__ == "__main__":
    sys.exit(main())
