/**
 * node-redis (`redis` / `@redis/client`, v4 and later): a client, a cluster (`createCluster`) or a
 * Sentinel (`createSentinel`). Typed structurally, so this package imports nothing of it.
 */
import { CONNECT_TIMEOUT, connecting, noop, type Adapter, type Connection, type ConnectOptions } from "./adapter.js";
import { slotOf, type Arg } from "./protocol.js";

type Args = (string | Buffer)[];

interface NodeRedisClient {
  options?: { socket?: Record<string, unknown> };
  isOpen: boolean;
  sendCommand(args: Args): Promise<unknown>;
  duplicate(overrides?: Record<string, unknown>): NodeRedisClient;
  connect(): Promise<unknown>;
  on(event: string, listener: (...a: unknown[]) => void): unknown;
  destroy?(): void;
  disconnect?(): Promise<void>;
  ref?(): void;
  unref?(): void;
}

interface NodeRedisCluster {
  slots: { master: unknown }[];
  sendCommand(firstKey: string, isReadonly: boolean, args: Args): Promise<unknown>;
  nodeClient(node: unknown): NodeRedisClient | Promise<NodeRedisClient>;
  getSlotMaster?(slot: number): unknown;
}

interface NodeRedisSentinel {
  getMasterNode(): { host: string; port: number } | undefined;
  getSentinelNode(): unknown;
  sendCommand(isReadonly: boolean, args: Args): Promise<unknown>;
  duplicate(overrides?: Record<string, unknown>): NodeRedisSentinel;
  connect(): Promise<unknown>;
  on(event: string, listener: (...a: unknown[]) => void): unknown;
  destroy(): Promise<void> | void;
}

const has = (x: unknown, ...names: string[]): boolean =>
  typeof x === "object" && x !== null && names.every((n) => typeof (x as Record<string, unknown>)[n] === "function");

const isCluster = (x: unknown): x is NodeRedisCluster =>
  has(x, "sendCommand", "nodeClient") && "slots" in (x as object);
const isSentinel = (x: unknown): x is NodeRedisSentinel => has(x, "sendCommand", "getMasterNode", "getSentinelNode");
const isClient = (x: unknown): x is NodeRedisClient =>
  has(x, "sendCommand", "duplicate", "connect") && "isOpen" in (x as object);

export function isNodeRedis(x: unknown): boolean {
  return isCluster(x) || isSentinel(x) || isClient(x);
}

const strings = (args: readonly Arg[]): Args => args.map((a) => (typeof a === "number" ? String(a) : a));

/** A duplicate of `client` of this library's own: no reconnects (a broken link is this
 * library's to retry; node-redis never writes a command twice), no offline queue, no socket or
 * command timeout (a wait takes as long as the server does). */
async function own(client: NodeRedisClient, options: ConnectOptions): Promise<Connection> {
  const connectTimeout = options.timeout ?? CONNECT_TIMEOUT;
  const dup = client.duplicate({
    socket: { ...client.options?.socket, reconnectStrategy: false, connectTimeout, socketTimeout: undefined },
    commandOptions: undefined,
    disableOfflineQueue: true,
    pingInterval: undefined,
  });
  dup.on("error", noop); // reported through the commands' rejections
  const close = (): void => {
    try {
      if (dup.destroy) dup.destroy();
      else void dup.disconnect?.().catch(noop);
    } catch {
      // already closed
    }
  };
  await connecting(dup.connect(), connectTimeout + 100, close);
  return {
    // Commands sent in one tick are written together (node-redis pipelines them by itself).
    send: (args) => dup.sendCommand(strings(args)),
    isOpen: () => dup.isOpen,
    close,
    ref: (keepAlive) => (keepAlive ? dup.ref?.() : dup.unref?.()),
  };
}

export function nodeRedisAdapter(client: unknown): Adapter {
  if (isCluster(client)) {
    const nodeOf = async (key: string): Promise<NodeRedisClient> => {
      const slot = slotOf(key);
      const master = client.slots[slot]?.master ?? client.getSlotMaster?.(slot);
      if (master === undefined) throw new Error("the cluster's slots are not known yet (is it connected?)");
      return await client.nodeClient(master);
    };
    return {
      name: "node-redis cluster",
      send: (key, args) => client.sendCommand(key, false, strings(args)),
      connect: async (key, options = {}) => own(await nodeOf(key), options),
      route: (key) => {
        const master = client.slots[slotOf(key)]?.master as { host?: string; port?: number } | undefined;
        return master ? `${master.host}:${master.port}` : "";
      },
      address(key) {
        return this.route(key) || "the cluster";
      },
    };
  }
  if (isSentinel(client)) {
    return {
      name: "node-redis sentinel",
      send: (_key, args) => client.sendCommand(false, strings(args)),
      // A Sentinel object of its own (one master connection): it asks the Sentinels for the
      // master as it connects, and follows a failover by itself.
      connect: async (_key, options = {}) => {
        const dup = client.duplicate({ masterPoolSize: 1, reserveClient: false });
        dup.on("error", noop);
        const close = (): void => void Promise.resolve(dup.destroy()).catch(noop);
        await connecting(dup.connect(), options.timeout ?? CONNECT_TIMEOUT, close);
        return { send: (args) => dup.sendCommand(false, strings(args)), close, ref: noop };
      },
      route: () => "",
    };
  }
  if (isClient(client)) {
    return {
      name: "node-redis",
      send: (_key, args) => client.sendCommand(strings(args)),
      connect: (_key, options = {}) => own(client, options),
      route: () => "",
      address: () => {
        const socket = (client.options?.socket ?? {}) as { host?: string; port?: number; path?: string };
        return socket.path ?? `${socket.host ?? "localhost"}:${socket.port ?? 6379}`;
      },
    };
  }
  throw new TypeError("not a node-redis client");
}
