/**
 * `Locks`: the entry point. `acquire` waits in the server's FIFO queue (`LOCK.ACQUIRE ... WAIT`)
 * on a connection of its own, never polling; an `AbortSignal` or the wait time ends the wait, and
 * an aborted wait's connection is closed (which takes it out of the server's queue), never reused.
 * Every hold it grants is renewed by its one renewal loop (`loop.ts`).
 */
import { randomUUID } from "node:crypto";
import { adapt } from "./adapt.js";
import { CONNECT_TIMEOUT, LinkTimeout, noop, within, type Adapter, type Connection } from "./adapter.js";
import { Election, type ElectionOptions } from "./election.js";
import { LockError, LockLostError, NotAcquiredError, UnavailableError } from "./errors.js";
import { Hold } from "./hold.js";
import { MultiHold } from "./multihold.js";
import { Link, Links } from "./links.js";
import { RenewalLoop } from "./loop.js";
import {
  RETRY_PAUSE,
  acquireArgs,
  checkKeys,
  int,
  macquireArgs,
  modeWords,
  releaseArgs,
  tokenOf,
  tokensOf,
  waitArgs,
  type Arg,
  type Mode,
} from "./protocol.js";
import { Reach, linkFailure, pause } from "./reach.js";

export interface AcquireOptions {
  /** The lease in ms (default 30 000); the watchdog renews it every ttl/3. */
  ttl?: number;
  /**
   * How long to wait in the server's queue, in ms: `Infinity` without limit, 0 one try.
   * Default: `acquire` waits without limit, `tryAcquire` tries once.
   */
  wait?: number;
  /** Ends the wait: the promise rejects with `signal.reason` and the waiter leaves the queue. */
  signal?: AbortSignal;
  /** A read hold: any number at once; a writer waits for all. */
  shared?: boolean;
  /** `permits` (default 1) of a counting semaphore of `limit` permits. */
  semaphore?: { limit: number; permits?: number };
  /** The hold lives on a connection of its own and ends when it closes (this process dies). */
  session?: boolean;
  /** A durable grant: granted only once this many replicas have it (`WAIT n timeout`), else
   * released and reported not granted. */
  replicas?: number;
  /** How long the replicas may take to acknowledge, in ms (default 1000). */
  replicasTimeout?: number;
  /** The owner (default: a fresh UUID per acquire). A retry with the same owner is safe. */
  owner?: string;
  /** Renew the lease while held (default true); false keeps a fixed lease. */
  watchdog?: boolean;
  /** Called once, with the reason, when the hold is lost (as the `lost` promise and event). */
  onLost?: (reason: string) => void;
  /** Whether leaving an `await using` scope throws `LockLostError` for a lost hold (default true). */
  raiseOnLost?: boolean;
}

export interface LocksOptions {
  /** Defaults for every acquire (its own options win). */
  defaults?: AcquireOptions;
  /** Idle wait connections kept per server for the next waits (default 16). */
  idleConnections?: number;
  /**
   * The unavailability bound in ms (default 10 000): a server that cannot be reached, or does
   * not answer, for this long fails an acquire (whatever its wait), a release, an extend or a
   * guarded write with `UnavailableError`; a longer wait is watched with `PING` meanwhile.
   */
  unavailableAfter?: number;
}

const DEFAULT_TTL = 30_000;
/** How long past a wait's end its reply is awaited before the server counts as silent (ms). */
const REPLY_GRACE = 1000;

/** An acquire's checked arguments. */
interface Ask {
  key: string;
  /** A lock set's keys (`key` is the first): `LOCK.MACQUIRE`. */
  keys: string[] | undefined;
  o: AcquireOptions;
  owner: string;
  ttl: number;
  mode: Mode;
  session: boolean;
  blocking: boolean;
  own: boolean;
  signal: AbortSignal | undefined;
  deadline: number;
}

/** One try's route, and whether its connection was an idle one. */
interface Attempt {
  route: string;
  reused: boolean;
  /** When its command was written on its own connection (undefined: not that far). */
  sent?: number;
}

