/**
 * The client `Locks` is given, as an `Adapter`: a node-redis client, cluster or Sentinel, an
 * ioredis `Redis` (standalone or Sentinel) or `Cluster`, or an object that is an `Adapter` already.
 */
import type { Adapter } from "./adapter.js";
import { ioredisAdapter, isIoredis } from "./ioredis.js";
import { isNodeRedis, nodeRedisAdapter } from "./node-redis.js";

export function adapt(client: unknown): Adapter {
  if (isAdapter(client)) return client;
  if (isIoredis(client)) return ioredisAdapter(client);
  if (isNodeRedis(client)) return nodeRedisAdapter(client);
  throw new TypeError(
    "redis-lock-client: expected a node-redis client, cluster or sentinel, an ioredis Redis or Cluster, or an Adapter",
  );
}

function isAdapter(x: unknown): x is Adapter {
  const a = x as Partial<Adapter> | null;
  return (
    typeof a === "object" &&
    a !== null &&
    typeof a.send === "function" &&
    typeof a.connect === "function" &&
    typeof a.route === "function"
  );
}
