/**
 * ioredis (v5 and later): a `Redis` (standalone, or Sentinel with `sentinels` and `name`) or a
 * `Cluster`. Typed structurally, so this package imports nothing of it.
 */
import { CONNECT_TIMEOUT, connecting, noop, type Adapter, type Connection, type ConnectOptions } from "./adapter.js";
import { isRetryableReply, slotOf, type Arg } from "./protocol.js";

interface IoRedis {
  options: { host?: string; port?: number; path?: string; name?: string; sentinels?: unknown[] };
  status: string;
  stream?: { ref?(): void; unref?(): void };
  call(command: string, ...args: Arg[]): Promise<unknown>;
  pipeline(): IoPipeline;
  duplicate(override?: Record<string, unknown>): IoRedis;
  connect(): Promise<void>;
  disconnect(reconnect?: boolean): void;
  on(event: string, listener: (...a: unknown[]) => void): unknown;
}

interface IoPipeline {
  call(command: string, ...args: Arg[]): unknown;
  exec(): Promise<[Error | null, unknown][] | null>;
}

interface IoCluster {
  slots: string[][];
  nodes(role?: string): IoRedis[];
  call(command: string, ...args: Arg[]): Promise<unknown>;
  refreshSlotsCache?(callback?: (err?: unknown) => void): void;
  connect(): Promise<void>;
  status: string;
}

const has = (x: unknown, ...names: string[]): boolean =>
  typeof x === "object" && x !== null && names.every((n) => typeof (x as Record<string, unknown>)[n] === "function");

const isCluster = (x: unknown): x is IoCluster => has(x, "call", "nodes") && Array.isArray((x as IoCluster).slots);
const isRedis = (x: unknown): x is IoRedis => has(x, "call", "duplicate", "disconnect") && "status" in (x as object);

export function isIoredis(x: unknown): boolean {
  return isCluster(x) || isRedis(x);
}

function addressOf(client: IoRedis): string {
  const o = client.options;
  if (o.sentinels?.length) return `the master ${o.name ?? ""} of the Sentinels`;
  return o.path ?? `${o.host ?? "localhost"}:${o.port ?? 6379}`;
}

/** A duplicate of `client` of this library's own, whatever the client's settings: no reconnects
 * and no command written before a broken link sent again (`autoResendUnfulfilledCommands:
 * false`: a release whose reply is lost is never sent twice), no command timeout (a wait takes as
 * long as the server does); through Sentinel, it asks the Sentinels for the master as it connects. */
async function own(client: IoRedis, options: ConnectOptions): Promise<Connection> {
  const connectTimeout = options.timeout ?? CONNECT_TIMEOUT;
  const dup = client.duplicate({
    lazyConnect: true,
    retryStrategy: () => null,
    sentinelRetryStrategy: () => null,
    reconnectOnError: null,
    autoResendUnfulfilledCommands: false,
    maxRetriesPerRequest: 0,
    enableOfflineQueue: true,
    commandTimeout: undefined,
    socketTimeout: undefined,
    connectTimeout,
    enableAutoPipelining: false,
    keepAlive: 0,
  });
  // Reported through the commands' rejections; a failed connect rejects with "Connection is
  // closed.", so its cause (connection refused, ...) is taken from this event.
  let failure: unknown;
  dup.on("error", (e: unknown) => (failure = e));
  const close = (): void => dup.disconnect(false);
  const connected = dup.connect().catch((e: unknown) => {
    throw failure ?? e;
  });
  await connecting(connected, connectTimeout + 100, close);
  return {
    send: (args) => dup.call(String(args[0]), ...args.slice(1)),
    pipeline: (commands) => pipelined(dup, commands),
    isOpen: () => dup.status === "ready",
    close,
    ref: (keepAlive) => (keepAlive ? dup.stream?.ref?.() : dup.stream?.unref?.()),
  };
}

/** `commands` in one ioredis `pipeline()` (no MULTI): one write, a promise per reply. */
function pipelined(client: IoRedis, commands: readonly (readonly Arg[])[]): Promise<unknown>[] {
  const pipeline = client.pipeline();
  for (const args of commands) pipeline.call(String(args[0]), ...args.slice(1));
  const replies = pipeline.exec();
  return commands.map((_, i) =>
    replies.then((rows) => {
      const [err, reply] = rows?.[i] ?? [new Error("Connection is closed."), undefined];
      if (err) throw err;
      return reply;
    }),
  );
}

export function ioredisAdapter(client: unknown): Adapter {
  if (isCluster(client)) {
    const nodeKey = (key: string): string | undefined => client.slots[slotOf(key)]?.[0];
    const nodeOf = async (key: string): Promise<IoRedis> => {
      if (nodeKey(key) === undefined && client.status !== "ready") await client.connect().catch(noop);
      const want = nodeKey(key);
      const node = client.nodes("master").find((n) => `${n.options.host}:${n.options.port}` === want);
      if (!node) throw new Error(`no connection to the master of slot ${slotOf(key)} yet`);
      return node;
    };
    const refresh = (): Promise<void> =>
      new Promise((resolve) => client.refreshSlotsCache?.(() => resolve()) ?? resolve());
    return {
      name: "ioredis cluster",
      // The cluster's own connection to the key's master (ioredis does not know the key of a
      // module's command); a moved slot refreshes the map and asks the new master, once.
      send: async (key, args) => {
        try {
          return await (await nodeOf(key)).call(String(args[0]), ...args.slice(1));
        } catch (e) {
          if (!isRetryableReply(e)) throw e;
          await refresh();
          return await (await nodeOf(key)).call(String(args[0]), ...args.slice(1));
        }
      },
      connect: async (key, options = {}) => own(await nodeOf(key), options),
      route: (key) => nodeKey(key) ?? "",
      address: (key) => nodeKey(key) ?? "the cluster",
    };
  }
  if (isRedis(client)) {
    return {
      name: "ioredis",
      send: (_key, args) => client.call(String(args[0]), ...args.slice(1)),
      connect: (_key, options = {}) => own(client, options),
      route: () => "",
      address: () => addressOf(client),
    };
  }
  throw new TypeError("not an ioredis client");
}
