"""Every ```python snippet of docs/migration.md, the README and this client's README runs, as
written, against a real server with the module (their ```redis sessions run in tests/docs.rs).
Each snippet runs on a fresh server in a fresh namespace holding only the preamble:

    r   = redis.Redis(...)           a client of the test server
    ar  = redis.asyncio.Redis(...)   the same for asyncio (used inside one asyncio.run)
    db  = a stand-in database whose execute() records the statements it is given

and ``redis.Redis()`` without arguments (as the READMEs write it) connects to the test server.

Snippets import what they use themselves, as an application would; an assertion that fails or
an exception that escapes fails the test, which names the snippet by its line."""

import pathlib
import re

import pytest
import redis
import redis.asyncio

ROOT = pathlib.Path(__file__).resolve().parents[3]
PAGES = ["docs/migration.md", "README.md", "clients/python/README.md"]


def snippets():
    """(where, code) of each ```python block of the pages."""
    found = []
    for page in PAGES:
        text = (ROOT / page).read_text()
        for match in re.finditer(r"^```python\n(.*?)^```$", text, re.S | re.M):
            found.append((f"{page}:{text.count(chr(10), 0, match.start()) + 2}", match.group(1)))
    return found


class Database:
    """The snippets' stand-in for an application's database."""

    def __init__(self):
        self.statements = []

    def execute(self, statement, params=()):
        self.statements.append((statement, params))


def test_the_pages_have_python_snippets():
    pages = {where.rsplit(":", 1)[0] for where, _ in snippets()}
    assert pages == set(PAGES) and len(snippets()) >= 8


@pytest.mark.parametrize("where,code", snippets(), ids=[where for where, _ in snippets()])
def test_snippet_runs(server, monkeypatch, where, code):
    r = server.client()
    ar = redis.asyncio.Redis(port=server.port)
    real = redis.Redis

    def to_the_test_server(*args, **kw):
        if not args and not kw:
            kw = {"port": server.port}
        return real(*args, **kw)

    monkeypatch.setattr(redis, "Redis", to_the_test_server)
    db = Database()
    namespace = {"r": r, "ar": ar, "db": db, "__name__": "snippet"}
    try:
        exec(compile(code, where, "exec"), namespace)
    finally:
        r.close()
