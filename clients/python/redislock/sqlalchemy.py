"""Fenced transactions on a SQLAlchemy 2 ``Session`` (and ``AsyncSession``): the ORM's
read-change-commit, with the lock's fencing token checked and raised by the database as the
transaction's first statement (docs/fencing.md).

    with Session(engine) as db, redislock.Lock(r, "product:7", ttl=30.0) as lock:
        with redislock.sqlalchemy.fenced(db, lock):      # BEGIN; the fence; ... COMMIT
            product = db.get(Product, 7)
            product.stock -= 1

``fenced`` begins the session's transaction, runs the fence statement through it first (the
database from ``session.get_bind().dialect.name``), expires the session's objects so that every
one the body uses is read again after the fence, hands the body the session, commits when the
body returns and rolls back when it raises. A newer holder's token in the table: it rolls back
before the body runs and raises ``redislock.Stale``. The session must not be in a transaction
when ``fenced`` begins (``RuntimeError``: a read before the fence may be stale; a change to
its objects begins one too). ``fence`` runs only the fence statement in a transaction the caller
manages (a ``Session`` or a ``Connection``), ``create_fence_table`` makes the table.

SQLAlchemy is needed only by this module (``pip install 'redis-lock-client[sqlalchemy]'``);
the rules are ``redislock._fencing``'s, the very ones of ``redislock.db``.
"""

from __future__ import annotations

from typing import Any, Optional

from sqlalchemy import text

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


def _dialect(bind_or_session: Any, dialect: Optional[str]) -> f.Dialect:
    """The dialect named, else the one of the engine behind a session, connection or engine
    (an ``AsyncSession``'s and ``AsyncConnection``'s included)."""
    if dialect is not None:
        return f.dialect_named(dialect)
    sa_dialect = getattr(bind_or_session, "dialect", None)
    if sa_dialect is None:
        sa_dialect = bind_or_session.get_bind().dialect
    return f.dialect_named(sa_dialect.name)


def _check_fresh(session: Any) -> None:
    """``fenced`` begins the session's transaction: not while one is open (which any change
    to the session's objects begins too: their values may come from reads before the fence)."""
    if session.in_transaction():
        raise f.already_open("the session")


def _sqlite_immediate(connection: Any) -> bool:
    """Whether to open this SQLite transaction with ``BEGIN IMMEDIATE``: when the driver's
    connection says it is not in one yet (pysqlite would otherwise begin a deferred one at the
    fence; the fence first in a deferred transaction is right too, docs/fencing.md)."""
    dbapi = connection.connection.dbapi_connection
    return getattr(dbapi, "in_transaction", None) is False


class _Session:
    """The I/O of ``redislock._fencing``'s rules on a ``Session`` (or a ``Connection``:
    ``fence`` only), with plain calls."""

    paramstyle = "named"

    def __init__(self, session: Any, dialect: f.Dialect):
        self.session, self.dialect = session, dialect

    def begin(self, statement: str) -> None:
        _check_fresh(self.session)
        self.session.expire_all()  # what the body reads, it reads after the fence
        self.session.begin()
        try:
            if self.dialect is f.SQLITE:
                connection = self.session.connection()
                if _sqlite_immediate(connection):
                    connection.exec_driver_sql(statement)
        except BaseException:
            # A BEGIN IMMEDIATE that timed out ("database is locked") must not leave the
            # session in a transaction, or every retry would be refused as already open.
            self.session.rollback()
            raise

    def execute(self, sql: str, params: Any) -> int:
        return self.session.execute(text(sql), params or {}).rowcount

    def scalar(self, sql: str, params: Any) -> Any:
        return self.session.execute(text(sql), params or {}).scalar()

    def commit(self) -> None:
        self.session.commit()

    def rollback(self) -> None:
        self.session.rollback()


class _AsyncSession:
    """The same on an ``AsyncSession`` (or an ``AsyncConnection``), awaited."""

    paramstyle = "named"

    def __init__(self, session: Any, dialect: f.Dialect):
        self.session, self.dialect = session, dialect

    async def begin(self, statement: str) -> None:
        _check_fresh(self.session)
        self.session.expire_all()
        await self.session.begin()
        try:
            if self.dialect is f.SQLITE:
                connection = await self.session.connection()
                if _sqlite_immediate(connection.sync_connection):
                    await connection.exec_driver_sql(statement)
        except BaseException:
            await self.session.rollback()  # as the sync one: a retry must not find it open
            raise

    async def execute(self, sql: str, params: Any) -> int:
        return (await self.session.execute(text(sql), params or {})).rowcount

    async def scalar(self, sql: str, params: Any) -> Any:
        return (await self.session.execute(text(sql), params or {})).scalar()

    async def commit(self) -> None:
        await self.session.commit()

    async def rollback(self) -> None:
        await self.session.rollback()


