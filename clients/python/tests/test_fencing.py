"""The fenced-transaction helpers (redislock.db, redislock.sqlalchemy) against real PostgreSQL,
MariaDB and SQLite, with real locks on a real server with the module.

Every test runs once per (api, database) of ``fencing_apis.CASES``: DB-API and SQLAlchemy, sync
(holders in threads) and asyncio (holders in tasks). The first three are docs/fencing.md's
schedules: a holder paused past its lease (A) and the next holder (B) on 100 units in stock."""

import pytest

import redislock
from conftest import Server
from databases import SKU, database
from fencing_apis import APIS, CASES, models
from flavours import FLAVOURS, soon

LEASE = 0.3  # A's fixed lease (no watchdog): B is granted once it ends


@pytest.fixture(scope="module")
def redis_server():
    """One server for the module: every test has keys (and fence names) of its own."""
    server = Server()
    yield server
    server.stop()


@pytest.fixture(params=CASES, ids=[f"{api}-{dialect}" for api, dialect in CASES])
def api(request, tmp_path):
    name, dialect = request.param
    return APIS[name](database(request, dialect, tmp_path))


@pytest.fixture
def flavour(api, redis_server):
    """The lock flavour of ``api``'s holders (threads for the sync APIs, tasks for asyncio);
    it closes ``api``'s connections after the test, in the test's event loop."""
    driver = FLAVOURS[api.flavour](redis_server.port)
    driver.closing(api.close)
    return driver


@pytest.fixture(params=["postgresql", "mysql", "sqlite"])
def db(request, tmp_path):
    return database(request, request.param, tmp_path)


@pytest.fixture
def r(redis_server):
    client = redis_server.client()
    yield client
    client.close()


class Gate:
    """A flag one holder waits on and another opens, in threads as in tasks."""

    def __init__(self):
        import threading

        self._event = threading.Event()

    def open(self) -> None:
        self._event.set()

    async def wait(self, timeout: float = 10.0) -> bool:
        return await soon(self._event.is_set, timeout)


def key_of(api) -> str:
    return f"{{sku9}}:lock:{api.db.n}"


async def a_then_b(flavour, api):
    """A granted with a fixed lease of LEASE, then B granted once it ended: tB > tA."""
    key = key_of(api)
    a = flavour.Lock(flavour.client(), key, ttl=LEASE, watchdog=False)
    assert await a.acquire()
    b = flavour.Lock(flavour.client(), key, ttl=5.0, watchdog=False)
    assert await b.acquire(timeout=5), "B is granted when A's lease ends"
    assert b.token > a.token
    return a, b


async def two_holds(flavour, api):
    """Two live holds on two keys, the second with the larger token (one server, one token
    sequence)."""
    older = flavour.Lock(flavour.client(), key_of(api) + ":old", ttl=5.0)
    newer = flavour.Lock(flavour.client(), key_of(api) + ":new", ttl=5.0)
    assert await older.acquire() and await newer.acquire()
    assert newer.token > older.token
    return older, newer


# -- the schedules of docs/fencing.md ------------------------------------------------------------


async def test_a_stale_holder_is_refused_at_the_fence_and_sells_nothing(flavour, api):
    db = api.db
    party_a, party_b = await api.party("A"), await api.party("B")
    lock_a, lock_b = await a_then_b(flavour, api)  # A's lease ended while it was paused
    a_body_ran = Gate()

    async def late_a():
        async with party_a.fenced(lock_a) as tx:
            a_body_ran.open()
            await party_a.sell(tx, await party_a.qty(tx) - 1)

    async with party_b.fenced(lock_b) as tx:
        qty = await party_b.qty(tx)
        assert qty == 100
        late = flavour.spawn(late_a())  # A wakes and enters the helper with tA
        await db.a_waiter()  # its fence statement waits for B's row lock (or comes after)
        await party_b.sell(tx, qty - 1)
    with pytest.raises(redislock.Stale, match=r"fence '\{sku9\}:lock:\d+'.*than this hold's"):
        await flavour.join(late, 10)
    assert not a_body_ran._event.is_set(), "A's body never ran"
    assert db.qty() == 99
    assert db.sold() == 1
    await lock_b.release()


