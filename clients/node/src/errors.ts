/** The errors of this library; each is a `LockError`. */

export class LockError extends Error {
  override name = "LockError";
}

/** `acquire` was not granted: the wait time passed, the lock was busy without waiting, or a
 * durable grant did not reach its replicas in time. */
export class NotAcquiredError extends LockError {
  override name = "NotAcquiredError";
  constructor(
    message: string,
    readonly key: string,
  ) {
    super(message);
  }
}

/** `guard` refused: this hold's token is no longer the live exclusive hold's (the server's
 * `STALE`), or the hold was lost, released, or is a semaphore's. Nothing was run. */
export class StaleError extends LockError {
  override name = "StaleError";
}

/** A sole reader asked to upgrade while other readers hold (the server's `DEADLOCK`). */
export class DeadlockError extends LockError {
  override name = "DeadlockError";
}

/** Leaving an `await using` scope (or `using`) found the hold lost: the work done under it
 * may have overlapped another holder's. `reason` says why. */
export class LockLostError extends LockError {
  override name = "LockLostError";
  constructor(readonly reason: string) {
    super(`the hold was lost: ${reason}`);
  }
}

/** The lock service cannot be reached (refused, unresolvable, no answer within the client's
 * `unavailableAfter` bound) or does not answer as Redis with the redis-lock module loaded. Not a
 * refusal of the lock: whether the lock is free is unknown. `address` is where the client asked,
 * `cause` the last failure. */
export class UnavailableError extends LockError {
  override name = "UnavailableError";
  constructor(
    readonly address: string,
    why: string,
    options?: ErrorOptions,
  ) {
    super(`lock service unavailable at ${address}: ${why}`, options);
  }
}

/** The module's error replies as this library's errors (others stay as they are). */
export function translate(err: unknown): unknown {
  const message = err instanceof Error ? err.message : String(err);
  if (message.startsWith("STALE")) return new StaleError(message, { cause: err });
  if (message.startsWith("DEADLOCK")) return new DeadlockError(message, { cause: err });
  return err;
}

/** An error reply saying the module is not loaded (the server is Redis, but not a lock service). */
export function moduleMissing(err: unknown): boolean {
  const message = err instanceof Error ? err.message : String(err);
  return /unknown command/i.test(message) && /lock\./i.test(message);
}

/** A leadership was lost before its `resign()` (rule 21): a renewal answered 0, the lease ran
 * out (a frozen process), or the link was lost past the lease. The `signal` of the leadership
 * aborts with it, and leaving an `await using` scope throws it. `reason` says why. */
export class LeadershipLostError extends LockLostError {
  override name = "LeadershipLostError";
  constructor(reason: string) {
    super(reason);
    this.message = `leadership was lost: ${reason}`;
  }
}
