"""The rows of "Same case, same answer" (docs/clients.md, rules 16 and 17), one test each, and
rule 18 (quiet shutdown), in both flavours (flavours.py). "Nothing sent" is read from the server's own counts
(``INFO commandstats``), or from ``MONITOR``."""

import asyncio
import logging
import math
import subprocess
import sys
import threading
import time

import pytest
import redis

import redislock
from redislock import _protocol as p
from conftest import calls, halt, stat
from flavours import after, result, soon


def lose(r, lock) -> None:
    """Take the hold away from ``lock`` on the server (its next renewal finds it gone)."""
    r.execute_command("LOCK.FORCERELEASE", lock.key)


class Monitor:
    """The commands the server receives (``MONITOR``), read in a thread of their own."""

    def __init__(self, r: redis.Redis):
        self.seen: list = []
        self._client = r  # its pool holds the monitor's connection
        self._monitor = r.monitor()
        self._monitor.__enter__()
        self._thread = threading.Thread(target=self._read, daemon=True)
        self._thread.start()

    def _read(self) -> None:
        try:
            while True:
                self.seen.append(self._monitor.next_command()["command"])
        except Exception:  # closed at the end of the test
            pass

    def sent(self, prefix: str) -> list:
        return [c for c in self.seen if c.upper().startswith(prefix)]

    def close(self) -> None:
        self._monitor.connection.disconnect()
        self._thread.join(5)
        self._client.close()


@pytest.fixture
def monitor(server):
    m = Monitor(server.client())
    yield m
    m.close()


async def test_release_of_a_hold_known_lost_answers_false_and_sends_nothing(flavour, r):
    lock = flavour.Lock(flavour.client(), "k", ttl=1.5, raise_on_lost=False)  # renewed every 0.5 s
    assert await lock.acquire()
    lose(r, lock)
    assert await soon(lambda: lock.lost, 5), "the next renewal finds it gone"
    released = calls(r, "lock.release")
    assert await lock.release() is False
    assert calls(r, "lock.release") == released, "nothing sent"


async def test_guard_of_a_hold_known_lost_is_stale_and_sends_nothing(flavour, r):
    lock = flavour.Lock(flavour.client(), "k", ttl=1.5, raise_on_lost=False)
    assert await lock.acquire()
    lose(r, lock)
    assert await soon(lambda: lock.lost, 5)
    guarded = calls(r, "lock.guard")
    with pytest.raises(redislock.Stale, match="lost"):
        await lock.guard("SET", "x", 1)
    assert calls(r, "lock.guard") == guarded, "nothing sent"
    await lock.release()


async def test_a_hold_lost_while_the_server_is_down_answers_without_it(flavour, lone_server):
    """Known lost (its lease ended while the server was stopped): release and guard answer at
    once (a call to the server would fail as unavailable, after the bound)."""
    lock = flavour.Lock(flavour.client(lone_server), "k", ttl=0.6, raise_on_lost=False,
                        unavailable_after=30.0)
    assert await lock.acquire()
    halt(lone_server, "stopped")
    assert await soon(lambda: lock.lost, 5)
    with pytest.raises(redislock.Stale):
        await asyncio.wait_for(lock.guard("SET", "x", 1), 2)  # 2 s: far less than the bound
    assert await asyncio.wait_for(lock.release(), 2) is False


async def test_a_release_that_finds_the_lease_gone_answers_false_and_marks_it_lost(flavour, r):
    lost = []
    lock = flavour.Lock(flavour.client(), "k", ttl=5, watchdog=False, on_lost=lost.append)
    assert await lock.acquire()
    lose(r, lock)  # the lease ended before the release (as if this process had been paused)
    assert lock.lost is None, "nothing tells it before the release"
    assert await lock.release() is False
    assert lock.lost and "gone when released" in lock.lost
    assert await soon(lambda: lost, 5) and len(lost) == 1, "the lost signal fired once"


async def test_a_fixed_lease_is_lost_at_its_end_by_the_timer(flavour, r):
    """Rule 15 for a fixed lease (``watchdog=False``): lost at its end by a timer, not at the
    release; then release and guard answer without the server (rule 16)."""
    lost = []
    lock = flavour.Lock(flavour.client(), "k", ttl=1.0, watchdog=False, raise_on_lost=False,
                        on_lost=lambda reason: lost.append((time.monotonic(), reason)))
    before = time.monotonic()
    assert await lock.acquire(blocking=False)
    after = time.monotonic()
    assert await soon(lambda: lost, 5)
    seen, reason = lost[0]
    # Never before the lease's end, and within 10% of it + 100 ms after it (rule 15).
    assert before + 1.0 <= seen <= after + 1.0 + 0.2, f"lost {seen - after:.3f} s after the grant"
    assert reason == p.FIXED_LEASE_ENDED and not lock.locked()
    released, guarded = calls(r, "lock.release"), calls(r, "lock.guard")
    with pytest.raises(redislock.Stale, match="lost"):
        await lock.guard("SET", "x", 1)
    assert await lock.release() is False
    assert (calls(r, "lock.release"), calls(r, "lock.guard")) == (released, guarded), \
        "nothing sent"


