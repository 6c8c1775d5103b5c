"""Rule 20 (docs/clients.md): ``extend(ttl)`` sends ``LOCK.EXTEND key owner ttl TOKEN token``
now, so the lease ends ttl from now and the watchdog, if on, renews by that ttl; True while
the hold is live, False (and lost, once) when the server answers 0, False with nothing sent
for a hold known lost or released (rule 16). Each body runs in both flavours."""

import asyncio
import time

import pytest

from conftest import as_map, calls
from flavours import soon
from proxy import Proxy
import redislock
from redislock import _protocol as p


def lease_left_ms(r, key: str) -> int:
    """What is left of ``key``'s lease on the server, in ms (-1: not held)."""
    info = r.execute_command("LOCK.INFO", key)
    return -1 if info is None else int(as_map(info)[b"ttl"])


async def test_extend_of_a_live_hold_moves_its_lease(flavour, r):
    lock = flavour.Lock(flavour.client(), "e", ttl=1.5, watchdog=False)
    async with lock:
        assert await lock.extend(10.0) is True
        assert lease_left_ms(r, "e") > 5000, "10 s from now (5 s of margin), not 1.5 s"
        await asyncio.sleep(2.0)  # past the lease it was granted: the timer moved too
        assert lock.locked() and lock.lost is None
        assert await lock.extend(1.0) is True, "shorter than before"
        assert 0 < lease_left_ms(r, "e") <= 1000
        assert await lock.extend() is True, "by default the hold's ttl (the last one set)"


async def test_the_watchdog_renews_by_the_extended_ttl(flavour, r):
    lock = flavour.Lock(flavour.client(), "e", ttl=1.5)
    async with lock:
        assert await lock.extend(6.0) is True
        extends = calls(r, "lock.extend")
        # Two renewals (every 2 s): the second at least was sent after the extend's answer.
        assert await soon(lambda: calls(r, "lock.extend") > extends + 1, 8)
        # Renewed by 1.5 s, at most 1.5 s would be left; renewed by 6 s, at least 6 - 2 (the
        # interval) - 1 (a late renewal on a loaded machine).
        assert lease_left_ms(r, "e") > 3000


async def test_extend_answered_0_loses_the_hold_once(flavour, r):
    lost = []
    lock = flavour.Lock(flavour.client(), "e", ttl=5, watchdog=False, raise_on_lost=False,
                        on_lost=lost.append)
    assert await lock.acquire()
    r.execute_command("LOCK.FORCERELEASE", "e")
    assert await lock.extend(5.0) is False
    assert lock.lost == p.LEASE_RAN_OUT and not lock.locked()
    assert await soon(lambda: lost, 2) and lost == [p.LEASE_RAN_OUT]
    sent = calls(r, "lock.extend")
    assert await lock.extend(5.0) is False
    assert calls(r, "lock.extend") == sent, "known lost: nothing sent"
    assert await lock.release() is False
    await asyncio.sleep(0.2)
    assert lost == [p.LEASE_RAN_OUT], "reported once"


async def test_extend_of_a_hold_known_lost_or_released_sends_nothing(flavour, r):
    lock = flavour.Lock(flavour.client(), "e", ttl=0.2, watchdog=False, raise_on_lost=False)
    assert await lock.acquire()
    assert await soon(lambda: lock.lost, 2), "a fixed lease lost at its end"
    sent = calls(r, "lock.extend")
    assert await lock.extend(5.0) is False
    released = flavour.Lock(flavour.client(), "f", ttl=5)
    assert await released.acquire()
    assert await released.release() is True
    assert await released.extend(5.0) is False
    assert calls(r, "lock.extend") == sent, "nothing sent"


async def test_extend_checks_its_ttl_before_sending(flavour, r):
    lock = flavour.Lock(flavour.client(), "e", ttl=5)
    async with lock:
        for bad in (0, 0.0001, float("nan"), -1):
            with pytest.raises(ValueError):
                await lock.extend(bad)
        assert calls(r, "lock.extend") == 0


