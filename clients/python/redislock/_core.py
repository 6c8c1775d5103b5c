"""What a lock object does, written once for both flavours, sans-IO.

Every rule (waiting and retrying, re-entrancy, granting, renewing, losing, releasing, guarded
writes, ``with`` and ``hold()``) is a generator method of ``LockBase`` that does no I/O itself:
where it needs some, it yields a *step*, a tuple ``(method, *args)`` naming one of the flavour's
I/O methods (listed in ``LockBase``), and gets back what that returned, or has raised at its
``yield`` what that raised. So a rule reads as straight-line code, ``try``/``except`` included.
``run`` carries a rule out with plain calls (``redislock.lock``: threads), ``arun`` by awaiting
each step (``redislock.aio``: tasks); a flavour holds nothing but those I/O methods.
"""

from __future__ import annotations

import logging
import time
from typing import Any, Callable, Generator, Optional, Sequence, Tuple, TypeVar

from redis.exceptions import ConnectionError as LinkError
from redis.exceptions import ResponseError

from . import _protocol as p
from .errors import LockLost, NotAcquired, Stale, Unavailable

log = logging.getLogger("redislock")

T = TypeVar("T")

#: A rule: a generator that yields steps ``(io_method, *args)`` and returns its result.
Steps = Generator[Tuple[Any, ...], Any, T]

#: How often an extend looks whether the renewal it waits for was answered (a renewal is in
#: flight for a round trip, once per ttl / 3: rarely waited for, and not for long).
RENEWAL_POLL = 0.002

#: ``on_event(name, fields)``: "acquired" (wait_s, token), "released" (held_s), "lost" (reason).
EventHook = Callable[[str, dict], None]


def run(steps: Steps[T]) -> T:
    """Carry out ``steps`` with plain calls: each step's method is called, and what it returns
    (or raises) goes back to the rule, which decides."""
    send: Callable[[Any], Any] = steps.send
    value: Any = None
    while True:
        try:
            step = send(value)
        except StopIteration as done:
            return done.value
        try:
            value, send = step[0](*step[1:]), steps.send
        except BaseException as err:  # raised in the rule, at its ``yield``
            value, send = err, steps.throw


async def arun(steps: Steps[T]) -> T:
    """``run`` for asyncio: each step's method is a coroutine, awaited."""
    send: Callable[[Any], Any] = steps.send
    value: Any = None
    while True:
        try:
            step = send(value)
        except StopIteration as done:
            return done.value
        try:
            value, send = await step[0](*step[1:]), steps.send
        except BaseException as err:  # cancellation included: the rule cleans up, then re-raises
            value, send = err, steps.throw


def _now(fn: Callable[..., T], *args: Any) -> Steps[T]:
    """``fn(*args)`` as steps (none): a rule without I/O, to run under the state lock."""
    return fn(*args)
    yield  # a generator all the same: ``fn`` runs when it is carried out


