#!/usr/bin/env python3
"""The training run of the release build's profile-guided optimisation (scripts/pgo.sh).

usage: pgo_train.py PORT PID

Drives a server that loaded the instrumented module with the mix a deployment sends: mostly
uncontended acquire + release cycles (the path `make bench` measures), then renewals, owner
and token checks, busy locks, shared holds, semaphores, lock sets, WAIT queues with handoffs,
watches and guarded writes. The profile only weighs the module's branches and calls against
each other: what is sent matters, not how fast. Python's standard library only (a fresh
machine builds the module before any virtual environment exists); a few seconds. Ends with
SHUTDOWN NOSAVE: the profile is written as the server exits.
"""

import socket
import sys
import threading
import time

PORT, PID = int(sys.argv[1]), int(sys.argv[2])
CYCLES = 60_000  # pipelined acquire + release: the bulk of the profile, as in production
BATCH = 500
HANDOFFS = 1_500  # a lock handed from one WAIT-ing connection to the next


def command(*words):
    out = [b"*%d\r\n" % len(words)]
    for word in words:
        word = word if isinstance(word, bytes) else str(word).encode()
        out.append(b"$%d\r\n%s\r\n" % (len(word), word))
    return b"".join(out)


class ServerError(Exception):
    """An error reply where none was expected: the training would profile the error path."""


class Connection:
    def __init__(self):
        self.sock = socket.create_connection(("127.0.0.1", PORT), timeout=10)
        self.file = self.sock.makefile("rb")

    def reply(self):
        line = self.file.readline()
        if not line:
            raise ConnectionError("the server closed the connection")
        kind, rest = line[:1], line[1:-2]
        if kind == b"-":
            return ServerError(rest.decode(errors="replace"))
        if kind in b"+:":
            return rest
        if kind == b"$":
            n = int(rest)
            return None if n < 0 else self.file.read(n + 2)[:-2]
        if kind == b"*":
            n = int(rest)
            return None if n < 0 else [self.reply() for _ in range(n)]
        raise ValueError(f"unexpected reply {line!r}")

    def pipeline(self, commands, errors_expected=()):
        """The replies; an error reply raises unless its index is in `errors_expected`."""
        self.sock.sendall(b"".join(commands))
        replies = [self.reply() for _ in commands]
        for i, reply in enumerate(replies):
            if isinstance(reply, ServerError) and i not in errors_expected:
                raise reply
        return replies

    def call(self, *words):
        return self.pipeline([command(*words)])[0]


def owner(i):
    return f"8d3e4f5a-0000-4000-8000-{i:012d}"


def cycles(con):
    for start in range(0, CYCLES, BATCH):
        batch = []
        for i in range(start, start + BATCH):
            key, who = f"pgo:c:{i}", owner(i % 97)
            batch += [command("LOCK.ACQUIRE", key, who, 30000), command("LOCK.RELEASE", key, who)]
        replies = con.pipeline(batch)
        if not replies[0].isdigit() or replies[1] != b"1":
            raise ServerError(f"a cycle answered {replies[:2]!r}, not a token and 1")


def single_holder(con, rounds=2_000):
    """Renewals, checks and refusals around one exclusive hold."""
    for i in range(rounds):
        key, me, other = f"pgo:s:{i % 50}", owner(1), owner(2)
        token = con.call("LOCK.ACQUIRE", key, me, 30000)
        con.pipeline(
            [
                command("LOCK.ACQUIRE", key, me, 30000),  # a retry: the same token
                command("LOCK.ACQUIRE", key, other, 30000),  # busy: nil
                command("LOCK.EXTEND", key, me, 20000),
                command("LOCK.EXTEND", key, me, 20000, "TOKEN", token),
                command("LOCK.FENCE", key),
                command("LOCK.FENCE", key, token),
                command("LOCK.RELEASE", key, other),  # not the holder: 0
                command("LOCK.GUARD", key, token, "SET", f"pgo:data:{i % 50}", i),
                command("LOCK.INFO", key),
                command("LOCK.WATCH", key),
                command("LOCK.RELEASE", key, me, "TOKEN", token),
                command("LOCK.RELEASE", key, me),  # twice: 0
                command("LOCK.ACQUIRE", key, "*", 30000),
                command("LOCK.FORCERELEASE", key),
                command("LOCK.ACQUIRE", key, me, "bad-ttl"),  # an argument error
            ],
            errors_expected=(14,),
        )


def families(con, rounds=1_000):
    """Shared holds, semaphores, session holds and lock sets."""
    for i in range(rounds):
        rw, sem, k1, k2 = f"pgo:rw:{i}", f"pgo:sem:{i}", f"pgo:m1:{i}", f"pgo:m2:{i}"
        con.pipeline(
            [command("LOCK.ACQUIRE", rw, owner(n), 30000, "SHARED") for n in range(4)]
            + [command("LOCK.ACQUIRE", rw, owner(9), 30000)]  # a writer refused
            + [command("LOCK.RELEASE", rw, owner(n)) for n in range(4)]
            + [command("LOCK.ACQUIRE", sem, owner(n), 30000, "LIMIT", 3) for n in range(4)]
            + [command("LOCK.RELEASE", sem, owner(n)) for n in range(4)]
            + [
                command("LOCK.ACQUIRE", f"pgo:sess:{i}", owner(1), 30000, "SESSION"),
                command("LOCK.RELEASE", f"pgo:sess:{i}", owner(1)),
                command("LOCK.MACQUIRE", 2, k1, k2, owner(1), 30000),
                command("LOCK.MACQUIRE", 2, k1, k2, owner(2), 30000),
                command("LOCK.MRELEASE", 2, k1, k2, owner(1)),
            ]
        )


def waiter(key, me, done):
    con = Connection()
    while not done.is_set():
        if con.call("LOCK.ACQUIRE", key, me, 30000, "WAIT", 2000) is not None:
            con.call("LOCK.RELEASE", key, me)


def queues():
    """Handoffs through a FIFO queue: each release grants the next waiter."""
    key, done = "pgo:queue", threading.Event()
    threads = [
        threading.Thread(target=waiter, args=(key, owner(100 + n), done), daemon=True)
        for n in range(3)
    ]
    for t in threads:
        t.start()
    try:
        con = Connection()
        for _ in range(HANDOFFS // 3):
            if con.call("LOCK.ACQUIRE", key, owner(1), 30000, "WAIT", 2000) is not None:
                con.call("LOCK.RELEASE", key, owner(1))
    finally:
        done.set()
    for t in threads:
        t.join(timeout=10)


def connect():
    """The server started as PID, once it answers (not another one that took the port first)."""
    deadline = time.monotonic() + 30
    while True:
        try:
            con = Connection()
            info = con.call("INFO", "server").decode()
            break
        except (ConnectionError, OSError):
            if time.monotonic() > deadline:
                raise
            time.sleep(0.1)
    if f"process_id:{PID}\r\n" not in info:
        sys.exit(f"pgo_train: port {PORT} is served by another process than {PID}")
    return con


def main():
    con = connect()
    cycles(con)
    single_holder(con)
    families(con)
    queues()
    cycles(con)
    con.sock.sendall(command("SHUTDOWN", "NOSAVE"))


if __name__ == "__main__":
    main()
