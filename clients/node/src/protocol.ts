/**
 * The LOCK.* commands as argument lists, their replies as values, and the timing rules of
 * waits and renewals: pure functions, no I/O (what a hold does with them is `hold.ts` and
 * `locks.ts`). The words and rules are the Python and Rust clients' (`docs/clients.md`).
 */

/** One argument of a command, as sent. */
export type Arg = string | number | Buffer;

/** How long a wait pauses before it asks again after a broken link (ms). */
export const RETRY_PAUSE = 50;

// Why a hold was lost: docs/clients.md rule 8's table, word for word in every client.

/** A renewal or an extend answered 0. */
export const LEASE_RAN_OUT = "the lease ran out before it was renewed";
/** A release answered 0 (rule 16). */
export const GONE_AT_RELEASE = "the hold was gone when released (its lease ran out)";
/** A fixed lease (watchdog off) reached its end. */
export const FIXED_LEASE_ENDED = "the lease ended (a fixed lease, not extended in time)";
const UNREACHABLE = "the server could not be reached before the lease ended";

/** The lease deadline (rule 15) passed without a successful renewal; `cause`: the last failure. */
export function unreachable(cause: string): string {
  return `${UNREACHABLE}: ${cause}`;
}

/** A renewal got an error reply that is not retryable (rule 19). */
export function refused(err: unknown): string {
  return `renewal refused: ${text(err)}`;
}

/** Any other failure of the loop for this hold. */
export function watchdogFailed(err: unknown): string {
  const name = err instanceof Error ? err.name : typeof err;
  return `the watchdog failed: ${name}: ${text(err)}`;
}

/** A session hold's own connection broke. */
export function sessionClosed(cause: string): string {
  return `the session's connection closed: ${cause}`;
}

/**
 * Rule 19: the error replies that say this server did not run the command and cannot serve the
 * key now (a moved slot, a demoted master, a loading server, a waiter unblocked by a failover).
 * They are asked again (after connecting again through Sentinel or the cluster's map) with the
 * same owner; to the watchdog they are a broken link. Any other error reply is not retried.
 */
export const RETRYABLE_REPLIES = [
  "MOVED",
  "ASK",
  "TRYAGAIN",
  "CLUSTERDOWN",
  "READONLY",
  "LOADING",
  "MASTERDOWN",
  "UNBLOCKED",
] as const;

const RETRYABLE = new RegExp(`^(${RETRYABLE_REPLIES.join("|")})\\b`);

/** Whether `err` is an error reply of rule 19's list (asked again), by its first word. */
export function isRetryableReply(err: unknown): boolean {
  return RETRYABLE.test(text(err));
}

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

/** The most keys of one lock set: the server's default `lock.max-set-size` (rule 23). */
export const MAX_SET_SIZE = 64;

/** A lock set's keys (rule 23), checked: 1 to `MAX_SET_SIZE` strings, none twice, else
 * `RangeError` (`TypeError` for what is not an array of strings). */
export function checkKeys(keys: unknown): string[] {
  if (!Array.isArray(keys)) throw new TypeError("keys must be an array of keys");
  if (keys.length === 0) throw new RangeError("a lock set needs at least one key");
  if (keys.length > MAX_SET_SIZE)
    throw new RangeError(`a lock set takes at most ${MAX_SET_SIZE} keys: ${keys.length} given`);
  const seen = new Set<string>();
  for (const key of keys) {
    if (typeof key !== "string") throw new TypeError(`a key is a string: ${String(key)}`);
    if (seen.has(key)) throw new RangeError(`a key appears twice in the set: ${key}`);
    seen.add(key);
  }
  return [...(keys as string[])];
}

/** `LOCK.MACQUIRE`; `wait` as in `acquireArgs`. */
export function macquireArgs(
  keys: readonly string[],
  owner: string,
  ttl: number,
  shared: boolean,
  session: boolean,
  wait: number | undefined,
): Arg[] {
  const args: Arg[] = ["LOCK.MACQUIRE", keys.length, ...keys, owner, millis(ttl)];
  if (shared) args.push("SHARED");
  if (session) args.push("SESSION");
  if (wait !== undefined) args.push("WAIT", wait === Infinity ? 0 : millis(wait));
  return args;
}

export function mreleaseArgs(keys: readonly string[], owner: string): Arg[] {
  return ["LOCK.MRELEASE", keys.length, ...keys, owner];
}

/** The tokens of a `LOCK.MACQUIRE` reply, one per key in their order; null when not granted. */
export function tokensOf(reply: unknown): number[] | null {
  if (reply === null || reply === undefined) return null;
  if (!Array.isArray(reply)) throw new TypeError(`expected an array of tokens, got ${String(reply)}`);
  if (reply.length === 2 && Array.isArray(reply[1])) return (reply[1] as unknown[]).map(int); // owner `*`
  return reply.map(int);
}

/** Why a lock set was lost: the reason of its member `key` that was (rule 23). */
export function memberLost(reason: string, key: string): string {
  return `${key}: ${reason}`;
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

/**
 * `LOCK.WATCH key [AFTER cursor] [WAIT timeout]`: who holds `key`. Without `after` it answers
 * at once; with it, only when the holders differ from the ones the cursor names (nil otherwise),
 * blocking up to `wait` ms (`Infinity`: `WAIT 0`, without limit) when `wait` is given.
 */
export function watchArgs(key: string, after?: string, wait?: number): Arg[] {
  const args: Arg[] = ["LOCK.WATCH", key];
  if (after !== undefined) args.push("AFTER", after);
  if (wait !== undefined) args.push("WAIT", wait === Infinity ? 0 : millis(wait));
  return args;
}

/** One live hold of a `LOCK.WATCH` reply. */
export interface Watched {
  owner: string;
  token: number;
  /** ms left of its lease when the server answered. */
  ttl: number;
  permits: number;
}

/** A `LOCK.WATCH` reply: what to pass as `AFTER` next, the mode, the newest live hold's token
 * (an election's term) and every live hold, oldest first. */
export interface WatchState {
  cursor: string;
  mode: string;
  token: number | null;
  holders: Watched[];
}

/** A reply's map (a RESP2 flat field/value array, a RESP3 `Map` or object) as an object. */
function fields(reply: unknown): Record<string, unknown> {
  if (Array.isArray(reply)) {
    const out: Record<string, unknown> = {};
    for (let i = 0; i + 1 < reply.length; i += 2) out[str(reply[i])] = reply[i + 1];
    return out;
  }
  if (reply instanceof Map) return Object.fromEntries([...reply].map(([k, v]) => [str(k), v]));
  if (typeof reply === "object" && reply !== null && !Buffer.isBuffer(reply)) return reply as Record<string, unknown>;
  throw new TypeError(`expected a map reply, got ${String(reply)}`);
}

const str = (x: unknown): string => (Buffer.isBuffer(x) ? x.toString() : String(x));

/** The `LOCK.WATCH` reply, or null for nil (nothing new within the wait). */
export function watchReply(reply: unknown): WatchState | null {
  if (reply === null || reply === undefined) return null;
  const f = fields(reply);
  const holders = (f["holders"] ?? []) as unknown[];
  if (!Array.isArray(holders)) throw new TypeError(`expected an array of holders, got ${String(holders)}`);
  return {
    cursor: str(f["cursor"]),
    mode: str(f["mode"]),
    token: f["token"] === null || f["token"] === undefined ? null : int(f["token"]),
    holders: holders.map((h) => {
      const g = fields(h);
      return { owner: str(g["owner"]), token: int(g["token"]), ttl: int(g["ttl"]), permits: int(g["permits"]) };
    }),
  };
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
