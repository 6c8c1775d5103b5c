"""Rule 14 (docs/clients.md): a lock service that cannot be reached, or does not answer as Redis,
is ``redislock.Unavailable`` (neither not-granted, stale nor lost) within the lock's
``unavailable_after`` bound, whatever the wait (without limit included): a closed port, a
service that answers HTTP, one that accepts and never answers, a server stopped (SIGKILL by
PID) and one frozen (SIGSTOP by PID, SIGCONT after), with a live hold and with a waiter.

Each body runs in both flavours (flavours.py). Every call is made through ``flavour.join`` with
a limit, so a hang fails the test instead of stopping the suite."""

import asyncio
import os
import signal
import socket
import threading
import time

import pytest
import redis

import redislock
from conftest import Server, calls, free_port, halt, stat
from flavours import soon

#: The bound the tests configure: short, so that they stay short.
BOUND = 1.5
#: What a loaded 2-core machine may add to a bound (thread and task wake-ups, reconnects).
MARGIN = 1.5


class Port:
    """A port with ``.port``, for ``flavour.client(server=...)``."""

    def __init__(self, port: int):
        self.port = port


class FakeService:
    """A TCP service on loopback that is not Redis: ``http`` answers every connection with an
    HTTP error, ``silent`` accepts and never answers, ``drop`` answers ``+OK`` to every command
    (the client's handshake included) but closes the connection on ``LOCK.ACQUIRE`` (counted
    in ``acquires``). Stopped by ``stop()``."""

    def __init__(self, mode: str):
        self.mode = mode
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.listener.settimeout(0.1)
        self.port = self.listener.getsockname()[1]
        self.accepted: list = []
        self.acquires = 0
        self.stopped = threading.Event()
        self.thread = threading.Thread(target=self._serve, daemon=True)
        self.thread.start()

    def _serve(self) -> None:
        while not self.stopped.is_set():
            try:
                conn, _ = self.listener.accept()
            except OSError:
                continue
            self.accepted.append(conn)
            if self.mode == "http":
                conn.sendall(b"HTTP/1.1 400 Bad Request\r\nContent-Length: 0\r\n\r\n")
            elif self.mode == "drop":
                threading.Thread(target=self._drop, args=(conn,), daemon=True).start()

    def _drop(self, conn: socket.socket) -> None:
        try:
            while True:
                data = conn.recv(65536)
                if not data or b"LOCK.ACQUIRE" in data.upper():
                    self.acquires += bool(data)
                    break
                conn.sendall(b"".join(map(_fake_reply, _command_names(data))))
        except OSError:
            pass
        finally:
            conn.close()

    def stop(self) -> None:
        self.stopped.set()
        self.thread.join(5)
        for conn in self.accepted + [self.listener]:
            conn.close()


def _command_names(data: bytes) -> list:
    """The names of the commands in ``data`` (each an array whose first bulk string is its
    name; none of the client's arguments here starts a line with ``*``)."""
    lines = data.split(b"\r\n")
    return [lines[i + 2].upper() for i, line in enumerate(lines[:-2]) if line.startswith(b"*")]


def _fake_reply(name: bytes) -> bytes:
    """What the ``drop`` service answers: HELLO a RESP3 map of the protocol, the rest ``+OK``."""
    return b"%1\r\n$5\r\nproto\r\n:3\r\n" if name == b"HELLO" else b"+OK\r\n"


@pytest.fixture
def service(request):
    made = FakeService(request.param)
    yield made
    made.stop()


async def unavailable_within(flavour, call, limit: float) -> redislock.Unavailable:
    """``call`` (a coroutine) fails with ``Unavailable`` within ``limit`` seconds."""
    started = time.monotonic()
    with pytest.raises(redislock.Unavailable) as raised:
        await flavour.join(flavour.spawn(call), limit + 5)  # + 5: a hang fails, not stops
    took = time.monotonic() - started
    assert took < limit, f"after {took:.2f} s: {raised.value}"
    return raised.value


# -- nothing there, or not Redis --------------------------------------------------------------


async def test_wrong_address_is_unavailable_within_the_bound(flavour):
    port = free_port()  # nothing listens there
    lock = flavour.Lock(flavour.client(Port(port)), "k", ttl=5, unavailable_after=BOUND)
    # The default wait (without limit): retried until the bound, then unavailable.
    err = await unavailable_within(flavour, lock.acquire(), BOUND + MARGIN)
    assert str(err) == f"lock service unavailable at localhost:{port}: connection refused"
    assert (err.address, err.cause) == (f"localhost:{port}", "connection refused")
    assert isinstance(err, redislock.LockError) and isinstance(err, redis.ConnectionError)
    # One try, and a wait shorter than the bound: unavailable at once, and by the deadline.
    await unavailable_within(flavour, lock.acquire(blocking=False), MARGIN)
    await unavailable_within(flavour, lock.acquire(timeout=0.3), 0.3 + MARGIN)
    assert not lock.locked()


