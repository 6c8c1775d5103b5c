"""The client over RESP3 and over Redis Cluster."""

import threading
import time

import pytest

import redislock
from conftest import as_map, eventually, idle_pool


def test_resp3(server):
    r = server.client(protocol=3)
    with redislock.Lock(r, "k", ttl=5) as lock:
        assert isinstance(lock.token, int)
        info = as_map(r.execute_command("LOCK.INFO", "k"))
        assert info[b"token"] == lock.token
    with redislock.Semaphore(r, "p", limit=2, ttl=5) as sem:
        assert sem.token > 0


def test_cluster_routes_by_key_waits_and_guards(cluster):
    rc = cluster.client()
    rc.set("{sku:9}:stock", 3)
    tokens = []
    for i in range(20):
        with redislock.Lock(rc, f"order:{i}", ttl=5) as lock:
            tokens.append(lock.token)
    assert all(t > 0 for t in tokens)
    first = redislock.Lock(rc, "{sku:9}:lock", ttl=5)
    first.acquire()
    assert first.guard("DECRBY", "{sku:9}:stock", 1) == 2
    got = []
    second = redislock.Lock(cluster.client(), "{sku:9}:lock", ttl=5)
    t = threading.Thread(target=lambda: got.append(second.acquire(timeout=10)))
    t.start()
    node = rc.get_node_from_key("{sku:9}:lock").redis_connection
    assert eventually(lambda: node.info("clients")["blocked_clients"] == 1)
    first.release()
    t.join(10)
    assert got == [True]
    assert second.guard("DECRBY", "{sku:9}:stock", 1) == 1
    second.release()
    with redislock.Lock(rc, "{sku:9}:lock", ttl=5, session=True) as s:
        assert s.token > 0
    small = cluster.client(max_connections=2)  # each node's pool: 2 connections
    for _ in range(5):
        with redislock.Lock(small, "{sku:9}:lock", ttl=0.3, session=True) as s:
            time.sleep(0.4)  # more than the lease: renewed by the watchdog
            assert small.execute_command("LOCK.FENCE", "{sku:9}:lock") == s.token
    assert idle_pool(small.get_node_from_key("{sku:9}:lock").redis_connection)
