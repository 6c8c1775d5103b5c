"""redislock.Lock and Semaphore on real servers."""

import os
import signal
import threading
import time

import pytest
import redis

import redislock
from conftest import Server, as_map, calls, eventually, idle_pool, stat, waiters


def test_with_gives_a_token_and_releases(r):
    lock = redislock.Lock(r, "order:42", ttl=5)
    with lock:
        assert isinstance(lock.token, int) and lock.token > 0
        assert r.execute_command("LOCK.FENCE", "order:42") == lock.token
        assert lock.locked()
    assert lock.token is None
    assert r.exists("order:42") == 0


def test_waits_in_the_servers_queue_without_polling(server, r):
    first = redislock.Lock(r, "job", ttl=5)
    first.acquire()
    got = []
    second = redislock.Lock(server.client(), "job", ttl=5)
    waiter = threading.Thread(target=lambda: got.append(second.acquire()))
    waiter.start()
    assert eventually(lambda: r.info("clients")["blocked_clients"] == 1)
    time.sleep(0.3)
    first.release()
    waiter.join(5)
    assert got == [True]
    assert calls(r, "lock.acquire") == 2, "one blocking call each, no retries"
    second.release()


def test_threading_lock_conventions(server, r):
    a = redislock.Lock(r, "k", ttl=5)
    assert a.acquire()
    b = redislock.Lock(server.client(), "k", ttl=5)
    assert b.acquire(blocking=False) is False
    started = time.monotonic()
    assert b.acquire(timeout=0.3) is False
    assert 0.25 < time.monotonic() - started < 3
    with pytest.raises(redislock.NotAcquired):
        with b.hold(timeout=0.2):
            pass
    assert a.release() is True
    with pytest.raises(RuntimeError):
        a.release()


def test_a_short_socket_timeout_does_not_break_a_long_wait(server, r):
    holder = redislock.Lock(r, "slow", ttl=5)
    holder.acquire()
    impatient = server.client(socket_timeout=0.2)
    threading.Timer(1.0, holder.release).start()
    lock = redislock.Lock(impatient, "slow", ttl=5)
    assert lock.acquire(timeout=5)
    lock.release()


def test_the_watchdog_renews_and_stops_with_release(r):
    lock = redislock.Lock(r, "w", ttl=0.6)
    with lock:
        time.sleep(1.5)  # more than two leases
        assert r.execute_command("LOCK.FENCE", "w") == lock.token
    extends = calls(r, "lock.extend")
    assert extends >= 2
    time.sleep(0.5)
    assert calls(r, "lock.extend") == extends, "no renewal after release"


def test_a_lost_hold_is_signalled_once_and_raises_on_exit(r):
    reasons = []
    lock = redislock.Lock(r, "w", ttl=0.3, on_lost=reasons.append)
    with pytest.raises(redislock.LockLost):
        with lock:
            r.execute_command("LOCK.FORCERELEASE", "w")
            assert eventually(lambda: reasons, 2)
            assert not lock.locked()
    assert len(reasons) == 1, reasons
    assert "ran out" in reasons[0]


def test_without_watchdog_the_lease_is_fixed(r):
    lock = redislock.Lock(r, "w", ttl=0.2, watchdog=False)
    with pytest.raises(redislock.LockLost):
        with lock:
            time.sleep(0.4)
    assert lock.lost and "gone when released" in lock.lost


def test_guard_writes_only_while_held(r):
    r.set("{sku:9}:stock", 10)
    lock = redislock.Lock(r, "{sku:9}:lock", ttl=0.2, watchdog=False, raise_on_lost=False)
    with lock:
        assert lock.guard("DECRBY", "{sku:9}:stock", 1) == 9
        time.sleep(0.3)
        with pytest.raises(redislock.Stale):
            lock.guard("DECRBY", "{sku:9}:stock", 1)
    assert r.get("{sku:9}:stock") == b"9"
    with pytest.raises(redislock.Stale):
        lock.guard("GET", "{sku:9}:stock")


def test_shared_locks_and_semaphores(server, r):
    r1 = redislock.Lock(r, "doc", ttl=5, shared=True)
    r2 = redislock.Lock(server.client(), "doc", ttl=5, shared=True)
    writer = redislock.Lock(server.client(), "doc", ttl=5)
    with r1, r2:
        assert r1.token != r2.token
        assert writer.acquire(blocking=False) is False
    with writer:
        pass
    a = redislock.Semaphore(r, "pool", limit=2, ttl=5)
    b = redislock.Semaphore(server.client(), "pool", limit=2, ttl=5)
    c = redislock.Semaphore(server.client(), "pool", limit=2, ttl=5)
    with a, b:
        assert c.acquire(blocking=False) is False
    assert c.acquire(blocking=False) is True
    c.release()
    with pytest.raises(ValueError):
        redislock.Semaphore(r, "pool", limit=2, permits=3)
    with pytest.raises(redislock.Deadlock):
        with redislock.Lock(r, "doc2", ttl=5, shared=True, owner="x"):
            with redislock.Lock(server.client(), "doc2", ttl=5, shared=True):
                redislock.Lock(r, "doc2", ttl=5, owner="x").acquire(blocking=False)