async def test_release_twice_answers_true_then_false_and_sends_nothing(flavour, r):
    lock = flavour.Lock(flavour.client(), "k", ttl=5)
    assert await lock.acquire()
    assert await lock.release() is True
    released = calls(r, "lock.release")
    assert await lock.release() is False
    assert calls(r, "lock.release") == released, "nothing sent"
    assert lock.lost is None, "a second release is not a loss"
    never = flavour.Lock(flavour.client(), "other", ttl=5)
    assert await never.release() is False, "nor is a release of a hold never taken"
    async with lock:
        assert await lock.release() is True  # released in the block: leaving it is quiet
    assert calls(r, "lock.release") == released + 1


async def test_a_ttl_under_1_ms_is_a_value_error(flavour, r):
    before = calls(r, "lock.acquire")
    for ttl in (0, 0.0009, -1, math.nan, math.inf):
        with pytest.raises(ValueError, match="ttl"):
            flavour.Lock(flavour.client(), "k", ttl=ttl)
    with pytest.raises(ValueError, match="ttl"):
        flavour.Semaphore(flavour.client(), "s", limit=2, ttl=0)
    assert calls(r, "lock.acquire") == before, "nothing sent"


async def test_a_ttl_of_1_5_ms_is_a_2_ms_lease(flavour, monitor):
    lock = flavour.Lock(flavour.client(), "k", ttl=0.0015, watchdog=False, raise_on_lost=False)
    assert await lock.acquire(timeout=0.0015)
    assert await soon(lambda: monitor.sent("LOCK.ACQUIRE"), 5)
    # The key, the owner, the ttl in whole ms, rounded up (test_core: the wait's too).
    words = monitor.sent("LOCK.ACQUIRE")[0].split()
    assert words[3] == "2", words
    await lock.release()


async def test_the_blocking_acquire_waits_without_limit_by_default(flavour, r, monitor):
    holder = flavour.Lock(flavour.client(), "k", ttl=5)
    assert await holder.acquire()
    waiter = flavour.Lock(flavour.client(), "k", ttl=5)
    releasing = flavour.spawn(after(1.0, holder.release))
    assert await waiter.acquire() is True, "granted once released, after 1 s"
    assert await flavour.join(releasing, 5) is True
    waits = [c.split()[4:] for c in monitor.sent("LOCK.ACQUIRE")]
    assert ["WAIT", "0"] in waits, f"a wait without limit (WAIT 0): {waits}"
    await waiter.release()


async def test_acquire_blocking_false_tries_once(flavour, r):
    holder = flavour.Lock(flavour.client(), "k", ttl=5)
    assert await holder.acquire(blocking=False) is True
    other = flavour.Lock(flavour.client(), "k", ttl=5)
    asked, queued = calls(r, "lock.acquire"), stat(r, "exclusive_waits")
    assert await other.acquire(blocking=False) is False
    assert calls(r, "lock.acquire") == asked + 1 and stat(r, "exclusive_waits") == queued, \
        "one try, never in the queue"
    await holder.release()


async def test_timeout_minus_1_waits_without_limit_other_negatives_are_value_errors(flavour, r):
    holder = flavour.Lock(flavour.client(), "k", ttl=5)
    assert await holder.acquire()
    waiter = flavour.Lock(flavour.client(), "k", ttl=5)
    asked = calls(r, "lock.acquire")
    for timeout in (-0.5, -2, math.nan):
        with pytest.raises(ValueError, match="timeout"):
            await waiter.acquire(timeout=timeout)
        with pytest.raises(ValueError, match="timeout"):
            await waiter.acquire(blocking=False, timeout=timeout)
    assert calls(r, "lock.acquire") == asked, "nothing sent"
    releasing = flavour.spawn(after(1.0, holder.release))
    assert await waiter.acquire(timeout=-1) is True, "as threading.Lock: without limit"
    assert await flavour.join(releasing, 5) is True
    await waiter.release()


async def test_nan_is_a_value_error_an_infinite_wait_is_without_limit(flavour, r, monitor):
    before = calls(r, "lock.acquire")
    for bad in (dict(ttl=math.nan), dict(replicas_timeout=math.nan),
                dict(unavailable_after=math.nan), dict(unavailable_after=math.inf)):
        with pytest.raises(ValueError):
            flavour.Lock(flavour.client(), "k", **{"ttl": 5, **bad})
    waiter = flavour.Lock(flavour.client(), "k", ttl=5)
    with pytest.raises(ValueError, match="timeout"):
        await waiter.acquire(timeout=math.nan)
    assert calls(r, "lock.acquire") == before, "nothing sent"
    holder = flavour.Lock(flavour.client(), "k", ttl=5)
    assert await holder.acquire()
    releasing = flavour.spawn(after(1.0, holder.release))
    assert await waiter.acquire(timeout=math.inf) is True, "granted once released, after 1 s"
    assert await flavour.join(releasing, 5) is True
    waits = [c.split()[4:] for c in monitor.sent("LOCK.ACQUIRE")]
    assert ["WAIT", "0"] in waits, f"a wait without limit (WAIT 0): {waits}"
    await waiter.release()