async def test_the_old_recipe_loses_an_update_in_the_same_schedule(flavour, api):
    """``UPDATE ... SET qty = :read - 1, fence = :t WHERE ... AND fence <= :t``, with reads
    outside any fence: both token checks pass, two units sold, one taken from the stock."""
    db = api.db
    party_a, party_b = await api.party("A"), await api.party("B")
    key = key_of(api)
    lock_a = flavour.Lock(flavour.client(), key, ttl=LEASE, watchdog=False)
    assert await lock_a.acquire()
    read_a = await party_a.read()  # A reads, then pauses past its lease
    lock_b = flavour.Lock(flavour.client(), key, ttl=5.0, watchdog=False)
    assert await lock_b.acquire(timeout=5)
    read_b = await party_b.read()  # B reads
    assert read_a == read_b == 100
    assert await party_a.write_old(read_a - 1, lock_a.token) == 1  # A wakes: fence 0 <= tA
    assert await party_b.write_old(read_b - 1, lock_b.token) == 1  # tA <= tB
    assert db.sold() == 2
    assert db.qty() == 99, "the old recipe sells two units and takes one from the stock"
    await lock_b.release()


async def test_a_holder_paused_inside_its_transaction_makes_the_next_one_wait(flavour, api):
    db = api.db
    party_a, party_b = await api.party("A"), await api.party("B")
    key = key_of(api)
    lock_a = flavour.Lock(flavour.client(), key, ttl=LEASE, watchdog=False)
    assert await lock_a.acquire()
    has_read, resume = Gate(), Gate()

    async def paused_a():
        async with party_a.fenced(lock_a) as tx:
            qty = await party_a.qty(tx)
            has_read.open()
            assert await resume.wait(), "paused inside its transaction, past its lease"
            await party_a.sell(tx, qty - 1)
        return qty

    async def b_sells():
        async with party_b.fenced(lock_b) as tx:
            qty = await party_b.qty(tx)
            await party_b.sell(tx, qty - 1)
        return qty

    in_a = flavour.spawn(paused_a())
    assert await has_read.wait()
    lock_b = flavour.Lock(flavour.client(), key, ttl=5.0, watchdog=False)
    assert await lock_b.acquire(timeout=5), "B is granted when A's lease ends"
    assert lock_b.token > lock_a.token
    in_b = flavour.spawn(b_sells())
    await db.a_waiter()  # B's fence statement waits for A's row lock
    resume.open()
    assert await flavour.join(in_a, 10) == 100
    assert await flavour.join(in_b, 10) == 99, "B reads what A wrote"
    assert db.qty() == 98
    assert db.sold() == 2
    await lock_b.release()


# -- the helper's contract -----------------------------------------------------------------------


class Boom(Exception):
    pass


async def test_an_error_in_the_body_rolls_back_and_goes_on_unchanged(flavour, api):
    db = api.db
    party = await api.party("A")
    boom = Boom("the body failed")
    async with flavour.Lock(flavour.client(), key_of(api), ttl=5.0) as lock:
        with pytest.raises(Boom) as raised:
            async with party.fenced(lock) as tx:
                await party.sell(tx, await party.qty(tx) - 1)
                raise boom
        assert raised.value is boom
        assert db.qty() == 100 and db.sold() == 0
        # The connection (session) is usable again: the same hold fences again (<=).
        async with party.fenced(lock) as tx:
            await party.sell(tx, await party.qty(tx) - 1)
    assert db.qty() == 99 and db.sold() == 1


