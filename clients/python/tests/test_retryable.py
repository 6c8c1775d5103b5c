"""Rule 19 (docs/clients.md): an error reply that begins with one of ``MOVED ASK TRYAGAIN
CLUSTERDOWN READONLY LOADING MASTERDOWN UNBLOCKED`` says the server did not run the command: an
acquire asks again, with the same owner, until the caller's deadline or the unavailability
bound. Here the server is a replica (``LOCK.ACQUIRE`` answers ``READONLY``) until it is
promoted. Each body runs in both flavours."""

import asyncio
import threading

import pytest

import redislock
from conftest import as_map
from flavours import soon
from redislock import _protocol as p


def test_the_list_is_the_contracts():
    assert p.RETRYABLE == ("MOVED", "ASK", "TRYAGAIN", "CLUSTERDOWN", "READONLY", "LOADING",
                           "MASTERDOWN", "UNBLOCKED")
    assert p.retryable("READONLY You can't write against a read only replica.")
    assert not p.retryable("NOPERM User default has no permissions")


async def test_a_readonly_reply_to_an_acquire_is_asked_again_until_promoted(
        flavour, server, lone_server):
    lone_server.client().replicaof("127.0.0.1", server.port)
    lock = flavour.Lock(flavour.client(lone_server), "k", ttl=5)
    assert lone_server.client().info("replication")["role"] == "slave"
    promoting = threading.Timer(1.0, lambda: lone_server.client().replicaof("NO", "ONE"))
    promoting.start()
    try:
        assert await lock.acquire(timeout=8), "granted once promoted, within the deadline"
    finally:
        promoting.join()
    holder = as_map(lone_server.client().execute_command("LOCK.INFO", "k"))[b"owner"]
    assert holder.decode() == lock.owner, "asked again with the same owner"
    assert await lock.release() is True


async def test_a_readonly_reply_past_the_deadline_is_unavailable(flavour, server, lone_server):
    lone_server.client().replicaof("127.0.0.1", server.port)
    lock = flavour.Lock(flavour.client(lone_server), "k", ttl=5)
    with pytest.raises(redislock.Unavailable, match="READONLY"):
        await lock.acquire(timeout=0.5)


async def test_a_readonly_reply_to_a_renewal_is_retried_until_the_deadline(
        flavour, server, lone_server):
    """To the renewal loop a retryable reply is a broken link: asked again (on a new
    connection) until the lease deadline, then lost with that reply as the cause."""
    lost = []
    lock = flavour.Lock(flavour.client(lone_server), "k", ttl=1.5, raise_on_lost=False,
                        on_lost=lost.append)
    assert await lock.acquire()
    lone_server.client().replicaof("127.0.0.1", server.port)  # its writes: READONLY from now
    assert await soon(lambda: lost, 5), "lost at the lease deadline (1.5 s)"
    assert lost[0].startswith(p.UNREACHABLE + ": READONLY"), lost
    await asyncio.sleep(0.6)  # more renewal periods (0.5 s): nothing more reported
    assert len(lost) == 1 and lock.lost == lost[0]
