"""redislock.Lock and redislock.aio.Lock (and their Semaphores) on real servers.

Every test is one body run twice by the ``flavour`` fixture (see flavours.py): threads with
``redislock.Lock``, tasks with ``redislock.aio.Lock``. So a behaviour cannot exist in one
flavour and not the other; "another thread" below is another task in asyncio."""

import asyncio
import os
import signal
import threading
import time

import pytest
import redis

import redislock
from redislock import _protocol as p
from conftest import Server, as_map, calls, idle_pool, stat, waiters
from flavours import FLAVOURS, after, result, soon


async def test_with_gives_a_token_and_releases(flavour, r):
    lock = flavour.Lock(flavour.client(), "order:42", ttl=5)
    async with lock:
        assert isinstance(lock.token, int) and lock.token > 0
        assert r.execute_command("LOCK.FENCE", "order:42") == lock.token
        assert lock.locked()
    assert lock.token is None
    assert r.exists("order:42") == 0


async def test_waits_in_the_servers_queue_without_polling(flavour, r):
    first = flavour.Lock(flavour.client(), "job", ttl=5)
    await first.acquire()
    second = flavour.Lock(flavour.client(), "job", ttl=5)
    waiter = flavour.spawn(second.acquire())
    assert await soon(lambda: r.info("clients")["blocked_clients"] == 1)
    await asyncio.sleep(0.3)
    await first.release()
    assert await flavour.join(waiter, 5) is True
    assert calls(r, "lock.acquire") == 2, "one blocking call each, no retries"
    await second.release()


async def test_threading_lock_conventions(flavour):
    a = flavour.Lock(flavour.client(), "k", ttl=5)
    assert await a.acquire()
    b = flavour.Lock(flavour.client(), "k", ttl=5)
    assert await b.acquire(blocking=False) is False
    started = time.monotonic()
    assert await b.acquire(timeout=0.3) is False
    assert 0.25 < time.monotonic() - started < 3
    with pytest.raises(redislock.NotAcquired):
        async with b.hold(timeout=0.2):
            pass
    assert await a.release() is True


async def test_a_timeout_of_0_is_one_try(flavour, r):
    """As ``threading.Lock.acquire(timeout=0)``: granted at once if free, else False at once
    (asyncio's ``wait_for(..., 0)`` used to give up before trying)."""
    free = flavour.Lock(flavour.client(), "k0", ttl=5)
    assert await free.acquire(timeout=0) is True
    other = flavour.Lock(flavour.client(), "k0", ttl=5)
    asked, queued = calls(r, "lock.acquire"), stat(r, "exclusive_waits")
    assert await other.acquire(timeout=0) is False
    assert calls(r, "lock.acquire") == asked + 1, "one try"
    assert stat(r, "exclusive_waits") == queued, "that never joined the queue"
    assert await free.release()


async def test_hold_raises_when_not_granted_in_time_or_at_once(flavour, r):
    r.execute_command("LOCK.ACQUIRE", "held", "someone", 60000)
    a = flavour.client()
    with pytest.raises(redislock.NotAcquired):
        async with flavour.Lock(a, "held", ttl=5).hold(timeout=0.2):
            pass
    asked, queued = calls(r, "lock.acquire"), stat(r, "exclusive_waits")
    with pytest.raises(redislock.NotAcquired):
        async with flavour.Lock(a, "held", ttl=5).hold(blocking=False):
            pass
    assert calls(r, "lock.acquire") == asked + 1, "blocking=False asks once"
    assert stat(r, "exclusive_waits") == queued, "and never joins the queue"
    async with flavour.Lock(a, "free", ttl=5).hold(blocking=False) as free:
        assert free.token is not None


async def test_a_short_socket_timeout_does_not_break_a_long_wait(flavour):
    holder = flavour.Lock(flavour.client(), "slow", ttl=5)
    await holder.acquire()
    impatient = flavour.client(socket_timeout=0.2)
    releasing = flavour.spawn(after(1.0, holder.release))
    lock = flavour.Lock(impatient, "slow", ttl=5)
    assert await lock.acquire(timeout=5)
    await lock.release()
    assert await flavour.join(releasing, 5) is True