async def test_a_transaction_already_open_is_refused(flavour, api):
    db = api.db
    party = await api.party("A")
    async with flavour.Lock(flavour.client(), key_of(api), ttl=5.0) as lock:
        await party.begin_without_fence()
        with pytest.raises(RuntimeError, match="in a transaction already"):
            async with party.fenced(lock):
                pytest.fail("the body ran")
        await party.end_without_fence()
        async with party.fenced(lock) as tx:
            await party.sell(tx, await party.qty(tx) - 1)
    assert db.qty() == 99


async def test_fence_alone_in_a_transaction_the_caller_manages(flavour, api):
    """``fence``: two holds of one resource (on two keys, the fence named for both: no lease
    to wait for); the newer fences and commits, the older is refused."""
    db = api.db
    party_a, party_b = await api.party("A"), await api.party("B")
    older, newer = await two_holds(flavour, api)
    name = f"sku9-{db.n}"  # the servers' fence table is shared by the tests: names are not
    await party_b.fence_alone(newer, name=name, commit=True)
    with pytest.raises(redislock.Stale, match=f"fence '{name}' in lock_fences "):
        await party_a.fence_alone(older, name=name, commit=True)
    await party_a.end_without_fence()  # the caller rolls back
    await party_b.fence_alone(newer, name=name, commit=True)  # again: the same token is ours
    assert db.qty() == 100
    await older.release()
    await newer.release()


async def test_the_fence_name_and_table_can_be_chosen(flavour, api):
    """Two locks (two keys) fencing one resource share its name; a table of the caller's own,
    schema-qualified, is made by create_fence_table and used."""
    db = api.db
    table = await api.schema_table()
    party_a, party_b = await api.party("A"), await api.party("B")
    old, new = await two_holds(flavour, api)
    async with party_b.fenced(new, name="sku9", table=table) as tx:
        await party_b.sell(tx, await party_b.qty(tx) - 1)
    with pytest.raises(redislock.Stale, match=f"fence 'sku9' in {table} "):
        async with party_a.fenced(old, name="sku9", table=table):
            pytest.fail("the body ran")
    async with party_a.fenced(old, table=table):  # its own name: its key
        pass
    assert db.qty() == 99
    await old.release()
    await new.release()


async def test_a_lock_not_held_or_shared_fences_nothing(flavour, api):
    party = await api.party("A")
    lock = flavour.Lock(flavour.client(), key_of(api), ttl=5.0)
    with pytest.raises(redislock.Stale, match="not held"):
        async with party.fenced(lock):
            pytest.fail("the body ran")
    shared = flavour.Lock(flavour.client(), key_of(api), ttl=5.0, shared=True)
    async with shared:
        with pytest.raises(ValueError, match="shared hold"):
            async with party.fenced(shared):
                pytest.fail("the body ran")
    async with lock:  # nothing was left open by the refusals
        async with party.fenced(lock) as tx:
            assert await party.qty(tx) == 100


# -- what depends on the driver or on SQLAlchemy ---------------------------------------------------


def autocommit(db):
    """A connection of ``db`` that commits each statement on its own."""
    conn = db.connect()
    if db.dialect == "postgresql":
        conn.autocommit = True
    elif db.dialect == "mysql":
        conn.autocommit(True)
    else:
        conn.isolation_level = None
    return conn


def test_a_connection_in_autocommit_mode_gets_a_transaction_all_the_same(db, r):
    conn, other = autocommit(db), db.connect()
    sell = f"UPDATE {db.stock} SET qty = qty - 1 WHERE sku = {db.mark}"
    try:
        with redislock.Lock(r, f"autocommit:{db.n}", ttl=5.0) as lock:
            with pytest.raises(Boom):
                with redislock.db.fenced(conn, lock) as cur:
                    cur.execute(sell, (SKU,))
                    raise Boom()
            assert db.qty() == 100, "rolled back"
            with redislock.db.fenced(conn, lock) as cur:
                cur.execute(sell, (SKU,))
                assert db.qty() == 100, "not committed yet: one transaction"
            assert db.qty() == 99
            redislock.db.fence(other, lock, name=f"autocommit:{db.n}:x")  # a newer hold...
            other.commit()
        with redislock.Lock(r, f"autocommit:{db.n}:x", ttl=5.0) as newer:
            redislock.db.fence(other, newer)
            other.commit()
        with pytest.raises(redislock.Stale):  # ...and the older refused, rolled back
            with redislock.db.fenced(conn, lock, name=f"autocommit:{db.n}:x"):
                pytest.fail("the body ran")
    finally:
        conn.close()
        other.close()


