/**
 * redis-lock-client: locks for the redis-lock module on node-redis and ioredis. The server
 * does the hard parts (fair FIFO waits, fencing tokens, leases, shared locks, semaphores,
 * session holds, guarded writes); this package writes the loop around them: wait without
 * polling, leave the queue when aborted, renew the lease while working, say when a hold is lost,
 * never renew a released hold, and carry the token to the write; take several keys at once
 * (`locks.acquireAll`, a `MultiHold`); elect a leader on a session hold
 * (`locks.election`) and follow the leaders with `LOCK.WATCH`.
 */
import "./dispose.js";

export { Locks, type AcquireOptions, type LocksOptions } from "./locks.js";
export { Hold, type HoldEvents } from "./hold.js";
export { MultiHold, type MultiHoldEvents } from "./multihold.js";
export {
  Election,
  Leadership,
  type CampaignOptions,
  type ElectionOptions,
  type Leader,
  type ObserveOptions,
} from "./election.js";
export {
  DeadlockError,
  LeadershipLostError,
  LockError,
  LockLostError,
  NotAcquiredError,
  StaleError,
  UnavailableError,
} from "./errors.js";
export type { Arg } from "./protocol.js";
