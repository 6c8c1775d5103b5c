"""The fence's rules without a database: which dialect a connection is, which table names are
taken, and the statements, which must be docs/fencing.md's own (read from the page)."""

import pathlib
import re
import sqlite3
import types

import pytest

import redislock
from redislock import _fencing as f

ROOT = pathlib.Path(__file__).resolve().parents[3]


def doc_statements():
    """Every statement of the SQL blocks of docs/fencing.md's sections on the fence table and
    the three databases, by the block's language (sql, sql mariadb, sql sqlite), whitespace
    made single spaces and comments dropped."""
    text = (ROOT / "docs" / "fencing.md").read_text()
    start = text.index("### The fence table")
    section = text[start:text.index("## A holder paused", start)]
    found = {}
    for lang, block in re.findall(r"^```(sql[ a-z]*)\n(.*?)^```$", section, re.S | re.M):
        lines = [line for line in block.splitlines() if not line.lstrip().startswith("--")]
        for statement in " ".join(lines).split(";"):
            statement = normal(statement)
            if statement:
                found.setdefault(lang.strip(), []).append(statement)
    return found


def normal(sql: str) -> str:
    sql = re.sub(r"\s+", " ", sql).strip()
    return sql.replace("( ", "(").replace(" )", ")")


DIALECTS = {"sql": f.POSTGRESQL, "sql mariadb": f.MYSQL, "sql sqlite": f.SQLITE}


@pytest.mark.parametrize("lang", sorted(DIALECTS))
def test_the_statements_are_the_ones_of_docs_fencing(lang):
    dialect = DIALECTS[lang]
    documented = doc_statements()[lang]
    fence = f.Fence(dialect, "lock_fences", "sku9", 7, "named")
    ours = [fence.upsert()[0]] + ([fence.read_back()[0]] if dialect.read_back else [])
    for statement in ours + [normal(f.ddl(dialect, "lock_fences")), dialect.begin]:
        assert normal(statement) in documented, statement


def test_the_statements_in_every_paramstyle():
    fence = f.Fence(f.MYSQL, "s.fences", "sku9", 7, "qmark")
    assert fence.upsert() == (
        "INSERT INTO s.fences (name, token) VALUES (?, ?) ON DUPLICATE KEY UPDATE "
        "token = GREATEST(token, VALUES(token))", ("sku9", 7))
    assert fence.read_back() == ("SELECT token FROM s.fences WHERE name = ? FOR UPDATE",
                                 ("sku9",))
    sql = "UPDATE t SET token = :token WHERE name = :name AND token < :token"
    values = {"name": "n", "token": 3}
    assert f.render(sql, "format", values) == (
        "UPDATE t SET token = %s WHERE name = %s AND token < %s", (3, "n", 3))
    assert f.render(sql, "pyformat", values)[0].count("%s") == 3
    assert f.render(sql, "numeric", values) == (
        "UPDATE t SET token = :1 WHERE name = :2 AND token < :3", (3, "n", 3))
    assert f.render(sql, "named", values) == (sql, {"token": 3, "name": "n"})
    with pytest.raises(ValueError, match="paramstyle"):
        f.render(sql, "curly", values)


def test_a_schema_qualified_table_is_named_by_itself_in_on_conflict():
    sql, _ = f.Fence(f.POSTGRESQL, "app.fences", "n", 1, "format").upsert()
    assert sql.startswith("INSERT INTO app.fences (name, token)")
    assert sql.endswith("WHERE fences.token <= EXCLUDED.token")


@pytest.mark.parametrize("table", ["lock_fences", "_f", "F1", "app.lock_fences", "a_1.b_2"])
def test_table_names_that_are_identifiers_are_taken(table):
    assert f.check_table(table) == table
    assert f"EXISTS {table} (" in f.ddl(f.SQLITE, table)


@pytest.mark.parametrize("table", [
    "", "1fences", "lock-fences", "a.b.c", ".a", "a.", "lock_fences;DROP TABLE x", "a b",
    '"quoted"', "fences\n", "schéma.t", None, 7,
])
def test_table_names_that_are_not_identifiers_are_refused(table):
    with pytest.raises(ValueError, match="identifier"):
        f.check_table(table)
    conn = sqlite3.connect(":memory:")
    lock = types.SimpleNamespace(key="k", token=1)
    with pytest.raises(ValueError, match="identifier"):
        redislock.db.fenced(conn, lock, table=table).__enter__()
    assert not conn.in_transaction