def test_fence_alone_refuses_a_connection_that_commits_each_statement(db, r):
    """``fence()`` outside a transaction, in autocommit mode, would commit the fence alone and
    order nothing: refused, nothing written. Inside one begun explicitly it runs."""
    conn = autocommit(db)
    try:
        with redislock.Lock(r, f"alone:{db.n}", ttl=5.0) as lock:
            with pytest.raises(RuntimeError, match="needs a transaction"):
                redislock.db.fence(conn, lock)
            assert db.one("SELECT count(*) FROM lock_fences WHERE name = {p}",
                          f"alone:{db.n}") == 0
            cur = conn.cursor()
            cur.execute("BEGIN")
            redislock.db.fence(cur, lock)
            cur.execute("COMMIT")
            assert db.one("SELECT token FROM lock_fences WHERE name = {p}",
                          f"alone:{db.n}") == lock.token
    finally:
        conn.close()


def test_sqlite_runs_begin_immediate_then_the_fence_before_the_body(tmp_path, r):
    """The order of statements SQLite executes (its trace callback, below every driver):
    ``BEGIN IMMEDIATE``, then the fence, then the body. Through sqlite3 and a SQLAlchemy
    session on it."""
    import sqlite3

    from sqlalchemy import create_engine, event, text
    from sqlalchemy.orm import Session

    path = tmp_path / "order.db"
    statements = []
    conn = sqlite3.connect(path)
    redislock.db.create_fence_table(conn)
    conn.set_trace_callback(statements.append)
    engine = create_engine(f"sqlite:///{path}")
    event.listen(engine, "connect",
                 lambda dbapi, _record: dbapi.set_trace_callback(statements.append))
    session = Session(engine)
    try:
        with redislock.Lock(r, "order", ttl=5.0) as lock:
            with redislock.db.fenced(conn, lock) as cur:
                cur.execute("SELECT 'body'")
            assert first_words(statements) == ["BEGIN IMMEDIATE", "INSERT INTO lock_fences",
                                               "SELECT 'body'", "COMMIT"], statements
            statements.clear()
            with redislock.sqlalchemy.fenced(session, lock):
                session.execute(text("SELECT 'body'"))
            assert first_words(statements)[:3] == ["BEGIN IMMEDIATE", "INSERT INTO lock_fences",
                                                   "SELECT 'body'"], statements
    finally:
        conn.close()
        session.close()
        engine.dispose()


def first_words(statements):
    """Each statement's first words, as many as the assertions above compare."""
    out = []
    for sql in statements:
        words = sql.split()
        n = 3 if words[:2] == ["INSERT", "INTO"] else 2
        out.append(" ".join(words[:n]))
    return out


def test_a_begin_immediate_that_times_out_leaves_the_session_usable(tmp_path, r):
    """SQLite busy: the fenced transaction fails to begin, and the session is not left inside
    a transaction, so the caller's retry runs once the other writer is gone."""
    import sqlite3

    from sqlalchemy import create_engine
    from sqlalchemy.orm import Session

    path = tmp_path / "busy.db"
    redislock.db.create_fence_table(sqlite3.connect(path))
    engine = create_engine(f"sqlite:///{path}", connect_args={"timeout": 0})
    session, other = Session(engine), sqlite3.connect(path, isolation_level=None)
    try:
        with redislock.Lock(r, "busy", ttl=5.0) as lock:
            other.execute("BEGIN IMMEDIATE")  # another writer holds the database
            with pytest.raises(Exception, match="database is locked"):
                with redislock.sqlalchemy.fenced(session, lock):
                    pytest.fail("the body ran")
            assert not session.in_transaction()
            other.execute("ROLLBACK")
            with redislock.sqlalchemy.fenced(session, lock):
                pass
    finally:
        other.close()
        session.close()
        engine.dispose()


