"""What the tests of redislock.compat share: what the server says about a lock name, whichever
kind of lock holds it (an old-style string or the module's), so one test body can check an
original library and its adapter alike."""

import time


def fields(reply) -> dict:
    """A LOCK.INFO map as a dict of str keys (RESP3 map or RESP2 flat array)."""
    if not isinstance(reply, dict):
        reply = dict(zip(reply[::2], reply[1::2]))
    return {k.decode() if isinstance(k, bytes) else k: v for k, v in reply.items()}


def is_string(r, name) -> bool:
    return r.type(name) in (b"string", "string")


def lease_left(r, name) -> int:
    """Milliseconds left on the hold of ``name``: PTTL of a string lock (-1: none, -2: free),
    the exclusive holder's lease of a module lock."""
    if is_string(r, name) or not r.exists(name):
        return r.pttl(name)
    return int(fields(r.execute_command("LOCK.INFO", name))["ttl"])


def owner_of(r, name):
    """The owner string holding ``name`` (bytes), or None when free."""
    if is_string(r, name):
        return r.get(name)
    info = r.execute_command("LOCK.INFO", name)
    return None if info is None else fields(info).get("owner")


def waiters(r, name) -> int:
    info = r.execute_command("LOCK.INFO", name)
    return 0 if info is None else int(fields(info)["waiters"])


def calls(r, command: str) -> int:
    entry = r.info("commandstats").get(f"cmdstat_{command}")
    return int(entry["calls"]) if entry else 0


def tries(r) -> int:
    """How many times anyone asked for a lock: SETs (redis-py's and python-redis-lock's take
    a name with ``SET NX``) and ``LOCK.ACQUIRE``s (the adapters'). To count the tries of one
    call, as nothing else takes locks meanwhile."""
    return calls(r, "set") + calls(r, "lock.acquire")


def eventually(cond, timeout: float = 5.0) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if cond():
            return True
        time.sleep(0.005)
    return cond()