export class Locks {
  /** @internal the client, as this library speaks to it */
  readonly adapter: Adapter;
  #reach: Reach;
  /** Renews every watchdog hold of this object, on one connection per server (rule 6). */
  #loop: RenewalLoop;
  #defaults: AcquireOptions;
  #maxIdle: number;
  #idle = new Map<string, Connection[]>();
  #closed = false;

  /** `client`: a node-redis client, cluster or sentinel, an ioredis `Redis` or `Cluster`, or an `Adapter`. */
  constructor(client: unknown, options: LocksOptions = {}) {
    this.adapter = adapt(client);
    this.#reach = new Reach(this.adapter, options.unavailableAfter);
    this.#loop = new RenewalLoop(new Links(this.adapter));
    this.#defaults = options.defaults ?? {};
    this.#maxIdle = options.idleConnections ?? 16;
  }

  /**
   * Take the lock on `key`, waiting in the server's queue (without limit unless `wait` or
   * `signal` says otherwise). Rejects with `NotAcquiredError` when not granted in time, with
   * `signal.reason` when aborted.
   */
  async acquire(key: string, options: AcquireOptions = {}): Promise<Hold> {
    const o = { ...this.#defaults, ...options };
    const hold = (await this.#take(key, o, o.wait ?? Infinity)) as Hold | null;
    if (hold) return hold;
    const within = o.wait === undefined || o.wait === Infinity ? "" : ` within ${o.wait} ms`;
    throw new NotAcquiredError(`${key} was not granted${within}`, key);
  }

  /** `acquire`, but null when not granted; tries once unless `wait` is given. */
  async tryAcquire(key: string, options: AcquireOptions = {}): Promise<Hold | null> {
    const o = { ...this.#defaults, ...options };
    return (await this.#take(key, o, o.wait ?? 0)) as Hold | null;
  }

  /**
   * Take every one of `keys` in one step, or none (`LOCK.MACQUIRE`, rule 23): each exclusive, or
   * each shared (`shared: true`), with its own token and lease. A set that waits queues in every
   * key's queue at once, so sets never deadlock whatever order they name their keys in. Waits as
   * `acquire` does; rejects with `NotAcquiredError` when not granted in time. No keys, a key twice
   * or more than 64 keys is a `RangeError` before anything is sent; `semaphore` and `replicas`
   * are not offered. In a cluster the keys must hash to one slot (`{acct}:1`, `{acct}:2`).
   */
  async acquireAll(keys: readonly string[], options: AcquireOptions = {}): Promise<MultiHold> {
    const o = { ...this.#defaults, ...options };
    const set = checkKeys(keys);
    const hold = (await this.#take(set[0]!, o, o.wait ?? Infinity, set)) as MultiHold | null;
    if (hold) return hold;
    const within = o.wait === undefined || o.wait === Infinity ? "" : ` within ${o.wait} ms`;
    throw new NotAcquiredError(`the set ${set.join(", ")} was not granted${within}`, set[0]!);
  }

  /** `acquireAll`, but null when not granted (and nothing taken); tries once unless `wait` is given. */
  async tryAcquireAll(keys: readonly string[], options: AcquireOptions = {}): Promise<MultiHold | null> {
    const o = { ...this.#defaults, ...options };
    const set = checkKeys(keys);
    return (await this.#take(set[0]!, o, o.wait ?? 0, set)) as MultiHold | null;
  }

  /**
   * `routine(hold, signal)` under the lock, released when it ends; `signal` aborts if the hold
   * is lost meanwhile (its reason a `LockLostError`). Rejects with the routine's error, or
   * else with `LockLostError` if the hold was lost.
   */
  async using<T>(
    key: string,
    options: AcquireOptions,
    routine: (hold: Hold, signal: AbortSignal) => Promise<T>,
  ): Promise<T> {
    const o = { ...this.#defaults, ...options };
    const hold: Hold = await this.acquire(key, o);
    const lost = new AbortController();
    void hold.lost.then((reason) => lost.abort(new LockLostError(reason)));
    let result: T;
    try {
      result = await routine(hold, lost.signal);
    } catch (e) {
      await hold.release().catch(() => undefined);
      throw e;
    }
    if (!(await hold.release()) && o.raiseOnLost !== false) {
      throw new LockLostError(hold.lostReason ?? "the hold was gone when released");
    }
    return result;
  }

  /**
   * An election on `key` (rule 21): `campaign()` waits in the key's queue for a session hold
   * owned by `identity` (default: host name, pid and random digits), renewed by this object's
   * watchdog; `leader()` and `observe()` read who leads.
   */
  election(key: string, options: ElectionOptions = {}): Election {
    const election: Election = new Election(
      key,
      options.identity,
      this.#reach,
      (o, wait) =>
        // Not this object's `defaults`: a leadership is always an exclusive session hold with its
        // watchdog on, whatever the other holds are.
        this.#take(
          key,
          { ...o, owner: election.identity, session: true, watchdog: true },
          wait,
        ) as Promise<Hold | null>,
    );
    return election;
  }

  /** Close the idle wait connections, and the renewal loop's once no hold is left in it (holds
   * and waits in progress keep theirs). */
  close(): void {
    this.#closed = true;
    this.#loop.close();
    for (const conns of this.#idle.values()) for (const c of conns) c.close();
    this.#idle.clear();
  }

  async #take(key: string, o: AcquireOptions, wait: number, keys?: string[]): Promise<Hold | MultiHold | null> {
    const ask = this.#ask(key, o, wait, keys); // every argument checked before anything is sent
    ask.signal?.throwIfAborted();
    let failingSince: number | undefined;
    let staleRetried = false;
    for (;;) {
      const route = this.adapter.route(key); // a cluster's slot may move between tries
      const attempt: Attempt = { route, reused: false };
      const began = performance.now();
      try {
        return await this.#attempt(ask, attempt);
      } catch (e) {
        if (ask.signal?.aborted) throw ask.signal.reason; // its connection is closed already
        if (e instanceof LockError || !linkFailure(e)) throw this.#reach.failure(key, e);
        if (attempt.reused && !staleRetried) {
          staleRetried = true; // an idle connection the server had closed meanwhile: once more
          continue;
        }
        // The link broke (or this server no longer serves the key): the same owner asks again,
        // which the server answers as a safe retry, until the caller's deadline or the bound.
        // The silence began when the failed try began (a connect may take its timeout to fail),
        // but for a wait whose link broke once its command was written: the server was watched
        // until then (`Reach.watch`), so it failed now, however long it had waited (a standing
        // candidate of an election, a waiter unblocked by a failover).
        failingSince ??= attempt.sent === undefined ? began : performance.now();
        if (performance.now() + RETRY_PAUSE >= Math.min(ask.deadline, failingSince + this.#reach.bound)) {
          throw this.#reach.unavailable(key, e);
        }
        await this.#abortable(pause(RETRY_PAUSE), ask.signal, noop);
      }
    }
  }

  /** The acquire's arguments, checked (`RangeError`), and its deadline. */
  #ask(key: string, o: AcquireOptions, wait: number, keys: string[] | undefined): Ask {
    if (!(wait >= 0)) throw new RangeError("wait must be a number of ms >= 0 (Infinity: without limit)");
    const ttl = o.ttl ?? DEFAULT_TTL;
    if (!(ttl >= 1 && ttl < Infinity)) throw new RangeError("ttl must be a finite number of ms >= 1");
    if (o.replicas !== undefined && !(Number.isInteger(o.replicas) && o.replicas >= 0))
      throw new RangeError("replicas must be an integer >= 0");
    if (o.replicasTimeout !== undefined && !(o.replicasTimeout >= 0 && o.replicasTimeout < Infinity))
      throw new RangeError("replicasTimeout must be a finite number of ms >= 0");
    const mode: Mode = o.semaphore
      ? { limit: o.semaphore.limit, permits: o.semaphore.permits ?? 1 }
      : { shared: !!o.shared };
    modeWords(mode);
    if (keys && (o.semaphore || o.replicas))
      throw new RangeError("a lock set takes exclusive or shared locks: no semaphore, no replicas");
    const session = !!o.session;
    const blocking = wait > 0;
    return {
      key,
      keys,
      o,
      ttl,
      mode,
      session,
      blocking,
      owner: o.owner ?? randomUUID(),
      signal: o.signal,
      deadline: wait === Infinity ? Infinity : performance.now() + wait,
      // A wait, a session hold and a durable grant (`WAIT` blocks its connection) use a
      // connection of their own; a try without them, the application's client.
      own: blocking || session || !!o.replicas,
    };
  }

  /** One try: the hold, or null when not granted. */
  async #attempt(ask: Ask, attempt: Attempt): Promise<Hold | MultiHold | null> {
    const { key, owner, signal } = ask;
    const left = ask.deadline - performance.now();
    const wait = ask.blocking ? Math.max(1, left) : undefined;
    const args = ask.keys
      ? macquireArgs(ask.keys, owner, ask.ttl, !!ask.mode.shared, ask.session, wait)
      : acquireArgs(key, owner, ask.ttl, ask.mode, ask.session, wait);
    // A lock set's grant is its tokens; a lock's, its token.
    const granted = (reply: unknown): number | number[] | null => (ask.keys ? tokensOf(reply) : tokenOf(reply));
    if (!ask.own) {
      const sent = performance.now();
      const token = granted(await this.#reach.send(key, args, false));
      return token === null ? null : this.#hold(ask, token, sent, undefined);
    }
    const made = await this.#abortable(this.#connection(key, attempt.route), signal, noop, (m) => m.conn.close());
    const c = made.conn;
    attempt.reused = made.reused;
    try {
      const sent = performance.now();
      attempt.sent = sent;
      const reply = this.#reply(c, key, args, ask.blocking ? left : 0);
      const token = granted(await this.#abortable(reply, signal, () => c.close()));
      // A grant after a wait started its lease when the server granted it, which the reply
      // tells (one loopback or network hop later); a try's lease started no earlier than it was sent.
      const leaseFrom = ask.blocking ? performance.now() : sent;
      if (
        token === null ||
        (typeof token === "number" && ask.o.replicas && !(await this.#durable(c, ask, token, leaseFrom)))
      ) {
        this.#giveBack(attempt.route, c);
        return null;
      }
      if (ask.session) return this.#hold(ask, token, leaseFrom, c);
      this.#giveBack(attempt.route, c);
      return this.#hold(ask, token, leaseFrom, undefined);
    } catch (e) {
      if (linkFailure(e) || e instanceof UnavailableError || signal?.aborted) c.close();
      else this.#giveBack(attempt.route, c); // the command ended: the connection is clean
      throw e;
    }
  }

  /**
   * The acquire's reply on its own connection `c`, awaited until the wait's end (`left` ms) plus
   * a grace, the server watched meanwhile (`Reach.watch`): silence past either closes `c`, which
   * takes the waiter out of the queue, and rejects as unavailable.
   */
  #reply(c: Connection, key: string, args: Arg[], left: number): Promise<unknown> {
    const bound = this.#reach.bound;
    return new Promise((resolve, reject) => {
      const dead = (err: UnavailableError): void => {
        c.close();
        reject(err);
      };
      const stop = this.#reach.watch(key, dead);
      const awaited = left > 0 ? left + Math.min(bound, REPLY_GRACE) : bound;
      const reply = awaited === Infinity ? c.send(args) : within(c.send(args), awaited, () => c.close());
      reply
        .then(resolve, (e: unknown) => reject(e instanceof LinkTimeout ? this.#reach.unavailable(key, e) : e))
        .finally(stop);
    });
  }

  /** Whether the grant (its lease from `leaseFrom`) reached its replicas (`WAIT n timeout`); if
   * not, it is given back. */
  async #durable(c: Connection, ask: Ask, token: number, leaseFrom: number): Promise<boolean> {
    const timeout = ask.o.replicasTimeout ?? 1000;
    const bound = this.#reach.bound;
    let acked: number;
    try {
      acked = int(await within(c.send(waitArgs(ask.o.replicas!, timeout)), timeout + bound, () => c.close()));
    } catch (e) {
      if (!linkFailure(e)) throw e;
      // Unavailable now, not asked again (a retry's grant could meet this give-back). The grant
      // is given back on the renewal loop's connection (the library's own: not the application's
      // client, which may have no offline queue and refuse it while its link is down), asked
      // again after a broken link (the same owner and token: a second release of a released
      // hold answers 0) until the server answers or the grant's lease would have ended anyway.
      const leaseEnd = leaseFrom + ask.ttl;
      if (performance.now() < leaseEnd) {
        const link = this.#loop.links.forKey(ask.key);
        const args = releaseArgs(ask.key, ask.owner, token);
        this.#loop.aside(this.#reach.sendOn(link, ask.key, args, true, leaseEnd).catch(noop));
      }
      throw this.#reach.unavailable(ask.key, e);
    }
    if (acked >= ask.o.replicas!) return true;
    await within(c.send(releaseArgs(ask.key, ask.owner, token)), bound, () => c.close());
    return false;
  }

  #hold(ask: Ask, token: number | number[], leaseFrom: number, session: Connection | undefined): Hold | MultiHold {
    session?.ref(false); // a hold never keeps the process alive (its end releases a session hold)
    const { o } = ask;
    if (typeof token !== "number") {
      return new MultiHold({
        reach: this.#reach,
        loop: this.#loop,
        keys: ask.keys!,
        owner: ask.owner,
        tokens: token,
        ttl: ask.ttl,
        leaseFrom,
        watchdog: o.watchdog ?? true,
        ...(session ? { session: Link.session(session) } : {}),
        ...(o.onLost ? { onLost: o.onLost } : {}),
        raiseOnLost: o.raiseOnLost ?? true,
      });
    }
    return new Hold({
      reach: this.#reach,
      loop: this.#loop,
      key: ask.key,
      owner: ask.owner,
      token,
      ttl: ask.ttl,
      leaseFrom,
      semaphore: !!o.semaphore,
      watchdog: o.watchdog ?? true,
      ...(session ? { session: Link.session(session) } : {}),
      ...(o.onLost ? { onLost: o.onLost } : {}),
      raiseOnLost: o.raiseOnLost ?? true,
    });
  }

  /** An idle wait connection for `route`, or a new one. */
  async #connection(key: string, route: string): Promise<{ conn: Connection; reused: boolean }> {
    const idle = this.#idle.get(route)?.pop();
    if (idle) {
      idle.ref(true);
      return { conn: idle, reused: true };
    }
    const conn = await this.adapter.connect(key, { timeout: Math.min(CONNECT_TIMEOUT, this.#reach.bound) });
    conn.ref(true);
    return { conn, reused: false };
  }

  /** A connection whose command ended: kept for the next wait (not keeping the process alive). */
  #giveBack(route: string, conn: Connection): void {
    const idle = this.#idle.get(route) ?? [];
    if (this.#closed || idle.length >= this.#maxIdle) {
      conn.close();
      return;
    }
    conn.ref(false);
    idle.push(conn);
    this.#idle.set(route, idle);
  }

  /**
   * `work`, unless `signal` aborts first: then it rejects with the reason, `now` runs at once
   * (closing the connection a wait is on) and `later` on what `work` still resolves with.
   */
  #abortable<T>(
    work: Promise<T>,
    signal: AbortSignal | undefined,
    now: () => void,
    later?: (value: T) => void,
  ): Promise<T> {
    if (!signal) return work;
    return new Promise<T>((resolve, reject) => {
      const onAbort = (): void => {
        now();
        reject(signal.reason);
        work.then((v) => later?.(v), noop);
      };
      if (signal.aborted) return onAbort();
      signal.addEventListener("abort", onAbort, { once: true });
      work.then(
        (v) => {
          signal.removeEventListener("abort", onAbort);
          resolve(v);
        },
        (e: unknown) => {
          signal.removeEventListener("abort", onAbort);
          reject(e);
        },
      );
    });
  }
}