class _Silent:
    """A MySQL connection whose driver does not say whether it is in a transaction (as
    mysqlclient's): only the DB-API methods."""

    def __init__(self, conn):
        self._conn = conn

    def cursor(self):
        return self._conn.cursor()

    def commit(self):
        self._conn.commit()

    def rollback(self):
        self._conn.rollback()

    def get_autocommit(self):
        return self._conn.get_autocommit()


def test_a_mysql_driver_that_does_not_say_gets_a_fresh_transaction(tmp_path, r, request):
    """A read made before ``fenced`` on a MySQL connection that does not report its
    transaction leaves a REPEATABLE READ snapshot open; the fence must not join it, or the body
    reads the stock as it was before the previous holder's commit."""
    db = database(request, "mysql", tmp_path)
    conn, silent = db.connect(), None
    try:
        cur = conn.cursor()
        cur.execute(f"SELECT qty FROM {db.stock}")  # opens a snapshot: 100
        assert cur.fetchone()[0] == 100
        db.run("UPDATE {stock} SET qty = 99")  # the previous holder's committed write
        silent = _Silent(conn)
        with redislock.Lock(r, f"silent:{db.n}", ttl=5.0) as lock:
            with redislock.db.fenced(silent, lock, dialect="mysql") as fenced_cur:
                fenced_cur.execute(f"SELECT qty FROM {db.stock}")
                assert fenced_cur.fetchone()[0] == 99, "read in a snapshot from before"
    finally:
        conn.close()


@pytest.fixture(params=["postgresql", "mysql", "sqlite"])
def orm(request, tmp_path):
    """A SQLAlchemy engine of ``db`` and its ORM classes."""
    db = database(request, request.param, tmp_path)
    engine = db.engine()
    yield db, engine, models(db)
    engine.dispose()


def test_objects_loaded_before_the_fence_are_read_again_after_it(orm, r):
    """With ``expire_on_commit=False`` the session keeps what it loaded; ``fenced`` expires it,
    so ``db.get`` reads the stock again inside the fenced transaction, not from memory."""
    from sqlalchemy.orm import Session

    db, engine, (Stock, Sale) = orm
    with Session(engine, expire_on_commit=False) as session:
        stale = session.get(Stock, SKU)
        session.commit()
        assert stale.qty == 100
        db.run("UPDATE {stock} SET qty = 50")  # others sold meanwhile
        with redislock.Lock(r, f"orm:{db.n}", ttl=5.0) as lock:
            with redislock.sqlalchemy.fenced(session, lock) as s:
                assert s is session
                product = session.get(Stock, SKU)
                assert product.qty == 50
                product.qty -= 1
                session.add(Sale(sku=SKU, who="A"))
    assert db.qty() == 49 and db.sold() == 1


def test_a_session_with_changes_made_before_the_fence_is_refused(orm, r):
    from sqlalchemy.orm import Session

    db, engine, (Stock, _) = orm
    with Session(engine, expire_on_commit=False) as session:
        product = session.get(Stock, SKU)
        session.commit()
        product.qty -= 1  # from a read before the fence: the session begins a transaction
        with redislock.Lock(r, f"orm:{db.n}", ttl=5.0) as lock:
            with pytest.raises(RuntimeError, match="in a transaction already"):
                with redislock.sqlalchemy.fenced(session, lock):
                    pytest.fail("the body ran")
            session.rollback()  # forget them
            with redislock.sqlalchemy.fenced(session, lock):
                session.get(Stock, SKU).qty -= 1
    assert db.qty() == 99
