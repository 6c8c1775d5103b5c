"""A worker process of the fenced inventory soak (test_fencing_soak.py), run as

    python fencing_worker.py '<json config>'

It sells from the shop of ``databases.Database(dialect, url, n)`` until it reads 0: for each
sale it takes the lock (waiting in the server's queue; lease ``lease``, renewed by the
watchdog), then in the fenced transaction reads the stock, writes the read value minus one and
records the sale, commits, and releases. It says ``ready`` once connected, and starts when
the test pushes to the list ``start``. On its ``stop_at``-th read it stops itself (SIGSTOP)
inside the transaction, past its lease, until the test continues it; the test stops it at
random moments too. A stale hold counts and goes on; a deadlock, a serialization failure or a
lock wait that timed out is rolled back by the helper and tried again. At the end it prints
``{"sold": n, "stale": n, "retried": n}`` on one line."""

import json
import os
import signal
import sys

import redis

import redislock
import redislock.db
import redislock.sqlalchemy
from databases import SKU, Database

#: PostgreSQL's SQLSTATEs (deadlock, serialization failure, lock wait timed out) and MariaDB's
#: error numbers (lock wait timeout, deadlock) worth a retry.
RETRY_SQLSTATES = {"40P01", "40001", "55P03"}
RETRY_MYSQL = {1205, 1213}


def retryable(err: BaseException) -> bool:
    err = getattr(err, "orig", None) or err  # SQLAlchemy wraps the driver's error
    if getattr(err, "sqlstate", None) in RETRY_SQLSTATES:
        return True
    if type(err).__module__.startswith("pymysql") and err.args and err.args[0] in RETRY_MYSQL:
        return True
    return type(err).__module__ == "sqlite3" and "locked" in str(err)


class Dbapi:
    def __init__(self, db: Database, who: str):
        self.conn = db.connect()
        self.who = who
        self.sql = {
            "read": f"SELECT qty FROM {db.stock} WHERE sku = {db.mark}",
            "write": f"UPDATE {db.stock} SET qty = {db.mark} WHERE sku = {db.mark}",
            "sale": f"INSERT INTO {db.sales} (sku, who) VALUES ({db.mark}, {db.mark})",
        }

    def sell(self, lock, pause) -> bool:
        """One sale in a fenced transaction; False once the stock reads 0."""
        with redislock.db.fenced(self.conn, lock) as cur:
            cur.execute(self.sql["read"], (SKU,))
            qty = int(cur.fetchone()[0])
            if qty <= 0:
                return False
            pause()
            cur.execute(self.sql["write"], (qty - 1, SKU))
            cur.execute(self.sql["sale"], (SKU, self.who))
        return True


class Orm:
    """The same with the SQLAlchemy ORM: ``db.get(Stock, sku)``, change, commit."""

    def __init__(self, db: Database, who: str):
        from sqlalchemy.orm import Session

        from fencing_apis import models

        self.engine = db.engine()
        self.session = Session(self.engine)
        self.Stock, self.Sale = models(db)
        self.who = who

    def sell(self, lock, pause) -> bool:
        with redislock.sqlalchemy.fenced(self.session, lock) as session:
            stock = session.get(self.Stock, SKU)
            if stock.qty <= 0:
                return False
            pause()
            stock.qty = stock.qty - 1
            session.add(self.Sale(sku=SKU, who=self.who))
        return True


def main() -> None:
    config = json.loads(sys.argv[1])
    db = Database(config["dialect"], config["url"], config["n"])
    shop = (Orm if config["api"] == "sqlalchemy" else Dbapi)(db, config["who"])
    r = redis.Redis(port=config["redis_port"])
    print("ready", flush=True)
    if r.blpop([config["start"]], timeout=60) is None:  # all start selling at once
        sys.exit("never told to start")
    counts = {"sold": 0, "stale": 0, "retried": 0}
    reads = 0

    def pause() -> None:
        nonlocal reads
        reads += 1
        if reads == config["stop_at"]:
            os.kill(os.getpid(), signal.SIGSTOP)  # inside the transaction, past the lease

    while True:
        lock = redislock.Lock(r, config["key"], ttl=config["lease"], raise_on_lost=False)
        with lock:
            try:
                if not shop.sell(lock, pause):
                    break
                counts["sold"] += 1
            except redislock.Stale:
                counts["stale"] += 1
            except Exception as err:
                if not retryable(err):
                    raise
                counts["retried"] += 1
    print(json.dumps(counts), flush=True)


if __name__ == "__main__":
    main()
