"""Fenced database transactions, written once for every driver and both flavours, sans-IO.

The recipe is docs/fencing.md's: the transaction's first statement raises the resource's fence
in a table of fences (one row per name, the largest token seen), and a larger stored token means
a newer holder has been in: roll back before anything else runs and raise ``Stale``. The row
lock the fence statement takes orders two holders' transactions, whichever commits first.

Here are the dialects (their statements, each written once, in ``:name`` style and rendered
for the driver's ``paramstyle``), the checks of the caller's arguments, and the rules of
``fenced`` (begin, fence, commit or roll back), ``fence`` and ``create_fence_table`` as
generators that yield each piece of I/O as a step ``(io_method, *args)`` (see ``_core``): the
I/O object of ``redislock.db`` runs DB-API cursors, the one of ``redislock.sqlalchemy`` runs a
``Session``; each carries the steps out with ``_core.run`` or, awaiting them, ``_core.arun``.

An I/O object has these methods (coroutines in an asyncio flavour):

- ``begin(statement)``: begin a transaction, with ``statement`` if the driver needs it sent
  (``RuntimeError`` if the connection is in a transaction already: the fence would not be
  its first statement);
- ``execute(sql, params)``: run a statement (``params`` None: it has none), return its rows
  affected;
- ``scalar(sql, params)``: run a query, return the first column of its first row (or None);
- ``commit()``, ``rollback()``.
"""

from __future__ import annotations

import logging
import re
from dataclasses import dataclass
from typing import Any, Dict, List, Optional, Tuple

from ._core import Steps
from .errors import Stale

log = logging.getLogger("redislock")

#: The default table of fences.
TABLE = "lock_fences"

_IDENTIFIER = re.compile(r"[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)?\Z")
_PARAM = re.compile(r":([a-z]+)")


@dataclass(frozen=True)
class Dialect:
    """A database's statements: ``begin`` opens a transaction that takes the write lock where
    the database has such a thing; ``upsert`` raises the fence (one statement whose rows
    affected say who won, or, with ``read_back``, a statement then a query that reads the
    stored token back under the row lock); ``ddl`` makes the table."""

    name: str
    begin: str
    upsert: str
    read_back: Optional[str]
    ddl: str


POSTGRESQL = Dialect(
    name="postgresql",
    begin="BEGIN",
    upsert=(
        "INSERT INTO {table} (name, token) VALUES (:name, :token)"
        " ON CONFLICT (name) DO UPDATE SET token = EXCLUDED.token"
        " WHERE {target}.token <= EXCLUDED.token"
    ),
    read_back=None,
    ddl="CREATE TABLE IF NOT EXISTS {table} (name text PRIMARY KEY, token bigint NOT NULL)",
)

# MySQL's rows affected cannot tell "a newer token is stored" from "this token is stored
# already" (CLIENT_FOUND_ROWS, set differently by drivers): the token is read back instead.
MYSQL = Dialect(
    name="mysql",
    begin="START TRANSACTION",
    upsert=(
        "INSERT INTO {table} (name, token) VALUES (:name, :token)"
        " ON DUPLICATE KEY UPDATE token = GREATEST(token, VALUES(token))"
    ),
    read_back="SELECT token FROM {table} WHERE name = :name FOR UPDATE",
    ddl=(
        "CREATE TABLE IF NOT EXISTS {table} (name VARBINARY(255) PRIMARY KEY,"
        " token BIGINT NOT NULL) ENGINE = InnoDB"
    ),
)

SQLITE = Dialect(
    name="sqlite",
    begin="BEGIN IMMEDIATE",
    upsert=(
        "INSERT INTO {table} (name, token) VALUES (:name, :token)"
        " ON CONFLICT (name) DO UPDATE SET token = excluded.token"
        " WHERE {target}.token <= excluded.token"
    ),
    read_back=None,
    ddl="CREATE TABLE IF NOT EXISTS {table} (name TEXT PRIMARY KEY, token INTEGER NOT NULL)",
)

#: Dialects by the names callers, drivers and SQLAlchemy give them.
DIALECTS: Dict[str, Dialect] = {
    "postgresql": POSTGRESQL,
    "postgres": POSTGRESQL,
    "mysql": MYSQL,
    "mariadb": MYSQL,
    "sqlite": SQLITE,
}

