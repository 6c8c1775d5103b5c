/**
 * A granted hold: its token, guarded writes, the watchdog that renews it, the loss signal, and
 * the release that stops the watchdog in the same step.
 */
import { EventEmitter } from "node:events";
import { isReplyError, within, type Adapter, type Connection } from "./adapter.js";
import "./dispose.js";
import { LockLostError, StaleError, translate } from "./errors.js";
import {
  GONE_AT_RELEASE,
  LEASE_RAN_OUT,
  RETRY_PAUSE,
  Renewals,
  extendArgs,
  guardArgs,
  int,
  movedAway,
  refused,
  releaseArgs,
  watchdogFailed,
  type Arg,
} from "./protocol.js";

/** What `Locks` hands a new hold. */
export interface Grant {
  adapter: Adapter;
  key: string;
  owner: string;
  token: number;
  ttl: number;
  semaphore: boolean;
  watchdog: boolean;
  /** A session hold's own connection (closing it ends the hold). */
  session?: Connection;
  onLost?: (reason: string) => void;
  raiseOnLost: boolean;
}

type Phase = "held" | "lost" | "released";

export interface HoldEvents {
  lost: [reason: string];
}

/**
 * A hold on a lock. Release it with `release()`, or let `await using` do it at the end of the
 * scope. `lost` resolves (and the `"lost"` event fires, once) with the reason if the hold is
 * lost before its release.
 */
export class Hold extends EventEmitter<HoldEvents> implements AsyncDisposable {
  readonly key: string;
  /** The owner the server knows this hold by. */
  readonly owner: string;
  /** The fencing token: pass it to the storage with every write. */
  readonly token: number;
  /** Resolves with the reason when the hold is lost; pending while it lives and after a release in time. */
  readonly lost: Promise<string>;

  #grant: Grant;
  #phase: Phase = "held";
  #reason: string | undefined;
  #announce!: (reason: string) => void;
  #renewals: Renewals;
  #timer: NodeJS.Timeout | undefined;
  #renewing: Promise<void> | undefined;
  #conn: Connection | undefined;
  #released: Promise<boolean> | undefined;

