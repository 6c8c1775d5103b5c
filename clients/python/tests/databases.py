"""Real databases for the fenced-transaction tests: PostgreSQL and MariaDB started once per test
process by scripts/testdb.sh (throwaway servers on loopback, stopped by PID at the end, and by
the script's watcher if this process dies first), SQLite in a file of the test's own.

A ``Database`` connects to one of them with each API the helpers support (a DB-API connection,
sync or asyncio; SQLAlchemy URLs) and makes a shop of the test's own in it: the tables
``stock_<n>(sku, qty, fence)`` with 100 units of one sku and ``sales_<n>(id, sku, who)``, and
the fence table ``lock_fences`` (made once, by ``redislock.db.create_fence_table``)."""

import itertools
import os
import pathlib
import sqlite3
import subprocess
import tempfile
import time
from dataclasses import dataclass
from typing import Any, Dict, Optional

import pytest

from redislock.db import create_fence_table

ROOT = pathlib.Path(__file__).resolve().parents[3]
TESTDB = ROOT / "scripts" / "testdb.sh"
#: SQLite's busy timeout, seconds: the next holder waits (BEGIN IMMEDIATE) rather than fails.
SQLITE_BUSY_TIMEOUT = 20.0
STOCK = 100
SKU = "sku9"

_numbers = itertools.count(1)


class Server:
    """A PostgreSQL or MariaDB server of scripts/testdb.sh, in a directory of the system's temp
    dir (the server runs as another user, who must reach it)."""

    #: Tries to start: mariadb-install-db has been seen to crash (SIGSEGV in its bootstrap)
    #: on this loaded machine, once, with a fresh directory working at the next try.
    TRIES = 2

    def __init__(self, kind: str):
        self.kind = kind
        for attempt in range(1, self.TRIES + 1):
            self.dir = tempfile.mkdtemp(prefix=f"redislock-py-{kind}-")
            os.rmdir(self.dir)  # the script makes it, owned by the server's user
            started = subprocess.run(
                ["bash", str(TESTDB), "start", kind, self.dir, str(os.getpid())],
                capture_output=True, text=True, timeout=120,
            )
            if started.returncode == 0:
                break
            self.stop()  # what the failed start left (a server, a directory)
            if attempt == self.TRIES:
                raise RuntimeError(f"scripts/testdb.sh start {kind} failed: {started.stderr}")
        fields = dict(line.split("=", 1) for line in started.stdout.split() if "=" in line)
        self.port = int(fields["PORT"])
        self.user = fields["USER"]
        self.database = fields["DATABASE"]
        self.url = fields["URL"]

    def stopping(self) -> "subprocess.Popen[bytes]":
        """Stop the server (and remove its directory): the stop under way, to wait for."""
        return subprocess.Popen(["bash", str(TESTDB), "stop", self.dir],
                                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)

    def stop(self) -> None:
        self.stopping().wait(timeout=60)


