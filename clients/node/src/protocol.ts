/**
 * The LOCK.* commands as argument lists, their replies as values, and the timing rules of
 * waits and renewals: pure functions, no I/O (what a hold does with them is `hold.ts` and
 * `locks.ts`). The words and rules are the Python and Rust clients' (`docs/clients.md`).
 */

/** One argument of a command, as sent. */
export type Arg = string | number | Buffer;

/** How long a wait pauses before it asks again after a broken link (ms). */
export const RETRY_PAUSE = 50;

/** Why a hold was lost, in the words of every client. */
export const LEASE_RAN_OUT = "the lease ran out before it was renewed";
export const UNREACHABLE = "the server could not be reached before the lease ended";
export const GONE_AT_RELEASE = "the hold was gone when released (its lease ran out)";
export const FIXED_LEASE_ENDED = "the lease ended (a fixed lease, not extended in time)";

/** What a hold is: exclusive (the default), shared, or `permits` of a semaphore of `limit`. */
export interface Mode {
  shared?: boolean;
  limit?: number;
  permits?: number;
}

/** Milliseconds as the module's: an integer, at least 1, rounded up (a lease is never shorter
 * than asked). */
export function millis(ms: number): number {
  if (!Number.isFinite(ms)) throw new RangeError(`not a finite number of milliseconds: ${ms}`);
  return Math.max(1, Math.ceil(ms));
}

/** The words of a mode; `RangeError` unless 1 <= permits <= limit. */
export function modeWords(mode: Mode): Arg[] {
  if (mode.limit !== undefined) {
    const permits = mode.permits ?? 1;
    if (!(Number.isInteger(mode.limit) && Number.isInteger(permits) && 1 <= permits && permits <= mode.limit)) {
      throw new RangeError("a semaphore needs integers 1 <= permits <= limit");
    }
    if (mode.shared) throw new RangeError("a hold is shared or a semaphore's, not both");
    return ["LIMIT", mode.limit, "PERMITS", permits];
  }
  return mode.shared ? ["SHARED"] : [];
}

/**
 * `LOCK.ACQUIRE`. `wait`: undefined, do not wait; `Infinity`, wait without limit (`WAIT 0`);
 * else milliseconds.
 */
export function acquireArgs(
  key: string,
  owner: string,
  ttl: number,
  mode: Mode,
  session: boolean,
  wait: number | undefined,
): Arg[] {
  const args: Arg[] = ["LOCK.ACQUIRE", key, owner, millis(ttl), ...modeWords(mode)];
  if (session) args.push("SESSION");
  if (wait !== undefined) args.push("WAIT", wait === Infinity ? 0 : millis(wait));
  return args;
}

export function extendArgs(key: string, owner: string, ttl: number, token: number): Arg[] {
  return ["LOCK.EXTEND", key, owner, millis(ttl), "TOKEN", token];
}

export function releaseArgs(key: string, owner: string, token: number): Arg[] {
  return ["LOCK.RELEASE", key, owner, "TOKEN", token];
}

export function guardArgs(key: string, token: number, command: readonly Arg[]): Arg[] {
  if (command.length === 0) throw new TypeError("guard needs a command to run");
  return ["LOCK.GUARD", key, token, ...command];
}

/** `WAIT` for a durable grant: `replicas` must have it within `timeout` ms. */
export function waitArgs(replicas: number, timeout: number): Arg[] {
  return ["WAIT", replicas, millis(timeout)];
}

/** An integer reply as a number (tokens stay below 2^53, so they are exact). */
export function int(reply: unknown): number {
  if (typeof reply === "number") return reply;
  if (typeof reply === "bigint") return Number(reply);
  const digits = typeof reply === "string" ? reply : Buffer.isBuffer(reply) ? reply.toString() : undefined;
  if (digits !== undefined && /^-?\d+$/.test(digits)) return Number(digits);
  throw new TypeError(`expected an integer reply, got ${String(reply)}`);
}

/** The token of a `LOCK.ACQUIRE` reply; null when not granted. */
export function tokenOf(reply: unknown): number | null {
  if (reply === null || reply === undefined) return null;
  if (Array.isArray(reply)) return int(reply[1]); // owner `*`: [owner, token]
  return int(reply);
}

/** The text of an error reply (or of any error). */
export function text(err: unknown): string {
  return err instanceof Error ? err.message : String(err);
}

/**
 * Error replies that say this server no longer serves the key (a demoted master, a moved slot,
 * a master that became a replica while a client waited, a loading server): the caller
 * connects again (through Sentinel or the cluster's map, to the new one) and asks again.
 */
export function movedAway(err: unknown): boolean {
  return /^(READONLY|MOVED|ASK|TRYAGAIN|CLUSTERDOWN|UNBLOCKED|LOADING|MASTERDOWN)\b/.test(text(err));
}

export function refused(err: unknown): string {
  return `renewal refused: ${text(err)}`;
}

export function watchdogFailed(err: unknown): string {
  const name = err instanceof Error ? err.name : typeof err;
  return `the watchdog failed: ${name}: ${text(err)}`;
}

/**
 * The watchdog's rule, the same in every client: renew every `ttl / 3`; the hold is lost when a
 * renewal answers 0 or is refused, or when the link stays broken until the lease would have
 * ended (a broken link before that is retried); any other failure loses it at once.
 */
export class Renewals {
  readonly interval: number;
  /** For connecting and for each reply: a renewal never waits past the next one. */
  readonly timeout: number;
  leaseEnd: number;
  /** The cause of the last failed renewal, for the loss's reason. */
  lastFailure: string | undefined;

  constructor(
    readonly ttl: number,
    now: number = performance.now(),
  ) {
    this.interval = ttl / 3;
    this.timeout = Math.max(50, this.interval);
    this.leaseEnd = now + ttl;
  }

  /** A renewal sent at `sent` answered `reply`: undefined while the hold lives. */
  answered(sent: number, reply: unknown): string | undefined {
    if (int(reply) !== 1) return LEASE_RAN_OUT;
    this.leaseEnd = sent + this.ttl;
    return undefined;
  }

  /** The link broke: retried (undefined) until the lease would have ended. */
  broken(now: number = performance.now()): string | undefined {
    return now >= this.leaseEnd ? this.unreachable(this.lastFailure ?? "no answer") : undefined;
  }

  /** The reason of a hold lost with the server out of reach, with the last failure's cause. */
  unreachable(cause: string): string {
    return `${UNREACHABLE}: ${cause}`;
  }
}

// CRC16 (XMODEM) of Redis Cluster's key slots, with hash tags: `{order:42}:stock` and
// `{order:42}:lock` share a slot.
const CRC16 = (() => {
  const table = new Uint16Array(256);
  for (let i = 0; i < 256; i++) {
    let crc = i << 8;
    for (let bit = 0; bit < 8; bit++) crc = crc & 0x8000 ? (crc << 1) ^ 0x1021 : crc << 1;
    table[i] = crc & 0xffff;
  }
  return table;
})();

/** The cluster slot of `key`. */
export function slotOf(key: string | Buffer): number {
  let bytes = typeof key === "string" ? Buffer.from(key) : key;
  const open = bytes.indexOf(0x7b); // {
  if (open >= 0) {
    const close = bytes.indexOf(0x7d, open + 1); // }
    if (close > open + 1) bytes = bytes.subarray(open + 1, close);
  }
  let crc = 0;
  for (const b of bytes) crc = ((crc << 8) & 0xffff) ^ CRC16[((crc >> 8) ^ b) & 0xff]!;
  return crc & 0x3fff;
}