  /** @internal made by `Locks.acquire` */
  constructor(grant: Grant) {
    super();
    this.#grant = grant;
    this.key = grant.key;
    this.owner = grant.owner;
    this.token = grant.token;
    this.lost = new Promise<string>((resolve) => (this.#announce = resolve));
    this.#renewals = new Renewals(grant.ttl);
    if (grant.watchdog) this.#schedule();
  }

  /** Why the hold was lost; undefined while it holds (or if it was released in time). */
  get lostReason(): string | undefined {
    return this.#reason;
  }

  /** Whether this hold is live as far as this process knows: not lost, not released. */
  get held(): boolean {
    return this.#phase === "held";
  }

  /**
   * `LOCK.GUARD key token ...command`: runs `command` only while this is the live exclusive
   * hold, else rejects with `StaleError` (nothing is run). Resolves with the command's reply.
   */
  async guard(...command: Arg[]): Promise<unknown> {
    if (this.#grant.semaphore) throw new StaleError("a semaphore's permits never guard a write; use an exclusive lock");
    if (this.#phase === "released") throw new StaleError("this hold was released");
    if (this.#phase === "lost") throw new StaleError(`this hold was lost: ${this.#reason}`);
    try {
      return await this.#grant.adapter.send(this.key, guardArgs(this.key, this.token, command));
    } catch (e) {
      throw translate(e);
    }
  }

  /** Set the lease to `ttl` ms from now (default: the acquire's ttl); whether the hold was
   * still live. For fixed leases (`watchdog: false`); the watchdog renews by itself. */
  async extend(ttl: number = this.#grant.ttl): Promise<boolean> {
    if (this.#phase !== "held") return false;
    const sent = performance.now();
    const reply = await this.#grant.adapter.send(this.key, extendArgs(this.key, this.owner, ttl, this.token));
    if (int(reply) === 1) {
      this.#renewals.leaseEnd = Math.max(this.#renewals.leaseEnd, sent + ttl);
      return true;
    }
    this.#lose(LEASE_RAN_OUT);
    return false;
  }

  /**
   * Release the hold: true if it was still live (false if it had been lost: its lease ran out
   * first, and the work done under it may have overlapped another holder's). The watchdog
   * stops in the same step: no renewal is sent after this call. Calling it again answers the
   * same.
   */
  release(): Promise<boolean> {
    this.#released ??= this.#release();
    return this.#released;
  }

  async #release(): Promise<boolean> {
    const wasHeld = this.#phase === "held";
    this.#phase = "released";
    clearTimeout(this.#timer);
    this.#timer = undefined;
    // A renewal already on the wire ends first (it is bounded by its timeout), so the server
    // sees it before the release; its answer is ignored.
    await this.#renewing;
    this.#conn?.close();
    this.#conn = undefined;
    const args = releaseArgs(this.key, this.owner, this.token);
    let released: boolean;
    try {
      released = int(await this.#send(args)) === 1;
    } finally {
      this.#grant.session?.close(); // closing it ends the session hold in any case
    }
    if (!released && wasHeld) this.#lose(GONE_AT_RELEASE, true);
    return released && wasHeld;
  }

  /** On the application's client; once more if the link was gone (safe: the release carries its token). */
  async #send(args: Arg[]): Promise<unknown> {
    try {
      return await this.#grant.adapter.send(this.key, args);
    } catch (e) {
      if (isReplyError(e) && !movedAway(e)) throw e;
      return await this.#grant.adapter.send(this.key, args);
    }
  }

  /** `await using hold = await locks.acquire(...)`: released at the end of the scope; a hold
   * found lost then throws `LockLostError` (unless `raiseOnLost: false`). */
  async [Symbol.asyncDispose](): Promise<void> {
    const released = await this.release();
    if (!released && this.#grant.raiseOnLost) throw new LockLostError(this.#reason ?? GONE_AT_RELEASE);
  }

  // -- the watchdog ----------------------------------------------------------------------------

  /** The next renewal, ttl/3 after the last one was sent (at once, after a pause, if that one
   * took so long, say to connect through Sentinel during a failover). */
  #schedule(lastSent?: number): void {
    const wait =
      lastSent === undefined ? this.#renewals.interval : lastSent + this.#renewals.interval - performance.now();
    this.#timer = setTimeout(
      () => {
        this.#renewing = this.#renew().finally(() => (this.#renewing = undefined));
      },
      Math.max(RETRY_PAUSE, wait),
    );
    this.#timer.unref(); // a hold never keeps the process alive by itself
  }

  /** One renewal, `LOCK.EXTEND key owner ttl TOKEN token` on the watchdog's own connection. */
  async #renew(): Promise<void> {
    const { adapter, key, owner, token, ttl } = this.#grant;
    const renewals = this.#renewals;
    let reason: string | undefined;
    const sent = performance.now();
    try {
      const args = extendArgs(key, owner, ttl, token);
      let reply: unknown;
      let broken = false;
      try {
        if (!this.#conn) {
          this.#conn = await adapter.connect(key, { timeout: renewals.timeout });
          this.#conn.ref(false);
        }
        const conn = this.#conn;
        reply = await within(conn.send(args), renewals.timeout, () => conn.close());
      } catch (e) {
        if (isReplyError(e) && !movedAway(e)) {
          reason = refused(e);
        } else {
          // The link broke, timed out or could not be made, or this server no longer serves
          // the key: asked again on a new connection (through Sentinel or the cluster's map)
          // until the lease would have ended.
          this.#conn?.close();
          this.#conn = undefined;
          broken = true;
        }
      }
      if (broken) reason = renewals.broken();
      else if (reason === undefined) reason = renewals.answered(sent, reply);
    } catch (e) {
      // Anything else (a reply that is not an integer, a bug): nobody would hear of it
      // otherwise, so the hold is given up at once.
      reason = watchdogFailed(e);
    }
    if (this.#phase !== "held") return; // released (or lost) meanwhile: nothing to say
    if (reason === undefined) this.#schedule(sent);
    else this.#lose(reason);
  }

  /** Mark the hold lost with `reason` and announce it, once. */
  #lose(reason: string, atRelease = false): void {
    if (this.#reason !== undefined) return;
    this.#reason = reason;
    if (!atRelease) {
      this.#phase = "lost";
      clearTimeout(this.#timer);
      this.#conn?.close();
      this.#conn = undefined;
    }
    this.#announce(reason);
    try {
      this.#grant.onLost?.(reason);
    } catch {
      // the application's callback must not break the hold's bookkeeping
    }
    try {
      this.emit("lost", reason);
    } catch {
      // as above
    }
  }
}