OLD_TTL, NEW_TTL = b"$4\r\n1000\r\n", b"$5\r\n10000\r\n"  # 1 s and 10 s, as sent


def a_hold(flavour, client, kind: str, ttl: float = 1.0, **options):
    """A lock (or a lock set of two keys) leased for ``ttl``, renewed on the loop's connection
    or, a session hold, on its own; and the keys it holds."""
    session = kind.endswith("session")
    if kind.startswith("set"):
        keys = ["e:1", "e:2"]
        return flavour.MultiLock(client, keys, ttl=ttl, session=session, **options), keys
    return flavour.Lock(client, "e", ttl=ttl, session=session, **options), ["e"]


@pytest.mark.parametrize("kind", ["loop", "session", "set-loop", "set-session"])
async def test_an_extend_waits_for_a_renewal_in_flight(flavour, server, r, kind):
    """Rule 20: a renewal sent with the old ttl is answered before the extend goes. They travel
    on different connections; run after the extend, it would end the lease 1 s later while the
    client counts 10 s (rule 15). A proxy holds a renewal back 0.4 s while extend(10) is made."""
    proxy = Proxy(server.port, match=(b"LOCK.EXTEND", OLD_TTL), marked=b"LOCK.EXTEND", hold=0.4)
    try:
        lock, keys = a_hold(flavour, flavour.client(proxy), kind)
        async with lock:
            assert await soon(proxy.holding.is_set, 3), "a renewal every 1/3 s: one is held"
            assert await lock.extend(10.0) is True
            assert await soon(lambda: proxy.released_at is not None, 2)
            order = [OLD_TTL in sent for sent in proxy.forwarded]
            assert order.index(False) > order.index(True), "the extend after the renewal"
            # The held renewal's lease would end 1 s after it went; 0.5 s later the extend's
            # 10 s (or a renewal by them) hold on the server, with 3.5 s of margin.
            await asyncio.sleep(max(0.0, proxy.released_at + 1.5 - time.monotonic()))
            assert all(lease_left_ms(r, key) > 5000 for key in keys)
            assert lock.locked() and lock.lost is None
    finally:
        proxy.close()


@pytest.mark.parametrize("watchdog", [False, True], ids=["fixed", "watchdog"])
@pytest.mark.parametrize("kind", ["loop", "session", "set-loop", "set-session"])
async def test_an_extend_without_an_answer_may_have_shortened_the_lease(flavour, server, r,
                                                                         kind, watchdog):
    """Rules 15 and 20: extend(1) of a 30 s lease is forwarded, then its connection is cut
    before the answer. It ran: the server's lease ends 1 s after it. The client counts the
    lease as ending by the extend's send + 1 s: a fixed lease is lost then; a watchdog renews
    at once (by 1 s), so the hold stays held."""
    if kind.endswith("session") and not watchdog:
        pytest.skip("a session hold without a watchdog is timed in the loop: the loop's case")
    proxy = Proxy(server.port, match=(b"LOCK.EXTEND", OLD_TTL), marked=b"LOCK.EXTEND", cut=True)
    try:
        lock, keys = a_hold(flavour, flavour.client(proxy), kind, ttl=30.0, watchdog=watchdog,
                            raise_on_lost=False)
        assert await lock.acquire()
        await asyncio.sleep(0.1)  # the watchdog (a task: once this one yields) waits its 10 s
        sent = time.monotonic()
        with pytest.raises(redislock.Unavailable):
            await lock.extend(1.0)
        # (Whether it reached the server or broke before - now and then its connection reads
        # closed before the proxy sees a byte: left open, see the closing note of 2026-12-05 -
        # the client cannot tell, and counts the lease by the extend: what is asserted.)
        if not watchdog:
            # Lost at the extend's lease end: 1 s after the send, 1.5 s of margin (rule 15
            # tests 10% of the ttl + 100 ms).
            assert await soon(lambda: lock.lost is not None, sent + 2.5 - time.monotonic())
            assert lock.lost.endswith(p.FIXED_LEASE_ENDED)  # (a set names its key first)
        else:
            # Renewed at once by 1 s, then every 1/3 s: 2.5 s after the send (1.5 s past the
            # extend's lease) the server still holds it, by at most 1 s.
            await asyncio.sleep(max(0.0, sent + 2.5 - time.monotonic()))
            assert all(0 < lease_left_ms(r, key) <= 1000 for key in keys)
            assert lock.locked() and lock.lost is None
            await lock.release()
    finally:
        proxy.close()


