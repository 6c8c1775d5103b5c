/**
 * Rule 14: the lock service unavailable is an outcome of its own. `Reach` holds a `Locks`
 * object's unavailability bound (`unavailableAfter`) and is the one place that turns link
 * failures, silence and a server without the module into `UnavailableError`s, naming the address
 * and the cause.
 */
import {
  LinkTimeout,
  MAX_TIMER,
  isLinkError,
  isReplyError,
  noop,
  why,
  within,
  type Adapter,
  type Connection,
} from "./adapter.js";
import { LockError, UnavailableError, moduleMissing, translate } from "./errors.js";
import { LinkGone, type Link } from "./links.js";
import { RETRY_PAUSE, isRetryableReply, type Arg } from "./protocol.js";

/** The default bound (ms): a server silent or unreachable this long is unavailable. */
export const UNAVAILABLE_AFTER = 10_000;

/** A link failure (broken, timed out, not made) or a server that no longer serves the key:
 * worth asking again; any other error is the server's answer, or a bad argument or a bug. */
export const linkFailure = (e: unknown): boolean => isLinkError(e) || isRetryableReply(e);

/** A timer that does not keep the process alive. */
export const pause = (ms: number): Promise<void> =>
  new Promise((resolve) => setTimeout(resolve, Math.max(0, ms)).unref());

export class Reach {
  /** The PING in flight per route, shared by every watch on it: while the server is down, one
   * waits in the client's offline queue, not one per watch and half bound. */
  #pings = new Map<string, Promise<unknown>>();

  constructor(
    readonly adapter: Adapter,
    /** ms: link failures and silence are retried or awaited this long, then unavailable. */
    readonly bound: number = UNAVAILABLE_AFTER,
  ) {
    if (!(bound > 0 && bound <= MAX_TIMER))
      throw new RangeError("unavailableAfter must be a number of ms in 1..2^31-1");
  }

  /** The unavailable error for `key`'s server, caused by `err`. */
  unavailable(key: string, err: unknown): UnavailableError {
    const address = this.adapter.address?.(key) ?? this.adapter.name;
    const cause = moduleMissing(err) ? `the redis-lock module is not loaded (${why(err)})` : why(err);
    return new UnavailableError(address, cause, { cause: err });
  }

  /** The error to throw for `err`: the server's answer as the library's error, else unavailable. */
  failure(key: string, err: unknown): unknown {
    if (err instanceof LockError) return err; // said already (stale, deadlock, unavailable)
    return linkFailure(err) || moduleMissing(err) ? this.unavailable(key, err) : translate(err);
  }

  /**
   * One command on the application's client, its answer awaited no longer than the bound. With
   * `retry` (only for commands safe to repeat: they carry their token) a link failure is asked
   * again until the bound has passed since this call; without it, it is unavailable at once.
   */
  async send(key: string, args: readonly Arg[], retry: boolean): Promise<unknown> {
    const end = performance.now() + this.bound;
    for (;;) {
      try {
        return await within(this.adapter.send(key, args), end - performance.now(), noop);
      } catch (e) {
        if (!retry || !linkFailure(e) || performance.now() + RETRY_PAUSE >= end) throw this.failure(key, e);
      }
      await pause(RETRY_PAUSE);
    }
  }

  /**
   * One command on a connection of the library's own (`link`, the renewal loop's or a session
   * hold's), whatever the application's client does with unanswered commands: answered within
   * the bound. A connection that cannot be made is tried again until the bound (nothing was
   * sent), and so is a retryable reply (rule 19: not run); a command written whose link then
   * failed is asked again only with `retry` (it carries its token), else never sent again (rule
   * 14's table: a release whose reply is lost).
   * A session's closed connection rejects with `LinkGone`, at once. `end`: when to give up
   * (`performance.now()`; default: the bound from now).
   */
  sendOn(
    link: Link,
    key: string,
    args: readonly Arg[],
    retry: boolean,
    end = performance.now() + this.bound,
  ): Promise<unknown> {
    return link.track(this.#sendOn(link, key, args, retry, end));
  }

  async #sendOn(link: Link, key: string, args: readonly Arg[], retry: boolean, end: number): Promise<unknown> {
    for (;;) {
      let conn: Connection | undefined;
      try {
        conn = await link.open(key, end - performance.now());
        return await within(link.send(conn, args), end - performance.now(), noop);
      } catch (e) {
        if (e instanceof LinkGone) throw e;
        // A session's connection that broke ended the hold with it.
        if (conn && link.isSession && isLinkError(e) && !(e instanceof LinkTimeout)) throw new LinkGone(why(e));
        // A broken link is made again; so is one to a server that no longer serves the key,
        // which did not run the command (rule 19): that one is asked again in any case.
        if (conn && isRetryableReply(e)) link.stalled(conn);
        else if (conn && isLinkError(e) && !(e instanceof LinkTimeout)) link.drop(conn);
        const again = linkFailure(e) && (conn === undefined || retry || isRetryableReply(e));
        if (!again || performance.now() + RETRY_PAUSE >= end) throw this.failure(key, e);
      }
      await pause(RETRY_PAUSE);
    }
  }

  /**
   * Watches `key`'s server while a wait is on another connection: `PING` on the application's
   * client every half bound; when no answer came within the bound, `dead` runs once with the
   * unavailable error. The returned function stops the watch.
   */
  watch(key: string, dead: (err: UnavailableError) => void): () => void {
    let stopped = false;
    let answered = performance.now();
    const probe = async (): Promise<void> => {
      while (!stopped) {
        await pause(Math.min(this.bound / 2, answered + this.bound - performance.now()));
        if (stopped) return;
        try {
          await within(this.#ping(key), answered + this.bound - performance.now(), noop);
          answered = performance.now();
        } catch (e) {
          if (isReplyError(e))
            answered = performance.now(); // an error reply is an answer
          else if (e instanceof LinkTimeout || performance.now() >= answered + this.bound) {
            stopped = true;
            const silence = new LinkTimeout(`no answer for ${Math.round(performance.now() - answered)} ms`);
            return dead(this.unavailable(key, e instanceof LinkTimeout ? silence : e));
          }
        }
      }
    };
    void probe();
    return () => (stopped = true);
  }

  /** A `PING` to `key`'s server: the one in flight, if any, else a new one. */
  #ping(key: string): Promise<unknown> {
    const route = this.adapter.route(key);
    let ping = this.#pings.get(route);
    if (!ping) {
      ping = this.adapter.send(key, ["PING"]).finally(() => this.#pings.delete(route));
      ping.catch(noop); // its watchers see the failure; none may be left to
      this.#pings.set(route, ping);
    }
    return ping;
  }
}
