"""Fenced transactions on a DB-API 2 connection: a lock's fencing token, checked and raised by
the database itself as the first statement of the transaction (docs/fencing.md).

    with redislock.Lock(r, "order:42", ttl=30.0) as lock:
        with redislock.db.fenced(conn, lock) as cur:     # BEGIN; the fence; ... COMMIT
            cur.execute("SELECT qty FROM stock WHERE sku = %s", ("sku9",))
            ...

``fenced`` begins a transaction on ``conn``, raises the fence of ``lock`` (its key, unless
``name`` is given) in ``table`` first, hands the body a cursor, commits when the body returns
and rolls back when it raises (re-raising its error). When a newer holder's token is stored it
rolls back before the body runs and raises ``redislock.Stale``. It never checks the lease
(the database decides) and retries nothing. ``fence`` runs the fence statement alone, in a
transaction the caller manages; ``create_fence_table`` makes the table (the helpers never do).

Drivers: psycopg 3 (and ``psycopg.AsyncConnection`` with ``async_fenced``), sqlite3 (and
aiosqlite), PyMySQL and mysqlclient; the database is found from the connection's module, or
named with ``dialect='postgresql' | 'mysql' | 'sqlite'`` for another driver. The connection
must not be in a transaction when ``fenced`` begins (``RuntimeError``): the fence is the first
statement, and a read before it may be stale. Works in autocommit mode too (it sends ``BEGIN``
itself then). SQLite: ``BEGIN IMMEDIATE``, so set a busy timeout (``sqlite3.connect(...,
timeout=10)``) for the next holder to wait rather than fail with "database is locked".

The rules (statements per database, the decision, commit and rollback) are written once in
``redislock._fencing``; this module does their I/O, with plain calls or awaiting them.
"""

from __future__ import annotations

import inspect
import sys
from dataclasses import dataclass
from typing import Any, Optional

from . import _fencing as f
from ._core import arun, run
from ._fencing import TABLE

__all__ = [
    "fenced",
    "async_fenced",
    "fence",
    "async_fence",
    "create_fence_table",
    "async_create_fence_table",
    "TABLE",
]

#: The IN_TRANS bit of MySQL's server status (PyMySQL's ``server_status``).
_MYSQL_IN_TRANS = 1


def _paramstyle(obj: Any, dialect: f.Dialect) -> str:
    """The DB-API ``paramstyle`` of the driver of ``obj`` (its top-level module's), else the
    usual one of ``dialect``'s drivers."""
    for cls in type(obj).__mro__:
        module = sys.modules.get((cls.__module__ or "").split(".", 1)[0])
        style = getattr(module, "paramstyle", None)
        if isinstance(style, str):
            return style
    return "qmark" if dialect is f.SQLITE else "format"


def _in_transaction(conn: Any) -> Optional[bool]:
    """Whether ``conn`` is in a transaction, as its driver says (None: it does not say)."""
    status = getattr(getattr(conn, "info", None), "transaction_status", None)
    if status is not None:  # psycopg (libpq's status: 0 is idle)
        return int(status) != 0
    in_transaction = getattr(conn, "in_transaction", None)
    if isinstance(in_transaction, bool):  # sqlite3, aiosqlite
        return in_transaction
    server_status = getattr(conn, "server_status", None)
    if isinstance(server_status, int):  # PyMySQL
        return bool(server_status & _MYSQL_IN_TRANS)
    return None


def _would_autocommit(conn: Any) -> bool:
    """Whether a statement on ``conn`` now would be committed on its own (no transaction open,
    autocommit on): a fence there orders nothing."""
    if _in_transaction(conn):
        return False
    if hasattr(conn, "in_transaction") and getattr(conn, "isolation_level", "") is None:
        return True  # sqlite3 / aiosqlite with isolation_level=None
    return _autocommit(conn)


def _check_in_transaction(cursor_or_conn: Any) -> None:
    conn = getattr(cursor_or_conn, "connection", None) if _is_cursor(cursor_or_conn) else \
        cursor_or_conn
    if conn is not None and _would_autocommit(conn):
        raise RuntimeError("fence() needs a transaction: the connection commits each statement "
                           "on its own and none is open (BEGIN first, or use fenced())")


def _autocommit(conn: Any) -> bool:
    """Whether ``conn`` commits each statement on its own (then ``fenced`` sends ``BEGIN`` and
    ``COMMIT``/``ROLLBACK`` itself)."""
    autocommit = getattr(conn, "autocommit", None)
    if isinstance(autocommit, bool):  # psycopg, sqlite3 from Python 3.12 (else -1: legacy)
        return autocommit
    get = getattr(conn, "get_autocommit", None)  # PyMySQL, mysqlclient
    return bool(get()) if callable(get) else False


@dataclass(frozen=True)
class _Plan:
    """How ``fenced`` begins and ends a transaction on a connection."""

    send_begin: bool
    end_with_statements: bool


