"""A process of the election tests (test_election.py), run as

    python election_worker.py '<json config>'

config: ``port``, ``key``, ``identity``, ``role`` (``candidate`` or ``observer``), ``flavour``
(``sync``: ``redislock.Election``; ``async``: ``redislock.AsyncElection``), ``ttl`` (the
leadership's lease), ``log`` (the list the leader's fenced writes push to) and
``unavailable_after``.

It prints one JSON object a line, each with ``event`` and ``at`` (``time.monotonic()``: the
same clock in every process of the machine):

- a candidate campaigns at once and, while leader, pushes ``identity:term`` to ``log`` through
  ``LOCK.GUARD key term`` every 50 ms, sent to the server whatever the client knows (a stale
  leader's write is the server's to refuse): ``leader`` (term), ``refused`` (term, error: the
  server refused a fenced write), ``lost`` (reason: ``on_lost``, which runs once),
  ``resigning`` / ``resigned`` (ok), ``left`` (term, error: the exception leaving the ``with``
  block raised, if any). After its leadership it waits for a command. Commands, one a line
  on stdin: ``resign``, ``campaign`` (again), ``exit``.
- an observer reports each leader of ``observe()``: ``observed`` (identity, term; both null
  for no leader)."""

import asyncio
import json
import os
import queue
import sys
import threading
import time

import redis
import redis.asyncio as aredis

import redislock

CONFIG = json.loads(sys.argv[1])
KEY, IDENTITY, LOG = CONFIG["key"], CONFIG["identity"], CONFIG.get("log", "fenced-log")
OPTIONS = {"ttl": CONFIG.get("ttl", 10.0),
           "unavailable_after": CONFIG.get("unavailable_after", 10.0)}
WRITE_EVERY = 0.05


def emit(event: str, **fields) -> None:
    line = json.dumps({"event": event, "at": time.monotonic(), **fields})
    sys.stdout.write(line + "\n")
    sys.stdout.flush()


def commands() -> "queue.Queue[str]":
    """The commands of stdin, as they come (``exit`` at its end)."""
    found: "queue.Queue[str]" = queue.Queue()

    def read() -> None:
        for line in sys.stdin:
            found.put(line.strip())
        found.put("exit")

    threading.Thread(target=read, daemon=True).start()
    return found


def write_args(term: int) -> list:
    return ["LOCK.GUARD", KEY, term, "RPUSH", LOG, f"{IDENTITY}:{term}"]


# -- threads ----------------------------------------------------------------------------------


def candidate_sync() -> None:
    r = redis.Redis(port=CONFIG["port"])
    election = redislock.Election(r, KEY, IDENTITY, **OPTIONS)
    inbox = commands()
    while True:
        lead_sync(r, election, inbox)
        command = inbox.get()
        if command == "exit":
            return


def lead_sync(r, election, inbox) -> None:
    leadership = election.campaign(on_lost=lambda reason: emit("lost", reason=reason))
    term = leadership.term
    emit("leader", term=term)
    try:
        with leadership:
            while True:
                try:
                    r.execute_command(*write_args(term))
                except redis.ResponseError as err:
                    emit("refused", term=term, error=str(err))
                    break
                try:
                    command = inbox.get(timeout=WRITE_EVERY)
                except queue.Empty:
                    continue
                if command == "resign":
                    emit("resigning", term=term)
                    emit("resigned", term=term, ok=leadership.resign())
                    break
                if command == "exit":
                    os._exit(0)
    except Exception as err:
        emit("left", term=term, error=f"{type(err).__name__}: {err}")
    else:
        emit("left", term=term, error=None)


def observer_sync() -> None:
    election = redislock.Election(redis.Redis(port=CONFIG["port"]), KEY, IDENTITY, **OPTIONS)
    with election.observe() as leaders:
        for leader in leaders:
            emit("observed", identity=leader and leader.identity, term=leader and leader.term)


# -- asyncio ------------------------------------------------------------------------------------


async def candidate_async() -> None:
    r = aredis.Redis(port=CONFIG["port"])
    election = redislock.AsyncElection(r, KEY, IDENTITY, **OPTIONS)
    inbox = commands()

    async def next_command(timeout=None) -> str:
        return await asyncio.get_running_loop().run_in_executor(
            None, lambda: inbox.get(timeout=timeout))

    while True:
        await lead_async(r, election, inbox)
        if await next_command() == "exit":
            return


async def lead_async(r, election, inbox) -> None:
    async def lost(reason: str) -> None:  # a coroutine: awaited by the library
        emit("lost", reason=reason)

    leadership = await election.campaign(on_lost=lost)
    term = leadership.term
    emit("leader", term=term)
    try:
        async with leadership:
            while True:
                try:
                    await r.execute_command(*write_args(term))
                except redis.ResponseError as err:
                    emit("refused", term=term, error=str(err))
                    break
                try:
                    command = inbox.get_nowait()
                except queue.Empty:
                    await asyncio.sleep(WRITE_EVERY)
                    continue
                if command == "resign":
                    emit("resigning", term=term)
                    emit("resigned", term=term, ok=await leadership.resign())
                    break
                if command == "exit":
                    os._exit(0)
    except Exception as err:
        emit("left", term=term, error=f"{type(err).__name__}: {err}")
    else:
        emit("left", term=term, error=None)


async def observer_async() -> None:
    election = redislock.AsyncElection(aredis.Redis(port=CONFIG["port"]), KEY, IDENTITY,
                                       **OPTIONS)
    async with election.observe() as leaders:
        async for leader in leaders:
            emit("observed", identity=leader and leader.identity, term=leader and leader.term)


def main() -> None:
    emit("ready", pid=os.getpid())
    role, flavour = CONFIG["role"], CONFIG.get("flavour", "sync")
    if flavour == "sync":
        {"candidate": candidate_sync, "observer": observer_sync}[role]()
    else:
        asyncio.run({"candidate": candidate_async, "observer": observer_async}[role]())


if __name__ == "__main__":
    main()