async def test_a_wait_of_1_ms_or_less_on_a_free_lock_is_granted(flavour, r):
    """One try is always sent, however little of the wait is left when it goes."""
    for timeout in (0.001, 0.0005, 1e-9):
        lock = flavour.Lock(flavour.client(), "k", ttl=5)
        asked = calls(r, "lock.acquire")
        assert await lock.acquire(timeout=timeout) is True, timeout
        assert calls(r, "lock.acquire") == asked + 1
        assert await lock.release() is True


async def test_a_release_whose_reply_is_lost_is_unavailable_and_never_sent_again(flavour, r):
    """The release reaches the server, which holds it (``CLIENT PAUSE WRITE``); its link is
    killed before the reply: unavailable at once, and not sent again, which would release
    the hold once the pause ends (and could answer a false loss)."""
    lock = flavour.Lock(flavour.client(), "k", ttl=30, unavailable_after=10.0)
    assert await lock.acquire()
    token = lock.token
    r.execute_command("CLIENT", "PAUSE", 3000, "WRITE")
    try:
        releasing = flavour.spawn(lock.release())
        assert await soon(lambda: "cmd=lock.release" in r.execute_command("CLIENT", "LIST")
                          .decode(), 2.5), "the release reached the server"
        r.execute_command("CLIENT", "KILL", "TYPE", "normal", "SKIPME", "yes")
        with pytest.raises(redislock.Unavailable):
            await flavour.join(releasing, 2)  # well before the pause ends (3 s)
    finally:
        r.execute_command("CLIENT", "UNPAUSE")
    await asyncio.sleep(0.3)  # what a second release would have needed after the pause
    assert calls(r, "lock.release") == 0, "never sent again"
    assert r.execute_command("LOCK.FENCE", "k") == token and r.exists("k") == 1, \
        "the hold is left to its lease"
    assert lock.lost is None and await lock.release() is False


def of_this_test(record: logging.LogRecord, key: str) -> bool:
    """A record of redislock's, not from another test's watchdog thread (a hold that test left,
    whose server is gone, may log while this one runs)."""
    watchdog = record.threadName.startswith("redislock-watchdog-")
    return record.name.startswith("redislock") and (not watchdog or record.threadName.endswith(
        f"-watchdog-{key}"))


async def test_closing_the_locks_and_then_the_client_logs_nothing(flavour, caplog):
    """Rule 18: a hold with its watchdog, released, then the client closed: not a line."""
    caplog.set_level(logging.DEBUG, logger="redislock")
    client = flavour.client()
    # Renewed every 1.67 s: a renewal may come more than 3 s late before the lease ends (a
    # 1.5 s lease lost its hold, and logged it, when a renewal came 1 s late on a loaded host).
    async with flavour.Lock(client, "quiet", ttl=5) as lock:
        await asyncio.sleep(2.0)  # a renewal
        assert lock.locked()
    await result(flavour._close(client))
    await asyncio.sleep(0.3)  # the watchdog's end
    assert [r.getMessage() for r in caplog.records if of_this_test(r, "quiet")] == []


async def test_closing_the_client_closes_the_locks_connections(flavour, r):
    """The idle connections the locks keep (their calls', and a watched wait's PING probes) are
    closed with the client: none outlives it."""
    name = "locks-under-test"  # the locks' connections are named as the client's
    connected = lambda: sum(c["name"] == name for c in r.client_list())  # noqa: E731
    client = flavour.client(client_name=name)
    holder = flavour.Lock(client, "k", ttl=5)
    assert await holder.acquire()
    waiter = flavour.Lock(client, "k", ttl=5, unavailable_after=0.4)  # a PING every 0.2 s
    assert await waiter.acquire(timeout=0.6) is False
    assert await holder.release() is True
    assert connected() > 0, "idle connections are kept for the next call"
    await result(flavour._close(client))
    assert await soon(lambda: connected() == 0, 5), f"{connected()} left open"


CLOSE_QUIETLY = """
import asyncio, gc, sys
import redis, redis.asyncio as aredis, redislock, redislock.aio

async def main(port):
    client = aredis.Redis(port=port)
    async with redislock.aio.Lock(client, "k", ttl=5):
        pass
    await client.aclose()

client = redis.Redis(port=int(sys.argv[1]))
with redislock.Lock(client, "k", ttl=5):
    pass
client.close()
asyncio.run(main(int(sys.argv[1])))
del client
gc.collect()
"""


def test_closing_the_client_leaves_no_resource_warning(server):
    """Rule 18: with ``-W error::ResourceWarning``, a lock's connections closed with the client
    leave nothing for the garbage collector to warn about (asyncio's connections warn)."""
    done = subprocess.run([sys.executable, "-W", "error::ResourceWarning", "-c", CLOSE_QUIETLY,
                           str(server.port)], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0 and "ResourceWarning" not in done.stderr, done.stderr
