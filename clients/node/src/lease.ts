/**
 * One hold's lease as this process keeps it (rules 6, 15 and 20 of docs/clients.md): its ttl,
 * when it ends at the latest, when its next renewal falls due. Pure: the times are
 * `performance.now()` values passed in, so the rules are tested without a server or a clock.
 */
import { FIXED_LEASE_ENDED, LEASE_RAN_OUT, RETRY_PAUSE, int, unreachable } from "./protocol.js";

/** The shortest wait for a renewal's reply (ms), however short the ttl. */
const MIN_REPLY_WAIT = 50;

export class Lease {
  /** The lease's length (ms): the acquire's, or the last extend's (rule 20). */
  ttl: number;
  /** When the lease ends at the latest: the last successful command's send time plus its ttl,
   * never later than the server's own end of it (rule 15). */
  end: number;
  /** When the next renewal falls due: the last success's send time + ttl/3 (sooner after a
   * broken link, which is asked again after a pause). */
  due: number;
  /** Whether a renewal of it is on the wire (not sent again until it is answered). */
  renewing = false;
  /** The cause of the last failed renewal, for the loss's reason. */
  lastFailure: string | undefined;
  /** The send time of the command that set `end`: the reply to an earlier one changes nothing
   * (the server ran it first: the commands of one connection run in order). */
  #from: number;

  constructor(ttl: number, from: number) {
    this.ttl = ttl;
    this.#from = from;
    this.end = from + ttl;
    this.due = from + ttl / 3;
  }

  /** The renewal period: a third of the ttl. */
  get interval(): number {
    return this.ttl / 3;
  }

  /** The earliest a renewal is sent to join others in one pipeline: a tenth of its period early. */
  get joinFrom(): number {
    return this.due - this.interval / 10;
  }

  /** How long a renewal sent at `now` is awaited: a period (at least 50 ms), never past the
   * lease's end. */
  replyWait(now: number): number {
    return Math.max(1, Math.min(Math.max(MIN_REPLY_WAIT, this.interval), this.end - now));
  }

  /**
   * A `LOCK.EXTEND` of `ttl` sent at `sent` answered `reply`: undefined while the hold lives,
   * else the loss's reason. A reply that is not an integer throws (`TypeError`).
   */
  answered(sent: number, reply: unknown, ttl: number): string | undefined {
    if (int(reply) !== 1) return LEASE_RAN_OUT;
    if (sent >= this.#from) {
      this.#from = sent;
      this.end = sent + ttl;
      this.due = sent + ttl / 3;
      this.lastFailure = undefined;
    }
    return undefined;
  }

  /**
   * A `LOCK.EXTEND` of `ttl` sent at `sent` got no answer: it may have run, and the server's lease
   * then ends `ttl` after it ran, maybe before `end` (rule 15). When `sent + ttl` is sooner, it
   * is the end now, a reply to an earlier command changes nothing, and the next renewal is due
   * at once (it carries `ttl`). Whether it was sooner.
   */
  unanswered(sent: number, ttl: number): boolean {
    if (sent + ttl >= this.end) return false;
    this.end = sent + ttl;
    this.#from = Math.max(this.#from, sent);
    this.due = Math.min(this.due, sent);
    return true;
  }

  /** A renewal failed with the link (`cause`): asked again after a pause, until the lease ends. */
  broken(cause: string, now: number): void {
    this.lastFailure = cause;
    this.due = now + RETRY_PAUSE;
  }

  /** The loss's reason if the lease has ended by `now` (with the watchdog on or off), else undefined. */
  ended(now: number, watchdog: boolean): string | undefined {
    if (now < this.end) return undefined;
    return watchdog ? unreachable(this.lastFailure ?? "no answer") : FIXED_LEASE_ENDED;
  }
}
