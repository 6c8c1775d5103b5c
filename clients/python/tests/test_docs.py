"""Every ```python snippet of docs/migration.md, the README and this client's README runs, as
written, against a real server with the module (their ```redis sessions run in tests/docs.rs).
Each snippet runs on a fresh server in a fresh namespace holding only the preamble:

    r   = redis.Redis(...)           a client of the test server
    ar  = redis.asyncio.Redis(...)   the same for asyncio (used inside one asyncio.run)

and ``redis.Redis()`` (or ``redis.asyncio.Redis()``) without arguments, or with ``port=6379``
(as the READMEs write it), connects to the test server.
It runs in a directory of its own (a SQLite file it names is made there). A snippet that reads
``os.environ["DATABASE_URL"]`` gets a real PostgreSQL (databases.py), in a schema of its own
holding the fence table and the tables the snippets use (``SHOP``).

Snippets import what they use themselves, as an application would; an assertion that fails or
an exception that escapes fails the test, which names the snippet by its line."""

import itertools
import pathlib
import re

import psycopg
import pytest
import redis
import redis.asyncio

from redislock.db import create_fence_table

ROOT = pathlib.Path(__file__).resolve().parents[3]
PAGES = ["docs/migration.md", "README.md", "clients/python/README.md"]
#: The tables of the snippets' DATABASE_URL.
SHOP = [
    "CREATE TABLE orders (id int PRIMARY KEY, status text NOT NULL)",
    "INSERT INTO orders VALUES (42, 'new')",
]
_schemas = itertools.count(1)


def snippets():
    """(where, code) of each ```python block of the pages."""
    found = []
    for page in PAGES:
        text = (ROOT / page).read_text()
        for match in re.finditer(r"^```python\n(.*?)^```$", text, re.S | re.M):
            found.append((f"{page}:{text.count(chr(10), 0, match.start()) + 2}", match.group(1)))
    return found


def test_the_pages_have_python_snippets():
    pages = {where.rsplit(":", 1)[0] for where, _ in snippets()}
    assert pages == set(PAGES) and len(snippets()) >= 8


def database_url(server) -> str:
    """A URL of the PostgreSQL ``server`` whose connections work in a new schema holding the
    fence table and ``SHOP``."""
    schema = f"snippet_{next(_schemas)}"
    with psycopg.connect(server.url, autocommit=True) as conn:
        conn.execute(f"CREATE SCHEMA {schema}")
    url = f"{server.url}?options=-csearch_path%3D{schema}"
    with psycopg.connect(url) as conn:
        create_fence_table(conn)
        for statement in SHOP:
            conn.execute(statement)
    return url


def to_the_test_server(real, port: int):
    """``real`` (``redis.Redis`` or ``redis.asyncio.Redis``), connecting to ``port`` when
    called without arguments or with the READMEs' default server."""

    def connect(*args, **kw):
        if not args and (not kw or kw.get("port") == 6379):
            kw = {**kw, "port": port}
        return real(*args, **kw)

    return connect


@pytest.mark.parametrize("where,code", snippets(), ids=[where for where, _ in snippets()])
def test_snippet_runs(request, server, monkeypatch, tmp_path, where, code):
    r = server.client()
    ar = redis.asyncio.Redis(port=server.port)
    for module in (redis, redis.asyncio):
        monkeypatch.setattr(module, "Redis", to_the_test_server(module.Redis, server.port))
    monkeypatch.chdir(tmp_path)
    if "DATABASE_URL" in code:
        monkeypatch.setenv("DATABASE_URL",
                           database_url(request.getfixturevalue("postgresql_server")))
    namespace = {"r": r, "ar": ar, "__name__": "snippet"}
    try:
        exec(compile(code, where, "exec"), namespace)
    finally:
        r.close()
