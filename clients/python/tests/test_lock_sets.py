"""Rule 23 (docs/clients.md): lock sets, ``redislock.MultiLock`` and ``redislock.aio.MultiLock``
on real servers. Every body runs in both flavours (see flavours.py)."""

import asyncio
import time

import pytest

import redislock
from redislock import _protocol as p
from conftest import as_map, calls, waiters
from flavours import soon


def lease_left_ms(r, key: str) -> int:
    """What is left of ``key``'s lease on the server, in ms (-1: not held)."""
    info = r.execute_command("LOCK.INFO", key)
    return -1 if info is None else int(as_map(info)[b"ttl"])


def free(r, *keys: str) -> bool:
    return r.exists(*keys) == 0


async def test_a_set_has_a_token_per_key_and_releases(flavour, r):
    keys = ["acct:1", "acct:2", "acct:3"]
    lock = flavour.MultiLock(flavour.client(), keys, ttl=5)
    async with lock:
        assert len(lock.tokens) == 3 and all(isinstance(t, int) for t in lock.tokens)
        assert list(lock.tokens) == sorted(lock.tokens), "issued in the order of the keys"
        for key, token in zip(keys, lock.tokens):
            assert lock.token_for(key) == token
            assert r.execute_command("LOCK.FENCE", key) == token
        assert lock.locked()
        with pytest.raises(KeyError):
            lock.token_for("acct:4")
    assert lock.tokens is None and lock.token_for("acct:1") is None
    assert free(r, *keys)
    assert calls(r, "lock.macquire") == 1 and calls(r, "lock.mrelease") == 1


async def test_try_once_is_not_granted_when_one_key_is_busy_and_takes_nothing(flavour, r):
    r.execute_command("LOCK.ACQUIRE", "b:2", "someone", 60000)
    lock = flavour.MultiLock(flavour.client(), ["b:1", "b:2", "b:3"], ttl=5)
    assert await lock.acquire(blocking=False) is False
    assert calls(r, "lock.macquire") == 1, "one try"
    assert free(r, "b:1", "b:3"), "nothing taken, not even the free keys"
    assert lock.tokens is None and not lock.locked()
    with pytest.raises(redislock.NotAcquired):
        async with lock.hold(timeout=0.2):
            pass
    assert free(r, "b:1", "b:3")


async def test_sets_in_opposite_orders_are_granted_in_turn(flavour, r):
    holder = flavour.MultiLock(flavour.client(), ["x", "y"], ttl=5)
    assert await holder.acquire()
    granted = []

    async def take(keys):
        lock = flavour.MultiLock(flavour.client(), keys, ttl=5)
        assert await lock.acquire(timeout=20)
        granted.append(keys)
        await asyncio.sleep(0.2)
        assert await lock.release() is True
        return lock.tokens is None

    forward = flavour.spawn(take(["x", "y"]))
    assert await soon(lambda: waiters(r, "x") == 1 and waiters(r, "y") == 1)
    backward = flavour.spawn(take(["y", "x"]))
    assert await soon(lambda: waiters(r, "x") == 2 and waiters(r, "y") == 2), "both queued"
    assert await holder.release() is True
    assert await flavour.join(forward, 10) is True
    assert await flavour.join(backward, 10) is True
    assert granted == [["x", "y"], ["y", "x"]], "in turn, in the order they came"
    assert free(r, "x", "y")


async def test_the_watchdog_keeps_a_set_past_several_ttls(flavour, r):
    keys = ["w:1", "w:2"]
    lock = flavour.MultiLock(flavour.client(), keys, ttl=1.0)
    async with lock:
        await asyncio.sleep(3.5)  # over three leases: only renewals keep it
        assert lock.locked() and lock.lost is None
        for key in keys:
            assert r.execute_command("LOCK.FENCE", key) == lock.token_for(key)
        assert calls(r, "lock.extend") >= 2, "each member renewed by LOCK.EXTEND"
    assert free(r, *keys)