#: The driver modules whose connections name their dialect (the first part of the class's
#: module, matched along the class's MRO, so an application's subclass is found too).
DRIVERS: Dict[str, str] = {
    "psycopg": "postgresql",
    "psycopg2": "postgresql",
    "sqlite3": "sqlite",
    "aiosqlite": "sqlite",
    "pymysql": "mysql",
    "MySQLdb": "mysql",
}


def dialect_named(name: str) -> Dialect:
    """The dialect called ``name`` (``ValueError`` for one this module does not know)."""
    try:
        return DIALECTS[name.lower()]
    except (KeyError, AttributeError):
        known = ", ".join(sorted(DIALECTS))
        raise ValueError(f"unknown dialect {name!r} (known: {known})") from None


def driver_of(obj: Any) -> Optional[str]:
    """The top-level module of the driver that made ``obj`` (a connection or a cursor), if
    it is one of ``DRIVERS``."""
    for cls in type(obj).__mro__:
        top = (cls.__module__ or "").split(".", 1)[0]
        if top in DRIVERS:
            return top
    return None


def dialect_of(obj: Any, dialect: Optional[str] = None) -> Dialect:
    """The dialect named by ``dialect`` if given, else found from ``obj``'s driver; a
    ``ValueError`` that says what to do when neither names one."""
    if dialect is not None:
        return dialect_named(dialect)
    driver = driver_of(obj)
    if driver is None:
        cls = type(obj)
        raise ValueError(
            f"cannot tell the database of a {cls.__module__}.{cls.__qualname__}: pass "
            "dialect='postgresql', 'mysql' or 'sqlite'"
        )
    return DIALECTS[DRIVERS[driver]]


def check_table(table: str) -> str:
    """``table`` if it is an identifier (``[A-Za-z_][A-Za-z0-9_]*``), optionally qualified
    by a schema (``schema.table``): it is written into the statements, never quoted."""
    if not isinstance(table, str) or not _IDENTIFIER.match(table):
        raise ValueError(
            f"the fence table must be an identifier, optionally schema-qualified: {table!r}"
        )
    return table


def render(sql: str, paramstyle: str, values: Dict[str, Any]) -> Tuple[str, Any]:
    """``sql`` written with ``:name`` parameters, and its parameters, in a DB-API
    ``paramstyle``: ``named`` keeps them (a dict), the positional styles get a tuple in the
    order of the placeholders."""
    if paramstyle == "named":
        return sql, {k: values[k] for k in _PARAM.findall(sql)}
    marks = {"qmark": "?", "format": "%s", "pyformat": "%s"}
    order: List[str] = []

    def mark(match: "re.Match[str]") -> str:
        order.append(match.group(1))
        if paramstyle == "numeric":
            return f":{len(order)}"
        return marks[paramstyle]

    if paramstyle not in marks and paramstyle != "numeric":
        raise ValueError(f"unknown DB-API paramstyle {paramstyle!r}")
    text = _PARAM.sub(mark, sql)
    return text, tuple(values[k] for k in order)


@dataclass(frozen=True)
class Fence:
    """One fence to raise: ``token`` for ``name`` in ``table``, in ``dialect``'s statements
    rendered for ``paramstyle``."""

    dialect: Dialect
    table: str
    name: str
    token: int
    paramstyle: str

    def _statement(self, template: str) -> Tuple[str, Any]:
        target = self.table.rsplit(".", 1)[-1]  # the table's own name, in ON CONFLICT's WHERE
        sql = template.format(table=self.table, target=target)
        return render(sql, self.paramstyle, {"name": self.name, "token": self.token})

    def upsert(self) -> Tuple[str, Any]:
        return self._statement(self.dialect.upsert)

    def read_back(self) -> Tuple[str, Any]:
        assert self.dialect.read_back is not None
        return self._statement(self.dialect.read_back)

    def stale(self, stored: Optional[int] = None) -> Stale:
        newer = f"token {stored}" if stored is not None else "a token"
        return Stale(
            f"stale: the fence {self.name!r} in {self.table} holds {newer} newer than this "
            f"hold's {self.token}: a newer holder has been in (rolled back)"
        )


