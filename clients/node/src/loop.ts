/**
 * Rule 6: one renewal loop per `Locks`, not a timer or a connection per hold. One timer wakes it
 * when the earliest renewal falls due or the earliest lease ends (rule 15); the renewals due
 * then, and those due within a tenth of their period, go in one pipeline per server on the
 * loop's own connection (`links.ts`); a session hold's go on its own connection. A hold the loop
 * finds lost is taken out and told once, with the reason of rule 8.
 */
import { channel } from "node:diagnostics_channel";
import { LinkTimeout, afterReplies, isLinkError, isReplyError, noop, why, type Connection } from "./adapter.js";
import type { Lease } from "./lease.js";
import { LinkGone, type Link, type Links } from "./links.js";
import { extendArgs, isRetryableReply, refused, sessionClosed, watchdogFailed } from "./protocol.js";

/** What the loop keeps of a hold. */
export interface Renewed {
  readonly key: string;
  readonly owner: string;
  readonly token: number;
  readonly lease: Lease;
  /** Renewed (true), or only watched for its lease's end (a fixed lease). */
  readonly watchdog: boolean;
  /** A session hold's own connection, renewed on; else the loop's connection to the key's server. */
  readonly session: Link | undefined;
  /** The loop found the hold lost: called once, after it was taken out of the loop. */
  lost(reason: string): void;
}

/**
 * Each renewal's lag, for measuring (`diagnostics_channel`, free when nobody subscribes):
 * `{ key, lag }`, the reply's arrival minus when the renewal fell due, in ms.
 */
export const RENEWAL_CHANNEL = "redis-lock-client:renewal";
const renewals = channel(RENEWAL_CHANNEL);

/** How long the loop's connections stay open once no hold is left (ms): a hold taken again soon
 * reuses them. */
const LINGER = 1000;

/** One renewal sent: what its reply is judged by. */
interface Sent {
  hold: Renewed;
  ttl: number;
  due: number;
}

export class RenewalLoop {
  readonly #holds = new Set<Renewed>();
  /** Cancels the loop's one timer. */
  #cancel: () => void = noop;
  #wakeAt = Infinity;
  #linger: NodeJS.Timeout | undefined;

  constructor(readonly links: Links) {}

