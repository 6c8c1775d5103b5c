/**
 * A granted hold: its token, guarded writes, the watchdog that renews it, the loss signal, and
 * the release that stops the watchdog in the same step.
 */
import { EventEmitter } from "node:events";
import { MAX_TIMER, isReplyError, why, within, type Connection } from "./adapter.js";
import "./dispose.js";
import { LockLostError, StaleError } from "./errors.js";
import {
  FIXED_LEASE_ENDED,
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
import type { Reach } from "./reach.js";

/** What `Locks` hands a new hold. */
export interface Grant {
  reach: Reach;
  key: string;
  owner: string;
  token: number;
  ttl: number;
  /** When the lease began, as far as this process can tell (`performance.now()`): never later
   * than the server's start of it. */
  leaseFrom: number;
  semaphore: boolean;
  watchdog: boolean;
  /** A session hold's own connection (closing it ends the hold). */
  session?: Connection;
  onLost?: (reason: string) => void;
  raiseOnLost: boolean;
}

type Phase = "held" | "lost" | "released";

const no = (): boolean => false;

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
  /** Fires at the lease's end (rule 15): the hold is lost then unless renewed meanwhile. */
  #leaseTimer: NodeJS.Timeout | undefined;
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
    this.#renewals = new Renewals(grant.ttl, grant.leaseFrom);
    this.#armLease();
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
    // Not retried: the command may have run before the link broke.
    return await this.#grant.reach.send(this.key, guardArgs(this.key, this.token, command), false);
  }

  /** Set the lease to `ttl` ms from now (default: the acquire's ttl); whether the hold was
   * still live. For fixed leases (`watchdog: false`); the watchdog renews by itself. */
  async extend(ttl: number = this.#grant.ttl): Promise<boolean> {
    if (!(ttl >= 1 && ttl < Infinity)) throw new RangeError("ttl must be a finite number of ms >= 1");
    if (this.#phase !== "held") return false;
    const sent = performance.now();
    const reply = await this.#grant.reach.send(this.key, extendArgs(this.key, this.owner, ttl, this.token), true);
    if (int(reply) === 1) {
      this.#renewals.leaseEnd = Math.max(this.#renewals.leaseEnd, sent + ttl);
      if (this.#phase === "held") this.#armLease(); // not after a release meanwhile
      return true;
    }
    this.#lose(LEASE_RAN_OUT);
    return false;
  }

  /**
   * Release the hold: true if it was still live (false if it had been lost: its lease ran out
   * first, and the work done under it may have overlapped another holder's). The watchdog
   * stops in the same step: no renewal is sent after this call. A hold known lost answers
   * false at once, and so does a second call: neither sends anything. A server that cannot be
   * reached within the bound rejects with `UnavailableError`, and so does a release whose link
   * broke after it was written: it is never sent again (a second one would find the hold gone
   * and answer false, lost, for a hold that was released).
   */
  release(): Promise<boolean> {
    if (this.#released) return this.#released.then(no, no);
    this.#released = this.#release();
    return this.#released;
  }

  async #release(): Promise<boolean> {
    const wasHeld = this.#phase === "held";
    this.#phase = "released";
    this.#stopTimers();
    if (!wasHeld) {
      this.#grant.session?.close();
      return false; // known lost: answered at once, nothing sent
    }
    // A renewal in flight is abandoned (its connection closed), not awaited: against a silent
    // server it would hold the release up to its own timeout. It carries the token: reaching the
    // server after the release, it finds nothing of this hold to extend.
    this.#closeWatchdog();
    let released: boolean;
    try {
      const args = releaseArgs(this.key, this.owner, this.token);
      released = int(await this.#grant.reach.send(this.key, args, false)) === 1;
    } finally {
      this.#grant.session?.close(); // closing it ends the session hold in any case
    }
    if (!released) this.#lose(GONE_AT_RELEASE, true);
    return released;
  }

  /** `await using hold = await locks.acquire(...)`: released at the end of the scope (unless
   * released already); a hold found lost then throws `LockLostError` (unless `raiseOnLost: false`). */
  async [Symbol.asyncDispose](): Promise<void> {
    const released = await (this.#released ?? this.release());
    if (!released && this.#grant.raiseOnLost) throw new LockLostError(this.#reason ?? GONE_AT_RELEASE);
  }

  // -- the watchdog ----------------------------------------------------------------------------

  /** The next renewal, ttl/3 after the last one was sent (at once, after a pause, if that one
   * took so long, say to connect through Sentinel during a failover). */
  #schedule(lastSent?: number): void {
    const wait =
      lastSent === undefined ? this.#renewals.interval : lastSent + this.#renewals.interval - performance.now();
    this.#timer = setTimeout(() => void this.#renew(), Math.max(RETRY_PAUSE, wait));
    this.#timer.unref(); // a hold never keeps the process alive by itself
  }

  /** The lease's end, by a timer (rule 15): lost then unless a renewal or extend moved it. */
  #armLease(): void {
    clearTimeout(this.#leaseTimer);
    const renewals = this.#renewals;
    const reason = (): string =>
      this.#grant.watchdog ? renewals.unreachable(renewals.lastFailure ?? "no answer") : FIXED_LEASE_ENDED;
    const left = renewals.leaseEnd - performance.now();
    // A lease longer than a Node timer takes is looked at again then.
    const end = left > MAX_TIMER ? () => this.#armLease() : () => this.#lose(reason());
    this.#leaseTimer = setTimeout(end, Math.min(left, MAX_TIMER));
    this.#leaseTimer.unref();
  }

  #closeWatchdog(): void {
    this.#conn?.close();
    this.#conn = undefined;
  }

  #stopTimers(): void {
    clearTimeout(this.#timer);
    clearTimeout(this.#leaseTimer);
    this.#timer = this.#leaseTimer = undefined;
  }

  /** One renewal, `LOCK.EXTEND key owner ttl TOKEN token` on the watchdog's own connection,
   * its reply awaited no longer than the lease has left. */
  async #renew(): Promise<void> {
    const { reach, key, owner, token, ttl } = this.#grant;
    const renewals = this.#renewals;
    let reason: string | undefined;
    const sent = performance.now();
    const timeout = Math.max(1, Math.min(renewals.timeout, renewals.leaseEnd - sent));
    try {
      const args = extendArgs(key, owner, ttl, token);
      let reply: unknown;
      let broken = false;
      try {
        if (!this.#conn) {
          const made = await reach.adapter.connect(key, { timeout });
          made.ref(false);
          if (this.#phase !== "held") return made.close(); // released (or lost) while connecting
          this.#conn = made;
        }
        const conn = this.#conn;
        reply = await within(conn.send(args), timeout - (performance.now() - sent), () => conn.close());
      } catch (e) {
        if (isReplyError(e) && !movedAway(e)) {
          reason = refused(e);
        } else {
          // The link broke, timed out or could not be made, or this server no longer serves
          // the key: asked again on a new connection (through Sentinel or the cluster's map)
          // until the lease would have ended.
          this.#closeWatchdog();
          renewals.lastFailure = why(e);
          broken = true;
        }
      }
      if (this.#phase !== "held") return; // released (or lost) meanwhile: nothing to say or arm
      if (broken) reason = renewals.broken();
      else if (reason === undefined) {
        reason = renewals.answered(sent, reply);
        if (reason === undefined) this.#armLease();
      }
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
    if (this.#phase === "released" && !atRelease) return; // a timer or reply late for a release: not lost
    this.#reason = reason;
    if (!atRelease) {
      this.#phase = "lost";
      this.#stopTimers();
      this.#closeWatchdog();
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
