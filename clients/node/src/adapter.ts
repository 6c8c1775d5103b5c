/**
 * The one small interface between the lock rules and a Redis client library, and what every
 * connection of the library's own shares (bounds, link failures in a few words). `adapt.ts`
 * makes an `Adapter` for a node-redis or ioredis client; this file imports neither.
 */
import type { Arg } from "./protocol.js";

/** A connection of the library's own: a wait's, a watchdog's or a session hold's. */
export interface Connection {
  /** One command and its reply (an error reply rejects). */
  send(args: readonly Arg[]): Promise<unknown>;
  /** Closed at once, without QUIT: the server takes a waiter on it out of the queue. */
  close(): void;
  /** Whether it keeps the process alive (a watchdog's and an idle one's do not). */
  ref(keepAlive: boolean): void;
  /** Several commands written together, without MULTI (a pipeline); each reply settles its own
   * promise. Default: `send` for each, in the same tick. */
  pipeline?(commands: readonly (readonly Arg[])[]): Promise<unknown>[];
  /** Whether it is still connected (false once it closed: a command sent now is not written).
   * Default: true. */
  isOpen?(): boolean;
}

export interface ConnectOptions {
  /** Bounds connecting (ms); undefined: the library's own default, `CONNECT_TIMEOUT`. */
  timeout?: number;
}

/** How long making a connection of the library's own may take (ms), unless bounded shorter. */
export const CONNECT_TIMEOUT = 5000;

/** The longest delay a Node timer takes (ms): 2^31-1 (24.8 days); a longer one fires at once. */
export const MAX_TIMER = 2 ** 31 - 1;

export interface Adapter {
  /** Which library, for messages. */
  readonly name: string;
  /** A command on the application's client, routed to the master serving `key`. */
  send(key: string, args: readonly Arg[]): Promise<unknown>;
  /**
   * A new connection to the master serving `key`, made like the client's (same server or
   * Sentinel deployment, credentials, database), but outside it and without its retries,
   * offline queue or command timeouts. Through Sentinel it asks for the master as it connects.
   */
  connect(key: string, options?: ConnectOptions): Promise<Connection>;
  /** Where `key`'s connections go (a node of a cluster); idle connections are kept per route. */
  route(key: string): string;
  /** The server's address for messages (`127.0.0.1:6379`); default: the adapter's name. */
  address?(key: string): string;
}

/** Whether `err` is an error reply of the server (else the link failed: it broke, timed out or
 * could not be made). Both libraries' reply errors are recognized by their class names. */
export function isReplyError(err: unknown): boolean {
  if (!(err instanceof Error)) return false;
  if (err.name === "ReplyError") return true; // ioredis (redis-errors)
  for (let p = Object.getPrototypeOf(err); p && p !== Error.prototype; p = Object.getPrototypeOf(p)) {
    const name = (p.constructor as { name?: string } | undefined)?.name;
    if (name === "ErrorReply" || name === "ReplyError") return true; // node-redis
  }
  return false;
}

/**
 * Whether `err` is a link failure (broken, timed out, not made, or the client closed or offline)
 * rather than the server's answer or a fault of the caller or of this code. The Redis libraries
 * raise link failures as plain `Error`s or classes of their own, told apart by message only; the
 * JavaScript errors a bad argument or a bug raises (`RangeError`, `TypeError`, ...) never come
 * from a link, so they are what is excluded.
 */
export function isLinkError(err: unknown): boolean {
  if (isReplyError(err)) return false;
  return !(
    err instanceof RangeError ||
    err instanceof TypeError ||
    err instanceof ReferenceError ||
    err instanceof SyntaxError
  );
}

/** A link that did not answer in time. */
export class LinkTimeout extends Error {
  override name = "LinkTimeout";
}

/** A connection that could not be made (whatever the server or the library answered: a full
 * server's `ERR max number of clients reached` is a link failure, not a command's refusal).
 * Internal: callers see it as an `UnavailableError`'s cause. */
export class ConnectError extends Error {
  override name = "ConnectError";
}

/** `connecting`, bounded by `ms`; any failure as a `ConnectError`, after `close` ran. */
export async function connecting(connecting: Promise<unknown>, ms: number, close: () => void): Promise<void> {
  try {
    await within(connecting, ms, close);
  } catch (e) {
    close();
    throw new ConnectError(why(e), { cause: e });
  }
}

const CAUSES: Record<string, string> = {
  ECONNREFUSED: "connection refused",
  ENOTFOUND: "unresolvable host",
  EAI_AGAIN: "unresolvable host",
  ECONNRESET: "connection reset",
  EPIPE: "connection reset",
  ETIMEDOUT: "connect timed out",
  EHOSTUNREACH: "host unreachable",
  ENETUNREACH: "network unreachable",
};

/** A failure in a few words: `connection refused`, `no answer within 2000 ms`, or its message. */
export function why(err: unknown): string {
  for (let e: unknown = err; e instanceof Error; e = e.cause) {
    const code = (e as { code?: unknown }).code;
    if (typeof code === "string" && code in CAUSES) return CAUSES[code]!;
    const errors = (e as { errors?: unknown }).errors; // AggregateError: one per address tried
    if (Array.isArray(errors) && errors.length > 0) return why(errors[errors.length - 1]);
    if (e instanceof ConnectError || e instanceof LinkTimeout) return e.message;
  }
  return err instanceof Error ? err.message || err.name : String(err);
}

/**
 * `fn` after `ms`, once the replies already received have been read: timers run before the
 * event loop reads its sockets, so a process that was paused (GC, SIGSTOP) would otherwise see a
 * timeout for a reply waiting in its socket. The timer is unref'ed (the immediate is not: an
 * unref'ed one would let the loop block in its poll first); the function returned cancels it.
 */
export function afterReplies(ms: number, fn: () => void): () => void {
  let immediate: NodeJS.Immediate | undefined;
  const timer = setTimeout(() => (immediate = setImmediate(fn)), Math.min(Math.max(0, ms), MAX_TIMER));
  timer.unref();
  return () => {
    clearTimeout(timer);
    if (immediate) clearImmediate(immediate);
  };
}

/** `promise`, or a `LinkTimeout` after `ms` (then `onTimeout` runs: close the link). */
export function within<T>(promise: Promise<T>, ms: number, onTimeout: () => void): Promise<T> {
  return new Promise<T>((resolve, reject) => {
    const cancel = afterReplies(ms, () => {
      onTimeout();
      reject(new LinkTimeout(`no answer within ${Math.round(ms)} ms`));
    });
    promise.then(
      (v) => {
        cancel();
        resolve(v);
      },
      (e: unknown) => {
        cancel();
        reject(e);
      },
    );
  });
}

export const noop = (): void => {};