  add(hold: Renewed): void {
    this.#holds.add(hold);
    clearTimeout(this.#linger);
    this.#linger = undefined;
    this.#arm(this.#nextEvent(hold));
  }

  /** Takes `hold` out: nothing of it is sent after this, and a reply already on its way is ignored. */
  remove(hold: Renewed): void {
    if (this.#holds.delete(hold) && this.#holds.size === 0) this.#lingerThenClose(LINGER);
  }

  /** `hold`'s lease moved (an extend): its next renewal or end may come sooner. */
  moved(hold: Renewed): void {
    if (this.#holds.has(hold)) this.#arm(this.#nextEvent(hold));
  }

  /** The link `hold`'s commands go on. */
  linkOf(hold: Pick<Renewed, "key" | "session">): Link {
    return hold.session ?? this.links.forKey(hold.key);
  }

  /**
   * `work`, a command of no hold on one of the loop's links (a durable grant given back): once
   * it settled, the loop's connections close as after a hold's removal if no hold is left.
   */
  aside(work: Promise<unknown>): void {
    const settled = (): void => {
      if (this.#holds.size === 0) this.#lingerThenClose(LINGER);
    };
    work.then(settled, settled);
  }

  /** Closes the loop's connections now if no hold is left (else once the last one leaves). */
  close(): void {
    if (this.#holds.size === 0) this.#lingerThenClose(0);
  }

  #lingerThenClose(ms: number): void {
    clearTimeout(this.#linger);
    this.#linger = setTimeout(() => {
      this.#linger = undefined;
      // A command still awaited (a release's reply) keeps its link: looked at again later.
      if (this.#holds.size === 0 && !this.links.closeIdle()) this.#lingerThenClose(LINGER);
    }, ms);
    this.#linger.unref();
  }

  /** When the loop must next look at `hold`: its renewal's due time or its lease's end. */
  #nextEvent(hold: Renewed): number {
    const lease = hold.lease;
    return hold.watchdog && !lease.renewing ? Math.min(lease.due, lease.end) : lease.end;
  }

  /** The timer, to fire at `at` unless it fires sooner already. */
  #arm(at: number): void {
    if (at >= this.#wakeAt) return;
    this.#cancel();
    this.#wakeAt = at;
    const delay = at - performance.now();
    // After the replies already received are read (`afterReplies`): a process paused past a
    // renewal's due time and back finds its renewal's answer before it looks at the lease's end.
    this.#cancel = afterReplies(delay, () => this.#wake()); // unref'ed: a hold never keeps the process alive
  }

  /** Loses the holds whose lease has ended; sends the renewals due, grouped by link. */
  #wake(): void {
    this.#wakeAt = Infinity;
    this.#cancel = noop;
    const now = performance.now();
    const due = new Map<Link, Renewed[]>();
    const early: Renewed[] = [];
    for (const hold of this.#holds) {
      const reason = hold.lease.ended(now, hold.watchdog);
      if (reason !== undefined) this.#lose(hold, reason);
      else if (!hold.watchdog || hold.lease.renewing) continue;
      else if (hold.lease.due <= now) add(due, this.linkOf(hold), hold);
      else if (hold.lease.joinFrom <= now) early.push(hold);
    }
    // Never sent late to wait for others; at most a tenth of a period early to join them.
    for (const hold of early) due.get(this.linkOf(hold))?.push(hold);
    for (const [link, holds] of due) {
      for (const hold of holds) hold.lease.renewing = true;
      void this.#renew(link, holds);
    }
    let next = Infinity;
    for (const hold of this.#holds) next = Math.min(next, this.#nextEvent(hold));
    this.#arm(next);
  }

  /**
   * One pipeline of renewals on `link`. Each hold is lost at its own lease's end meanwhile (the
   * loop's deadline check; a reply after that is ignored), so the link counts as stalled only
   * once no reply came for as long as the longest of its leases allows (a renewal period at most).
   */
  async #renew(link: Link, holds: Renewed[]): Promise<void> {
    const replyWait = (now: number, sent: Renewed[]): number =>
      sent.reduce((w, hold) => Math.max(w, hold.lease.replyWait(now)), 1);
    let conn: Connection | undefined;
    try {
      conn = await link.open(holds[0]!.key, replyWait(performance.now(), holds));
      // Rule 7: a hold released while the connection was made is not renewed.
      const live = holds.filter((hold) => this.#holds.has(hold));
      if (live.length === 0) return;
      const sent = live.map((hold): Sent => ({ hold, ttl: hold.lease.ttl, due: hold.lease.due }));
      const at = performance.now();
      const commands = sent.map(({ hold, ttl }) => extendArgs(hold.key, hold.owner, ttl, hold.token));
      const c = conn;
      const replies = await link.replies(c, commands, replyWait(at, live));
      replies.forEach(({ result, arrived }, i) => this.#settle(link, c, sent[i]!, at, result, arrived));
    } catch (e) {
      // Not connected, or no reply in time: every renewal of the pipeline failed with the link.
      for (const hold of holds) this.#failed(link, hold, e);
    }
    for (const hold of holds) if (this.#holds.has(hold)) this.#arm(this.#nextEvent(hold));
  }

  /** The reply (or error) to one renewal sent at `at`, arrived at `arrived`. */
  #settle(
    link: Link,
    conn: Connection,
    sent: Sent,
    at: number,
    result: PromiseSettledResult<unknown>,
    arrived: number,
  ): void {
    const { hold, ttl, due } = sent;
    if (!this.#holds.has(hold)) return; // released or lost meanwhile: its reply means nothing now
    if (result.status === "rejected") {
      // A broken link is made again; so is one to a server that no longer serves the key.
      if (!isReplyError(result.reason)) link.drop(conn);
      else if (isRetryableReply(result.reason)) link.stalled(conn);
      return this.#failed(link, hold, result.reason);
    }
    hold.lease.renewing = false;
    let reason: string | undefined;
    try {
      reason = hold.lease.answered(at, result.value, ttl);
    } catch (e) {
      reason = watchdogFailed(e); // a reply that is not an integer: nobody would hear of it otherwise
    }
    if (reason !== undefined) return this.#lose(hold, reason);
    if (renewals.hasSubscribers) renewals.publish({ key: hold.key, lag: arrived - due });
  }

  /**
   * A renewal that got no reply: a broken link or a retryable reply (rule 19) is asked again on
   * a new connection until the lease ends (but a session's connection that closed ended the
   * hold); another error reply refuses the renewal; anything else (a bug) loses the hold at once.
   */
  #failed(link: Link, hold: Renewed, err: unknown): void {
    if (!this.#holds.has(hold)) return;
    hold.lease.renewing = false;
    if (err instanceof LinkGone) return this.#lose(hold, sessionClosed(why(err)));
    if (isReplyError(err) && !isRetryableReply(err)) return this.#lose(hold, refused(err));
    if (!isLinkError(err) && !isRetryableReply(err)) return this.#lose(hold, watchdogFailed(err));
    if (link.isSession && !isReplyError(err) && !(err instanceof LinkTimeout)) {
      return this.#lose(hold, sessionClosed(why(err)));
    }
    hold.lease.broken(why(err), performance.now());
  }

  #lose(hold: Renewed, reason: string): void {
    if (!this.#holds.has(hold)) return;
    this.remove(hold);
    hold.lost(reason);
  }
}

function add<K, V>(map: Map<K, V[]>, key: K, value: V): void {
  const list = map.get(key);
  if (list) list.push(value);
  else map.set(key, [value]);
}
