"""The inventory soak through the fenced-transaction helpers, per database: worker processes
(fencing_worker.py) sell 100 units, each sale a read-modify-write in a fenced transaction under
the lock, while holders are SIGSTOPped past their lease, inside their transaction (each worker
stops itself after its 3rd read) and at random moments (by this test). This test continues any
worker stopped for two leases. Whatever the scheduler made of it, the stock adds up: sales
recorded + stock left = 100, nothing oversold, every worker finished, and the sales the workers
counted are the rows recorded. (How many holds went stale is the scheduler's business.)"""

import json
import os
import random
import select
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from conftest import Server
from databases import STOCK, database

WORKERS = 3
LEASE = 0.25
STOP_AT = 3  # each worker stops itself after its 3rd read, inside the transaction
BOUND = 45.0  # seconds for a whole soak (they take a few)
HERE = Path(__file__).resolve().parent

SOAKS = [("dbapi", "postgresql"), ("dbapi", "mysql"), ("dbapi", "sqlite"),
         ("sqlalchemy", "postgresql")]


def state(pid: int) -> str:
    """The state letter of /proc/PID/stat (T: stopped); '' once it is gone."""
    try:
        with open(f"/proc/{pid}/stat") as stat:
            return stat.read().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return ""


def signal_(pid: int, sig: int) -> None:
    try:
        os.kill(pid, sig)
    except ProcessLookupError:
        pass


@pytest.fixture
def redis_server():
    server = Server()
    yield server
    server.stop()


@pytest.mark.parametrize("api,dialect", SOAKS, ids=[f"{a}-{d}" for a, d in SOAKS])
def test_inventory_soak_with_holders_paused_past_their_lease(request, tmp_path, redis_server,
                                                             api, dialect):
    db = database(request, dialect, tmp_path)
    seed = random.randrange(2**32)
    rng = random.Random(seed)
    workers = []
    start = f"soak:{db.n}:start"
    for i in range(WORKERS):
        config = {"api": api, "dialect": db.dialect, "url": db.url, "n": db.n,
                  "redis_port": redis_server.port, "key": f"{{sku9}}:soak:{db.n}",
                  "who": f"w{i}", "stop_at": STOP_AT, "lease": LEASE, "start": start}
        workers.append(subprocess.Popen(
            [sys.executable, str(HERE / "fencing_worker.py"), json.dumps(config)],
            cwd=HERE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        ))
    outputs = {}
    try:
        for w in workers:  # started and connected (a slow start is not part of the soak)
            waited = select.select([w.stdout], [], [], BOUND)[0]
            assert waited and w.stdout.readline() == "ready\n", f"worker {w.pid} is not ready"
        redis_server.client().rpush(start, *["go"] * WORKERS)
        started = time.monotonic()
        stopped_at = {}  # pid -> when it was first seen stopped
        next_stop = started + rng.uniform(0.1, 0.3)
        while any(w.poll() is None for w in workers):
            now = time.monotonic()
            assert now - started < BOUND, f"the soak ran past {BOUND} s (seed {seed})"
            for w in workers:
                if w.poll() is None and state(w.pid) == "T":
                    since = stopped_at.setdefault(w.pid, now)
                    if now - since >= 2 * LEASE:
                        signal_(w.pid, signal.SIGCONT)
                        stopped_at.pop(w.pid)
                else:
                    stopped_at.pop(w.pid, None)
            if now >= next_stop:  # a holder, or a waiter, paused at a random moment
                running = [w for w in workers if w.poll() is None and w.pid not in stopped_at]
                if running:
                    signal_(rng.choice(running).pid, signal.SIGSTOP)
                next_stop = now + rng.uniform(0.4, 1.0)
            time.sleep(0.02)
        for w in workers:
            outputs[w.pid] = w.communicate(timeout=10)
    finally:
        for w in workers:  # on a failure: by PID, continued first so that KILL is not queued
            if w.poll() is None:
                signal_(w.pid, signal.SIGCONT)
                w.kill()
                w.wait()
    elapsed = time.monotonic() - started
    for w in workers:
        out, err = outputs[w.pid]
        assert w.returncode == 0, f"worker {w.pid} exited {w.returncode} (seed {seed}): {err}"
    counts = [json.loads(outputs[w.pid][0].strip().splitlines()[-1]) for w in workers]
    left, sold = db.qty(), db.sold()
    print(f"{api} on {dialect}: {elapsed:.1f} s, seed {seed}, {counts}")
    assert left >= 0
    assert sold + left == STOCK, f"{sold} sold and {left} left of {STOCK} (seed {seed})"
    assert left == 0, "every worker stopped when it read 0"
    assert sum(c["sold"] for c in counts) == sold, f"the workers' counts {counts} (seed {seed})"
