/**
 * `Locks`: the entry point. `acquire` waits in the server's FIFO queue (`LOCK.ACQUIRE ... WAIT`)
 * on a connection of its own, never polling; an `AbortSignal` or the wait time ends the wait, and
 * an aborted wait's connection is closed (which takes it out of the server's queue), never reused.
 */
import { randomUUID } from "node:crypto";
import { adapt, isReplyError, noop, type Adapter, type Connection } from "./adapter.js";
import { LockLostError, NotAcquiredError, translate } from "./errors.js";
import { Hold } from "./hold.js";
import { RETRY_PAUSE, acquireArgs, int, movedAway, releaseArgs, tokenOf, waitArgs, type Mode } from "./protocol.js";

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
}

const DEFAULT_TTL = 30_000;

const pause = (ms: number): Promise<void> => new Promise((resolve) => setTimeout(resolve, ms));

/** A link failure or a server that no longer serves the key: a wait asks again. */
const retriable = (e: unknown): boolean => !isReplyError(e) || movedAway(e);

export class Locks {
  readonly adapter: Adapter;
  #defaults: AcquireOptions;
  #maxIdle: number;
  #idle = new Map<string, Connection[]>();
  #closed = false;

  /** `client`: a node-redis client, cluster or sentinel, an ioredis `Redis` or `Cluster`, or an `Adapter`. */
  constructor(client: unknown, options: LocksOptions = {}) {
    this.adapter = adapt(client);
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
    const hold = await this.#take(key, o, o.wait ?? Infinity);
    if (hold) return hold;
    const within = o.wait === undefined || o.wait === Infinity ? "" : ` within ${o.wait} ms`;
    throw new NotAcquiredError(`${key} was not granted${within}`, key);
  }

  /** `acquire`, but null when not granted; tries once unless `wait` is given. */
  async tryAcquire(key: string, options: AcquireOptions = {}): Promise<Hold | null> {
    const o = { ...this.#defaults, ...options };
    return this.#take(key, o, o.wait ?? 0);
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
    const hold = await this.acquire(key, o);
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

  /** Close the idle wait connections (holds and waits in progress keep theirs). */
  close(): void {
    this.#closed = true;
    for (const conns of this.#idle.values()) for (const c of conns) c.close();
    this.#idle.clear();
  }

  async #take(key: string, o: AcquireOptions, wait: number): Promise<Hold | null> {
    if (!(wait >= 0)) throw new RangeError("wait must be a number of ms >= 0 (Infinity: without limit)");
    const ttl = o.ttl ?? DEFAULT_TTL;
    if (!(ttl > 0)) throw new RangeError("ttl must be a positive number of ms");
    const mode: Mode = o.semaphore
      ? { limit: o.semaphore.limit, permits: o.semaphore.permits ?? 1 }
      : { shared: !!o.shared };
    const owner = o.owner ?? randomUUID();
    const session = !!o.session;
    const signal = o.signal;
    signal?.throwIfAborted();
    const deadline = wait === Infinity ? Infinity : performance.now() + wait;
    let staleRetried = false;
    for (;;) {
      const route = this.adapter.route(key); // a cluster's slot may move between tries
      const left = deadline === Infinity ? Infinity : deadline - performance.now();
      const blocking = wait > 0;
      const serverWait = blocking ? Math.max(1, left) : undefined;
      const args = acquireArgs(key, owner, ttl, mode, session, serverWait);
      // A wait, a session hold and a durable grant (`WAIT` blocks its connection) use a
      // connection of their own; a try without them, the application's client.
      const own = blocking || session || !!o.replicas;
      let conn: Connection | undefined;
      let reused = false;
      try {
        if (!own) {
          const token = tokenOf(await this.adapter.send(key, args));
          return token === null ? null : this.#hold(key, owner, token, ttl, o, undefined);
        }
        const made = await this.#abortable(this.#connection(key, route), signal, noop, (m) => m.conn.close());
        const c = (conn = made.conn);
        reused = made.reused;
        const token = tokenOf(await this.#abortable(c.send(args), signal, () => c.close()));
        if (token !== null && o.replicas && !(await this.#durable(c, o.replicas, o.replicasTimeout ?? 1000))) {
          await c.send(releaseArgs(key, owner, token)); // not durable: given back, not granted
          this.#giveBack(route, c);
          return null;
        }
        if (token === null) {
          this.#giveBack(route, c);
          return null;
        }
        if (session) return this.#hold(key, owner, token, ttl, o, c);
        this.#giveBack(route, c);
        return this.#hold(key, owner, token, ttl, o, undefined);
      } catch (e) {
        if (signal?.aborted) throw signal.reason; // its connection is closed already
        if (!retriable(e)) {
          if (conn) this.#giveBack(route, conn); // the command ended: the connection is clean
          throw translate(e);
        }
        // The link broke (or this server no longer serves the key): the same owner asks again,
        // which the server answers as a safe retry, until the deadline.
        conn?.close();
        if (reused && !staleRetried) {
          staleRetried = true; // an idle connection the server had closed meanwhile: once more
          continue;
        }
        if (!blocking || performance.now() >= deadline) throw e;
        await this.#abortable(pause(RETRY_PAUSE), signal, noop);
      }
    }
  }

  async #durable(conn: Connection, replicas: number, timeout: number): Promise<boolean> {
    return int(await conn.send(waitArgs(replicas, timeout))) >= replicas;
  }

  #hold(
    key: string,
    owner: string,
    token: number,
    ttl: number,
    o: AcquireOptions,
    session: Connection | undefined,
  ): Hold {
    session?.ref(false); // a hold never keeps the process alive (its end releases a session hold)
    return new Hold({
      adapter: this.adapter,
      key,
      owner,
      token,
      ttl,
      semaphore: !!o.semaphore,
      watchdog: o.watchdog ?? true,
      ...(session ? { session } : {}),
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
    const conn = await this.adapter.connect(key);
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