async def test_a_waiter_waits_while_the_watchdog_keeps_the_hold(flavour, r):
    r.set("stock", 5)
    # Renewed every 0.5 s: a renewal may come ~1 s late before the lease ends.
    first = flavour.Lock(flavour.client(), "job", ttl=1.5)
    async with first:
        assert await first.guard("DECRBY", "stock", 1) == 4
        second = flavour.Lock(flavour.client(socket_timeout=0.2), "job", ttl=0.3)
        waiting = flavour.spawn(second.acquire(timeout=10))
        await asyncio.sleep(3.2)  # more than two leases: only renewals keep the hold
        assert r.execute_command("LOCK.FENCE", "job") == first.token
        assert not waiting.done()
    assert await flavour.join(waiting, 5)
    assert second.token > 0
    await second.release()
    assert calls(r, "lock.extend") >= 2, "held past two leases: renewed twice at least"


async def test_the_watchdog_renews_and_stops_with_release(flavour, r):
    # Renewed every 0.5 s: a renewal may come ~1 s late before the lease ends.
    lock = flavour.Lock(flavour.client(), "w", ttl=1.5)
    async with lock:
        await asyncio.sleep(3.2)  # more than two leases: only renewals keep the hold
        assert r.execute_command("LOCK.FENCE", "w") == lock.token
    extends = calls(r, "lock.extend")
    assert extends >= 2, "held past two leases: renewed twice at least"
    await asyncio.sleep(1.0)  # two renewal periods
    assert calls(r, "lock.extend") == extends, "no renewal after release"


async def test_a_lost_hold_is_signalled_once_and_raises_on_exit(flavour, r):
    reasons = []
    # Renewed every 0.5 s: the hold outlives a renewal ~1 s late, until it is force-released.
    lock = flavour.Lock(flavour.client(), "w", ttl=1.5, on_lost=reasons.append)
    with pytest.raises(redislock.LockLost):
        async with lock:
            other = await flavour.join(flavour.spawn(lock.acquire(timeout=0.1)), 5)
            assert other is False, "another thread waits for this hold"
            r.execute_command("LOCK.FORCERELEASE", "w")
            assert await soon(lambda: reasons, 5), "the next renewal finds it gone"
            assert not lock.locked()
    assert len(reasons) == 1, reasons
    assert "ran out" in reasons[0]


async def test_on_lost_runs_to_its_end_when_the_hold_is_released_meanwhile(flavour, r):
    """The watchdog is stopped, never killed, by release (an asyncio release used to cancel
    the task, cutting an awaited on_lost short)."""
    done = []
    released = []  # on_lost runs until the test says the hold was released
    lock = flavour.Lock(flavour.client(), "w", ttl=1.5, raise_on_lost=False,
                        on_lost=flavour.gated(lambda: released, done.append))
    async with lock:
        r.execute_command("LOCK.FORCERELEASE", "w")
        assert await soon(lambda: lock.lost, 5), "the next renewal (every 0.5 s) finds it gone"
    assert not done, "the release did not wait for on_lost"
    released.append(True)
    assert await soon(lambda: done, 5), "on_lost ran to its end after the release"
    assert len(done) == 1 and "ran out" in done[0]


async def test_without_watchdog_the_lease_is_fixed(flavour):
    lock = flavour.Lock(flavour.client(), "w", ttl=0.2, watchdog=False)
    with pytest.raises(redislock.LockLost):
        async with lock:
            await asyncio.sleep(0.4)
    assert lock.lost == p.FIXED_LEASE_ENDED, "lost at its end, by the timer"


async def test_guard_writes_only_while_held(flavour, r):
    r.set("{sku:9}:stock", 10)
    lock = flavour.Lock(flavour.client(), "{sku:9}:lock", ttl=30, watchdog=False,
                        raise_on_lost=False)
    async with lock:
        assert await lock.guard("DECRBY", "{sku:9}:stock", 1) == 9
        # Then the lease is cut to 100 ms (as if this holder had been paused that long).
        assert r.execute_command("LOCK.EXTEND", "{sku:9}:lock", lock.owner, 100) == 1
        await asyncio.sleep(0.3)
        with pytest.raises(redislock.Stale):
            await lock.guard("DECRBY", "{sku:9}:stock", 1)
    assert r.get("{sku:9}:stock") == b"9"
    with pytest.raises(redislock.Stale):
        await lock.guard("GET", "{sku:9}:stock")


