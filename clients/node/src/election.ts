/**
 * Elections (rules 21 and 22 of docs/clients.md). A candidate campaigns by waiting in the key's
 * FIFO queue for a session hold (`LOCK.ACQUIRE key identity ttl SESSION WAIT ...`, through its
 * `Locks`): the hold is its leadership, the hold's fencing token its term, renewed by the `Locks`'
 * one watchdog on the hold's own connection. A leader killed with `kill -9` closes that connection
 * and the next candidate is leader at once; one frozen past its lease is replaced at the lease's
 * end, and told once (its `signal` aborts) when it runs again. Observers read the leader with
 * `LOCK.WATCH`, one connection blocked per observer, passing their last cursor after a reconnect.
 */
import { randomUUID } from "node:crypto";
import { hostname } from "node:os";
import "./dispose.js";
import { CONNECT_TIMEOUT, within, type Adapter, type Connection } from "./adapter.js";
import { LeadershipLostError, NotAcquiredError } from "./errors.js";
import type { Hold } from "./hold.js";
import { RETRY_PAUSE, watchArgs, watchReply, type Arg, type WatchState } from "./protocol.js";
import { linkFailure, type Reach } from "./reach.js";

/** A leadership's lease when the campaign names none (ms): rule 21's default. */
export const ELECTION_TTL = 10_000;
/** The longest pause between an observer's attempts to connect again (ms). */
const MAX_RECONNECT_PAUSE = 1000;

export interface ElectionOptions {
  /**
   * This candidate's identity: the owner of its hold, what `leader()` and `observe()` report (a
   * host or pod name). It must be unique among live candidates: the server answers a second
   * candidate with the leader's identity as a retry of the leader, with the same term. Default:
   * `<host name>:<pid>:<8 random hex digits>`.
   */
  identity?: string;
}

export interface CampaignOptions {
  /** The leadership's lease in ms (default 10 000); the watchdog renews it every ttl/3. A leader
   * frozen (SIGSTOP, GC, swap) or cut off longer than this is replaced at the lease's end. */
  ttl?: number;
  /** How long to wait for leadership, in ms (default: without limit); `NotAcquiredError` after. */
  wait?: number;
  /** Ends the wait: the campaign rejects with `signal.reason` and leaves the server's queue. */
  signal?: AbortSignal;
  /** Called once, with the reason, when the leadership is lost (as `signal` aborts). */
  onLost?: (reason: string) => void;
}

export interface ObserveOptions {
  /** Ends the observation: the iteration ends (without an error) and its connection closes. */
  signal?: AbortSignal;
}

/** Who leads: the candidate's identity and its term (its hold's fencing token). */
export interface Leader {
  readonly identity: string;
  readonly term: number;
}

/** What an election needs of its `Locks`: a session hold of its key for this identity. */
export type Take = (
  o: { ttl: number; signal?: AbortSignal; onLost: (reason: string) => void },
  wait: number,
) => Promise<Hold | null>;

/**
 * An election on one key (`locks.election(key, { identity })`): `campaign()` waits to lead,
 * `leader()` reads who leads, `observe()` follows the leaders.
 */
export class Election {
  readonly key: string;
  /** This candidate's identity (the owner of its hold). */
  readonly identity: string;
  #reach: Reach;
  #take: Take;

  /** @internal made by `Locks.election` */
  constructor(key: string, identity: string | undefined, reach: Reach, take: Take) {
    if (identity !== undefined && (typeof identity !== "string" || identity.length === 0))
      throw new TypeError("identity must be a non-empty string");
    this.key = key;
    this.identity = identity ?? `${hostname()}:${process.pid}:${randomUUID().slice(0, 8)}`;
    this.#reach = reach;
    this.#take = take;
  }