class LockBase:
    """A lock object's settings, its live hold and every rule of ``redislock.Lock`` and
    ``redislock.aio.Lock``; each flavour sets the class attributes below and does the I/O."""

    #: Named in ``repr`` and errors.
    _NAME = "redislock.Lock"
    #: Makes the object's own mutexes (one holder at a time; the state lock serializing the
    #: watchdog's renewals with release and loss): ``threading.Lock`` or ``asyncio.Lock``.
    _Mutex: Callable[[], Any]
    #: Makes the signal release gives the watchdog: ``threading.Event`` or ``asyncio.Event``.
    _Event: Callable[[], Any]
    #: The class of ``hold()``'s object (a ``HoldBase`` with the flavour's ``with``).
    _Hold: Callable[..., Any]
    #: What a session hold's watchdog takes for its own failure, which loses the hold at once:
    #: inherent to the flavour (a thread has nobody to raise to; a task leaves cancellation and
    #: interrupts to the event loop).
    _WATCHDOG_FAILURES: Tuple[type, ...] = (BaseException,)
    #: The renewal loop of a pool (``redislock._loop``): the threads' or the tasks'.
    _loop_of: Callable[[Any], Any]
    #: An extend of this object is in flight (``_extend_in_turn``; with the state lock held).
    _extend_in_flight = False

    def __init__(
        self,
        client: Any,
        key: str,
        ttl: float = 30.0,
        *,
        owner: Optional[str] = None,
        shared: bool = False,
        session: bool = False,
        replicas: int = 0,
        replicas_timeout: float = 1.0,
        watchdog: bool = True,
        reentrant: bool = False,
        on_lost: Optional[Callable[[str], Any]] = None,
        raise_on_lost: bool = True,
        on_event: Optional[EventHook] = None,
        unavailable_after: float = p.UNAVAILABLE_AFTER,
        _mode: Optional[p.Mode] = None,
        _lease_timer: bool = True,
    ):
        self.client = client
        self.key = key
        self.ttl = p.check_ttl(ttl)
        #: Rule 14: a call fails with ``Unavailable`` once the server has not answered this long.
        self.unavailable_after = p.check_bound(unavailable_after)
        self.owner = owner or p.new_owner()
        self.mode = _mode or p.Mode(shared=shared)
        self.session = session
        self.replicas = replicas
        self.replicas_timeout = p.check_replicas_timeout(replicas_timeout)
        self.watchdog = watchdog
        # A fixed lease is lost at its end by a timer (rule 15); ``redislock.compat`` turns it
        # off, since its ``extend`` moves the lease on the server behind this object's back.
        self._lease_timer = watchdog or _lease_timer
        self.reentrant = reentrant
        self.on_lost = on_lost
        self.raise_on_lost = raise_on_lost
        self.on_event = on_event
        #: The fencing token of the current hold (None when not held).
        self.token: Optional[int] = None
        #: Why the last hold was lost (None while it holds, or if it was released in time).
        self.lost: Optional[str] = None
        self._local = self._Mutex()
        self._state = self._Mutex()
        self._holder: Any = None  # the thread or task of the hold (see ``_me``)
        self._depth = 0
        self._session_conn: Any = None
        self._granted_at = 0.0
        self._lease_from = 0.0  # when the lease of the hold began at the latest (rule 15)
        self._stop: Any = None
        self._watchdog: Any = None  # a session hold's (see ``_watch``)
        self._entry: Any = None  # the hold in its pool's renewal loop (``_schedule.Entry``)
        self._renewals: Optional[p.Renewals] = None  # a session hold's renewals

    # -- the flavour's I/O: plain methods in redislock.lock, coroutines in redislock.aio --------

    def _me(self) -> Any:
        """Who calls (a plain method in both): the thread, or the task."""
        raise NotImplementedError

    def _take_local(self, patience: Optional[float]) -> bool:
        """This object's own mutex, waiting as long as ``patience`` (``p.patience``) allows."""
        raise NotImplementedError

    def _connect(self, conn: Any, timeout: float) -> None:
        """Make ``conn`` (a connection of ``p.Spares``, or the watchdog's) ready for a command
        within ``timeout`` seconds, each later reply too: connected (again, if it was closed
        meanwhile), asking the Sentinels for the master if it is managed by them."""
        raise NotImplementedError

    def _write(self, conn: Any, args: list) -> None:
        raise NotImplementedError

    def _reply_within(self, conn: Any, seconds: float) -> bool:
        """Whether the reply of a wait sent on ``conn`` comes within ``seconds`` (``_read``
        takes it then); the wait itself has no read timeout (rule 2)."""
        raise NotImplementedError

    def _read(self, conn: Any) -> Any:
        raise NotImplementedError

    def _close(self, conn: Any) -> None:
        """Close ``conn`` whatever happens (so not interrupted by a cancellation)."""
        raise NotImplementedError

    def _pause(self, seconds: float) -> None:
        raise NotImplementedError

    def _stopped(self, stop: Any, seconds: float) -> bool:
        """Wait up to ``seconds`` for ``stop`` (a ``_Event``); whether it is set."""
        raise NotImplementedError

    def _in_state(self, steps: Steps[T]) -> T:
        """``steps`` carried out with the state lock held."""
        raise NotImplementedError

    def _start_watchdog(self, token: int, stop: Any) -> None:
        """Carry out ``_watch(token, stop)`` on its own: a thread, or a task."""
        raise NotImplementedError

    def _in_background(self, steps: Steps[Any]) -> None:
        """Carry out ``steps`` on their own (a thread, or a task), nobody waiting for them."""
        raise NotImplementedError

    def _on_own(self, conn: Any, timeout: float) -> bool:
        """Whether ``conn`` (a session hold's) is still connected; if so, each reply on it is
        awaited at most ``timeout`` seconds. It is never connected again: it is the hold."""
        raise NotImplementedError

    def _call_back(self, fn: Callable[..., Any], *args: Any) -> None:
        """The application's callback (a coroutine's result is awaited, in asyncio)."""
        raise NotImplementedError

    # -- acquiring ---------------------------------------------------------------------------

    def locked(self) -> bool:
        """Whether this object holds the lock (and has not lost it)."""
        return self.token is not None and self.lost is None

    def _acquire(self, blocking: bool, timeout: Optional[float]) -> Steps[bool]:
        """Take the lock, waiting in the server's queue when ``blocking`` (up to ``timeout``
        seconds; None: without limit). True if granted, as ``threading.Lock.acquire``."""
        started = time.monotonic()
        me = self._me()
        if self.reentrant and self._depth > 0 and self._holder is me:
            self._depth += 1  # nested in the caller's own hold: one hold, one token
            return True
        patience = p.patience(blocking, timeout)
        if not (yield self._take_local, patience):
            return False
        try:
            granted = yield from self._ask_server(p.left(patience, started))
        except BaseException:
            self._local.release()
            raise
        if not granted:
            self._local.release()
            return False
        self._holder, self._depth = me, 1
        self._emit("acquired", wait_s=time.monotonic() - started, token=self.token)
        return True

    def _ask_server(self, patience: Optional[float]) -> Steps[bool]:
        wait = p.server_wait(patience)
        # A call that does not wait tries once: its deadline is now (rule 14: no retry).
        deadline = p.deadline_of(wait) if wait is not None else time.monotonic()
        pool = p.pool_of(self.client, self.key)
        sent = 0.0

        def acquire_args() -> list:
            # Each retry waits what is left: the same owner asks again, which the server treats
            # as a safe retry (a grant whose reply never went out is revoked).
            nonlocal sent
            left = p.next_wait(deadline, wait) if wait else wait
            sent = time.monotonic()
            return p.acquire_args(self.key, self.owner, self.ttl, self.mode, self.session, left)

        keep = self.session or bool(self.replicas)
        reply, conn = yield from self._call(pool, acquire_args, wait=wait, deadline=deadline,
                                            keep=keep)
        # The lease began when the server granted: at the send of a call that did not wait, at
        # the reply of one that did (later than the server's by the reply's trip, at most);
        # never after a durable grant's WAIT, which takes from the lease.
        granted = sent if wait is None else time.monotonic()
        token = p.token_of(reply)
        if token is not None and self.replicas:
            token = yield from self._durable(pool, conn, token, granted)
        if token is not None and self.session:
            self._session_conn = conn  # kept open while the hold lives
        elif keep:
            yield from self._give_back(pool, conn)
        if token is None:
            return False
        yield self._in_state, self._grant(token, granted)
        return True

    def _durable(self, pool: Any, conn: Any, token: int, granted: float) -> Steps[Optional[int]]:
        """A grant is durable once ``replicas`` have it (``WAIT``); else it is given back and
        the acquire reports no grant. A ``WAIT`` that fails or gets no answer is
        ``Unavailable``, and the grant is given back when the server answers again."""
        try:
            yield self._connect, conn, self.unavailable_after + self.replicas_timeout
            yield self._write, conn, p.wait_args(self.replicas, self.replicas_timeout)
            if p.replicated((yield self._read, conn), self.replicas):
                return token
            yield self._write, conn, p.release_args(self.key, self.owner, token)
            yield self._read, conn
        except BaseException as err:
            yield self._close, conn
            yield self._in_background, self._give_back_grant(token, granted + self.ttl)
            if isinstance(err, p.BROKEN_LINK + p.NOT_REDIS):
                raise p.unavailable(pool, err) from err
            raise
        self._emit("not-durable", replicas=self.replicas)
        return None

    def _give_back_grant(self, token: int, lease_end: float) -> Steps[None]:
        """Release grant ``token``, which nobody holds (its acquire failed), once the server
        answers: asked again until it does, or until its lease has ended on its own."""
        args = p.release_args(self.key, self.owner, token)
        while time.monotonic() < lease_end:
            try:
                yield from self._command(args)
                return
            except Unavailable:
                yield self._pause, p.RETRY_PAUSE
            except Exception:  # refused (an ACL, say): its lease ends it
                return

    # -- calls: every command of a hold, with rule 14's bound -------------------------------

    def _call(self, pool: Any, make_args: Callable[[], list], *, wait: Optional[Any] = None,
              deadline: Optional[float] = None, resend: bool = True,
              keep: bool = False) -> Steps[Tuple[Any, Any]]:
        """``make_args()`` sent on a connection of ``pool``'s spares, and its reply (with the
        connection, still lent, if ``keep``). A link that breaks (or a connection that cannot
        be made) is retried, after the command was sent only if ``resend``, until ``deadline``
        or ``unavailable_after`` since the first failure, whichever comes first: then the call
        fails with ``Unavailable``, as at once when the service does not answer as Redis. A
        retryable error reply (rule 19: the server did not run it) is asked again the same way,
        on a new connection (through Sentinel: to the master, now)."""
        outage = p.Outage(self.unavailable_after)
        spares = p.spares_of(pool)
        while True:
            conn = spares.take(pool, self.unavailable_after)
            outage.attempt()
            sent = False
            try:
                # (Connected is not answered: a service may take connections and drop commands.)
                yield self._connect, conn, outage.timeout()
                sent = True
                args = make_args()
                if isinstance(args, p.Batch):
                    reply = yield from self._batch(conn, args)
                else:
                    yield self._write, conn, args
                    if wait is not None:
                        yield from self._watch_wait(pool, conn, deadline, outage)
                    reply = yield self._read, conn
            except Unavailable:
                yield self._close, conn
                raise
            except ResponseError as err:
                reply = p.error_reply(err)
                if not p.retryable(reply):
                    yield from self._give_back(pool, conn)
                    raise p.translate(err, pool) from err
                yield self._close, conn
                if outage.failed() or p.expired(deadline):
                    raise p.unavailable(pool, err) from err
                yield self._pause, p.RETRY_PAUSE
                continue
            except p.NOT_REDIS as err:
                yield self._close, conn
                raise p.unavailable(pool, err) from err
            except p.BROKEN_LINK as err:  # (LOADING is one to redis-py: not run, so resent)
                yield self._close, conn
                ran = sent and not p.retryable(p.error_reply(err))
                if (ran and not resend) or outage.failed() or p.expired(deadline):
                    raise p.unavailable(pool, err) from err
                yield self._pause, p.RETRY_PAUSE
                continue
            except BaseException:
                # Interrupted mid-call (cancelled, KeyboardInterrupt, a signal handler's
                # exception): the reply may still come, so the connection is closed, which takes
                # a waiter out of the server's queue.
                yield self._close, conn
                raise
            if keep:
                return reply, conn
            yield from self._give_back(pool, conn)
            return reply, None

    def _batch(self, conn: Any, commands: "p.Batch") -> Steps[list]:
        """``commands`` written on ``conn`` one after the other, then their replies read: a
        list, or the first error reply raised once every reply was read (so ``conn`` can be
        lent again)."""
        for args in commands:
            yield self._write, conn, args
        return (yield from self._replies(conn, len(commands)))

    def _replies(self, conn: Any, count: int) -> Steps[list]:
        """The next ``count`` replies on ``conn``; the first error reply raised once every one
        was read."""
        replies: list = []
        refused: Optional[ResponseError] = None
        for _ in range(count):
            try:
                replies.append((yield self._read, conn))
            except ResponseError as err:
                refused = refused or err
                replies.append(err)
        if refused is not None:
            raise refused
        return replies

    def _watch_wait(self, pool: Any, conn: Any, deadline: Optional[float],
                    outage: p.Outage) -> Steps[None]:
        """Wait for the reply of a wait sent on ``conn``; while none comes, PING the server on
        another connection at least every half bound (rule 14): ``Unavailable`` (and ``conn``
        closed by the caller) when the PING gets no answer, so a frozen server never leaves
        a waiter hanging. A link that breaks meanwhile starts the outage then, unless one
        started before the last PING's answer."""
        half = self.unavailable_after / 2
        while True:
            try:
                if (yield self._reply_within, conn, p.watch_slice(half, deadline)):
                    return
            except p.BROKEN_LINK:
                outage.attempt()
                raise
            probe = p.spares_of(pool).take(pool, half)
            try:
                yield self._connect, probe, p.ping_timeout(half, deadline)
                yield self._write, probe, ["PING"]
                yield self._read, probe
                outage.answered()  # the server answers: an outage, if any, is over
            except p.BROKEN_LINK + p.NOT_REDIS as err:
                yield self._close, probe
                raise p.unavailable(pool, err, "a PING while waiting: ") from err
            except BaseException:
                yield self._close, probe
                raise
            yield from self._give_back(pool, probe)

    def _give_back(self, pool: Any, conn: Any) -> Steps[None]:
        if not p.spares_of(pool).give(conn):
            yield self._close, conn

    def _command(self, args: list) -> Steps[Any]:
        """``args`` of this hold (a release, a guarded write): not sent again once sent, since
        it may have been carried out (``Unavailable`` instead)."""
        reply, _ = yield from self._call(p.pool_of(self.client, self.key), lambda: args,
                                         resend=False)
        return reply

    def _grant(self, token: int, granted: float) -> Steps[None]:
        """Hold ``token`` from now (with the state lock held): in its pool's renewal loop (a
        fixed lease: timed there), or, a session hold, renewed by a watchdog of its own on its
        own connection (the hold lives as long as that connection)."""
        self.token, self.lost = token, None
        self._granted_at = time.monotonic()
        self._lease_from = granted
        self._stop = self._Event()
        self._entry = self._renewals = None
        if self.session and self.watchdog:
            self._renewals = p.Renewals(self.ttl, granted)
            yield self._start_watchdog, token, self._stop
        elif self._lease_timer:
            pool = p.pool_of(self.client, self.key)
            self._entry = self._loop_of(pool).add(pool, self, token, self.ttl, granted,
                                                  self.watchdog)

    def _unwatch(self) -> None:
        """Take the hold out of its loop (or stop its session watchdog): nothing of it is sent
        after, and the loop no longer marks it lost."""
        entry, self._entry = self._entry, None
        if entry is not None:
            entry.loop.remove(entry)
        if self._stop is not None:
            self._stop.set()

    def _lost_in_loop(self, token: int, reason: str) -> bool:
        """The loop lost hold ``token`` (with the loop's mutex held): whether it is news."""
        return self.token == token and self._mark_lost(reason)

    # -- a session hold's watchdog -----------------------------------------------------------

    def _watch(self, token: int, stop: Any) -> Steps[None]:
        """Renew session hold ``token`` on its own connection by the rules of ``p.Renewals``
        until ``stop`` is set (by release, in one step with the renewals). Whatever fails, the
        hold is marked lost and announced: renewals never end silently."""
        renewals, conn = self._renewals, self._session_conn
        lost: Optional[str] = None
        try:
            # Woken at each renewal, and at the lease deadline: lost then, not a renewal later.
            while lost is None and not (yield from self._next_renewal(token, stop, renewals)):
                lost = yield from self._renewal(conn, token, renewals)
        except self._WATCHDOG_FAILURES as err:  # nobody would hear of it: say it, once
            log.error("redislock: the watchdog of %s failed", self._label(), exc_info=err)
            lost = yield self._in_state, _now(self._lose, token, p.watchdog_failed(err))
        if lost is not None:
            yield from self._announce_lost(lost)

    def _next_renewal(self, token: Any, stop: Any, renewals: p.Renewals) -> Steps[bool]:
        """Wait until the next renewal (or the deadline); whether the watchdog stops instead.
        ``stop`` is set by the release, and by a hurried renewal, which takes it back."""
        if not (yield self._stopped, stop, renewals.pause()):
            return False
        return not (yield self._in_state, _now(self._hurried, token, stop, renewals))

    def _hurried(self, token: Any, stop: Any, renewals: p.Renewals) -> bool:
        """``stop`` was set to hurry a renewal of hold ``token`` (with the state lock held, as
        a release sets it): taken back, unless the hold was released or lost since."""
        if self.token != token or self.lost is not None or not renewals.hurry:
            return False
        renewals.hurry = False
        stop.clear()
        return True

    def _renewal(self, conn: Any, token: int, renewals: p.Renewals) -> Steps[Optional[str]]:
        """One renewal; the reason to announce if it lost the hold. Only its send holds the
        state lock (so none is sent after a release); its reply is awaited without it, so a
        release never waits behind a renewal in flight: it abandons it (the reply, when it
        comes, is for a hold that is no longer this object's, and ignored)."""
        reason = renewals.ended()
        if reason is None:
            try:
                sent = time.monotonic()
                if not (yield self._on_own, conn, renewals.timeout()):
                    raise LinkError("the connection was closed")
                if not (yield self._in_state, self._send_renewal(conn, token, renewals)):
                    return None  # released first: never renew a released hold
                reason = yield from self._renewed(conn, sent, renewals)
            except p.BROKEN_LINK + p.NOT_REDIS as err:
                renewals.unanswered()
                yield self._close, conn  # (if it is not closed already: the hold ends with it)
                reason = renewals.ended() or p.session_closed(err)
            except ResponseError as err:
                renewals.unanswered()
                reason = p.refused(p.error_reply(err))
        if reason is None:
            return None
        return (yield self._in_state, _now(self._lose, token, reason))

    def _renewed(self, conn: Any, sent: float, renewals: p.Renewals) -> Steps[Optional[str]]:
        """The reply to a session hold's renewal sent at ``sent``: the reason if it lost it."""
        return renewals.answered(sent, (yield self._read, conn))

    def _send_renewal(self, conn: Any, token: int, renewals: p.Renewals) -> Steps[bool]:
        """Send the renewal of hold ``token`` (with the state lock held), unless it was released."""
        if self.token != token:
            return False
        yield self._write, conn, p.extend_args(self.key, self.owner, renewals.sending(), token)
        return True

    # -- extend --------------------------------------------------------------------------------

    def _extend_in_turn(self, ttl: Optional[float]) -> Steps[bool]:
        """Rule 20: the extends of this object go one at a time, in the order they were made.
        Two on different connections could be answered in the other order than the server
        ran them: a late answer to extend(10) after extend(1) ran would have the client count
        10 s while the server's lease ends 1 s after (rule 15). So one made while another is
        in flight waits for its answer, up to ``unavailable_after`` (then ``Unavailable``,
        nothing sent); the ttl is checked first."""
        if ttl is not None:
            ttl = p.check_ttl(ttl)
        if self.token is None or self.lost is not None:
            return False  # known (rule 16): at once, even while another extend is in flight
        until = time.monotonic() + self.unavailable_after
        while not (yield self._in_state, _now(self._take_extend_turn)):
            if time.monotonic() >= until:
                raise Unavailable(p.address_of(p.pool_of(self.client, self.key)),
                                  "an earlier extend of the hold got no answer; this one was "
                                  "not sent")
            yield self._pause, RENEWAL_POLL
        try:
            return (yield from self._extend(ttl))
        finally:
            # One store, without a step: a second cancellation cannot keep the turn taken.
            self._extend_in_flight = False

    def _take_extend_turn(self) -> bool:
        """Whether no other extend of this object is in flight, now taken (state lock held)."""
        if self._extend_in_flight:
            return False
        self._extend_in_flight = True
        return True

    def _extend(self, ttl: Optional[float]) -> Steps[bool]:
        """Rule 20: ``LOCK.EXTEND`` now, so the lease ends ``ttl`` (checked) from now (None: the
        hold's ttl) and the renewals go on by it. False, nothing sent, for a hold known lost
        or released; False when the server answers 0 (the hold is then lost, reported once)."""
        token = self.token
        if token is None or self.lost is not None:
            return False
        ttl = self._hold_ttl() if ttl is None else ttl
        if not (yield from self._renewals_by(token, ttl)):
            return False
        sent = time.monotonic()
        try:
            reply = yield from self._command(p.extend_args(self.key, self.owner, ttl, token))
        except BaseException as err:  # unanswered, cancelled or interrupted: it may have run
            if not p.answered(err):
                yield self._in_state, _now(self._extend_unanswered, token, sent + ttl)
            raise
        if p.extended(reply):
            return (yield self._in_state, _now(self._extended, token, ttl, sent))
        lost = yield self._in_state, _now(self._lose_now, token, p.LEASE_RAN_OUT)
        if lost is not None:
            yield from self._announce_lost(lost)
        return False

    def _renewals_by(self, token: Any, ttl: float) -> Steps[bool]:
        """Before an extend to ``ttl`` is sent (rule 20): the renewals of hold ``token`` carry
        ``ttl`` from now on, and one already sent is answered first. They travel on another
        connection: an old-ttl renewal run after the extend would end the lease before the
        client's deadline (rule 15). False if the hold was lost or released meanwhile;
        ``Unavailable``, with nothing sent, if no answer comes within ``unavailable_after``."""
        until = time.monotonic() + self.unavailable_after
        renewing = yield self._in_state, _now(self._extending, token, ttl)
        while renewing:
            if time.monotonic() >= until:
                raise Unavailable(p.address_of(p.pool_of(self.client, self.key)),
                                  "a renewal of the hold got no answer; the extend was not sent")
            yield self._pause, RENEWAL_POLL
            renewing = yield self._in_state, _now(self._renewing, token)
        return renewing is not None

    def _extending(self, token: int, ttl: float) -> Optional[bool]:
        """The renewals of hold ``token`` go by ``ttl`` from now on (with the state lock held):
        whether one is in flight; None if the hold is gone."""
        if self.token != token or self.lost is not None:
            return None
        if self._entry is not None:
            return self._entry.loop.extending(self._entry, ttl)
        return self._renewals is not None and self._renewals.extending(ttl)

    def _renewing(self, token: Any) -> Optional[bool]:
        """Whether a renewal of hold ``token`` is in flight (state lock held); None: it is gone."""
        if self.token != token or self.lost is not None:
            return None
        if self._entry is not None:
            return self._entry.loop.renewing(self._entry)
        return self._renewals is not None and self._renewals.in_flight is not None

    def _extend_unanswered(self, token: Any, ends_by: float) -> None:
        """An extend of hold ``token`` got no answer (with the state lock held): it may have
        run, so the lease may end by ``ends_by`` (rule 15): counted so, renewed at once."""
        if self.token != token or self.lost is not None:
            return
        if self._entry is not None:
            self._entry.loop.extend_unanswered(self._entry, ends_by)
        elif self._renewals is not None and self._renewals.extend_unanswered(ends_by):
            self._stop.set()  # wakes the watchdog (``_hurried``)

    def _hold_ttl(self) -> float:
        if self._entry is not None:
            return self._entry.ttl
        return self._renewals.ttl if self._renewals is not None else self.ttl

    def _extended(self, token: int, ttl: float, sent: float) -> bool:
        """An extend of hold ``token`` sent at ``sent`` was answered 1 (with the state lock
        held): the lease ends ``ttl`` after ``sent``; False if the hold was lost meanwhile."""
        if self.token != token or self.lost is not None:
            return False
        if self._entry is not None:
            return bool(self._entry.loop.extended(self._entry, ttl, sent))
        if self._renewals is not None:
            self._renewals.extended(ttl, sent)
        return True

    def _lose_now(self, token: int, reason: str) -> Optional[str]:
        """Hold ``token`` is lost for ``reason`` (with the state lock held), taken out of its
        loop: the reason to announce, unless it was known already."""
        if self.token != token:
            return None
        if self._entry is not None:
            return reason if self._entry.loop.lose(self._entry, reason) else None
        return self._lose(token, reason)

    def _mark_lost(self, reason: str) -> bool:
        """Record the loss (with the state lock held); True the first time, when the caller
        announces it once the state lock is free (the callback may use the lock)."""
        if self.lost is not None:
            return False
        self.lost = reason
        return True

    def _lose(self, token: int, reason: Optional[str]) -> Optional[str]:
        """The watchdog of hold ``token`` found ``reason`` (with the state lock held): the reason
        to announce, or None when there is nothing to (no loss, released meanwhile, or lost)."""
        if reason is None or self.token != token or not self._mark_lost(reason):
            return None
        return reason

    def _announce_lost(self, reason: str) -> Steps[None]:
        log.warning("redislock: lost %s: %s", self._label(), reason)
        self._emit("lost", reason=reason)
        if self.on_lost is not None:
            try:
                yield self._call_back, self.on_lost, reason
            except Exception:  # the application's callback must not kill the watchdog
                log.exception("redislock: on_lost callback failed")

    # -- releasing ---------------------------------------------------------------------------

    def _release(self) -> Steps[bool]:
        """Release the hold. False if it was lost first (its lease ran out, or the watchdog
        gave it up): the work done under it may have overlapped another holder's."""
        if self.reentrant and self._depth > 1:
            self._depth -= 1
            return True
        if self._depth == 0:
            return False  # released already (or never held): nothing to send (rule 16)
        try:
            try:
                released, newly_lost, held = yield self._in_state, self._end()
            except BaseException:
                self._abandon()
                raise
            if newly_lost:
                yield from self._announce_lost(self.lost or "")
            if self._session_conn is not None:
                conn, self._session_conn = self._session_conn, None
                yield self._close, conn  # closing it ends the session hold in any case
            self._emit("released", held_s=held, released=released)
            return self.lost is None
        finally:
            self._depth, self._holder = 0, None
            self._local.release()

    def _abandon(self) -> None:
        """A release interrupted before it ended the hold (cancelled or interrupted while the
        state lock was busy, or its command failed): stop the renewals all the same, so the
        hold ends with its lease instead of being renewed for as long as the process lives."""
        self._unwatch()
        self.token = None

    def _end(self) -> Steps[Tuple[bool, bool, float]]:
        """End the hold (with the state lock held, so the watchdog stops in this very step):
        whether the server released it, whether it is newly lost, how long it was held."""
        self._unwatch()  # first: after this, the loop sends nothing of it nor marks it lost
        token, self.token = self.token, None
        released = False
        # A hold known lost answers without the server (rule 16); a release that finds it gone
        # marks it lost. A server that cannot be reached raises ``Unavailable`` (rule 14).
        if token is not None and self.lost is None:
            args = p.release_args(self.key, self.owner, token)
            released = p.released((yield from self._command(args)))
        newly_lost = not released and self._mark_lost(p.GONE_AT_RELEASE)
        return released, newly_lost, time.monotonic() - self._granted_at

    # -- guarded writes ----------------------------------------------------------------------

    def _guarded(self, command: Sequence[Any]) -> Steps[Any]:
        """Run ``command`` through ``LOCK.GUARD`` with this hold's token: it runs only while the
        hold is the live exclusive one, else ``redislock.Stale``."""
        return (yield from self._command(self._guard_args(command)))

    def _guard_args(self, command: Sequence[Any]) -> list:
        """``LOCK.GUARD`` of this hold; ``Stale`` for a semaphore, when not held, or once it was
        lost (the server may still accept it until the lease runs out, but the application has
        been told)."""
        if self.mode.limit is not None:
            raise Stale("a semaphore's permits never guard a write; use an exclusive Lock")
        if self.token is None:
            raise Stale("this lock is not held")
        if self.lost is not None:
            raise Stale(f"this hold was lost: {self.lost}")
        return p.guard_args(self.key, self.token, command)

    # -- with, and hold() ----------------------------------------------------------------------

    def _enter(self, blocking: bool = True, timeout: Optional[float] = None,
               hold: bool = False) -> Steps["LockBase"]:
        """Entering ``with lock`` (or ``with lock.hold(...)``): ``NotAcquired`` if not granted."""
        if not (yield from self._acquire(blocking, timeout)):
            within = f" within {timeout} s" if hold else ""
            raise NotAcquired(f"{self.key} was not granted{within}")
        return self

    def _exit(self, exc_type: Any) -> Steps[None]:
        """Leaving it: release; ``LockLost`` if the hold was lost, unless the block raised (or
        it was released in the block already)."""
        depth = self._depth
        if depth == 0:
            return
        released = yield from self._release()
        if depth <= 1 and not released and self.raise_on_lost and exc_type is None:
            raise LockLost(self.lost or "the hold was gone when released")

    def hold(self, timeout: Optional[float] = None, blocking: bool = True) -> Any:
        """``with lock.hold(timeout=5.0):`` raises ``NotAcquired`` if not granted in time
        (``blocking=False``: at once)."""
        return self._Hold(self, timeout, blocking)

    # -- the rest ----------------------------------------------------------------------------

    def _label(self) -> str:
        """What the hold is of, in logs: its key."""
        return str(self.key)

    def _emit(self, event: str, **fields: Any) -> None:
        if self.on_event is not None:
            try:
                self.on_event(event, fields)
            except Exception:
                log.exception("redislock: on_event hook failed")

    def __repr__(self) -> str:
        return f"<{self._NAME} {self.key!r} owner={self.owner} token={self.token}>"


class HoldBase:
    """``hold()``'s object: the lock's own ``with``, acquiring with ``timeout`` and
    ``blocking``."""

    def __init__(self, lock: LockBase, timeout: Optional[float], blocking: bool):
        self.lock, self.timeout, self.blocking = lock, timeout, blocking

    def _enter(self) -> Steps[LockBase]:
        return self.lock._enter(self.blocking, self.timeout, hold=True)

    def _exit(self, exc_type: Any) -> Steps[None]:
        return self.lock._exit(exc_type)


class SemaphoreBase:
    """``permits`` of a counting semaphore of ``limit`` permits at ``key``: never more than
    ``limit`` held at once, waiters served in order (a big request is never passed by smaller
    ones), each holder with its own lease and token. Mixed in before a flavour's Lock."""

    def __init__(self, client: Any, key: str, limit: int, ttl: float = 30.0, permits: int = 1,
                 **kw: Any):
        mode = p.Mode.semaphore(limit, permits)
        super().__init__(client, key, ttl, _mode=mode, **kw)  # type: ignore[call-arg]
