"""Every ```python snippet of docs/migration.md runs, as written, against a real server with the
module (its ```redis sessions run in tests/docs.rs). Each snippet runs on a fresh server in a
fresh namespace holding only the preamble:

    r   = redis.Redis(...)           a client of the test server
    ar  = redis.asyncio.Redis(...)   the same for asyncio (used inside one asyncio.run)

Snippets import what they use themselves, as an application would; an assertion that fails or
an exception that escapes fails the test, which names the snippet by its line."""

import pathlib
import re

import pytest
import redis
import redis.asyncio

GUIDE = pathlib.Path(__file__).resolve().parents[3] / "docs" / "migration.md"


def snippets():
    """(line, code) of each ```python block of the guide."""
    text = GUIDE.read_text()
    found = []
    for match in re.finditer(r"^```python\n(.*?)^```$", text, re.S | re.M):
        found.append((text.count("\n", 0, match.start()) + 2, match.group(1)))
    return found


def test_the_guide_has_python_snippets():
    assert len(snippets()) >= 6


@pytest.mark.parametrize("line,code", snippets(), ids=[f"migration.md:{n}" for n, _ in snippets()])
def test_snippet_runs(server, line, code):
    r = server.client()
    ar = redis.asyncio.Redis(port=server.port)
    namespace = {"r": r, "ar": ar, "__name__": f"migration_md_{line}"}
    try:
        exec(compile(code, f"docs/migration.md:{line}", "exec"), namespace)
    finally:
        r.close()