@dataclass
class Database:
    """One database, as every API reaches it; ``n`` numbers the shop's tables."""

    dialect: str  # postgresql | mysql | sqlite
    url: str  # as the DB-API connect functions below take it (SQLite: a path)
    n: int

    @property
    def stock(self) -> str:
        return f"stock_{self.n}"

    @property
    def sales(self) -> str:
        return f"sales_{self.n}"

    @property
    def mark(self) -> str:
        """The DB-API parameter mark of the driver."""
        return "?" if self.dialect == "sqlite" else "%s"

    # -- DB-API --------------------------------------------------------------------------

    def connect(self, **kw: Any) -> Any:
        """A DB-API connection (psycopg, PyMySQL, sqlite3), not in autocommit mode."""
        return connect(self.dialect, self.url, **kw)

    async def aconnect(self) -> Any:
        """An asyncio DB-API connection (psycopg's, aiosqlite's)."""
        if self.dialect == "postgresql":
            import psycopg

            return await psycopg.AsyncConnection.connect(self.url)
        if self.dialect == "sqlite":
            import aiosqlite

            return await aiosqlite.connect(self.url, timeout=SQLITE_BUSY_TIMEOUT)
        raise NotImplementedError(f"no asyncio DB-API driver for {self.dialect} in the tests")

    # -- SQLAlchemy ----------------------------------------------------------------------

    def engine(self) -> Any:
        from sqlalchemy import create_engine

        return create_engine(sqlalchemy_url(self.dialect, self.url), **_engine_args(self.dialect))

    def async_engine(self) -> Any:
        from sqlalchemy.ext.asyncio import create_async_engine

        url = sqlalchemy_url(self.dialect, self.url, asyncio=True)
        return create_async_engine(url, **_engine_args(self.dialect))

    # -- the shop ------------------------------------------------------------------------

    def admin(self) -> Any:
        """A connection that commits each statement: to make tables, look and observe."""
        conn = self.connect()
        if self.dialect == "mysql":
            conn.autocommit(True)
        elif self.dialect == "postgresql":
            conn.autocommit = True
        else:
            conn.isolation_level = None
        return conn

    def make_shop(self) -> None:
        """This test's stock (100 units of ``SKU``, fence 0) and sales tables."""
        autoincrement = {
            "postgresql": "id bigserial PRIMARY KEY",
            "mysql": "id BIGINT AUTO_INCREMENT PRIMARY KEY",
            "sqlite": "id INTEGER PRIMARY KEY",
        }[self.dialect]
        conn = self.admin()
        try:
            cur = conn.cursor()
            cur.execute(f"CREATE TABLE {self.stock} (sku varchar(32) PRIMARY KEY, qty int NOT NULL,"
                        " fence bigint NOT NULL)")
            cur.execute(f"CREATE TABLE {self.sales} ({autoincrement}, sku varchar(32) NOT NULL,"
                        " who varchar(64) NOT NULL)")
            cur.execute(f"INSERT INTO {self.stock} VALUES ({self.mark}, {STOCK}, 0)", (SKU,))
            cur.close()
        finally:
            conn.close()

    def run(self, sql: str, *params: Any) -> None:
        """``sql`` (``{stock}``, ``{sales}``, ``{p}`` filled in, as in ``one``), committed."""
        conn = self.admin()
        try:
            conn.cursor().execute(sql.format(stock=self.stock, sales=self.sales, p=self.mark),
                                  params)
        finally:
            conn.close()

    def one(self, sql: str, *params: Any) -> Any:
        """The first column of the first row of ``sql`` (``{stock}``, ``{sales}`` and ``{p}``,
        the parameter mark, filled in), read in a transaction of its own."""
        conn = self.admin()
        try:
            cur = conn.cursor()
            cur.execute(sql.format(stock=self.stock, sales=self.sales, p=self.mark), params)
            row = cur.fetchone()
            cur.close()
            return None if row is None else row[0]
        finally:
            conn.close()

    def qty(self) -> int:
        return int(self.one("SELECT qty FROM {stock} WHERE sku = {p}", SKU))

    def sold(self) -> int:
        return int(self.one("SELECT count(*) FROM {sales}"))

    def lock_waits(self) -> Optional[int]:
        """How many transactions wait for a row lock now (None: SQLite cannot say)."""
        if self.dialect == "postgresql":
            return int(self.one("SELECT count(*) FROM pg_stat_activity"
                                " WHERE wait_event_type = 'Lock'"))
        if self.dialect == "mysql":
            # innodb_trx misses some waits that SHOW ENGINE INNODB STATUS shows (a transaction
            # begun implicitly, not by START TRANSACTION, as SQLAlchemy's): a fence statement
            # running for 100 ms on this idle server is one too.
            return int(self.one(
                "SELECT (SELECT count(*) FROM information_schema.innodb_trx"
                " WHERE trx_state = 'LOCK WAIT') + (SELECT count(*) FROM"
                " information_schema.processlist WHERE command = 'Query'"
                " AND info LIKE 'INSERT INTO %%fences%%' AND time_ms > 100)"))
        return None

    async def a_waiter(self, timeout: float = 5.0) -> bool:
        """Whether a transaction comes to wait for a row lock within ``timeout`` (SQLite: a
        short pause instead, its waits cannot be seen). The tests' outcomes never depend on it:
        it only makes the interleaving they are about the likely one."""
        import asyncio

        if self.lock_waits() is None:
            await asyncio.sleep(0.1)
            return False
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.lock_waits():
                return True
            await asyncio.sleep(0.01)
        return False


