/**
 * `redis-lock-client/redlock`: the API of node-redlock v5 (`acquire`, `release`, `extend`,
 * `using`) on the module, so moving off redlock is an import line:
 *
 *   import Redlock from "redis-lock-client/redlock";   // was: import Redlock from "redlock";
 *
 * What changes in meaning: one client (the module's locks live on one master, made durable with
 * Sentinel and `replicas`, not on a quorum of independent servers); waits are the server's FIFO
 * queue for `retryCount * retryDelay` ms instead of retries (`retryCount: -1`: without limit);
 * `using` renews with the watchdog and always settles; each `Lock` also carries its fencing
 * `tokens` and `holds`.
 */
import { randomUUID } from "node:crypto";
import { EventEmitter } from "node:events";
import { LockLostError } from "./errors.js";
import type { Hold } from "./hold.js";
import { Locks } from "./locks.js";

export interface Settings {
  readonly driftFactor: number;
  readonly retryCount: number;
  readonly retryDelay: number;
  readonly retryJitter: number;
  readonly automaticExtensionThreshold: number;
}

const DEFAULTS: Settings = {
  driftFactor: 0.01,
  retryCount: 10,
  retryDelay: 200,
  retryJitter: 100,
  automaticExtensionThreshold: 500,
};

export type ExecutionStats = {
  readonly membershipSize: number;
  readonly quorumSize: number;
  readonly votesFor: Set<unknown>;
  readonly votesAgainst: Map<unknown, Error>;
};

export type ExecutionResult = { attempts: ReadonlyArray<Promise<ExecutionStats>> };

export type RedlockAbortSignal = AbortSignal & { error?: Error };

export class ResourceLockedError extends Error {
  override name = "ResourceLockedError";
}

export class ExecutionError extends Error {
  override name = "ExecutionError";
  constructor(
    message: string,
    readonly attempts: ReadonlyArray<Promise<ExecutionStats>> = [],
  ) {
    super(message);
  }
}

const NO_QUORUM = "The operation was unable to achieve a quorum during its retry window.";

export class Lock {
  constructor(
    readonly redlock: Redlock,
    readonly resources: string[],
    readonly value: string,
    readonly attempts: ReadonlyArray<Promise<ExecutionStats>>,
    public expiration: number,
    /** The module's holds, one per resource (in `resources` order). */
    readonly holds: Hold[],
  ) {}

  /** The fencing token of each resource's hold. */
  get tokens(): number[] {
    return this.holds.map((h) => h.token);
  }

  release(): Promise<ExecutionResult> {
    return this.redlock.release(this);
  }

  extend(duration: number): Promise<Lock> {
    return this.redlock.extend(this, duration);
  }
}

export default class Redlock extends EventEmitter {
  readonly clients: Set<unknown>;
  readonly settings: Settings;
  readonly locks: Locks;

  /** `clients`: one node-redis or ioredis client (or cluster, or Sentinel-backed client). */
  constructor(clients: Iterable<unknown>, settings: Partial<Settings> = {}) {
    super();
    this.clients = new Set(clients);
    if (this.clients.size !== 1) {
      throw new TypeError(
        "redis-lock-client/redlock takes one client: the module's locks live on one master (use Sentinel and `replicas` for durability, not a quorum)",
      );
    }
    this.settings = { ...DEFAULTS, ...settings };
    this.locks = new Locks([...this.clients][0]);
  }

  async quit(): Promise<void> {
    this.locks.close();
    for (const c of this.clients) await (c as { quit?: () => Promise<unknown> }).quit?.();
  }

  /** Hold every resource (in a fixed order, so two callers never deadlock) for `duration` ms. */
  acquire(resources: string[], duration: number, settings?: Partial<Settings>): Promise<Lock> {
    return this.#acquire(resources, duration, settings, false);
  }

  async #acquire(
    resources: string[],
    duration: number,
    settings: Partial<Settings> | undefined,
    watchdog: boolean,
  ): Promise<Lock> {
    const s = { ...this.settings, ...settings };
    const value = randomUUID();
    const wait = s.retryCount < 0 ? Infinity : s.retryCount * s.retryDelay;
    const deadline = performance.now() + wait;
    const holds: Hold[] = [];
    try {
      for (const resource of [...new Set(resources)].sort()) {
        const left = wait === Infinity ? Infinity : Math.max(0, deadline - performance.now());
        const hold = await this.locks.tryAcquire(resource, { ttl: duration, wait: left, owner: value, watchdog });
        if (!hold) throw new ExecutionError(NO_QUORUM);
        holds.push(hold);
      }
    } catch (e) {
      await Promise.all(holds.map((h) => h.release().catch(() => false)));
      throw e;
    }
    const byResource = new Map(holds.map((h) => [h.key, h]));
    return new Lock(
      this,
      resources,
      value,
      [],
      Date.now() + duration,
      resources.map((r) => byResource.get(r)!),
    );
  }

  /** Release every hold of `lock`; `ExecutionError` if one had already expired (as redlock). */
  async release(lock: Lock, _settings?: Partial<Settings>): Promise<ExecutionResult> {
    lock.expiration = 0;
    const released = await Promise.all(lock.holds.map((h) => h.release()));
    if (!released.every(Boolean)) throw new ExecutionError(NO_QUORUM);
    return { attempts: [] };
  }

  /** Extend every hold of `lock` to `duration` ms from now: a new `Lock` (the old one expires). */
  async extend(existing: Lock, duration: number, _settings?: Partial<Settings>): Promise<Lock> {
    if (existing.expiration < Date.now()) throw new ExecutionError("Cannot extend an already-expired lock.");
    const extended = await Promise.all(existing.holds.map((h) => h.extend(duration)));
    if (!extended.every(Boolean)) throw new ExecutionError(NO_QUORUM);
    existing.expiration = 0;
    return new Lock(this, existing.resources, existing.value, [], Date.now() + duration, existing.holds);
  }

  /**
   * `routine` under a lock renewed by the watchdog (every duration/3); `signal` aborts, with
   * `signal.error` a `LockLostError`, if a hold is lost meanwhile. Always settles: with the
   * routine's result or error (the release's own error is not raised over it).
   */
  using<T>(
    resources: string[],
    duration: number,
    settings: Partial<Settings>,
    routine?: (signal: RedlockAbortSignal) => Promise<T>,
  ): Promise<T>;
  using<T>(resources: string[], duration: number, routine: (signal: RedlockAbortSignal) => Promise<T>): Promise<T>;
  async using<T>(
    resources: string[],
    duration: number,
    settingsOrRoutine: Partial<Settings> | ((signal: RedlockAbortSignal) => Promise<T>),
    maybeRoutine?: (signal: RedlockAbortSignal) => Promise<T>,
  ): Promise<T> {
    const settings = typeof settingsOrRoutine === "function" ? undefined : settingsOrRoutine;
    const routine = typeof settingsOrRoutine === "function" ? settingsOrRoutine : maybeRoutine;
    if (!routine) throw new TypeError("using needs a routine");
    const lock = await this.#acquire(resources, duration, settings, true);
    const controller = new AbortController();
    const signal = controller.signal as RedlockAbortSignal;
    for (const hold of lock.holds) {
      void hold.lost.then((reason) => {
        if (signal.aborted) return;
        signal.error = new LockLostError(reason);
        controller.abort(signal.error);
      });
    }
    try {
      return await routine(signal);
    } finally {
      await Promise.all(lock.holds.map((h) => h.release().catch(() => false)));
    }
  }
}

export { Redlock };