def ddl(dialect: Dialect, table: str) -> str:
    """The ``CREATE TABLE IF NOT EXISTS`` of the fence table ``table`` in ``dialect``."""
    return dialect.ddl.format(table=check_table(table))


def fence_of(lock: Any, dialect: Dialect, paramstyle: str, name: Optional[str] = None,
             table: str = TABLE) -> Fence:
    """The fence of ``lock``'s hold (anything with ``token`` and ``key``: a ``redislock.Lock``
    or a ``redislock.aio.Lock``), named ``name`` (default: the lock's key). Only the token is
    read, not whether the hold still lives: the database decides that. ``Stale`` when it has
    no token (not held); ``ValueError`` for a shared hold or a semaphore's permits, which
    several holders hold at once."""
    mode = getattr(lock, "mode", None)
    if mode is not None and (getattr(mode, "shared", False) or getattr(mode, "limit", None)):
        raise ValueError("a shared hold or a semaphore's permits never fence a write; use an "
                         "exclusive Lock")
    if name is None:
        name = lock.key
    if isinstance(name, bytes):
        name = name.decode("utf-8")
    if not isinstance(name, str) or not name:
        raise ValueError(f"the fence's name must be a non-empty string: {name!r}")
    token = getattr(lock, "token", None)
    if token is None:
        raise Stale(f"the fence {name!r}: the lock is not held (it has no token)")
    return Fence(dialect, check_table(table), name, int(token), paramstyle)


def already_open(what: str) -> RuntimeError:
    return RuntimeError(
        f"{what} is in a transaction already, so the fence would not be its first statement "
        "(reads before it may be stale): commit or roll back first, or call fence() as the "
        "first statement of the transaction"
    )


# -- the rules ---------------------------------------------------------------------------------


def raise_fence(io: Any, fence: Fence) -> Steps[None]:
    """Run the fence statement(s) in the transaction ``io`` is in; ``Stale`` when a larger
    token is stored (the caller rolls back)."""
    sql, params = fence.upsert()
    affected = yield io.execute, sql, params
    if fence.dialect.read_back is None:
        # 1: stored (or this very token was already: `<=`); 0: a larger one is stored.
        if affected == 0:
            raise fence.stale()
        if affected != 1:
            raise RuntimeError(f"the fence statement affected {affected} rows (1 or 0 expected)")
        return
    sql, params = fence.read_back()
    stored = yield io.scalar, sql, params
    # GREATEST stored this token or kept a larger one: anything else is not a fence table.
    if stored is None or int(stored) < fence.token:
        raise RuntimeError(f"the fence {fence.name!r} in {fence.table} reads {stored!r} after "
                           f"storing {fence.token}")
    if int(stored) > fence.token:
        raise fence.stale(int(stored))


def enter(io: Any, fence: Fence) -> Steps[None]:
    """Begin the transaction and raise the fence as its first statement; on ``Stale`` (or any
    failure) roll back before re-raising, so nothing of the body ever runs."""
    yield io.begin, fence.dialect.begin
    try:
        yield from raise_fence(io, fence)
    except BaseException:
        yield from rollback_quietly(io)
        raise


def leave(io: Any, failed: bool) -> Steps[None]:
    """Commit when the body returned, roll back when it raised (its error is the caller's to
    re-raise, unchanged). A commit that fails is rolled back too, then re-raised."""
    if failed:
        yield from rollback_quietly(io)
        return
    try:
        yield (io.commit,)
    except BaseException:
        yield from rollback_quietly(io)
        raise


def rollback_quietly(io: Any) -> Steps[None]:
    """Roll back, logging (not raising) a failure: the error being raised is the one that
    matters, and a broken connection cannot roll back anyway."""
    try:
        yield (io.rollback,)
    except Exception:
        log.warning("redislock: the rollback of a fenced transaction failed", exc_info=True)


def create(io: Any, dialect: Dialect, table: str) -> Steps[None]:
    """``create_fence_table``: the DDL in a transaction of its own."""
    statement = ddl(dialect, table)
    yield io.begin, dialect.begin
    try:
        yield io.execute, statement, None
    except BaseException:
        yield from rollback_quietly(io)
        raise
    yield from leave(io, failed=False)
