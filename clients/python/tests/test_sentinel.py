"""redislock over redis-py's Sentinel support, across real Sentinel failovers: a master and a
replica with the module, three Sentinels (quorum 2, a master down after 1 s), all on loopback;
the client is ``redis.sentinel.Sentinel(...).master_for(...)`` (``redis.asyncio.sentinel`` for
the asyncio twin)."""

import asyncio
import os
import shutil
import signal
import subprocess
import tempfile
import threading
import time

import pytest
import redis
import redis.asyncio.sentinel
import redis.sentinel

import redislock
from conftest import Server, as_map, calls, eventually, free_port

NAME = "lockm"

#: The lease of the holders that must outlive a failover. The watchdog renews every third of it
#: (6.7 s) and tries a renewal that found no master again a third later, so a hold lives through
#: a failover of up to 6.7 s whenever it starts (13 s when it starts just after a renewal or the
#: grant, as in these tests); down-after 1 s, the election and the promotion take 2-3 s here.
FAILOVER_PROOF_TTL = 20.0


class SentinelProcess:
    """One Sentinel (``<server> sentinel.conf --sentinel``) watching ``master_port``."""

    def __init__(self, master_port: int):
        self.port = free_port()
        self.dir = tempfile.mkdtemp(prefix="redislock-sentinel-")
        conf = os.path.join(self.dir, "sentinel.conf")
        with open(conf, "w") as f:
            f.write(
                f"port {self.port}\nbind 127.0.0.1\nprotected-mode no\ndir {self.dir}\n"
                f"sentinel monitor {NAME} 127.0.0.1 {master_port} 2\n"
                f"sentinel down-after-milliseconds {NAME} 1000\n"
                f"sentinel failover-timeout {NAME} 3000\n"
            )
        binary = os.environ.get("LOCK_TEST_SERVER", "redis-server")
        self.proc = subprocess.Popen(
            [binary, conf, "--sentinel"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
        )

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
            self.proc.wait()
        shutil.rmtree(self.dir, ignore_errors=True)


class Deployment:
    """A master and a replica (each with the module) and three Sentinels watching them."""

    def __init__(self):
        self.servers = []
        self.sentinels = []
        try:
            self._start()
        except BaseException:
            self.stop()  # whatever started is stopped, by pid
            raise

    def _start(self) -> None:
        self.servers.append(Server("--repl-diskless-sync-delay", "0"))
        self.servers.append(
            Server("--replicaof", "127.0.0.1", str(self.servers[0].port),
                   "--repl-diskless-sync-delay", "0")
        )
        for _ in range(3):
            self.sentinels.append(SentinelProcess(self.servers[0].port))
        replica = self.servers[1].client()
        if not eventually(lambda: replica.info("replication")["master_link_status"] == "up", 20):
            raise RuntimeError("the replica never synced")
        self.sentinel = redis.sentinel.Sentinel(
            [("127.0.0.1", s.port) for s in self.sentinels], socket_timeout=0.5
        )

        def ready() -> bool:
            try:
                return all(
                    redis.Redis(port=s.port).sentinel_master(NAME)["num-other-sentinels"] == 2
                    and redis.Redis(port=s.port).sentinel_master(NAME)["num-slaves"] == 1
                    for s in self.sentinels
                )
            except redis.RedisError:
                return False

        # Sentinels find each other by hellos every 2 s and the replica by the master's INFO:
        # seconds on an idle machine; 90 s for a loaded one (make test beside a soak once took
        # more than 30). Setting up, not what the tests measure.
        if not eventually(ready, 90):
            raise RuntimeError("the Sentinels never saw the replica and each other")

    @property
    def master(self) -> Server:
        return self.servers[0]

    @property
    def replica(self) -> Server:
        return self.servers[1]

    def client(self, **kw) -> redis.Redis:
        return self.sentinel.master_for(NAME, socket_timeout=2.0, **kw)

    def async_client(self, **kw):
        sentinel = redis.asyncio.sentinel.Sentinel(
            [("127.0.0.1", s.port) for s in self.sentinels], socket_timeout=0.5
        )
        return sentinel.master_for(NAME, socket_timeout=2.0, **kw)

    def kill_master(self) -> None:
        self.master.proc.send_signal(signal.SIGKILL)
        self.master.proc.wait()

    def wait_failover(self, timeout: float = 30) -> float:
        """Wait until the Sentinels name the replica; the seconds it took."""
        started = time.monotonic()
        want = ("127.0.0.1", self.replica.port)
        if not eventually(lambda: self._named() == want, timeout):
            raise AssertionError("no failover")
        return time.monotonic() - started

    def _named(self):
        try:
            return self.sentinel.discover_master(NAME)
        except redis.RedisError:
            return None

    def stop(self) -> None:
        for s in self.sentinels:
            s.stop()
        for s in self.servers:
            s.stop()


@pytest.fixture
def deployment():
    d = Deployment()
    yield d
    d.stop()


def test_a_holders_watchdog_follows_the_new_master(deployment):
    """A durable hold (on the replica too) outlives the failover: the watchdog's renewals go
    to the promoted replica, and the release there finds the hold."""
    r = deployment.client()
    lost = []
    lock = redislock.Lock(r, "k", ttl=FAILOVER_PROOF_TTL, replicas=1, on_lost=lost.append)
    with lock:
        token = lock.token
        deployment.kill_master()
        took = deployment.wait_failover()
        new = deployment.replica.client()
        # The next renewal comes within a third of the lease, or (failover still under way)
        # a third later.
        renewed = eventually(lambda: calls(new, "lock.extend") >= 1, 20)
        assert renewed, "renewed on the new master"
        assert new.execute_command("LOCK.FENCE", "k") == token
        assert lock.locked() and lost == []
    assert lost == [] and lock.lost is None
    assert new.exists("k") == 0, f"released on the new master (failover took {took:.1f} s)"


def test_a_holders_watchdog_reports_the_hold_lost_when_the_new_master_lacks_it(deployment):
    """A grant the replica never received: the promoted replica does not know the hold, so
    the watchdog's first renewal there answers 0 (or none gets through before the lease ends)
    and the hold is reported lost."""
    r = deployment.client()
    m = deployment.master.client()
    deployment.replica.proc.send_signal(signal.SIGSTOP)
    try:
        m.execute_command("CLIENT", "KILL", "TYPE", "replica")  # the grant never reaches it
        lost = []
        lock = redislock.Lock(r, "k", ttl=3.0, on_lost=lost.append)
        with pytest.raises(redislock.LockLost):
            with lock:
                deployment.kill_master()
                deployment.replica.proc.send_signal(signal.SIGCONT)
                deployment.wait_failover()
                assert eventually(lambda: lost, 10), "reported lost"
                assert not lock.locked()
    finally:
        deployment.replica.proc.send_signal(signal.SIGCONT)
    assert len(lost) == 1
    assert "ran out" in lost[0] or "could not be reached" in lost[0], lost
    assert deployment.replica.client().exists("k") == 0


def test_a_waiter_retries_with_its_owner_on_the_new_master(deployment):
    """A waiter blocked on the master when it dies: its link breaks, it asks again with the
    same owner (through Sentinel, so on the promoted replica once there is one), and is
    granted there when the replicated hold's lease ends."""
    r = deployment.client()
    holder = redislock.Lock(r, "k", ttl=3.0, replicas=1, watchdog=False)
    assert holder.acquire()
    waiter = redislock.Lock(deployment.client(), "k", ttl=5.0)
    got = []
    t = threading.Thread(target=lambda: got.append(waiter.acquire(timeout=20)))
    t.start()
    m = deployment.master.client()
    assert eventually(lambda: m.info("clients")["blocked_clients"] == 1)
    deployment.kill_master()
    deployment.wait_failover()
    t.join(25)
    assert got == [True]
    new = deployment.replica.client()
    assert new.execute_command("LOCK.FENCE", "k") == waiter.token > holder.token
    info = as_map(new.execute_command("LOCK.INFO", "k"))
    assert info[b"owner"] == waiter.owner.encode(), "granted to the owner it asked with first"
    assert waiter.release()


def test_a_waiter_on_a_demoted_master_retries_on_the_new_one(deployment):
    """``SENTINEL FAILOVER`` of a live master: Sentinel promotes the replica, and some seconds
    later turns the old master into a replica; the ``CLIENT KILL TYPE normal`` it sends with
    the ``REPLICAOF`` breaks the waiter's link (so the module's ``UNBLOCKED`` answer never
    reaches it): the waiter asks again with the same owner, through Sentinel on the new master,
    and is granted there when the holder (whose durable hold the new master has) releases."""
    holder = redislock.Lock(deployment.client(), "k", ttl=30.0, replicas=1, watchdog=False)
    assert holder.acquire()
    held = holder.token
    waiter = redislock.Lock(deployment.client(), "k", ttl=5.0)
    got = []
    t = threading.Thread(target=lambda: got.append(waiter.acquire(timeout=40)))
    t.start()
    m = deployment.master.client()
    assert eventually(lambda: m.info("clients")["blocked_clients"] == 1)
    redis.Redis(port=deployment.sentinels[0].port).execute_command("SENTINEL", "FAILOVER", NAME)
    deployment.wait_failover()
    new = deployment.replica.client()
    demoted = lambda: m.info("replication")["role"] == "slave"  # noqa: E731
    assert eventually(demoted, 30), "Sentinel turned the old master into a replica"
    assert eventually(lambda: new.info("clients")["blocked_clients"] == 1, 10), "waits again"
    assert holder.release()
    t.join(10)
    assert got == [True]
    assert new.execute_command("LOCK.FENCE", "k") == waiter.token > held
    assert as_map(new.execute_command("LOCK.INFO", "k"))[b"owner"] == waiter.owner.encode()
    assert waiter.release()


def test_asyncio_holder_follows_and_waiter_retries(deployment):
    """The asyncio twin: a durable holder's watchdog follows the new master; a waiter that
    was blocked on the dead master is granted on the new one with its owner."""

    async def main():
        lost = []
        holder = redislock.aio.Lock(
            deployment.async_client(), "k", ttl=FAILOVER_PROOF_TTL, replicas=1,
            on_lost=lost.append,
        )
        waiter = redislock.aio.Lock(deployment.async_client(), "k", ttl=5.0)
        assert await holder.acquire()
        held = holder.token
        waiting = asyncio.create_task(waiter.acquire(timeout=40))
        m = deployment.master.client()
        while m.info("clients")["blocked_clients"] != 1:
            await asyncio.sleep(0.01)
        deployment.kill_master()
        await asyncio.get_running_loop().run_in_executor(None, deployment.wait_failover)
        new = deployment.replica.client()
        # The next renewal comes within a third of the lease, or (failover still under way)
        # a third later.
        deadline = time.monotonic() + 20
        while calls(new, "lock.extend") < 1 and time.monotonic() < deadline:
            await asyncio.sleep(0.05)
        assert calls(new, "lock.extend") >= 1, "renewed on the new master"
        assert holder.locked() and lost == []
        assert await holder.release()
        assert await asyncio.wait_for(waiting, 15)
        assert new.execute_command("LOCK.FENCE", "k") == waiter.token > held
        assert await waiter.release()

    asyncio.run(main())