async def test_shared_locks_and_semaphores(flavour, r):
    r1 = flavour.Lock(flavour.client(), "doc", ttl=5, shared=True)
    r2 = flavour.Lock(flavour.client(), "doc", ttl=5, shared=True)
    writer = flavour.Lock(flavour.client(), "doc", ttl=5)
    async with r1, r2:
        assert r1.token != r2.token
        assert await writer.acquire(blocking=False) is False
    async with writer:
        pass
    a = flavour.Semaphore(flavour.client(), "pool", limit=2, ttl=5)
    b = flavour.Semaphore(flavour.client(), "pool", limit=2, ttl=5)
    c = flavour.Semaphore(flavour.client(), "pool", limit=2, ttl=5)
    async with a, b:
        assert await c.acquire(blocking=False) is False
        with pytest.raises(redislock.Stale, match="semaphore"):
            await a.guard("GET", "x")
    assert await c.acquire(blocking=False) is True
    await c.release()
    one = flavour.client()
    async with flavour.Semaphore(one, "pool1", limit=1, ttl=5):
        assert not await flavour.Semaphore(one, "pool1", limit=1, ttl=5).acquire(blocking=False)
    with pytest.raises(ValueError):
        flavour.Semaphore(flavour.client(), "pool", limit=2, permits=3)
    x, y = flavour.client(), flavour.client()
    with pytest.raises(redislock.Deadlock):
        async with flavour.Lock(x, "doc2", ttl=5, shared=True, owner="x"):
            async with flavour.Lock(y, "doc2", ttl=5, shared=True):
                await flavour.Lock(x, "doc2", ttl=5, owner="x").acquire(blocking=False)


async def _take_and_give(lock) -> bool:
    got = await lock.acquire(timeout=2)
    if got:
        await lock.release()
    return got


async def test_reentrant_nesting_keeps_one_hold_and_threads_do_not_share(flavour, r):
    lock = flavour.Lock(flavour.client(), "re", ttl=5, reentrant=True)
    async with lock:
        token = lock.token
        async with lock:
            assert lock.token == token
        assert lock.locked(), "still held after the inner block"
        other = await flavour.join(flavour.spawn(lock.acquire(timeout=0.2)), 5)
        assert other is False, "another thread does not share this hold"
    assert r.exists("re") == 0
    # The threading flavour used to keep its RLock taken once per nesting level.
    assert await flavour.join(flavour.spawn(_take_and_give(lock)), 5) is True, \
        "once released, the object is free for another thread"


async def test_session_holds_end_with_their_connection(flavour, r):
    lock = flavour.Lock(flavour.client(), "s", ttl=60, session=True)
    await lock.acquire()
    holders = as_map(r.execute_command("LOCK.INFO", "s"))[b"holders"]
    assert as_map(holders[0])[b"session"] is not None
    next_lock = flavour.Lock(flavour.client(), "s", ttl=5)
    waiting = flavour.spawn(next_lock.acquire(timeout=10))
    assert await soon(lambda: r.info("clients")["blocked_clients"] == 1)
    started = time.monotonic()
    # What the death of this process does to its connection:
    await result(lock._session_conn.disconnect())
    assert await flavour.join(waiting, 10) is True and time.monotonic() - started < 5
    assert stat(r, "session_releases") == 1
    # Released, so that no watchdog outlives the test (and its server) to log in another one.
    assert await next_lock.release() is True
    assert await lock.release() is False and "gone when released" in lock.lost


async def test_durable_grants_need_their_replicas(flavour, r):
    lock = flavour.Lock(flavour.client(), "d", ttl=5, replicas=1, replicas_timeout=0.2)
    assert await lock.acquire() is False, "no replica: no grant"
    assert r.exists("d") == 0, "and nothing left held"
    master = Server("--repl-diskless-sync-delay", "0")
    replica = Server("--replicaof", "127.0.0.1", str(master.port))
    try:
        rc = replica.client()
        assert await soon(lambda: rc.info("replication")["master_link_status"] == "up", 20)
        # A loopback replica acks in milliseconds; 5 s (not the default 1 s) is the margin
        # for a loaded machine, where one run of 1 s ran out.
        durable = flavour.Lock(flavour.client(master), "d", ttl=5, replicas=1, replicas_timeout=5)
        async with durable:
            assert replica.client().execute_command("LOCK.FENCE", "d") == durable.token
    finally:
        replica.stop()
        master.stop()