async def test_a_member_lost_loses_the_set_once_and_gives_the_rest_back(flavour, r):
    keys = ["m:1", "m:2", "m:3"]
    lost = []
    lock = flavour.MultiLock(flavour.client(), keys, ttl=2.0, on_lost=lost.append,
                             raise_on_lost=False)
    assert await lock.acquire()
    r.execute_command("LOCK.FORCERELEASE", "m:2")
    assert await soon(lambda: lost, 5), "the next renewal of m:2 answers 0"
    assert lost == [p.member_lost(p.LEASE_RAN_OUT, "m:2")]
    assert "m:2" in lock.lost and not lock.locked()
    assert await soon(lambda: free(r, "m:1", "m:3"), 3), "the other members given back"
    with pytest.raises(redislock.Stale):
        await lock.guard("m:1", "SET", "data", "x")
    sent = calls(r, "lock.mrelease")
    assert await lock.release() is False
    assert calls(r, "lock.mrelease") == sent, "known lost: nothing sent"
    await asyncio.sleep(1.0)
    assert len(lost) == 1, "reported once"


async def test_leaving_with_raises_the_loss_naming_the_key(flavour, r):
    lock = flavour.MultiLock(flavour.client(), ["l:1", "l:2"], ttl=2.0)
    with pytest.raises(redislock.LockLost) as raised:
        async with lock:
            r.execute_command("LOCK.FORCERELEASE", "l:1")
            assert await soon(lambda: lock.lost, 5)
    assert raised.value.reason == p.member_lost(p.LEASE_RAN_OUT, "l:1")
    assert await soon(lambda: free(r, "l:1", "l:2"), 3)


async def test_release_answers_true_only_if_every_member_was_held(flavour, r):
    whole = flavour.MultiLock(flavour.client(), ["r:1", "r:2"], ttl=5)
    assert await whole.acquire()
    assert await whole.release() is True
    sent = calls(r, "lock.mrelease")
    assert await whole.release() is False, "twice: False"
    assert calls(r, "lock.mrelease") == sent, "and nothing sent"

    lost = []
    lock = flavour.MultiLock(flavour.client(), ["r:1", "r:2", "r:3"], ttl=5, watchdog=False,
                             on_lost=lost.append, raise_on_lost=False)
    assert await lock.acquire()
    r.execute_command("LOCK.FORCERELEASE", "r:3")
    assert await lock.release() is False
    assert lock.lost == p.GONE_AT_RELEASE
    assert await soon(lambda: lost == [p.GONE_AT_RELEASE], 2)
    assert free(r, "r:1", "r:2"), "the members still held were released"


async def test_arguments_are_checked_before_anything_is_sent(flavour, r):
    c = flavour.client()
    for keys in ([], ["a", "a"], [f"k{i}" for i in range(p.MAX_SET_SIZE + 1)]):
        with pytest.raises(ValueError):
            flavour.MultiLock(c, keys, ttl=5)
    with pytest.raises(TypeError):
        flavour.MultiLock(c, "ab", ttl=5)
    for ttl in (0, 0.0001, float("nan")):
        with pytest.raises(ValueError):
            flavour.MultiLock(c, ["a", "b"], ttl=ttl)
    lock = flavour.MultiLock(c, [f"k{i}" for i in range(p.MAX_SET_SIZE)], ttl=5)
    with pytest.raises(ValueError):
        await lock.acquire(timeout=-2)
    assert calls(r, "lock.macquire") == 0
    async with lock:
        assert len(lock.tokens) == p.MAX_SET_SIZE, "64 keys are fine"
        with pytest.raises(KeyError):
            await lock.guard("nope", "SET", "a", "1")
        with pytest.raises(ValueError):
            await lock.extend(0)
        assert calls(r, "lock.guard") == 0 and calls(r, "lock.extend") == 0