  /**
   * Wait in the key's queue until this candidate leads (without limit unless `wait` or `signal`
   * says otherwise): the leadership. Rejects with `NotAcquiredError` when `wait` passes, with
   * `signal.reason` when aborted (the candidate leaves the queue), with `UnavailableError` when
   * the server cannot be reached within the `Locks`' bound.
   */
  async campaign(options: CampaignOptions = {}): Promise<Leadership> {
    const lost = new AbortController();
    const onLost = (reason: string): void => {
      lost.abort(new LeadershipLostError(reason));
      try {
        options.onLost?.(reason);
      } catch {
        // the application's callback must not break the leadership's bookkeeping
      }
    };
    const wait = options.wait ?? Infinity;
    const o = { ttl: options.ttl ?? ELECTION_TTL, onLost, ...(options.signal ? { signal: options.signal } : {}) };
    const hold = await this.#take(o, wait);
    if (!hold) throw new NotAcquiredError(`${this.key}: not elected within ${wait} ms`, this.key);
    return new Leadership(this.identity, hold, lost.signal);
  }

  /** The current leader (identity and term), or null: one `LOCK.WATCH key`. */
  async leader(): Promise<Leader | null> {
    return leaderOf(watchReply(await this.#reach.send(this.key, watchArgs(this.key), true)));
  }

  /**
   * The leaders, as they change: the current one (or null) first, then each new one, never the
   * same twice in a row, until `signal` aborts (or the loop leaves). One connection of its own,
   * blocked in `LOCK.WATCH key AFTER cursor WAIT ...`; after a broken link, a silent server or a
   * retryable reply (rule 19) it connects again and passes its last cursor, so the next leader
   * it reports is the server's latest (leaders that came and went meanwhile may be skipped). A
   * server that cannot be reached is asked again without end (every second at most); an error
   * reply that is not retryable (`WRONGTYPE`, `NOPERM`, ...) ends the iteration with that error.
   */
  observe(options: ObserveOptions = {}): AsyncIterable<Leader | null> {
    return { [Symbol.asyncIterator]: () => this.#observe(options.signal) };
  }

  async *#observe(signal: AbortSignal | undefined): AsyncGenerator<Leader | null, void, undefined> {
    const { key } = this;
    const reach = this.#reach;
    // Blocks a half bound at a time: a server silent for the bound past that is a broken link.
    const wait = reach.bound / 2;
    let cursor: string | undefined;
    let told: Leader | null | undefined; // undefined: nothing reported yet
    let conn: Connection | undefined;
    let pauseFor = RETRY_PAUSE;
    try {
      while (!signal?.aborted) {
        let state: WatchState | null;
        try {
          conn ??= await connect(reach.adapter, key, Math.min(CONNECT_TIMEOUT, reach.bound), signal);
          const c = conn;
          const args: Arg[] = cursor === undefined ? watchArgs(key) : watchArgs(key, cursor, wait);
          const reply = within(c.send(args), (cursor === undefined ? 0 : wait) + reach.bound, () => c.close());
          state = watchReply(await untilAborted(reply, signal, () => c.close()));
          pauseFor = RETRY_PAUSE;
        } catch (e) {
          if (signal?.aborted) return;
          if (!linkFailure(e)) throw reach.failure(key, e);
          // The link broke, the server was silent, or it cannot serve the key now: a new
          // connection, the same cursor.
          conn?.close();
          conn = undefined;
          await sleep(pauseFor, signal);
          pauseFor = Math.min(MAX_RECONNECT_PAUSE, pauseFor * 2);
          continue;
        }
        if (state === null) continue; // nothing new within the wait
        cursor = state.cursor;
        const leader = leaderOf(state);
        if (told !== undefined && same(told, leader)) continue;
        told = leader;
        yield leader;
      }
    } finally {
      conn?.close();
    }
  }
}

/**
 * This candidate's leadership: its `term` (pass it to fenced writes: a later leader's is always
 * larger), `signal` (aborts once, with `LeadershipLostError`, when the leadership is lost) and
 * `lost` (resolves with the reason then), and `resign()`. `await using` resigns at the end of the
 * scope, and throws `LeadershipLostError` there if it was lost.
 */
export class Leadership implements AsyncDisposable {
  readonly key: string;
  readonly identity: string;
  /** The term: the hold's fencing token. */
  readonly term: number;
  /** Aborts once, with `LeadershipLostError` as its reason, when the leadership is lost before
   * `resign()`. */
  readonly signal: AbortSignal;
  /** Resolves with the reason when the leadership is lost; pending while it lives and after a
   * resign in time. */
  readonly lost: Promise<string>;
  /** The session hold behind it (`guard`, `fenced(db, leadership.hold, ...)`). */
  readonly hold: Hold;

  /** @internal made by `Election.campaign` */
  constructor(identity: string, hold: Hold, signal: AbortSignal) {
    this.key = hold.key;
    this.identity = identity;
    this.term = hold.token;
    this.hold = hold;
    this.signal = signal;
    this.lost = hold.lost;
  }

  /** The term, under the name fenced writes read (`fenced(db, leadership, body)`). */
  get token(): number {
    return this.term;
  }

  /** Whether this process still leads, as far as it knows: not lost, not resigned. */
  get leading(): boolean {
    return this.hold.held;
  }

  /** Why the leadership was lost; undefined while it lives (or if it resigned in time). */
  get lostReason(): string | undefined {
    return this.hold.lostReason;
  }

  /** `LOCK.GUARD key term ...command`: run only while this is still the leadership, else `StaleError`. */
  guard(...command: Arg[]): Promise<unknown> {
    return this.hold.guard(...command);
  }

  /**
   * Give the leadership up: the next candidate in the queue leads at once. True if it was still
   * held; false if it had been lost (then `signal` aborted), and at once for a second call.
   */
  resign(): Promise<boolean> {
    return this.hold.release();
  }

  /** `await using leadership = await election.campaign()`: resigned at the end of the scope; a
   * leadership found lost then throws `LeadershipLostError`. */
  async [Symbol.asyncDispose](): Promise<void> {
    await this.resign();
    const reason = this.hold.lostReason;
    if (reason !== undefined) throw new LeadershipLostError(reason);
  }
}

/** The leader a `LOCK.WATCH` reply names: the newest live hold's owner and token, or null. */
function leaderOf(state: WatchState | null): Leader | null {
  if (state === null || state.token === null) return null;
  const holder = state.holders.find((h) => h.token === state.token);
  return holder ? { identity: holder.owner, term: state.token } : null;
}

function same(a: Leader | null, b: Leader | null): boolean {
  return a === b || (a !== null && b !== null && a.term === b.term && a.identity === b.identity);
}

/** A connection of the library's own for `key`'s server, kept referenced (an observer keeps the
 * process alive while it iterates); one made after `signal` aborted is closed. */
async function connect(
  adapter: Adapter,
  key: string,
  timeout: number,
  signal: AbortSignal | undefined,
): Promise<Connection> {
  const made = adapter.connect(key, { timeout });
  const conn = await untilAborted(
    made,
    signal,
    () =>
      void made.then(
        (c) => c.close(),
        () => undefined,
      ),
  );
  conn.ref(true);
  return conn;
}

/** `work`, or `signal.reason` as soon as it aborts (then `onAbort` runs). */
function untilAborted<T>(work: Promise<T>, signal: AbortSignal | undefined, onAbort: () => void): Promise<T> {
  if (!signal) return work;
  return new Promise<T>((resolve, reject) => {
    const abort = (): void => {
      onAbort();
      reject(signal.reason);
    };
    if (signal.aborted) return abort();
    signal.addEventListener("abort", abort, { once: true });
    work.then(resolve, reject).finally(() => signal.removeEventListener("abort", abort));
  });
}

/** `ms`, or less if `signal` aborts; a referenced timer (an observer keeps the process alive). */
function sleep(ms: number, signal: AbortSignal | undefined): Promise<void> {
  return new Promise((resolve) => {
    const done = (): void => {
      clearTimeout(timer);
      signal?.removeEventListener("abort", done);
      resolve();
    };
    const timer = setTimeout(done, ms);
    signal?.addEventListener("abort", done, { once: true });
  });
}