async def test_a_durable_lease_starts_at_the_grant_not_after_its_wait(flavour):
    """Rule 15: the lease of a durable grant counts from the grant's reply, not from the end of
    its ``WAIT`` (here 1.5 s long: the replica is frozen meanwhile); a fixed lease is lost at
    the lease's end (by then, the server's lease has ended)."""
    master = Server("--repl-diskless-sync-delay", "0")
    replica = Server("--replicaof", "127.0.0.1", str(master.port))
    try:
        rc = replica.client()
        assert await soon(lambda: rc.info("replication")["master_link_status"] == "up", 20)
        rc.close()
        lost = []
        lock = flavour.Lock(flavour.client(master), "d", ttl=3, replicas=1, replicas_timeout=10,
                            watchdog=False, raise_on_lost=False,
                            on_lost=lambda reason: lost.append(time.monotonic()))
        os.kill(replica.proc.pid, signal.SIGSTOP)
        thawing = threading.Timer(1.5, os.kill, (replica.proc.pid, signal.SIGCONT))
        thawing.start()
        asked = time.monotonic()
        assert await lock.acquire(), "granted once the replica acks, 1.5 s after the grant"
        assert await soon(lambda: lost, 6)
        # At the grant's reply + 3 s (soon after asking); from the WAIT's end: 4.5 s or later.
        assert lost[0] - asked <= 3 + 0.4, f"lost {lost[0] - asked:.2f} s after asking"
    finally:
        os.kill(replica.proc.pid, signal.SIGCONT)
        replica.stop()
        master.stop()


async def test_metrics_hooks(flavour):
    events = []
    hook = lambda name, fields: events.append((name, fields))  # noqa: E731
    async with flavour.Lock(flavour.client(), "m", ttl=5, on_event=hook):
        pass
    assert [e[0] for e in events] == ["acquired", "released"]
    assert events[0][1]["wait_s"] >= 0 and events[1][1]["held_s"] >= 0


async def _sell(flavour, sold, stopped) -> None:
    """A worker process of the inventory scenario: sell one item per hold, through guard."""
    r = flavour.client()
    mine = 0
    while True:
        lock = flavour.Lock(r, "{sku:9}:lock", ttl=0.3, raise_on_lost=False)
        async with lock:
            stock = int(await result(r.get("{sku:9}:stock")))
            if stock <= 0:
                break
            time.sleep(0.002)  # the parent may SIGSTOP us here, past the lease
            try:
                await lock.guard("DECRBY", "{sku:9}:stock", 1)
                mine += 1
            except redislock.Stale:
                stopped.value += 1
    sold.put(mine)


def _seller(name: str, port: int, sold, stopped) -> None:
    driver = FLAVOURS[name](port)  # this process's own (the parent's clients stay the parent's)
    driver.run(_sell(driver, sold, stopped))


async def test_inventory_100_in_stock_16_processes_exactly_100_sold(flavour, r):
    import multiprocessing as mp

    ctx = mp.get_context("fork")
    r.set("{sku:9}:stock", 100)
    sold = ctx.Queue()
    stopped = ctx.Value("i", 0)
    workers = [ctx.Process(target=_seller, args=(flavour.name, flavour.port, sold, stopped))
               for _ in range(16)]
    for w in workers:
        w.start()
    rng = 7
    while any(w.is_alive() for w in workers):
        rng = (rng * 1103515245 + 12345) % 2**31
        victim = workers[rng % 16]
        if victim.is_alive():
            os.kill(victim.pid, signal.SIGSTOP)  # a GC pause past the 0.3 s lease
            time.sleep(0.4)
            os.kill(victim.pid, signal.SIGCONT)
        time.sleep(0.05)
    total = sum(sold.get(timeout=5) for _ in workers)
    assert int(r.get("{sku:9}:stock")) == 0
    assert total == 100, f"sold {total}"


async def test_a_connection_error_while_waiting_is_retried_with_the_same_owner(flavour, r):
    holder = flavour.Lock(flavour.client(), "retry", ttl=5)
    await holder.acquire()
    waiter = flavour.Lock(flavour.client(), "retry", ttl=5)
    waiting = flavour.spawn(waiter.acquire(timeout=10))
    assert await soon(lambda: r.info("clients")["blocked_clients"] == 1)
    # The waiter's link breaks (and the holder's: its watchdog and release reconnect).
    r.execute_command("CLIENT", "KILL", "TYPE", "normal", "SKIPME", "yes")
    assert await soon(lambda: r.info("clients")["blocked_clients"] == 1), "it waits again"
    await holder.release()
    assert await flavour.join(waiting, 10) is True
    assert r.execute_command("LOCK.FENCE", "retry") == waiter.token
    await waiter.release()


# -- small pools, failing watchdogs and abandoned waits ---------------------------------------