async def test_a_guarded_write_sends_the_token_of_its_key(flavour, r):
    lock = flavour.MultiLock(flavour.client(), ["g:1", "g:2"], ttl=5)
    with pytest.raises(redislock.LockLost):
        async with lock:
            assert await lock.guard("g:1", "SET", "data:1", "one") in (b"OK", "OK", True)
            assert await lock.guard("g:2", "SET", "data:2", "two") in (b"OK", "OK", True)
            assert r.mget("data:1", "data:2") == [b"one", b"two"]
            r.execute_command("LOCK.FORCERELEASE", "g:2")
            r.execute_command("LOCK.ACQUIRE", "g:2", "newer", 60000)
            assert await lock.guard("g:1", "SET", "data:1", "uno") in (b"OK", "OK", True)
            with pytest.raises(redislock.Stale):
                await lock.guard("g:2", "SET", "data:2", "stale")
        # Leaving: the release finds g:2 gone, so the block's work is reported lost.
    assert r.mget("data:1", "data:2") == [b"uno", b"two"]
    assert lock.lost == p.GONE_AT_RELEASE and free(r, "g:1")


async def test_extend_moves_every_members_lease(flavour, r):
    keys = ["e:1", "e:2"]
    lost = []
    lock = flavour.MultiLock(flavour.client(), keys, ttl=1.5, watchdog=False,
                             on_lost=lost.append, raise_on_lost=False)
    assert await lock.acquire()
    assert await lock.extend(10.0) is True
    assert all(lease_left_ms(r, k) > 5000 for k in keys), "10 s from now on every key"
    await asyncio.sleep(2.0)  # past the lease it was granted: the timer moved too
    assert lock.locked() and lock.lost is None
    assert await lock.extend() is True, "by default the ttl set last"
    r.execute_command("LOCK.FORCERELEASE", "e:2")
    assert await lock.extend(5.0) is False
    assert lock.lost == p.member_lost(p.LEASE_RAN_OUT, "e:2")
    assert await soon(lambda: lost and free(r, "e:1"), 3), "said, and e:1 given back"
    sent = calls(r, "lock.extend")
    assert await lock.extend(5.0) is False
    assert calls(r, "lock.extend") == sent, "known lost: nothing sent"
    assert await lock.release() is False
    assert lost == [lock.lost]


async def test_shared_sets_hold_together_and_exclude_a_writer(flavour, r):
    keys = ["s:1", "s:2"]
    a = flavour.MultiLock(flavour.client(), keys, ttl=5, shared=True)
    b = flavour.MultiLock(flavour.client(), list(reversed(keys)), ttl=5, shared=True)
    writer = flavour.MultiLock(flavour.client(), ["s:2"], ttl=5)
    assert await a.acquire(blocking=False) and await b.acquire(blocking=False)
    assert await writer.acquire(blocking=False) is False
    assert await a.release() and await b.release()
    assert await writer.acquire(blocking=False)
    assert await writer.release()


async def test_a_set_waits_for_its_busy_key_in_the_servers_queue(flavour, r):
    r.execute_command("LOCK.ACQUIRE", "q:2", "someone", 60000)
    lock = flavour.MultiLock(flavour.client(), ["q:1", "q:2"], ttl=5)
    waiting = flavour.spawn(lock.acquire(timeout=10))
    assert await soon(lambda: waiters(r, "q:2") == 1)
    assert free(r, "q:1"), "a waiting set takes nothing"
    started = time.monotonic()
    r.execute_command("LOCK.RELEASE", "q:2", "someone")
    assert await flavour.join(waiting, 5) is True
    assert time.monotonic() - started < 2
    assert calls(r, "lock.macquire") == 1, "one blocking call, no polling"
    assert await lock.release() is True


async def test_a_session_set_ends_with_its_connection(flavour, r):
    lost = []
    lock = flavour.MultiLock(flavour.client(), ["n:1", "n:2"], ttl=2.0, session=True,
                             on_lost=lost.append, raise_on_lost=False)
    assert await lock.acquire()
    listed = [c for c in r.client_list() if c.get("cmd") == "lock.macquire"]
    assert len(listed) == 1, "the set's own connection"
    await asyncio.sleep(1.0)  # renewed on it at least once (every 0.67 s)
    assert lock.locked() and r.exists("n:1", "n:2") == 2
    r.client_kill_filter(_id=listed[0]["id"])
    assert free(r, "n:1", "n:2"), "the server ended every member with it"
    assert await soon(lambda: lost, 5)
    assert lost[0].startswith("n:1: " + p.SESSION_CLOSED)
    assert await lock.release() is False
    await asyncio.sleep(0.3)
    assert len(lost) == 1
