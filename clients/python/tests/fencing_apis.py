"""The four ways to use the fenced-transaction helpers, as drivers of one test body
(``test_fencing.py``), as ``flavours.py`` does for the locks: a body is an ``async def`` that
opens parties (one connection or session per lock holder), and for each

    async with party.fenced(lock) as tx:     # the helper under test
        qty = await party.qty(tx)            # the read of the read-modify-write
        await party.sell(tx, qty - 1)        # the write, and a row in the sales table

plus the old recipe, without the helper: ``read`` (outside any fence) and ``write_old``
(``UPDATE ... SET qty = :qty, fence = :token WHERE ... AND fence <= :token``).

- ``dbapi``: ``redislock.db.fenced`` on psycopg, PyMySQL or sqlite3 connections;
- ``dbapi-async``: ``redislock.db.async_fenced`` on psycopg's ``AsyncConnection`` or aiosqlite;
- ``sqlalchemy``: ``redislock.sqlalchemy.fenced`` on an ORM ``Session`` (``db.get(Stock, sku)``,
  change, commit: the field report's code);
- ``sqlalchemy-async``: ``redislock.sqlalchemy.async_fenced`` on an ``AsyncSession``.

The sync ones run each call blocking in the calling thread (their holders run in threads of
their own: the ``sync`` flavour); the asyncio ones await (holders are tasks: ``async``)."""

from typing import Any, Callable, Dict

from databases import SKU, Database

import redislock.db
import redislock.sqlalchemy


class _Sync:
    """A sync context manager seen through ``async with`` (run in the calling thread)."""

    def __init__(self, inner: Any):
        self._inner = inner

    async def __aenter__(self) -> Any:
        return self._inner.__enter__()

    async def __aexit__(self, *exc: Any) -> Any:
        return self._inner.__exit__(*exc)


class Api:
    """One way to use the helpers on one database."""

    name = ""
    flavour = "sync"  # the lock flavour its holders run in (see flavours.py)

    def __init__(self, db: Database):
        self.db = db

    async def party(self, who: str) -> Any:
        raise NotImplementedError

    async def create_fence_table(self, table: str) -> None:
        """The helpers' own ``create_fence_table`` (run twice: it is idempotent)."""
        raise NotImplementedError

    async def schema_table(self) -> str:
        """A fence table of this test's own in a schema of its own (MariaDB: a database),
        made by ``create_fence_table``: ``<schema>.fences``."""
        schema = "main" if self.db.dialect == "sqlite" else f"fences_{self.db.n}"
        if schema != "main":
            what = "DATABASE" if self.db.dialect == "mysql" else "SCHEMA"
            self.db.run(f"CREATE {what} {schema}")
        table = f"{schema}.fences"
        await self.create_fence_table(table)
        await self.create_fence_table(table)
        return table

    async def close(self) -> None:
        """Close what the parties opened, the last first (after a failed test, an earlier
        party may be waiting for a later one's row lock: closing the later one frees it)."""

    def __repr__(self) -> str:
        return self.name


# -- DB-API ----------------------------------------------------------------------------------


class DbapiParty:
    def __init__(self, db: Database, who: str, conn: Any):
        self.db, self.who, self.conn = db, who, conn
        self._sql: Callable[[str], str] = lambda sql: sql.format(
            stock=db.stock, sales=db.sales, p=db.mark)

    def fenced(self, lock: Any, **kw: Any) -> Any:
        return _Sync(redislock.db.fenced(self.conn, lock, **kw))

    async def qty(self, cur: Any) -> int:
        cur.execute(self._sql("SELECT qty FROM {stock} WHERE sku = {p}"), (SKU,))
        return int(cur.fetchone()[0])

    async def sell(self, cur: Any, qty: int) -> None:
        cur.execute(self._sql("UPDATE {stock} SET qty = {p} WHERE sku = {p}"), (qty, SKU))
        cur.execute(self._sql("INSERT INTO {sales} (sku, who) VALUES ({p}, {p})"), (SKU, self.who))

    async def begin_without_fence(self) -> None:
        """A transaction begun by a write (sqlite3 begins none for a read), left open."""
        self.conn.cursor().execute(self._sql("UPDATE {stock} SET qty = qty WHERE sku = {p}"),
                                   (SKU,))

    async def end_without_fence(self) -> None:
        self.conn.rollback()

    async def fence_alone(self, lock: Any, name: str, commit: bool) -> None:
        """``fence`` on a cursor of the caller's transaction, which the caller commits."""
        redislock.db.fence(self.conn.cursor(), lock, name=name)
        if commit:
            self.conn.commit()

    async def read(self) -> int:
        cur = self.conn.cursor()
        cur.execute(self._sql("SELECT qty FROM {stock} WHERE sku = {p}"), (SKU,))
        qty = int(cur.fetchone()[0])
        self.conn.commit()
        return qty

    async def write_old(self, qty: int, token: int) -> int:
        cur = self.conn.cursor()
        cur.execute(self._sql("UPDATE {stock} SET qty = {p}, fence = {p}"
                              " WHERE sku = {p} AND fence <= {p}"), (qty, token, SKU, token))
        updated = cur.rowcount
        if updated:
            cur.execute(self._sql("INSERT INTO {sales} (sku, who) VALUES ({p}, {p})"),
                        (SKU, self.who))
        self.conn.commit()
        return updated