def test_the_dialect_is_found_from_the_driver():
    import aiosqlite
    import psycopg
    import pymysql

    def bare(cls):
        """An instance of (a subclass here, as an application's, of) ``cls`` that never
        connected: only its class matters, found along the MRO."""
        quiet = type(cls.__name__, (cls,), {"__del__": lambda self: None})
        assert quiet.__module__ == __name__
        return quiet.__new__(quiet)

    assert f.dialect_of(sqlite3.connect(":memory:")) is f.SQLITE
    assert f.dialect_of(sqlite3.connect(":memory:").cursor()) is f.SQLITE
    assert f.dialect_of(bare(aiosqlite.Connection)) is f.SQLITE
    assert f.dialect_of(bare(psycopg.Connection)) is f.POSTGRESQL
    assert f.dialect_of(bare(psycopg.AsyncConnection)) is f.POSTGRESQL
    assert f.dialect_of(bare(psycopg.Cursor)) is f.POSTGRESQL
    assert f.dialect_of(bare(pymysql.connections.Connection)) is f.MYSQL
    assert f.dialect_of(bare(pymysql.cursors.DictCursor)) is f.MYSQL


def test_an_unknown_driver_needs_the_dialect_named():
    class Connection:
        pass

    with pytest.raises(ValueError, match="pass dialect='postgresql', 'mysql' or 'sqlite'"):
        f.dialect_of(Connection())
    for name, dialect in [("postgresql", f.POSTGRESQL), ("postgres", f.POSTGRESQL),
                          ("MySQL", f.MYSQL), ("mariadb", f.MYSQL), ("sqlite", f.SQLITE)]:
        assert f.dialect_of(Connection(), name) is dialect
    assert f.dialect_of(sqlite3.connect(":memory:"), "postgresql") is f.POSTGRESQL  # it wins
    with pytest.raises(ValueError, match="unknown dialect 'oracle'"):
        f.dialect_of(Connection(), "oracle")
    with pytest.raises(ValueError, match="cannot tell the database"):
        redislock.db.fenced(Connection(), types.SimpleNamespace(key="k", token=1))


def test_the_fence_of_a_lock():
    lock = types.SimpleNamespace(key="order:42", token=17)
    fence = f.fence_of(lock, f.POSTGRESQL, "format")
    assert (fence.name, fence.token, fence.table) == ("order:42", 17, "lock_fences")
    assert f.fence_of(lock, f.POSTGRESQL, "format", name="order", table="x.y").name == "order"
    assert f.fence_of(types.SimpleNamespace(key=b"k\xc3\xa9", token=1), f.SQLITE, "qmark").name \
        == "k\u00e9"
    with pytest.raises(redislock.Stale, match="'order:42': the lock is not held"):
        f.fence_of(types.SimpleNamespace(key="order:42", token=None), f.SQLITE, "qmark")
    with pytest.raises(ValueError, match="non-empty"):
        f.fence_of(lock, f.SQLITE, "qmark", name="")


def test_shared_holds_and_semaphores_never_fence():
    # Lock objects that never talk to a server (no client): only their kind and token matter.
    for lock in (redislock.Lock(None, "k", shared=True), redislock.Semaphore(None, "s", limit=2)):
        lock.token = 5  # as if held
        with pytest.raises(ValueError, match="never fence a write"):
            f.fence_of(lock, f.SQLITE, "qmark")
    exclusive = redislock.aio.Lock(None, "k")
    exclusive.token = 5
    assert f.fence_of(exclusive, f.SQLITE, "qmark").token == 5


def test_stale_names_the_fence_and_the_token():
    fence = f.Fence(f.MYSQL, "lock_fences", "order:42", 17, "format")
    assert str(fence.stale(19)) == (
        "stale: the fence 'order:42' in lock_fences holds token 19 newer than this hold's 17: "
        "a newer holder has been in (rolled back)")
    assert isinstance(fence.stale(), redislock.Stale)
    assert "holds a token newer than this hold's 17" in str(fence.stale())


def test_the_helpers_are_imported_on_first_use_and_sqlalchemy_stays_optional():
    import subprocess
    import sys

    code = """
import sys
import redislock
assert "redislock.db" not in sys.modules and "sqlalchemy" not in sys.modules
assert callable(redislock.db.fenced) and "sqlalchemy" not in sys.modules
assert callable(redislock.sqlalchemy.fenced) and "sqlalchemy" in sys.modules
"""
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
