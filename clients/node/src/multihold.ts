/**
 * A granted lock set (rule 23): several keys taken in one step (`LOCK.MACQUIRE`), each with its
 * own token and lease. Each member is one hold of the renewal loop (`loop.ts`), renewed with the
 * other holds of its server in the same pipelines; the set is lost, once, when any member is,
 * and then gives back the members still held with one `LOCK.MRELEASE`.
 */
import { EventEmitter } from "node:events";
import "./dispose.js";
import { noop } from "./adapter.js";
import { LockLostError, StaleError, UnavailableError } from "./errors.js";
import { Lease } from "./lease.js";
import { LinkGone, type Link } from "./links.js";
import type { RenewalLoop, Renewed } from "./loop.js";
import {
  GONE_AT_RELEASE,
  extendArgs,
  guardArgs,
  int,
  memberLost,
  mreleaseArgs,
  sessionClosed,
  type Arg,
} from "./protocol.js";
import type { Reach } from "./reach.js";
import { Turn } from "./turn.js";

/** What `Locks` hands a new set. */
export interface SetGrant {
  reach: Reach;
  loop: RenewalLoop;
  keys: readonly string[];
  owner: string;
  tokens: readonly number[];
  ttl: number;
  /** When the leases began, as far as this process can tell (`performance.now()`). */
  leaseFrom: number;
  watchdog: boolean;
  /** A session set's own connection (closing it ends every member): renewed and released on it. */
  session?: Link;
  onLost?: (reason: string) => void;
  raiseOnLost: boolean;
}

type Phase = "held" | "lost" | "released";

const no = (): boolean => false;

export interface MultiHoldEvents {
  lost: [reason: string];
}

/**
 * A hold on a set of locks, all taken together. Release it with `release()`, or let `await
 * using` do it at the end of the scope. `lost` resolves (and the `"lost"` event fires, once)
 * with the reason, naming the key, if any member is lost before the release.
 */
export class MultiHold extends EventEmitter<MultiHoldEvents> implements AsyncDisposable {
  /** The keys, in the order they were given. */
  readonly keys: readonly string[];
  /** The owner the server knows every member by. */
  readonly owner: string;
  /** The fencing tokens, one per key in the order of `keys`. */
  readonly tokens: readonly number[];
  /** Resolves with the reason when the set is lost; pending while it lives and after a release in time. */
  readonly lost: Promise<string>;

  #grant: SetGrant;
  #phase: Phase = "held";
  #reason: string | undefined;
  #announce!: (reason: string) => void;
  /** The members as the renewal loop keeps them, in the order of `keys`. */
  #members: Renewed[];
  #byKey: Map<string, number>;
  #released: Promise<boolean> | undefined;
  /** Its extends, one at a time (rule 20). */
  #extends = new Turn();

  /** @internal made by `Locks.acquireAll` */
  constructor(grant: SetGrant) {
    super();
    this.#grant = grant;
    this.keys = Object.freeze([...grant.keys]);
    this.owner = grant.owner;
    this.tokens = Object.freeze([...grant.tokens]);
    this.#byKey = new Map(this.keys.map((key, i) => [key, this.tokens[i]!]));
    this.lost = new Promise<string>((resolve) => (this.#announce = resolve));
    this.#members = this.keys.map((key, i): Renewed => ({
      key,
      owner: grant.owner,
      token: this.tokens[i]!,
      lease: new Lease(grant.ttl, grant.leaseFrom),
      watchdog: grant.watchdog,
      session: grant.session,
      lost: (reason) => this.#lose(memberLost(reason, key)),
    }));
    for (const member of this.#members) grant.loop.add(member);
  }

  /** The fencing token of `key`'s member; `RangeError` for a key not in the set. */
  tokenOf(key: string): number {
    const token = this.#byKey.get(key);
    if (token === undefined) throw new RangeError(`${key} is not a key of this lock set`);
    return token;
  }

  /** Why the set was lost (naming the key); undefined while it holds (or if released in time). */
  get lostReason(): string | undefined {
    return this.#reason;
  }

  /** Whether the set is live as far as this process knows: not lost, not released. */
  get held(): boolean {
    return this.#phase === "held";
  }

