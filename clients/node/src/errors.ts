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

/** The module's error replies as this library's errors (others stay as they are). */
export function translate(err: unknown): unknown {
  const message = err instanceof Error ? err.message : String(err);
  if (message.startsWith("STALE")) return new StaleError(message, { cause: err });
  if (message.startsWith("DEADLOCK")) return new DeadlockError(message, { cause: err });
  if (/unknown command/i.test(message) && /lock\./i.test(message)) {
    return new LockError(`the redis-lock module is not loaded on this server: ${message}`, { cause: err });
  }
  return err;
}
