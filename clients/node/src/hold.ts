/**
 * A granted hold: its token, guarded writes, extend, the loss signal, and the release that takes
 * it out of the renewal loop in the same step. The renewals are the loop's (`loop.ts`).
 */
import { EventEmitter } from "node:events";
import "./dispose.js";
import { LockLostError, StaleError, UnavailableError } from "./errors.js";
import { Lease } from "./lease.js";
import { LinkGone, type Link } from "./links.js";
import type { RenewalLoop, Renewed } from "./loop.js";
import { GONE_AT_RELEASE, extendArgs, guardArgs, int, releaseArgs, sessionClosed, type Arg } from "./protocol.js";
import type { Reach } from "./reach.js";
import { Turn } from "./turn.js";

/** What `Locks` hands a new hold. */
export interface Grant {
  reach: Reach;
  loop: RenewalLoop;
  key: string;
  owner: string;
  token: number;
  ttl: number;
  /** When the lease began, as far as this process can tell (`performance.now()`): never later
   * than the server's start of it. */
  leaseFrom: number;
  semaphore: boolean;
  watchdog: boolean;
  /** A session hold's own connection (closing it ends the hold): renewed and released on it. */
  session?: Link;
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
  /** What the renewal loop keeps of this hold (its lease, and how it is told of a loss). */
  #renewed: Renewed;
  #released: Promise<boolean> | undefined;
  /** Its extends, one at a time (rule 20). */
  #extends = new Turn();

  /** @internal made by `Locks.acquire` */
  constructor(grant: Grant) {
    super();
    this.#grant = grant;
    this.key = grant.key;
    this.owner = grant.owner;
    this.token = grant.token;
    this.lost = new Promise<string>((resolve) => (this.#announce = resolve));
    this.#renewed = {
      key: grant.key,
      owner: grant.owner,
      token: grant.token,
      lease: new Lease(grant.ttl, grant.leaseFrom),
      watchdog: grant.watchdog,
      session: grant.session,
      lost: (reason) => this.#lose(reason),
    };
    grant.loop.add(this.#renewed);
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

  /**
   * `LOCK.EXTEND` now: the lease ends `ttl` ms from now (longer or shorter than before; default:
   * the hold's ttl), and from this call on the watchdog, if on, renews by `ttl`. True while the
   * hold is live; false when the server answers 0 (the hold is then lost, once) and, without
   * sending anything, for a hold known lost or released. How a fixed lease (`watchdog: false`)
   * is kept on the caller's schedule. Sent on the renewal loop's connection; unanswered within
   * the bound, or its link broken once it was written (it is not sent again), `UnavailableError`.
   * It may then have run, so the lease counts as ending no later than the extend's send + `ttl`
   * (rule 15): a watchdog whose lease that shortens renews at once, by `ttl`; a fixed lease is
   * lost then. Extends of one hold go one at a time, in the order they were made: one made while
   * another is in flight is sent once that one is answered or has failed; when that takes longer
   * than the bound, `UnavailableError` with nothing sent.
   */
  async extend(ttl: number = this.#renewed.lease.ttl): Promise<boolean> {
    if (!(ttl >= 1 && ttl < Infinity)) throw new RangeError("ttl must be a finite number of ms >= 1");
    if (this.#phase !== "held") return false;
    return await this.#extends.run(this.#grant.reach, this.key, () => this.#extend(ttl));
  }

  /** `extend`, its turn come. */
  async #extend(ttl: number): Promise<boolean> {
    if (this.#phase !== "held") return false; // lost or released while it waited: nothing sent
    const lease = this.#renewed.lease;
    lease.ttl = ttl; // the renewals sent from now on carry it
    const sent = performance.now();
    let reply: unknown;
    try {
      reply = await this.#send(extendArgs(this.key, this.owner, ttl, this.token));
    } catch (e) {
      if (e instanceof UnavailableError && lease.unanswered(sent, ttl)) this.#grant.loop.moved(this.#renewed);
      throw e;
    }
    if (reply === undefined) return false; // a session's connection closed: lost
    const reason = lease.answered(sent, reply, ttl);
    if (reason !== undefined) this.#lose(reason);
    else this.#grant.loop.moved(this.#renewed);
    return reason === undefined && this.#reason === undefined; // not lost meanwhile
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
    // Rule 7: out of the loop before the release is sent; a renewal of it already on the wire
    // went before it on the same connection, and its reply is ignored.
    this.#grant.loop.remove(this.#renewed);
    if (!wasHeld) {
      this.#grant.session?.close();
      return false; // known lost: answered at once, nothing sent
    }
    let released: boolean;
    try {
      const reply = await this.#send(releaseArgs(this.key, this.owner, this.token));
      if (reply === undefined) return false; // a session's connection closed: lost
      released = int(reply) === 1;
    } finally {
      this.#grant.session?.close(); // closing it ends the session hold in any case
    }
    if (!released) this.#lose(GONE_AT_RELEASE, true);
    return released;
  }

  /** `args` on the renewal loop's connection (a session hold's own), never sent again once
   * written (its lost reply is `UnavailableError`); undefined, the hold lost, if that is a
   * session's that has closed. */
  async #send(args: Arg[]): Promise<unknown> {
    const { reach, loop } = this.#grant;
    try {
      return await reach.sendOn(loop.linkOf(this.#renewed), this.key, args, false);
    } catch (e) {
      if (!(e instanceof LinkGone)) throw e;
      this.#lose(sessionClosed(e.message), this.#phase === "released");
      return undefined;
    }
  }

  /** `await using hold = await locks.acquire(...)`: released at the end of the scope (unless
   * released already); a hold found lost then throws `LockLostError` (unless `raiseOnLost: false`). */
  async [Symbol.asyncDispose](): Promise<void> {
    const released = await (this.#released ?? this.release());
    if (!released && this.#grant.raiseOnLost) throw new LockLostError(this.#reason ?? GONE_AT_RELEASE);
  }

  /** Mark the hold lost with `reason` and announce it, once. */
  #lose(reason: string, atRelease = false): void {
    if (this.#reason !== undefined) return;
    if (this.#phase === "released" && !atRelease) return; // a timer or reply late for a release: not lost
    this.#reason = reason;
    if (!atRelease) {
      this.#phase = "lost";
      this.#grant.loop.remove(this.#renewed);
      this.#grant.session?.close();
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