def _plan(conn: Any, dialect: f.Dialect) -> _Plan:
    if dialect is f.SQLITE and getattr(conn, "autocommit", None) is False:
        # sqlite3's PEP 249 mode (Python 3.12+): a deferred transaction is always open, begun
        # when the last one ended; the fence is its first statement (docs/fencing.md allows a
        # deferred one) unless the caller wrote in it since.
        return _Plan(False, False)
    state = _in_transaction(conn)
    if state:
        raise f.already_open("the connection")
    autocommit = _autocommit(conn)
    # psycopg (and a driver that does not say) begins on its own at the first statement; a
    # BEGIN of ours would come second. sqlite3 would begin a deferred one: ours is IMMEDIATE.
    # On MySQL a driver that does not say (mysqlclient) may be inside a transaction whose
    # snapshot predates the fence: START TRANSACTION ends it, so the fence comes first.
    implicit = dialect is f.POSTGRESQL or (state is None and dialect is not f.MYSQL)
    return _Plan(send_begin=autocommit or not implicit, end_with_statements=autocommit)


def _first(row: Any) -> Any:
    """The first column of a row (a tuple, or a dict from a dict cursor)."""
    if row is None:
        return None
    if isinstance(row, dict):
        return next(iter(row.values()))
    return row[0]


class _Cursor:
    """The I/O of ``redislock._fencing``'s rules on a DB-API cursor, with plain calls."""

    def __init__(self, conn: Any, cursor: Any, dialect: f.Dialect):
        self.conn, self.cursor, self.dialect = conn, cursor, dialect
        self.plan = _Plan(False, False)

    def begin(self, statement: str) -> None:
        self.plan = _plan(self.conn, self.dialect)
        if self.plan.send_begin:
            self.cursor.execute(statement)

    def execute(self, sql: str, params: Any) -> int:
        if params is None:
            self.cursor.execute(sql)
        else:
            self.cursor.execute(sql, params)
        return self.cursor.rowcount

    def scalar(self, sql: str, params: Any) -> Any:
        self.execute(sql, params)
        return _first(self.cursor.fetchone())

    def commit(self) -> None:
        if self.plan.end_with_statements:
            self.cursor.execute("COMMIT")
        else:
            self.conn.commit()

    def rollback(self) -> None:
        if self.plan.end_with_statements:
            self.cursor.execute("ROLLBACK")
        else:
            self.conn.rollback()


class _AsyncCursor:
    """The same I/O on an asyncio driver's cursor (psycopg's ``AsyncCursor``, aiosqlite's),
    awaited."""

    def __init__(self, conn: Any, cursor: Any, dialect: f.Dialect):
        self.conn, self.cursor, self.dialect = conn, cursor, dialect
        self.plan = _Plan(False, False)

    async def begin(self, statement: str) -> None:
        self.plan = _plan(self.conn, self.dialect)
        if self.plan.send_begin:
            await self.cursor.execute(statement)

    async def execute(self, sql: str, params: Any) -> int:
        if params is None:
            await self.cursor.execute(sql)
        else:
            await self.cursor.execute(sql, params)
        return self.cursor.rowcount

    async def scalar(self, sql: str, params: Any) -> Any:
        await self.execute(sql, params)
        return _first(await self.cursor.fetchone())

    async def commit(self) -> None:
        if self.plan.end_with_statements:
            await self.cursor.execute("COMMIT")
        else:
            await self.conn.commit()

    async def rollback(self) -> None:
        if self.plan.end_with_statements:
            await self.cursor.execute("ROLLBACK")
        else:
            await self.conn.rollback()


async def _acursor(conn: Any) -> Any:
    """A cursor of an asyncio connection (psycopg makes it at once, aiosqlite awaits it)."""
    cursor = conn.cursor()
    return await cursor if inspect.isawaitable(cursor) else cursor


async def _aclose(cursor: Any) -> None:
    closed = cursor.close()
    if inspect.isawaitable(closed):
        await closed


def _is_cursor(obj: Any) -> bool:
    return hasattr(obj, "fetchone")


class Fenced:
    """``with fenced(conn, lock) as cur:`` (see ``fenced``)."""

    def __init__(self, conn: Any, lock: Any, name: Optional[str], table: str,
                 dialect: Optional[str]):
        self._conn, self._lock, self._name, self._table = conn, lock, name, table
        self._dialect = f.dialect_of(conn, dialect)
        self._io: Any = None

    def _fence(self) -> f.Fence:
        # At entry, not before: the token is the one the lock holds when the block begins.
        paramstyle = _paramstyle(self._conn, self._dialect)
        return f.fence_of(self._lock, self._dialect, paramstyle, self._name, self._table)

    def __enter__(self) -> Any:
        fence = self._fence()
        cursor = self._conn.cursor()
        try:
            self._io = _Cursor(self._conn, cursor, self._dialect)
            run(f.enter(self._io, fence))
        except BaseException:
            cursor.close()
            raise
        return cursor

    def __exit__(self, exc_type: Any, exc: Any, tb: Any) -> None:
        try:
            run(f.leave(self._io, failed=exc_type is not None))
        finally:
            self._io.cursor.close()