class Dbapi(Api):
    name = "dbapi"

    def __init__(self, db: Database):
        super().__init__(db)
        self._conns: list = []

    async def party(self, who: str) -> DbapiParty:
        conn = self.db.connect()
        self._conns.append(conn)
        return DbapiParty(self.db, who, conn)

    async def create_fence_table(self, table: str) -> None:
        conn = self.db.connect()
        try:
            redislock.db.create_fence_table(conn, table=table)
        finally:
            conn.close()

    async def close(self) -> None:
        for conn in reversed(self._conns):
            conn.close()


class AsyncDbapiParty(DbapiParty):
    def fenced(self, lock: Any, **kw: Any) -> Any:
        return redislock.db.async_fenced(self.conn, lock, **kw)

    async def qty(self, cur: Any) -> int:
        await cur.execute(self._sql("SELECT qty FROM {stock} WHERE sku = {p}"), (SKU,))
        return int((await cur.fetchone())[0])

    async def sell(self, cur: Any, qty: int) -> None:
        await cur.execute(self._sql("UPDATE {stock} SET qty = {p} WHERE sku = {p}"), (qty, SKU))
        await cur.execute(self._sql("INSERT INTO {sales} (sku, who) VALUES ({p}, {p})"),
                          (SKU, self.who))

    async def begin_without_fence(self) -> None:
        cur = await _acursor(self.conn)
        await cur.execute(self._sql("UPDATE {stock} SET qty = qty WHERE sku = {p}"), (SKU,))

    async def end_without_fence(self) -> None:
        await self.conn.rollback()

    async def fence_alone(self, lock: Any, name: str, commit: bool) -> None:
        """``async_fence`` given the connection (it uses a cursor of its own)."""
        await redislock.db.async_fence(self.conn, lock, name=name)
        if commit:
            await self.conn.commit()

    async def read(self) -> int:
        cur = await _acursor(self.conn)
        await cur.execute(self._sql("SELECT qty FROM {stock} WHERE sku = {p}"), (SKU,))
        qty = int((await cur.fetchone())[0])
        await self.conn.commit()
        return qty

    async def write_old(self, qty: int, token: int) -> int:
        cur = await _acursor(self.conn)
        await cur.execute(self._sql("UPDATE {stock} SET qty = {p}, fence = {p}"
                                    " WHERE sku = {p} AND fence <= {p}"), (qty, token, SKU, token))
        updated = cur.rowcount
        if updated:
            await cur.execute(self._sql("INSERT INTO {sales} (sku, who) VALUES ({p}, {p})"),
                              (SKU, self.who))
        await self.conn.commit()
        return updated


async def _acursor(conn: Any) -> Any:
    cursor = conn.cursor()
    return await cursor if hasattr(cursor, "__await__") else cursor


class AsyncDbapi(Dbapi):
    name = "dbapi-async"
    flavour = "async"

    async def party(self, who: str) -> AsyncDbapiParty:
        conn = await self.db.aconnect()
        self._conns.append(conn)
        return AsyncDbapiParty(self.db, who, conn)

    async def create_fence_table(self, table: str) -> None:
        conn = await self.db.aconnect()
        try:
            await redislock.db.async_create_fence_table(conn, table=table)
        finally:
            await conn.close()

    async def close(self) -> None:
        for conn in reversed(self._conns):
            await conn.close()


# -- SQLAlchemy ------------------------------------------------------------------------------


def models(db: Database) -> Any:
    """ORM classes of the test's tables: ``Stock`` (sku, qty, fence) and ``Sale``."""
    from sqlalchemy import BigInteger, String
    from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column

    class Base(DeclarativeBase):
        pass

    class Stock(Base):
        __tablename__ = db.stock
        sku: Mapped[str] = mapped_column(String(32), primary_key=True)
        qty: Mapped[int]
        fence: Mapped[int] = mapped_column(BigInteger)

    class Sale(Base):
        __tablename__ = db.sales
        id: Mapped[int] = mapped_column(BigInteger, primary_key=True)
        sku: Mapped[str] = mapped_column(String(32))
        who: Mapped[str] = mapped_column(String(64))

    return Stock, Sale


