"""Rule 6 (docs/clients.md): one renewal loop per redis-py connection pool renews every live
hold of the pool's locks on one connection of its own; releasing or losing one hold leaves the
others renewed; a renewal refused is a loss of that hold, reported once (rule 8); a session hold
renews on its own connection, and is lost, saying so, when that connection breaks. Each body
runs in both flavours (threads: one daemon thread per pool; asyncio: one task per pool and
event loop)."""

import asyncio
import time

from conftest import as_map
from flavours import result, soon
from redislock import _protocol as p

HOLDS = 1000
# Renewed every 2 s: a renewal may come 4 s late before a lease ends (a starved process on a
# loaded 2-core machine stalled more than the 2 s that a 3 s lease allowed).
TTL = 6.0


def connected(r) -> int:
    return int(r.info("clients")["connected_clients"])


def leases_left_ms(r, keys) -> list:
    """What is left of each key's lease on the server, in ms (-1: not held)."""
    pipe = r.pipeline(transaction=False)
    for key in keys:
        pipe.execute_command("LOCK.INFO", key)
    return [-1 if info is None else int(as_map(info)[b"ttl"]) for info in pipe.execute()]


async def test_a_thousand_holds_add_two_connections_and_none_is_lost(flavour, r):
    client = flavour.client(max_connections=10)
    await result(client.ping())
    before = connected(r)  # this test's connection and the pool's one
    lost = []
    locks = [flavour.Lock(client, f"renew:{i}", ttl=TTL, raise_on_lost=False,
                          on_lost=lambda reason, i=i: lost.append((i, reason)))
             for i in range(HOLDS)]
    for lock in locks:
        assert await lock.acquire(blocking=False)
    most = connected(r)
    started = time.monotonic()
    while time.monotonic() - started < 2 * TTL + 1:  # two leases and more: only renewals keep them
        await asyncio.sleep(0.5)
        most = max(most, connected(r))
    # At most 2 more: the locks' one connection for their calls (acquire, release), made
    # outside the pool, and the renewal loop's own.
    assert most <= before + 2, f"{most - before} connections added"
    assert lost == [] and all(lock.locked() for lock in locks)

    assert await locks[0].release() is True
    r.execute_command("LOCK.RELEASE", locks[1].key, locks[1].owner)  # another client's doing
    assert await soon(lambda: lost, TTL), "the next renewal finds it gone"
    since = time.monotonic()
    await asyncio.sleep(TTL * 2 / 3 + 1)  # two renewal intervals, and a late renewal's margin
    asking = time.monotonic()
    left = leases_left_ms(r, [lock.key for lock in locks[2:]])
    # A lease not renewed since then would have at most TTL - (asking - since) left.
    assert min(left) > (TTL - (asking - since)) * 1000, "every other hold renewed since"
    assert lost == [(1, p.LEASE_RAN_OUT)], "only the released-behind-its-back hold is lost"
    for lock in locks[2:]:
        assert await lock.release() is True


async def test_a_refused_renewal_loses_its_hold_once(flavour, r):
    lost = []
    lock = flavour.Lock(flavour.client(), "k", ttl=0.9, raise_on_lost=False, on_lost=lost.append)
    other = flavour.Lock(flavour.client(), "other", ttl=60.0)
    assert await lock.acquire() and await other.acquire()
    r.execute_command("ACL", "SETUSER", "default", "-lock.extend")
    try:
        assert await soon(lambda: lost, 5), "the next renewal (every 0.3 s) is refused"
        await asyncio.sleep(1.0)  # more renewal periods: nothing more reported
        assert len(lost) == 1 and lost[0].startswith(p.REFUSED + ": NOPERM"), lost
        assert lock.lost == lost[0] and not lock.locked()
        assert other.locked(), "the other hold is not touched"
    finally:
        r.execute_command("ACL", "SETUSER", "default", "+@all")
    assert await lock.release() is False and await other.release() is True


async def test_a_session_hold_whose_connection_breaks_is_lost_saying_so(flavour, r):
    lost = []
    lock = flavour.Lock(flavour.client(), "s", ttl=1.5, session=True, raise_on_lost=False,
                        on_lost=lost.append)
    assert await lock.acquire()
    session = next(c["id"] for c in r.client_list() if c["cmd"].startswith("lock."))
    r.client_kill_filter(_id=session)  # as a proxy or the server would
    assert await soon(lambda: lost, 5), "the next renewal (every 0.5 s) finds it closed"
    assert lost[0].startswith(p.SESSION_CLOSED + ": "), lost
    assert r.execute_command("LOCK.INFO", "s") is None, "the hold ended with its connection"
    await asyncio.sleep(0.6)
    assert len(lost) == 1 and await lock.release() is False
