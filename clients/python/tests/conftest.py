"""Real servers for the client's tests: a redis-server (or valkey-server) with the freshly built
module on a free loopback port, stopped by PID. LOCK_TEST_SERVER picks the binary (default
redis-server), LOCK_MODULE the module (default target/debug/libredis_lock.so of this repo).

``flavour`` runs a test once per client flavour (threads, asyncio tasks; see flavours.py): an
``async def`` test taking it is run by it, with no plugin."""

import inspect
import os
import pathlib
import shutil
import signal
import socket
import subprocess
import tempfile
import time

import pytest
import redis

# PostgreSQL and MariaDB, started once per test process when a test needs them (databases.py).
from databases import database_servers, mysql_server, postgresql_server  # noqa: F401

ROOT = pathlib.Path(__file__).resolve().parents[3]


def free_port() -> int:
    """A free port whose cluster bus port (port + 10000) is free and valid too."""
    import random

    while True:
        port = random.randint(20000, 50000)
        try:
            for p in (port, port + 10000):
                with socket.socket() as s:
                    s.bind(("127.0.0.1", p))
            return port
        except OSError:
            continue


class Server:
    def __init__(self, *extra: str):
        self.dir = tempfile.mkdtemp(prefix="redislock-py-")
        # A free port can be taken by another process before the server binds it (suites run
        # two at a time): then the server exits and someone else answers. Start again on
        # another port until the answer comes from our own process.
        for _ in range(5):
            self.port = free_port()
            self.proc = self._spawn(extra)
            if self._ready():
                return
            self._kill()
        raise RuntimeError(f"the server did not start on any of 5 ports ({self.port} last)")

    def _spawn(self, extra: tuple) -> subprocess.Popen:
        module = os.environ.get("LOCK_MODULE", str(ROOT / "target/debug/libredis_lock.so"))
        binary = os.environ.get("LOCK_TEST_SERVER", "redis-server")
        return subprocess.Popen(
            [binary, "--port", str(self.port), "--bind", "127.0.0.1", "--dir", self.dir,
             "--save", "", "--appendonly", "no", "--loadmodule", module, *extra],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        )

    def _ready(self) -> bool:
        """Whether our process answers on the port within 10 s (False if it exited, or if
        another process answers there)."""
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline and self.proc.poll() is None:
            try:
                info = redis.Redis(port=self.port, protocol=2).info("server")
                return int(info["process_id"]) == self.proc.pid
            except Exception:  # not up yet, or not a server we can read
                time.sleep(0.02)
        return False

    def _kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
            self.proc.wait()

    def client(self, **kw) -> redis.Redis:
        return redis.Redis(port=self.port, **kw)

    def stop(self) -> None:
        self._kill()
        shutil.rmtree(self.dir, ignore_errors=True)


@pytest.fixture
def server():
    s = Server()
    yield s
    s.stop()


@pytest.fixture
def lone_server():
    """A server of the test's own, to stop or freeze by its PID (``server`` stays up)."""
    s = Server()
    yield s
    os.kill(s.proc.pid, signal.SIGCONT)  # if it was frozen
    s.stop()


def halt(server: Server, how: str) -> None:
    """Stop ``server`` (SIGKILL) or freeze it (SIGSTOP; ``lone_server`` sends SIGCONT after)."""
    os.kill(server.proc.pid, signal.SIGKILL if how == "stopped" else signal.SIGSTOP)


@pytest.fixture(params=["sync", "async"])
def flavour(request, server):
    """The client flavour a test body runs with (``flavours.Threads`` or ``flavours.Tasks``)."""
    from flavours import FLAVOURS

    return FLAVOURS[request.param](server.port)


@pytest.hookimpl(tryfirst=True)
def pytest_pyfunc_call(pyfuncitem):
    """An ``async def`` test is run by its ``flavour`` driver (which closes its clients)."""
    if not inspect.iscoroutinefunction(pyfuncitem.obj):
        return None
    args = {name: pyfuncitem.funcargs[name] for name in pyfuncitem._fixtureinfo.argnames}
    if "flavour" not in args:
        raise TypeError(f"{pyfuncitem.name}: an async test takes the flavour fixture")
    args["flavour"].run(pyfuncitem.obj(**args))
    return True


@pytest.fixture
def r(server):
    c = server.client()
    yield c
    c.close()


def stat(r: redis.Redis, field: str) -> float:
    return float(r.info("lock")[f"lock_{field}"])


def calls(r: redis.Redis, command: str) -> int:
    entry = r.info("commandstats").get(f"cmdstat_{command}")
    return int(entry["calls"]) if entry else 0


def eventually(cond, timeout: float = 5.0) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if cond():
            return True
        time.sleep(0.01)
    return cond()


def as_map(reply) -> dict:
    """A map reply as a dict, whichever protocol (RESP3 map, or RESP2 flat array) it came in."""
    if isinstance(reply, dict):
        return reply
    return dict(zip(reply[::2], reply[1::2]))


def waiters(r: redis.Redis, key: str) -> int:
    """How many clients wait in ``key``'s queue, as LOCK.INFO says (0 when the lock is free)."""
    info = r.execute_command("LOCK.INFO", key)
    return 0 if info is None else int(as_map(info)[b"waiters"])


def idle_pool(client) -> bool:
    """Whether ``client``'s pool has every connection back: none lent, and (sync pools) none
    counted against ``max_connections`` that the pool does not have."""
    pool = client.connection_pool
    made = getattr(pool, "_created_connections", len(pool._available_connections))
    return not pool._in_use_connections and made == len(pool._available_connections)


class Cluster:
    """3 masters and 3 replicas on loopback, made with `redis-cli --cluster create`."""

    def __init__(self):
        self.nodes = [
            Server("--cluster-enabled", "yes", "--cluster-config-file", "nodes.conf",
                   "--cluster-announce-ip", "127.0.0.1",
                   "--cluster-node-timeout", "2000")
            for _ in range(6)
        ]
        addrs = [f"127.0.0.1:{n.port}" for n in self.nodes]
        subprocess.run(
            ["redis-cli", "--cluster", "create", *addrs, "--cluster-replicas", "1", "--cluster-yes"],
            check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, timeout=60,
        )
        deadline = time.monotonic() + 30
        while not all(
            n.client().execute_command("CLUSTER", "INFO").decode().find("cluster_state:ok") >= 0
            for n in self.nodes
        ):
            if time.monotonic() > deadline:
                raise RuntimeError("the cluster did not come up")
            time.sleep(0.1)

    def client(self, **kw):
        return redis.RedisCluster(host="127.0.0.1", port=self.nodes[0].port, **kw)

    def stop(self):
        for n in self.nodes:
            n.stop()


@pytest.fixture
def cluster():
    c = Cluster()
    yield c
    c.stop()