@pytest.mark.parametrize("service", ["http"], indirect=True)
async def test_a_service_that_answers_http_is_unavailable(flavour, service):
    lock = flavour.Lock(flavour.client(service), "k", ttl=5, unavailable_after=BOUND)
    err = await unavailable_within(flavour, lock.acquire(), BOUND + MARGIN)
    assert err.address == f"localhost:{service.port}"
    assert "does not answer as Redis" in err.cause, err.cause


@pytest.mark.parametrize("service", ["silent"], indirect=True)
async def test_a_service_that_never_answers_is_unavailable(flavour, service):
    lock = flavour.Lock(flavour.client(service), "k", ttl=5, unavailable_after=BOUND)
    err = await unavailable_within(flavour, lock.acquire(), BOUND + MARGIN)
    assert err.address == f"localhost:{service.port}"
    await unavailable_within(flavour, lock.acquire(blocking=False), BOUND + MARGIN)


@pytest.mark.parametrize("service", ["drop"], indirect=True)
async def test_a_service_that_takes_connections_but_drops_commands_is_unavailable(flavour,
                                                                                  service):
    """Connecting is not an answer: the outage runs from the first failure until a reply (it
    used to restart at each connection, so a wait without limit retried for ever)."""
    lock = flavour.Lock(flavour.client(service), "k", ttl=5, unavailable_after=BOUND)
    err = await unavailable_within(flavour, lock.acquire(), BOUND + MARGIN)
    assert err.address == f"localhost:{service.port}"


@pytest.mark.parametrize("service", ["drop"], indirect=True)
async def test_the_try_once_form_is_unavailable_at_its_first_failure(flavour, service):
    """The try-once form, server unreachable: unavailable at its first failure, one attempt."""
    lock = flavour.Lock(flavour.client(service), "k", ttl=5, unavailable_after=10.0)
    await unavailable_within(flavour, lock.acquire(blocking=False), MARGIN)  # not the bound
    assert service.acquires == 1, "one attempt"
    closed = flavour.Lock(flavour.client(Port(free_port())), "k", ttl=5, unavailable_after=10.0)
    await unavailable_within(flavour, closed.acquire(blocking=False), MARGIN)


async def test_a_server_without_the_module_is_unavailable(flavour):
    with PlainServer() as plain:
        lock = flavour.Lock(flavour.client(plain), "k", ttl=5, unavailable_after=BOUND)
        err = await unavailable_within(flavour, lock.acquire(), MARGIN)
        assert "module is not loaded" in err.cause