def connect(dialect: str, url: str, **kw: Any) -> Any:
    """A DB-API connection to ``url`` (as ``Database.url``) with the driver of ``dialect``."""
    if dialect == "postgresql":
        import psycopg

        return psycopg.connect(url, **kw)
    if dialect == "mysql":
        import pymysql

        rest = url.split("://", 1)[1]
        user, rest = rest.split("@", 1)
        host_port, database = rest.split("/", 1)
        host, port = host_port.split(":")
        return pymysql.connect(host=host, port=int(port), user=user, database=database, **kw)
    return sqlite3.connect(url, timeout=SQLITE_BUSY_TIMEOUT, check_same_thread=False, **kw)


def sqlalchemy_url(dialect: str, url: str, asyncio: bool = False) -> str:
    if dialect == "postgresql":
        return url.replace("postgresql://", "postgresql+psycopg://", 1)
    if dialect == "mysql":
        if asyncio:
            raise NotImplementedError("no asyncio MySQL driver in the tests")
        return url.replace("mysql://", "mysql+pymysql://", 1)
    return f"sqlite+{'aiosqlite' if asyncio else 'pysqlite'}:///{url}"


def _engine_args(dialect: str) -> Dict[str, Any]:
    if dialect == "sqlite":
        return {"connect_args": {"timeout": SQLITE_BUSY_TIMEOUT}}
    return {}


def _fence_table(dialect: str, url: str) -> None:
    conn = connect(dialect, url)
    try:
        create_fence_table(conn)
        create_fence_table(conn)  # idempotent
    finally:
        conn.close()


class Servers:
    """The database servers of a test process, each started when a test first needs it, all
    stopped together at the end (a MariaDB takes seconds to stop)."""

    def __init__(self):
        self._started: Dict[str, Server] = {}

    def get(self, kind: str, dialect: str) -> Server:
        if kind not in self._started:
            server = Server(kind)
            self._started[kind] = server
            _fence_table(dialect, server.url)
        return self._started[kind]

    def stop(self) -> None:
        for stopping in [server.stopping() for server in self._started.values()]:
            stopping.wait(timeout=60)


@pytest.fixture(scope="session")
def database_servers():
    servers = Servers()
    yield servers
    servers.stop()


@pytest.fixture(scope="session")
def postgresql_server(database_servers):
    return database_servers.get("postgres", "postgresql")


@pytest.fixture(scope="session")
def mysql_server(database_servers):
    return database_servers.get("mariadb", "mysql")


def database(request: Any, dialect: str, tmp_path: pathlib.Path) -> Database:
    """A ``Database`` of ``dialect`` with a shop of this test's own (servers started once)."""
    if dialect == "sqlite":
        path = str(tmp_path / "shop.db")
        _fence_table("sqlite", path)
        db = Database("sqlite", path, next(_numbers))
    else:
        server = request.getfixturevalue(f"{dialect}_server")
        db = Database(dialect, server.url, next(_numbers))
    db.make_shop()
    return db


def missing(*modules: str) -> Optional[str]:
    """The first of ``modules`` that cannot be imported (for a skip), or None."""
    import importlib.util

    for module in modules:
        if importlib.util.find_spec(module) is None:
            return module
    return None