class AsyncFenced(Fenced):
    """``async with async_fenced(aconn, lock) as cur:`` (see ``async_fenced``)."""

    async def __aenter__(self) -> Any:
        fence = self._fence()
        cursor = await _acursor(self._conn)
        try:
            self._io = _AsyncCursor(self._conn, cursor, self._dialect)
            await arun(f.enter(self._io, fence))
        except BaseException:
            await _aclose(cursor)
            raise
        return cursor

    async def __aexit__(self, exc_type: Any, exc: Any, tb: Any) -> None:
        try:
            await arun(f.leave(self._io, failed=exc_type is not None))
        finally:
            await _aclose(self._io.cursor)


def fenced(conn: Any, lock: Any, *, name: Optional[str] = None, table: str = TABLE,
           dialect: Optional[str] = None) -> Fenced:
    """A transaction on the DB-API connection ``conn`` fenced by ``lock``'s hold (a
    ``redislock.Lock``, or anything with ``token`` and ``key``), for ``with``, which gives a
    cursor of ``conn``:

    - begins it (``BEGIN IMMEDIATE`` on SQLite), and as its first statement stores the hold's
      token as the fence ``name`` (default: the lock's key) in ``table`` (default
      ``lock_fences``, see ``create_fence_table``), unless a larger token is stored: then it
      rolls back and raises ``redislock.Stale`` before the body runs;
    - commits when the body returns; rolls back when it raises, and its error goes on.

    ``RuntimeError`` if ``conn`` is in a transaction already (commit or roll back first).
    ``dialect`` names the database ('postgresql', 'mysql', 'sqlite') when the driver is not
    one this module knows."""
    return Fenced(conn, lock, name, table, dialect)


def async_fenced(conn: Any, lock: Any, *, name: Optional[str] = None, table: str = TABLE,
                 dialect: Optional[str] = None) -> AsyncFenced:
    """``fenced`` for an asyncio DB-API connection (``psycopg.AsyncConnection``,
    ``aiosqlite``), for ``async with``; ``lock`` may be a ``redislock.aio.Lock``."""
    return AsyncFenced(conn, lock, name, table, dialect)


def fence(cursor_or_conn: Any, lock: Any, *, name: Optional[str] = None, table: str = TABLE,
          dialect: Optional[str] = None) -> None:
    """Only the fence statement, in the transaction the caller (or a framework) manages:
    make it the transaction's first statement. ``redislock.Stale`` when a larger token is
    stored: roll the transaction back. Given a connection, it uses a cursor of its own.
    ``RuntimeError`` on a connection in autocommit mode with no transaction open (the fence
    would be committed alone and order nothing)."""
    d = f.dialect_of(cursor_or_conn, dialect)
    fence_ = f.fence_of(lock, d, _paramstyle(cursor_or_conn, d), name, table)
    _check_in_transaction(cursor_or_conn)
    if _is_cursor(cursor_or_conn):
        run(f.raise_fence(_Cursor(None, cursor_or_conn, d), fence_))
        return
    cursor = cursor_or_conn.cursor()
    try:
        run(f.raise_fence(_Cursor(cursor_or_conn, cursor, d), fence_))
    finally:
        cursor.close()


async def async_fence(cursor_or_conn: Any, lock: Any, *, name: Optional[str] = None,
                      table: str = TABLE, dialect: Optional[str] = None) -> None:
    """``fence`` for an asyncio DB-API cursor or connection."""
    d = f.dialect_of(cursor_or_conn, dialect)
    fence_ = f.fence_of(lock, d, _paramstyle(cursor_or_conn, d), name, table)
    _check_in_transaction(cursor_or_conn)
    if _is_cursor(cursor_or_conn):
        await arun(f.raise_fence(_AsyncCursor(None, cursor_or_conn, d), fence_))
        return
    cursor = await _acursor(cursor_or_conn)
    try:
        await arun(f.raise_fence(_AsyncCursor(cursor_or_conn, cursor, d), fence_))
    finally:
        await _aclose(cursor)


def create_fence_table(conn: Any, *, table: str = TABLE, dialect: Optional[str] = None) -> None:
    """``CREATE TABLE IF NOT EXISTS`` the fence table, in a transaction of its own (committed):
    ``name`` (the fence's name) as its primary key and ``token``, a 64-bit integer."""
    d = f.dialect_of(conn, dialect)
    cursor = conn.cursor()
    try:
        run(f.create(_Cursor(conn, cursor, d), d, table))
    finally:
        cursor.close()


async def async_create_fence_table(conn: Any, *, table: str = TABLE,
                                   dialect: Optional[str] = None) -> None:
    """``create_fence_table`` for an asyncio DB-API connection."""
    d = f.dialect_of(conn, dialect)
    cursor = await _acursor(conn)
    try:
        await arun(f.create(_AsyncCursor(conn, cursor, d), d, table))
    finally:
        await _aclose(cursor)
