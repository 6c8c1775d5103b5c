"""Contended throughput and fairness of Python lock clients on one lock, in one run on one server:
redislock (this repository), redis-py's Lock (polling, with its default 0.1 s sleep and with
1 ms), and python-redis-lock (BLPOP signals). K threads loop: acquire, hold, release. Prints one
JSON object per client. Usage: contended.py PORT SECONDS CLIENTS HOLD_MS"""

import json
import sys
import threading
import time

import redis


def jain(counts):
    total = sum(counts)
    squares = sum(c * c for c in counts)
    return (total * total) / (len(counts) * squares) if squares else 0.0


def run(name, make_lock, port, seconds, clients, hold):
    stop = time.monotonic() + seconds
    counts = [0] * clients
    waits = []

    def worker(i):
        r = redis.Redis(port=port)
        acquire, release = make_lock(r, i)
        while time.monotonic() < stop:
            asked = time.monotonic()
            if not acquire():
                continue
            waits.append(time.monotonic() - asked)
            time.sleep(hold)
            release()
            counts[i] += 1

    threads = [threading.Thread(target=worker, args=(i,)) for i in range(clients)]
    started = time.monotonic()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    elapsed = time.monotonic() - started
    waits.sort()
    p99 = waits[max(0, int(len(waits) * 0.99) - 1)] if waits else 0.0
    print(json.dumps({
        "client": name,
        "grants_per_sec": sum(counts) / elapsed,
        "jain": jain(counts),
        "wait_p99_ms": p99 * 1000,
    }), flush=True)


def redislock_client(r, key):
    import redislock

    lock = redislock.Lock(r, key, ttl=10, watchdog=False)
    return (lambda: lock.acquire(timeout=5)), lock.release


def redis_py_client(r, key, sleep):
    lock = r.lock(key, timeout=10, sleep=sleep)
    return (lambda: lock.acquire(blocking_timeout=5)), lock.release


def python_redis_lock_client(r, key):
    import redis_lock

    lock = redis_lock.Lock(r, key, expire=10)
    return (lambda: lock.acquire(timeout=5)), lock.release


def main():
    port, seconds, clients, hold_ms = int(sys.argv[1]), float(sys.argv[2]), int(sys.argv[3]), float(sys.argv[4])
    hold = hold_ms / 1000
    run("redislock.Lock (WAIT in the server)",
        lambda r, i: redislock_client(r, "bench:py:redislock"), port, seconds, clients, hold)
    run("redis-py Lock (default sleep 0.1 s)",
        lambda r, i: redis_py_client(r, "bench:py:redispy", 0.1), port, seconds, clients, hold)
    run("redis-py Lock (sleep 1 ms)",
        lambda r, i: redis_py_client(r, "bench:py:redispy1", 0.001), port, seconds, clients, hold)
    try:
        import redis_lock  # noqa: F401
    except ImportError:
        print(json.dumps({"client": "python-redis-lock", "missing": True}), flush=True)
        return
    run("python-redis-lock (BLPOP signal)",
        lambda r, i: python_redis_lock_client(r, "bench:py:prl"), port, seconds, clients, hold)


if __name__ == "__main__":
    main()