@pytest.mark.parametrize("kind", ["loop", "set-loop"])
async def test_a_second_extend_waits_for_the_first_ones_answer(flavour, server, r, kind):
    """Rule 20: extends of one hold go one at a time. extend(10) runs on the server but its
    answer is late (a proxy holds it 0.5 s); extend(1), made meanwhile on another connection,
    would run after it and be answered first: the server's lease ends 1 s after the second,
    while the first's late answer would make the client count 10 s (rule 15)."""
    proxy = Proxy(server.port, match=(b"LOCK.EXTEND", NEW_TTL), marked=b"LOCK.EXTEND", hold=0.5,
                  hold_reply=True)
    try:
        lock, keys = a_hold(flavour, flavour.client(proxy), kind, ttl=30.0, watchdog=False,
                            raise_on_lost=False)
        assert await lock.acquire()
        first = flavour.spawn(lock.extend(10.0))
        # The first ran (its 10 s are on the server, 5 s of margin); its answer is held.
        assert await soon(lambda: all(5000 < lease_left_ms(r, key) <= 10_000 for key in keys), 3)
        assert await lock.extend(1.0) is True
        assert await flavour.join(first, 5) is True
        # The server ends the lease 1 s after the second extend ran; the client's count may not
        # end later: once the server has freed the keys, the hold is lost within 1 s (a loop
        # timer 1 s late on a loaded machine), not 10 s after the first.
        assert await soon(lambda: all(lease_left_ms(r, key) == -1 for key in keys), 5)
        assert await soon(lambda: lock.lost is not None, 1.0), "counted 10 s, the server 1 s"
    finally:
        proxy.close()


@pytest.mark.parametrize("watchdog", [False, True], ids=["fixed", "watchdog"])
@pytest.mark.parametrize("kind", ["loop", "set-loop"])
async def test_an_extend_interrupted_after_it_was_sent_may_have_shortened_the_lease(
        flavour, server, r, kind, watchdog):
    """Rule 15: extend(1) of a 30 s lease goes out, its answer is held back 2 s, and the call
    is interrupted (a thread) or cancelled (a task) meanwhile. It ran: the server's lease ends
    1 s after it, so the client counts it as ending by then, as for no answer at all: a fixed
    lease is lost then, a watchdog renews at once (and a later extend gets its turn)."""
    proxy = Proxy(server.port, match=(b"LOCK.EXTEND", OLD_TTL), marked=b"LOCK.EXTEND", hold=2.0,
                  hold_reply=True)
    try:
        lock, keys = a_hold(flavour, flavour.client(proxy), kind, ttl=30.0, watchdog=watchdog,
                            raise_on_lost=False)
        assert await lock.acquire()
        await asyncio.sleep(0.1)  # the watchdog (a task: once this one yields) waits its 10 s
        sent = time.monotonic()
        await flavour.interrupted(lambda: lock.extend(1.0), 0.5)
        if not watchdog:
            # Lost at the extend's lease end: 1 s after the send, 1.5 s of margin (as above).
            assert await soon(lambda: lock.lost is not None, sent + 2.5 - time.monotonic())
            assert lock.lost.endswith(p.FIXED_LEASE_ENDED)
        else:
            # Renewed at once by 1 s, then every 1/3 s: held on the server 1.5 s past the
            # extend's lease, by at most 1 s.
            await asyncio.sleep(max(0.0, sent + 2.5 - time.monotonic()))
            assert all(0 < lease_left_ms(r, key) <= 1000 for key in keys)
            assert lock.locked() and lock.lost is None
            assert await lock.extend(5.0) is True, "the interrupted extend gave its turn back"
            await lock.release()
    finally:
        proxy.close()