class PlainServer:
    """A redis-server without the module, stopped by PID."""

    def __enter__(self) -> "PlainServer":
        import subprocess
        import tempfile

        self.port = free_port()
        self.dir = tempfile.mkdtemp(prefix="redislock-py-plain-")
        binary = os.environ.get("LOCK_TEST_SERVER", "redis-server")
        self.proc = subprocess.Popen([binary, "--port", str(self.port), "--bind", "127.0.0.1",
                                      "--dir", self.dir, "--save", "", "--appendonly", "no"],
                                     stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        deadline = time.monotonic() + 10
        while True:
            try:
                redis.Redis(port=self.port).ping()
                return self
            except redis.ConnectionError:
                assert time.monotonic() < deadline and self.proc.poll() is None
                time.sleep(0.02)

    def __exit__(self, *exc: object) -> None:
        import shutil

        self.proc.kill()
        self.proc.wait()
        shutil.rmtree(self.dir, ignore_errors=True)


# -- a server stopped or frozen, with a live hold and with a waiter -------------------------


@pytest.mark.parametrize("how", ["stopped", "frozen"])
async def test_a_live_hold_of_a_server_gone_is_unavailable(flavour, lone_server, how):
    # ttl 30: the watchdog's first renewal (10 s) comes after the test.
    lock = flavour.Lock(flavour.client(lone_server), "k", ttl=30, unavailable_after=BOUND)
    assert await lock.acquire()
    halt(lone_server, how)
    with pytest.raises(redislock.Unavailable):
        await flavour.join(flavour.spawn(lock.guard("SET", "x", 1)), BOUND + MARGIN)
    await unavailable_within(flavour, lock.release(), BOUND + MARGIN)
    assert lock.lost is None, "unavailable is not lost: the lease runs out on the server"
    assert not lock.locked() and await lock.release() is False


async def test_a_release_abandons_a_renewal_in_flight(flavour, lone_server):
    """A release while a renewal is in flight, the server frozen: the renewal is abandoned, and
    the release is unavailable within the bound (it used to wait for the renewal's reply first:
    up to a third of the ttl more)."""
    r = lone_server.client()
    # ttl 9: renewed every 3 s; a renewal's reply is awaited up to 3 s.
    lock = flavour.Lock(flavour.client(lone_server), "k", ttl=9, unavailable_after=1.0)
    assert await lock.acquire()
    granted = time.monotonic()
    assert await soon(lambda: calls(r, "lock.extend") >= 1, 6), "the first renewal, at 3 s"
    r.close()
    halt(lone_server, "frozen")  # the second renewal, at 6 s, gets no reply until 9 s
    await asyncio.sleep(max(0.0, granted + 6.7 - time.monotonic()))
    # Waiting for that reply (2.3 s), then the bound (1 s): 3.3 s, past 1 s + MARGIN.
    await unavailable_within(flavour, lock.release(), 1.0 + MARGIN)
    assert lock.lost is None, "an abandoned renewal is not a loss"
    assert not lock.locked() and await lock.release() is False


@pytest.mark.parametrize("how", ["stopped", "frozen"])
async def test_a_waiter_of_a_server_gone_is_unavailable(flavour, lone_server, how):
    holder = redislock.Lock(lone_server.client(), "k", ttl=30, watchdog=False)
    assert holder.acquire()
    waiter = flavour.Lock(flavour.client(lone_server), "k", ttl=5, unavailable_after=BOUND)
    waiting = flavour.spawn(waiter.acquire())  # without limit
    r = lone_server.client()
    assert await soon(lambda: r.info("clients")["blocked_clients"] == 1)
    r.close()
    await_halt = time.monotonic()
    halt(lone_server, how)
    # Stopped: its link breaks, reconnecting is refused until the bound. Frozen: the PING every
    # half bound gets no answer within half a bound.
    with pytest.raises(redislock.Unavailable):
        await flavour.join(waiting, BOUND + MARGIN + 5)
    assert time.monotonic() - await_halt < BOUND + MARGIN
    assert not waiter.locked()


async def test_a_wait_whose_deadline_ends_while_the_server_is_frozen_is_unavailable(
        flavour, lone_server):
    """The caller's deadline ending while the server does not answer is unavailable, not
    not-granted (the server's answer of not-granted never came)."""
    holder = redislock.Lock(lone_server.client(), "k", ttl=30, watchdog=False)
    assert holder.acquire()
    waiter = flavour.Lock(flavour.client(lone_server), "k", ttl=5, unavailable_after=10.0)
    assert await waiter.acquire(timeout=0.2) is False, "the server answers: not granted"
    halt(lone_server, "frozen")
    # The table's row: at most min(1 s, bound) after the deadline. The wait's deadline (0.5 s),
    # then 0.5 s more for the reply, then a PING: 0.5 s.
    await unavailable_within(flavour, waiter.acquire(timeout=0.5), 0.5 + 1.0 + MARGIN)


async def test_a_durable_grant_whose_wait_gets_no_answer_is_unavailable(flavour):
    """The WAIT of a durable grant gets no answer (its replica frozen, then its master): the
    acquire is unavailable within the bound plus ``replicas_timeout``, never granted; the grant
    is given back (released with its owner and token) once the master answers again."""
    master = Server("--repl-diskless-sync-delay", "0")
    replica = Server("--replicaof", "127.0.0.1", str(master.port))
    try:
        rc = replica.client()
        assert await soon(lambda: rc.info("replication")["master_link_status"] == "up", 20)
        rc.close()
        lock = flavour.Lock(flavour.client(master), "d", ttl=30, replicas=1, replicas_timeout=1.0,
                            unavailable_after=BOUND)
        os.kill(replica.proc.pid, signal.SIGSTOP)  # the WAIT waits for it...
        freezing = threading.Timer(0.5, os.kill, (master.proc.pid, signal.SIGSTOP))
        freezing.start()  # ...and its master freezes meanwhile
        await unavailable_within(flavour, lock.acquire(), BOUND + 1.0 + MARGIN)
        assert not lock.locked()
        freezing.join()
        for server in (master, replica):
            os.kill(server.proc.pid, signal.SIGCONT)
        # Given back when the server answers again: well before its lease (30 s) would end it,
        # within a release's bound and the one that may be waiting on the frozen link.
        mc = master.client()
        assert await soon(lambda: mc.execute_command("LOCK.INFO", "d") is None,
                          2 * BOUND + MARGIN), "the grant given back"
        assert stat(mc, "acquired_immediately") == 1 and stat(mc, "releases") == 1, \
            "granted, then released (not ended by its lease)"
    finally:
        for server in (replica, master):
            os.kill(server.proc.pid, signal.SIGCONT)
            server.stop()


async def test_unavailable_after_is_checked(flavour):
    for bad in (0, -1, float("nan")):
        with pytest.raises(ValueError):
            flavour.Lock(flavour.client(), "k", ttl=5, unavailable_after=bad)