  /**
   * `LOCK.GUARD key token ...command` with `key`'s token: runs `command` only while that member
   * is the key's live exclusive hold, else rejects with `StaleError` (nothing is run).
   */
  async guard(key: string, ...command: Arg[]): Promise<unknown> {
    const token = this.tokenOf(key);
    if (this.#phase === "released") throw new StaleError("this lock set was released");
    if (this.#phase === "lost") throw new StaleError(`this lock set was lost: ${this.#reason}`);
    return await this.#grant.reach.send(key, guardArgs(key, token, command), false);
  }

  /**
   * `LOCK.EXTEND` of every member now, in one pipeline: each lease ends `ttl` ms from now
   * (default: the set's ttl, the last one set) and the watchdog, if on, renews by it. True only
   * if every member was still held; false when one answers 0 (the set is then lost, naming its
   * key, and the others are given back) and, without sending anything, for a set known lost or
   * released. `UnavailableError` as `Hold.extend`: every member's lease then counts as ending no
   * later than the extend's send + `ttl`. One at a time, as `Hold.extend`.
   */
  async extend(ttl: number = this.#members[0]!.lease.ttl): Promise<boolean> {
    if (!(ttl >= 1 && ttl < Infinity)) throw new RangeError("ttl must be a finite number of ms >= 1");
    if (this.#phase !== "held") return false;
    return await this.#extends.run(this.#grant.reach, this.keys[0]!, () => this.#extend(ttl));
  }

  /** `extend`, its turn come. */
  async #extend(ttl: number): Promise<boolean> {
    if (this.#phase !== "held") return false; // lost or released while it waited: nothing sent
    for (const member of this.#members) member.lease.ttl = ttl; // the renewals sent from now on carry it
    const sent = performance.now();
    let replies: unknown[];
    try {
      replies = await Promise.all(
        this.#members.map((m) => this.#send(m.key, extendArgs(m.key, this.owner, ttl, m.token))),
      );
    } catch (e) {
      if (e instanceof UnavailableError) this.#extendUnanswered(sent, ttl);
      throw e;
    }
    if (replies.includes(undefined)) return false; // a session's connection closed: lost
    this.#members.forEach((member, i) => {
      const reason = member.lease.answered(sent, replies[i], ttl);
      if (reason !== undefined) this.#lose(memberLost(reason, member.key));
    });
    if (this.#reason !== undefined) return false;
    for (const member of this.#members) this.#grant.loop.moved(member);
    return this.#phase === "held";
  }

  /** An extend of `ttl` sent at `sent` got no answer: each member's may have run (rule 15). */
  #extendUnanswered(sent: number, ttl: number): void {
    for (const member of this.#members) if (member.lease.unanswered(sent, ttl)) this.#grant.loop.moved(member);
  }

  /**
   * Release every member with one `LOCK.MRELEASE`: true only if every member was still held
   * (else false, and the set is lost: its work may have overlapped another holder's). The
   * watchdog stops in the same step. A set known lost answers false at once, and so does a
   * second call: neither sends anything. `UnavailableError` as `Hold.release`.
   */
  release(): Promise<boolean> {
    if (this.#released) return this.#released.then(no, no);
    this.#released = this.#release();
    return this.#released;
  }

  async #release(): Promise<boolean> {
    const wasHeld = this.#phase === "held";
    this.#phase = "released";
    for (const member of this.#members) this.#grant.loop.remove(member);
    if (!wasHeld) {
      this.#grant.session?.close();
      return false; // known lost: answered at once, nothing sent
    }
    let count: number;
    try {
      const reply = await this.#send(this.keys[0]!, mreleaseArgs(this.keys, this.owner));
      if (reply === undefined) return false; // a session's connection closed: lost
      count = int(reply);
    } finally {
      this.#grant.session?.close();
    }
    const released = count === this.keys.length;
    if (!released) this.#lose(GONE_AT_RELEASE, true);
    return released;
  }

  /** `args` on the renewal loop's connection to the set's server (a session set's own), never
   * sent again once written (its lost reply is `UnavailableError`); undefined, the set lost, if
   * that is a session's that has closed. */
  async #send(key: string, args: Arg[]): Promise<unknown> {
    const { reach, loop } = this.#grant;
    try {
      return await reach.sendOn(loop.linkOf(this.#members[0]!), key, args, false);
    } catch (e) {
      if (!(e instanceof LinkGone)) throw e;
      this.#lose(sessionClosed(e.message), this.#phase === "released");
      return undefined;
    }
  }

  /** `await using set = await locks.acquireAll(...)`: released at the end of the scope (unless
   * released already); a set found lost then throws `LockLostError` (unless `raiseOnLost: false`). */
  async [Symbol.asyncDispose](): Promise<void> {
    const released = await (this.#released ?? this.release());
    if (!released && this.#grant.raiseOnLost) throw new LockLostError(this.#reason ?? GONE_AT_RELEASE);
  }

  /** Mark the set lost with `reason` and announce it, once; the members still held are then
   * given back (one `LOCK.MRELEASE`, best effort: one not given back ends with its lease). */
  #lose(reason: string, atRelease = false): void {
    if (this.#reason !== undefined) return;
    if (this.#phase === "released" && !atRelease) return; // a timer or reply late for a release: not lost
    this.#reason = reason;
    if (!atRelease) {
      this.#phase = "lost";
      const { loop, reach, session } = this.#grant;
      for (const member of this.#members) loop.remove(member);
      if (session)
        session.close(); // closing it ends every member
      else
        loop.aside(
          reach
            .sendOn(loop.linkOf(this.#members[0]!), this.keys[0]!, mreleaseArgs(this.keys, this.owner), false)
            .catch(noop),
        );
    }
    this.#announce(reason);
    try {
      this.#grant.onLost?.(reason);
    } catch {
      // the application's callback must not break the set's bookkeeping
    }
    try {
      this.emit("lost", reason);
    } catch {
      // as above
    }
  }
}
