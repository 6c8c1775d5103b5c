"""The sans-IO core without a server: the wait rules, and the two drivers carrying out one rule
the same way (values and exceptions back at the rule's ``yield``)."""

import asyncio

import pytest

from redislock import _core
from redislock import _protocol as p


@pytest.mark.parametrize("blocking, timeout, patience, wait", [
    (False, None, 0.0, None),  # one try: no WAIT
    (False, 5, 0.0, None),
    (True, 0, 0.0, None),  # a timeout of 0 is one try too, as threading.Lock's
    (True, None, None, 0),  # without limit: WAIT 0
    (True, -1, None, 0),  # as threading.Lock: without limit
    (True, -1.0, None, 0),
    (True, 2.5, 2.5, 2.5),
])
def test_how_long_an_acquire_waits(blocking, timeout, patience, wait):
    assert p.patience(blocking, timeout) == patience
    assert p.server_wait(patience) == wait
    assert (p.deadline_of(wait) is None) == (not wait), "a wait without limit has no deadline"


@pytest.mark.parametrize("seconds, ms", [
    (0.0015, 2), (0.0025, 3), (0.001, 1), (0.003, 3), (1.0001, 1001), (30, 30000), (1e-7, 1),
])
def test_durations_are_sent_in_whole_milliseconds_rounded_up(seconds, ms):
    assert p.millis(seconds) == ms
    assert p.acquire_args("k", "o", seconds, p.Mode(), False, seconds)[3::2] == [ms, ms]


def test_what_is_left_of_a_wait():
    assert p.left(None, 0.0) is None
    assert p.left(0.0, 0.0) == 0.0
    assert p.left(1.0, 0.0) == 0.0, "never below 0"


def test_semaphore_modes_are_checked():
    assert p.Mode.semaphore(3, 2).words() == ["LIMIT", 3, "PERMITS", 2]
    for permits in (0, 4):
        with pytest.raises(ValueError):
            p.Mode.semaphore(3, permits)


class _IO:
    """Steps' methods: plain and awaitable twins."""

    def __init__(self):
        self.seen = []

    def echo(self, value):
        self.seen.append(value)
        return value

    def fail(self, err):
        raise err

    async def aecho(self, value):
        return self.echo(value)

    async def afail(self, err):
        raise err


def _rule(echo, fail):
    """A rule that uses a value, recovers from one failure and lets another through."""
    got = yield echo, 1
    try:
        yield fail, KeyError("k")
    except KeyError as err:
        got += len(err.args)
    yield from _inner(echo, got)
    try:
        yield fail, ValueError("v")
    finally:
        yield echo, "cleaned up"


def _inner(echo, got):
    return (yield echo, got + 1)


def test_run_and_arun_carry_out_a_rule_alike():
    plain, awaited = _IO(), _IO()
    with pytest.raises(ValueError):
        _core.run(_rule(plain.echo, plain.fail))
    with pytest.raises(ValueError):
        asyncio.run(_core.arun(_rule(awaited.aecho, awaited.afail)))
    assert plain.seen == awaited.seen == [1, 3, "cleaned up"]
    assert _core.run(_core._now(lambda a, b: a + b, 2, 3)) == 5