async def test_the_watchdog_keeps_a_hold_on_a_pool_of_two(flavour, r):
    small = flavour.client(max_connections=2)
    async with flavour.Lock(small, "k", 3.0):
        pass
    lost = []
    # Renewed every 0.5 s: a renewal may come ~1 s late before the lease ends.
    async with flavour.Lock(small, "k", 1.5, on_lost=lost.append) as lock:
        granted = time.monotonic()
        while time.monotonic() - granted < 2.0:  # past its lease: only the watchdog keeps it
            await asyncio.sleep(0.25)
            assert r.execute_command("LOCK.FENCE", "k") == lock.token
    assert lost == []
    assert idle_pool(small)


def _watchdog_client(r: redis.Redis) -> int:
    """The id of the connection that renews leases (the only one whose last command is that)."""
    return next(c["id"] for c in r.client_list() if c["cmd"] == "lock.extend")


async def test_a_watchdog_that_cannot_reconnect_loses_the_hold_and_says_so(flavour, r):
    small = flavour.client(max_connections=2)
    for _ in range(3):
        async with flavour.Lock(small, "k", 3.0):
            pass
    lost = []
    lock = flavour.Lock(small, "k", 0.6, on_lost=lost.append)
    with pytest.raises(redislock.LockLost, match="could not be reached"):
        async with lock:
            assert await soon(lambda: calls(r, "lock.extend") >= 1, 2), "a renewal"
            r.config_set("maxclients", 1)  # the server refuses every new connection
            r.client_kill_filter(_id=_watchdog_client(r))
            assert await soon(lambda: lost, 2), "lost when the lease ends"
            assert not lock.locked()
    r.config_set("maxclients", 10000)
    assert len(lost) == 1 and "could not be reached" in lost[0]


async def test_an_unexpected_watchdog_failure_loses_the_hold_at_once(flavour, monkeypatch):
    def broken(*args):
        raise RuntimeError("injected")

    lost = []
    lock = flavour.Lock(flavour.client(), "k", 3.0, on_lost=lost.append)
    with pytest.raises(redislock.LockLost, match="injected"):
        async with lock:
            monkeypatch.setattr(redislock._schedule.Entry, "renewal", broken)
            started = time.monotonic()
            assert await soon(lambda: lost, 2.5), "the first renewal (after 1 s) fails: lost then"
            assert time.monotonic() - started < 2.0 and not lock.locked()
            with pytest.raises(redislock.Stale, match="lost"):
                await lock.guard("SET", "x", 1)  # the lease still runs, but the hold was given up
    assert len(lost) == 1 and "injected" in lost[0]


async def test_an_abandoned_wait_leaves_the_queue_and_gives_its_connection_back(flavour, r):
    """A wait interrupted (threads: an exception from a signal handler, as KeyboardInterrupt)
    or cancelled (tasks: ``wait_for``) mid-call."""
    small = flavour.client(max_connections=2)
    holder = flavour.Lock(flavour.client(), "h", ttl=10)
    await holder.acquire()
    for _ in range(5):
        await flavour.abandoned_wait(small, "h")
        assert await soon(lambda: waiters(r, "h") == 0, 2), "the waiter left the queue"
    assert await result(small.ping()) and idle_pool(small)
    assert await holder.release()
    assert r.exists("h") == 0, "the release granted nobody"
    assert await flavour.Lock(small, "h", ttl=5).acquire(blocking=False)


async def test_lock_cycles_on_a_pool_of_two(flavour, r):
    small = flavour.client(max_connections=2)
    for _ in range(3):
        renewals = calls(r, "lock.extend")
        async with flavour.Lock(small, "c", ttl=1.5) as lock:  # renewed every 0.5 s
            assert await soon(lambda: calls(r, "lock.extend") > renewals, 5), "a renewal"
            assert await result(small.execute_command("LOCK.FENCE", "c")) == lock.token
        async with flavour.Lock(small, "s", ttl=5, session=True) as session:
            assert await result(small.execute_command("LOCK.FENCE", "s")) == session.token
        async with flavour.Lock(small, "h", ttl=5, owner="holder"):
            assert await flavour.Lock(small, "h", ttl=5).acquire(timeout=0.1) is False
            await flavour.abandoned_wait(small, "h")
    assert await result(small.ping())
    for _ in range(10):
        async with flavour.Lock(small, "c", ttl=5, session=True), flavour.Lock(small, "d", ttl=5):
            pass
    assert idle_pool(small)