class Fenced:
    """``with fenced(session, lock) as session:`` (see ``fenced``)."""

    def __init__(self, session: Any, lock: Any, name: Optional[str], table: str,
                 dialect: Optional[str]):
        self._session, self._lock, self._name, self._table = session, lock, name, table
        self._dialect = _dialect(session, dialect)

    def _fence(self) -> f.Fence:
        # At entry, not before: the token is the one the lock holds when the block begins.
        return f.fence_of(self._lock, self._dialect, "named", self._name, self._table)

    def __enter__(self) -> Any:
        run(f.enter(_Session(self._session, self._dialect), self._fence()))
        return self._session

    def __exit__(self, exc_type: Any, exc: Any, tb: Any) -> None:
        run(f.leave(_Session(self._session, self._dialect), failed=exc_type is not None))


class AsyncFenced(Fenced):
    """``async with async_fenced(session, lock) as session:`` (see ``async_fenced``)."""

    async def __aenter__(self) -> Any:
        await arun(f.enter(_AsyncSession(self._session, self._dialect), self._fence()))
        return self._session

    async def __aexit__(self, exc_type: Any, exc: Any, tb: Any) -> None:
        io = _AsyncSession(self._session, self._dialect)
        await arun(f.leave(io, failed=exc_type is not None))


def fenced(session: Any, lock: Any, *, name: Optional[str] = None, table: str = TABLE,
           dialect: Optional[str] = None) -> Fenced:
    """The ``Session``'s next transaction fenced by ``lock``'s hold (a ``redislock.Lock`` or
    ``redislock.aio.Lock``: anything with ``token`` and ``key``), for ``with``, which gives the
    session: it begins the transaction and runs the fence first (the fence ``name``, default
    the lock's key, in ``table``, default ``lock_fences``); a larger stored token rolls back
    and raises ``redislock.Stale`` before the body runs. The session's objects are expired
    after the fence, so the body reads them again. Commits when the body returns, rolls back
    when it raises (its error goes on). ``RuntimeError`` if the session is in a transaction
    already. ``dialect`` overrides the engine's ('postgresql', 'mysql', 'sqlite')."""
    return Fenced(session, lock, name, table, dialect)


def async_fenced(session: Any, lock: Any, *, name: Optional[str] = None, table: str = TABLE,
                 dialect: Optional[str] = None) -> AsyncFenced:
    """``fenced`` for an ``AsyncSession``, for ``async with``."""
    return AsyncFenced(session, lock, name, table, dialect)


def fence(session_or_connection: Any, lock: Any, *, name: Optional[str] = None,
          table: str = TABLE, dialect: Optional[str] = None) -> None:
    """Only the fence statement, in the transaction of a ``Session`` or ``Connection`` that the
    caller (or a framework) manages: run it first in the transaction, and expire what the
    session loaded before. ``redislock.Stale`` when a larger token is stored: roll back."""
    d = _dialect(session_or_connection, dialect)
    fence_ = f.fence_of(lock, d, "named", name, table)
    run(f.raise_fence(_Session(session_or_connection, d), fence_))


async def async_fence(session_or_connection: Any, lock: Any, *, name: Optional[str] = None,
                      table: str = TABLE, dialect: Optional[str] = None) -> None:
    """``fence`` for an ``AsyncSession`` or ``AsyncConnection``."""
    d = _dialect(session_or_connection, dialect)
    fence_ = f.fence_of(lock, d, "named", name, table)
    await arun(f.raise_fence(_AsyncSession(session_or_connection, d), fence_))


def create_fence_table(engine: Any, *, table: str = TABLE, dialect: Optional[str] = None) -> None:
    """``CREATE TABLE IF NOT EXISTS`` the fence table through ``engine`` (an ``Engine``), in a
    transaction of its own."""
    statement = f.ddl(_dialect(engine, dialect), table)
    with engine.begin() as connection:
        connection.exec_driver_sql(statement)


async def async_create_fence_table(engine: Any, *, table: str = TABLE,
                                   dialect: Optional[str] = None) -> None:
    """``create_fence_table`` through an ``AsyncEngine``."""
    statement = f.ddl(_dialect(engine, dialect), table)
    async with engine.begin() as connection:
        await connection.exec_driver_sql(statement)