class OrmParty:
    def __init__(self, db: Database, who: str, session: Any, orm: Any):
        self.db, self.who, self.session = db, who, session
        self.Stock, self.Sale = orm

    def fenced(self, lock: Any, **kw: Any) -> Any:
        return _Sync(redislock.sqlalchemy.fenced(self.session, lock, **kw))

    async def qty(self, session: Any) -> int:
        return session.get(self.Stock, SKU).qty

    async def sell(self, session: Any, qty: int) -> None:
        session.get(self.Stock, SKU).qty = qty
        session.add(self.Sale(sku=SKU, who=self.who))

    async def begin_without_fence(self) -> None:
        self.session.get(self.Stock, SKU)  # the session begins its transaction

    async def end_without_fence(self) -> None:
        self.session.rollback()

    async def fence_alone(self, lock: Any, name: str, commit: bool) -> None:
        redislock.sqlalchemy.fence(self.session, lock, name=name)
        if commit:
            self.session.commit()

    async def read(self) -> int:
        qty = self.session.get(self.Stock, SKU).qty
        self.session.commit()
        return qty

    async def write_old(self, qty: int, token: int) -> int:
        from sqlalchemy import update

        Stock = self.Stock
        updated = self.session.execute(
            update(Stock).where(Stock.sku == SKU, Stock.fence <= token)
            .values(qty=qty, fence=token)
        ).rowcount
        if updated:
            self.session.add(self.Sale(sku=SKU, who=self.who))
        self.session.commit()
        return updated


class Orm(Api):
    name = "sqlalchemy"

    def __init__(self, db: Database):
        super().__init__(db)
        self.engine = db.engine()
        self.orm = models(db)
        self._sessions: list = []

    async def party(self, who: str) -> OrmParty:
        from sqlalchemy.orm import Session

        session = Session(self.engine)
        self._sessions.append(session)
        return OrmParty(self.db, who, session, self.orm)

    async def create_fence_table(self, table: str) -> None:
        redislock.sqlalchemy.create_fence_table(self.engine, table=table)

    async def close(self) -> None:
        for session in reversed(self._sessions):
            session.close()
        self.engine.dispose()


class AsyncOrmParty(OrmParty):
    def fenced(self, lock: Any, **kw: Any) -> Any:
        return redislock.sqlalchemy.async_fenced(self.session, lock, **kw)

    async def qty(self, session: Any) -> int:
        return (await session.get(self.Stock, SKU)).qty

    async def sell(self, session: Any, qty: int) -> None:
        (await session.get(self.Stock, SKU)).qty = qty
        session.add(self.Sale(sku=SKU, who=self.who))

    async def begin_without_fence(self) -> None:
        await self.session.get(self.Stock, SKU)

    async def end_without_fence(self) -> None:
        await self.session.rollback()

    async def fence_alone(self, lock: Any, name: str, commit: bool) -> None:
        await redislock.sqlalchemy.async_fence(self.session, lock, name=name)
        if commit:
            await self.session.commit()

    async def read(self) -> int:
        qty = (await self.session.get(self.Stock, SKU)).qty
        await self.session.commit()
        return qty

    async def write_old(self, qty: int, token: int) -> int:
        from sqlalchemy import update

        Stock = self.Stock
        updated = (await self.session.execute(
            update(Stock).where(Stock.sku == SKU, Stock.fence <= token)
            .values(qty=qty, fence=token)
        )).rowcount
        if updated:
            self.session.add(self.Sale(sku=SKU, who=self.who))
        await self.session.commit()
        return updated


class AsyncOrm(Api):
    name = "sqlalchemy-async"
    flavour = "async"

    def __init__(self, db: Database):
        super().__init__(db)
        self.engine = db.async_engine()
        self.orm = models(db)
        self._sessions: list = []

    async def party(self, who: str) -> AsyncOrmParty:
        from sqlalchemy.ext.asyncio import AsyncSession

        session = AsyncSession(self.engine)
        self._sessions.append(session)
        return AsyncOrmParty(self.db, who, session, self.orm)

    async def create_fence_table(self, table: str) -> None:
        await redislock.sqlalchemy.async_create_fence_table(self.engine, table=table)

    async def close(self) -> None:
        for session in reversed(self._sessions):
            await session.close()
        await self.engine.dispose()


APIS: Dict[str, type] = {api.name: api for api in (Dbapi, AsyncDbapi, Orm, AsyncOrm)}

#: Every (api, dialect) the tests run: all four APIs on every database that has a driver for
#: them here (no asyncio MySQL driver is installed).
CASES = [
    (api, dialect)
    for api in APIS
    for dialect in ("postgresql", "mysql", "sqlite")
    if not (api.endswith("-async") and dialect == "mysql")
]