def test_reentrant_nesting_keeps_one_hold_and_threads_do_not_share(server, r):
    lock = redislock.Lock(r, "re", ttl=5, reentrant=True)
    with lock:
        token = lock.token
        with lock:
            assert lock.token == token
        assert lock.locked(), "still held after the inner block"
        other = []
        t = threading.Thread(target=lambda: other.append(lock.acquire(timeout=0.2)))
        t.start()
        t.join()
        assert other == [False], "another thread does not share this hold"
    assert r.exists("re") == 0


def test_session_holds_end_with_their_connection(server, r):
    lock = redislock.Lock(r, "s", ttl=60, session=True)
    lock.acquire()
    holders = as_map(r.execute_command("LOCK.INFO", "s"))[b"holders"]
    assert as_map(holders[0])[b"session"] is not None
    next_lock = redislock.Lock(server.client(), "s", ttl=5)
    got = []
    t = threading.Thread(target=lambda: got.append(next_lock.acquire(timeout=10)))
    t.start()
    assert eventually(lambda: r.info("clients")["blocked_clients"] == 1)
    started = time.monotonic()
    lock._session_conn.disconnect()  # what the death of this process does to its connection
    t.join(10)
    assert got == [True] and time.monotonic() - started < 5
    assert stat(r, "session_releases") == 1


def test_durable_grants_need_their_replicas(r):
    lock = redislock.Lock(r, "d", ttl=5, replicas=1, replicas_timeout=0.2)
    assert lock.acquire() is False, "no replica: no grant"
    assert r.exists("d") == 0, "and nothing left held"
    master = Server()
    replica = Server("--replicaof", "127.0.0.1", str(master.port))
    try:
        m = master.client()
        rc = replica.client()
        assert eventually(lambda: rc.info("replication")["master_link_status"] == "up", 20)
        with redislock.Lock(m, "d", ttl=5, replicas=1) as durable:
            assert replica.client().execute_command("LOCK.FENCE", "d") == durable.token
    finally:
        replica.stop()
        master.stop()


def test_metrics_hooks(r):
    events = []
    with redislock.Lock(r, "m", ttl=5, on_event=lambda name, fields: events.append((name, fields))):
        pass
    assert [e[0] for e in events] == ["acquired", "released"]
    assert events[0][1]["wait_s"] >= 0 and events[1][1]["held_s"] >= 0


def _sell(port: int, sold, stopped):
    """A worker process of the inventory scenario: sell one item per hold, through guard."""
    r = redis.Redis(port=port)
    mine = 0
    while True:
        lock = redislock.Lock(r, "{sku:9}:lock", ttl=0.3, raise_on_lost=False)
        with lock:
            stock = int(r.get("{sku:9}:stock"))
            if stock <= 0:
                break
            time.sleep(0.002)  # the parent may SIGSTOP us here, past the lease
            try:
                lock.guard("DECRBY", "{sku:9}:stock", 1)
                mine += 1
            except redislock.Stale:
                stopped.value += 1
    sold.put(mine)


def test_inventory_100_in_stock_16_processes_exactly_100_sold(server, r):
    import multiprocessing as mp

    ctx = mp.get_context("fork")
    r.set("{sku:9}:stock", 100)
    sold = ctx.Queue()
    stopped = ctx.Value("i", 0)
    workers = [ctx.Process(target=_sell, args=(server.port, sold, stopped)) for _ in range(16)]
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


def test_a_connection_error_while_waiting_is_retried_with_the_same_owner(server, r):
    holder = redislock.Lock(r, "retry", ttl=5)
    holder.acquire()
    waiter = redislock.Lock(server.client(), "retry", ttl=5)
    got = []
    t = threading.Thread(target=lambda: got.append(waiter.acquire(timeout=10)))
    t.start()
    assert eventually(lambda: r.info("clients")["blocked_clients"] == 1)
    r.execute_command("CLIENT", "KILL", "TYPE", "normal", "SKIPME", "yes")  # the waiter's link breaks
    assert eventually(lambda: r.info("clients")["blocked_clients"] == 1), "it waits again"
    holder.release()
    t.join(10)
    assert got == [True]
    assert r.execute_command("LOCK.FENCE", "retry") == waiter.token
    waiter.release()


# -- small pools, failing watchdogs and interrupted waits -------------------------------------


def test_the_watchdog_keeps_a_hold_on_a_pool_of_two(server, r):
    small = server.client(max_connections=2)
    with redislock.Lock(small, "k", 3.0):
        pass
    lost = []
    with redislock.Lock(small, "k", 0.3, on_lost=lost.append) as lock:
        for _ in range(5):  # 1.0 s, more than three leases: only the watchdog keeps the hold
            time.sleep(0.2)
            assert r.execute_command("LOCK.FENCE", "k") == lock.token
    assert lost == []
    assert idle_pool(small)


def _watchdog_client(r: redis.Redis) -> int:
    """The id of the connection that renews leases (the only one whose last command is that)."""
    return next(c["id"] for c in r.client_list() if c["cmd"] == "lock.extend")


def test_a_watchdog_that_cannot_reconnect_loses_the_hold_and_says_so(server, r):
    small = server.client(max_connections=2)
    for _ in range(3):
        with redislock.Lock(small, "k", 3.0):
            pass
    lost = []
    lock = redislock.Lock(small, "k", 0.6, on_lost=lost.append)
    with pytest.raises(redislock.LockLost, match="could not be reached"):
        with lock:
            assert eventually(lambda: calls(r, "lock.extend") >= 1, 2), "a renewal"
            r.config_set("maxclients", 1)  # the server refuses every new connection
            r.client_kill_filter(_id=_watchdog_client(r))
            assert eventually(lambda: lost, 2), "lost when the lease ends"
            assert not lock.locked()
    r.config_set("maxclients", 10000)
    assert len(lost) == 1 and "could not be reached" in lost[0]


def test_an_unexpected_watchdog_failure_loses_the_hold_at_once(r, monkeypatch):
    def broken(*args):
        raise RuntimeError("injected")

    lost = []
    lock = redislock.Lock(r, "k", 3.0, on_lost=lost.append)
    with pytest.raises(redislock.LockLost, match="injected"):
        with lock:
            monkeypatch.setattr(redislock._protocol, "extend_args", broken)
            started = time.monotonic()
            assert eventually(lambda: lost, 2.5), "the first renewal (after 1 s) fails: lost then"
            assert time.monotonic() - started < 2.0 and not lock.locked()
            with pytest.raises(redislock.Stale, match="lost"):
                lock.guard("SET", "x", 1)  # the lease still runs, but the hold was given up
    assert len(lost) == 1 and "injected" in lost[0]


class Interrupted(Exception):
    """What the SIGALRM handler raises in the waiting thread (as KeyboardInterrupt would)."""


def _interrupt(signum, frame):
    raise Interrupted()


def _interrupted_wait(client: redis.Redis, key: str) -> None:
    """A blocking acquire of the held ``key``, interrupted after 0.2 s by a signal handler."""
    previous = signal.signal(signal.SIGALRM, _interrupt)
    try:
        signal.setitimer(signal.ITIMER_REAL, 0.2)
        with pytest.raises(Interrupted):
            redislock.Lock(client, key, ttl=5).acquire(timeout=5)
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


def test_an_interrupted_wait_leaves_the_queue_and_gives_its_connection_back(server, r):
    small = server.client(max_connections=2)
    holder = redislock.Lock(r, "h", ttl=10)
    holder.acquire()
    for _ in range(3):
        _interrupted_wait(small, "h")
        assert eventually(lambda: waiters(r, "h") == 0, 2), "the waiter left the queue"
    assert small.ping() and idle_pool(small)
    assert holder.release()
    assert r.exists("h") == 0, "the release granted nobody"
    assert redislock.Lock(small, "h", ttl=5).acquire(blocking=False)


def test_lock_cycles_on_a_pool_of_two(server, r):
    small = server.client(max_connections=2)
    for _ in range(3):
        with redislock.Lock(small, "c", ttl=0.3) as lock:
            time.sleep(0.4)  # renewed by the watchdog
            assert small.execute_command("LOCK.FENCE", "c") == lock.token
        with redislock.Lock(small, "s", ttl=5, session=True) as session:
            assert small.execute_command("LOCK.FENCE", "s") == session.token
        with redislock.Lock(r, "h", ttl=5):
            assert redislock.Lock(small, "h", ttl=5).acquire(timeout=0.1) is False
            _interrupted_wait(small, "h")
    assert small.ping()
    for _ in range(10):
        with redislock.Lock(small, "c", ttl=5, session=True), redislock.Lock(small, "d", ttl=5):
            pass
    assert idle_pool(small)
