/**
 * Real servers for the tests: a redis-server (or valkey-server) with the freshly built module on
 * a free loopback port (never 6379), stopped by PID. LOCK_TEST_SERVER picks the binary (default
 * redis-server), LOCK_MODULE the module (default ../../target/debug/libredis_lock.so).
 *
 * `FLAVOURS` are the two Redis libraries: every behaviour test runs once with each.
 */
import { spawn, type ChildProcess } from "node:child_process";
import { mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { connect, createServer, type Socket } from "node:net";
import { tmpdir } from "node:os";
import { dirname, join, resolve } from "node:path";
import { fileURLToPath } from "node:url";
import { Redis, Cluster } from "ioredis";
import { createClient, createCluster, createSentinel } from "redis";
import type { Arg } from "redis-lock-client";
import type { Adapter } from "./internals.js";

export const ROOT = resolve(dirname(fileURLToPath(import.meta.url)), "../../../..");
export const MODULE = process.env.LOCK_MODULE ?? join(ROOT, "target/debug/libredis_lock.so");
export const BINARY = process.env.LOCK_TEST_SERVER ?? "redis-server";

export const sleep = (ms: number): Promise<void> => new Promise((r) => setTimeout(r, ms));

/** Whether `port` can be bound on loopback now. */
function bindable(port: number): Promise<boolean> {
  return new Promise((resolve) => {
    const s = createServer();
    s.once("error", () => resolve(false));
    s.listen(port, "127.0.0.1", () => s.close(() => resolve(true)));
  });
}

/** A free port whose cluster bus port (port + 10000) is free and valid too. */
export async function freePort(): Promise<number> {
  for (;;) {
    const port = 20000 + Math.floor(Math.random() * 30000);
    if ((await bindable(port)) && (await bindable(port + 10000))) return port;
  }
}

/** Polls `cond` every `every` ms until it holds or `timeout` ms pass; whether it held. */
export async function eventually(cond: () => boolean | Promise<boolean>, timeout = 5000, every = 10): Promise<boolean> {
  const end = performance.now() + timeout;
  while (performance.now() < end) {
    try {
      if (await cond()) return true;
    } catch {
      // not yet
    }
    await sleep(every);
  }
  return !!(await cond());
}

export class Server {
  readonly dir = mkdtempSync(join(tmpdir(), "redislock-node-"));
  proc!: ChildProcess;
  admin!: Redis;
  constructor(
    readonly port: number,
    readonly args: string[],
  ) {}

  static start(...args: string[]): Promise<Server> {
    return Server.#start(["--loadmodule", MODULE, ...args]);
  }

  /** A server without the module. */
  static startPlain(): Promise<Server> {
    return Server.#start([]);
  }

  static async #start(args: string[]): Promise<Server> {
    const s = new Server(await freePort(), args);
    s.#spawn();
    s.admin = new Redis({
      port: s.port,
      host: "127.0.0.1",
      lazyConnect: true,
      maxRetriesPerRequest: 1,
      retryStrategy: () => 50,
    });
    s.admin.on("error", () => undefined);
    const up = await eventually(async () => (await s.admin.ping()) === "PONG", 10_000);
    if (!up) {
      s.stop();
      throw new Error(`${BINARY} with ${MODULE} did not start on ${s.port}`);
    }
    return s;
  }

  #spawn(): void {
    this.proc = spawn(
      BINARY,
      [
        ...["--port", String(this.port), "--bind", "127.0.0.1", "--dir", this.dir, "--save", "", "--appendonly", "no"],
        ...this.args,
      ],
      { stdio: "ignore" },
    );
  }

  /** `kill -9`, then the same server again: the same port, directory and arguments, so the same
   * data when it had any on disk (`--appendonly yes --appendfsync always`). */
  async restart(): Promise<void> {
    const gone = new Promise((resolve) => this.proc.once("exit", resolve));
    if (this.proc.exitCode === null && this.proc.signalCode === null) {
      this.proc.kill("SIGKILL");
      await gone;
    }
    this.#spawn();
    if (!(await eventually(async () => (await this.admin.ping()) === "PONG", 10_000))) {
      throw new Error(`${BINARY} did not start again on ${this.port}`);
    }
  }

  get pid(): number {
    return this.proc.pid ?? 0;
  }

  /** A command of the test's own (not through the library). */
  cmd(...args: (string | number)[]): Promise<unknown> {
    return this.admin.call(String(args[0]), ...args.slice(1));
  }

  async calls(command: string): Promise<number> {
    const info = String(await this.cmd("INFO", "commandstats"));
    const m = new RegExp(`cmdstat_${command.replace(".", "\\.")}:calls=(\\d+)`).exec(info);
    return m ? Number(m[1]) : 0;
  }

  async info(section: string, field: string): Promise<string> {
    const info = String(await this.cmd("INFO", section));
    return new RegExp(`^${field}:(.*)$`, "m").exec(info)?.[1]?.trim() ?? "";
  }

  /** How many clients wait in `key`'s queue, as LOCK.INFO says (0 when the lock is free). */
  async waiters(key: string): Promise<number> {
    const info = (await this.cmd("LOCK.INFO", key)) as unknown[] | null;
    if (!info) return 0;
    return Number(info[info.indexOf("waiters") + 1]);
  }

  /** The ms left of `key`'s first holder's lease, as LOCK.INFO says (undefined when free). */
  async leaseLeft(key: string): Promise<number | undefined> {
    const info = (await this.cmd("LOCK.INFO", key)) as unknown[] | null;
    return info ? Number(info[info.indexOf("ttl") + 1]) : undefined;
  }

  signal(sig: NodeJS.Signals): void {
    if (this.proc.exitCode === null) this.proc.kill(sig);
  }

  stop(): void {
    this.admin?.disconnect();
    if (this.proc.exitCode === null && this.proc.signalCode === null) {
      try {
        process.kill(this.pid, "SIGCONT");
      } catch {
        // gone
      }
      this.proc.kill("SIGKILL");
    }
    rmSync(this.dir, { recursive: true, force: true });
  }
}

/** A Redis library the tests run with: how to make its clients and close them. */
export interface Flavour {
  name: "node-redis" | "ioredis";
  client(port: number): Promise<unknown>;
  cluster(ports: number[]): Promise<unknown>;
  sentinel(ports: number[], name: string): Promise<unknown>;
  close(client: unknown): Promise<void>;
}

export const FLAVOURS: Flavour[] = [
  {
    name: "node-redis",
    async client(port) {
      const c = createClient({ socket: { host: "127.0.0.1", port } });
      c.on("error", () => undefined);
      await c.connect();
      return c;
    },
    async cluster(ports) {
      const c = createCluster({ rootNodes: ports.map((port) => ({ socket: { host: "127.0.0.1", port } })) });
      c.on("error", () => undefined);
      await c.connect();
      return c;
    },
    async sentinel(ports, name) {
      const c = createSentinel({ name, sentinelRootNodes: ports.map((port) => ({ host: "127.0.0.1", port })) });
      c.on("error", () => undefined);
      await c.connect();
      return c;
    },
    async close(client) {
      await (client as { destroy(): Promise<void> | void }).destroy();
    },
  },
  {
    name: "ioredis",
    async client(port) {
      const c = new Redis({ host: "127.0.0.1", port });
      c.on("error", () => undefined);
      await c.ping();
      return c;
    },
    async cluster(ports) {
      const c = new Cluster(ports.map((port) => ({ host: "127.0.0.1", port })));
      c.on("error", () => undefined);
      await c.ping();
      return c;
    },
    async sentinel(ports, name) {
      const c = new Redis({ sentinels: ports.map((port) => ({ host: "127.0.0.1", port })), name });
      c.on("error", () => undefined);
      await c.ping();
      return c;
    },
    async close(client) {
      (client as { disconnect(): void }).disconnect();
    },
  },
];

/** Clients made for one test, closed at its end. */
export class Clients {
  #made: unknown[] = [];
  constructor(readonly flavour: Flavour) {}
  async client(port: number): Promise<unknown> {
    const c = await this.flavour.client(port);
    this.#made.push(c);
    return c;
  }
  track<T>(c: T): T {
    this.#made.push(c);
    return c;
  }
  async close(): Promise<void> {
    for (const c of this.#made.splice(0)) await this.flavour.close(c).catch(() => undefined);
  }
}

/** A Redis Cluster of 3 masters on loopback (`redis-cli --cluster create`), as harness/src/cluster.rs. */
export class ClusterServers {
  constructor(readonly nodes: Server[]) {}

  static async start(): Promise<ClusterServers> {
    const args = ["--cluster-enabled", "yes", "--cluster-config-file", "nodes.conf", "--cluster-node-timeout", "2000"];
    const nodes = await Promise.all([0, 1, 2].map(() => Server.start(...args)));
    const c = new ClusterServers(nodes);
    try {
      const { spawnSync } = await import("node:child_process");
      const out = spawnSync(
        "redis-cli",
        ["--cluster", "create", ...nodes.map((n) => `127.0.0.1:${n.port}`), "--cluster-replicas", "0", "--cluster-yes"],
        { encoding: "utf8", timeout: 60_000 },
      );
      if (out.status !== 0) throw new Error(`cluster create: ${out.stdout}${out.stderr}`);
      for (const n of nodes) {
        const ok = await eventually(
          async () => String(await n.cmd("CLUSTER", "INFO")).includes("cluster_state:ok"),
          30_000,
        );
        if (!ok) throw new Error("the cluster never became ok");
      }
    } catch (e) {
      c.stop();
      throw e;
    }
    return c;
  }

  get ports(): number[] {
    return this.nodes.map((n) => n.port);
  }

  /** The node that serves `key`'s slot. */
  async ownerOf(key: string): Promise<Server> {
    const slot = Number(await this.nodes[0]!.cmd("CLUSTER", "KEYSLOT", key));
    for (const n of this.nodes) {
      const lines = String(await n.cmd("CLUSTER", "NODES")).split("\n");
      const mine = lines.find((l) => l.includes("myself"));
      const serves = mine
        ?.split(" ")
        .slice(8)
        .some((spec) => {
          const [lo, hi = lo] = spec.split("-").map(Number);
          return lo! <= slot && slot <= hi!;
        });
      if (serves) return n;
    }
    throw new Error(`nobody serves ${key}`);
  }

  stop(): void {
    for (const n of this.nodes) n.stop();
  }
}

/** One Sentinel (`<server> sentinel.conf --sentinel`) watching `masterPort`. */
export class SentinelProcess {
  readonly dir = mkdtempSync(join(tmpdir(), "redislock-node-sentinel-"));
  proc!: ChildProcess;
  constructor(readonly port: number) {}

  static async start(masterPort: number, name: string): Promise<SentinelProcess> {
    const s = new SentinelProcess(await freePort());
    const conf = join(s.dir, "sentinel.conf");
    writeFileSync(
      conf,
      `port ${s.port}\nbind 127.0.0.1\nprotected-mode no\ndir ${s.dir}\n` +
        `sentinel monitor ${name} 127.0.0.1 ${masterPort} 2\n` +
        `sentinel down-after-milliseconds ${name} 1000\nsentinel failover-timeout ${name} 3000\n`,
    );
    s.proc = spawn(BINARY, [conf, "--sentinel"], { stdio: "ignore" });
    return s;
  }

  stop(): void {
    if (this.proc.exitCode === null && this.proc.signalCode === null) this.proc.kill("SIGKILL");
    rmSync(this.dir, { recursive: true, force: true });
  }
}

/** A master and a replica (each with the module) and three Sentinels watching them, as
 * clients/python/tests/test_sentinel.py and harness/src/sentinel.rs. */
export class SentinelDeployment {
  static readonly NAME = "lockm";
  servers: Server[] = [];
  sentinels: SentinelProcess[] = [];

  static async start(): Promise<SentinelDeployment> {
    const d = new SentinelDeployment();
    try {
      const master = await Server.start("--repl-diskless-sync-delay", "0");
      d.servers.push(master);
      d.servers.push(
        await Server.start("--replicaof", "127.0.0.1", String(master.port), "--repl-diskless-sync-delay", "0"),
      );
      for (let i = 0; i < 3; i++) d.sentinels.push(await SentinelProcess.start(master.port, SentinelDeployment.NAME));
      if (
        !(await eventually(async () => (await d.replica.info("replication", "master_link_status")) === "up", 20_000))
      ) {
        throw new Error("the replica never synced");
      }
      const ready = await eventually(async () => {
        for (const s of d.sentinels) {
          const fields = (await d.ask(s.port, "SENTINEL", "MASTER", SentinelDeployment.NAME)) as string[];
          const get = (f: string): string => fields[fields.indexOf(f) + 1] ?? "";
          if (get("num-other-sentinels") !== "2" || get("num-slaves") !== "1") return false;
        }
        return true;
        // Hellos every 2 s, the replica from the master's INFO: seconds when idle; 90 s for a
        // loaded machine (the Python twin of this wait once took more than 30 beside a soak).
      }, 90_000);
      if (!ready) throw new Error("the Sentinels never saw the replica and each other");
    } catch (e) {
      d.stop();
      throw e;
    }
    return d;
  }

  get master(): Server {
    return this.servers[0]!;
  }

  get replica(): Server {
    return this.servers[1]!;
  }

  get sentinelPorts(): number[] {
    return this.sentinels.map((s) => s.port);
  }

  /** One command to the process on `port`, on a connection of its own. */
  async ask(port: number, ...args: string[]): Promise<unknown> {
    const c = new Redis({
      port,
      host: "127.0.0.1",
      lazyConnect: true,
      maxRetriesPerRequest: 0,
      retryStrategy: () => null,
    });
    c.on("error", () => undefined);
    try {
      return await c.call(args[0]!, ...args.slice(1));
    } finally {
      c.disconnect();
    }
  }

  killMaster(): void {
    this.master.proc.kill("SIGKILL");
  }

  /** Wait until every Sentinel names the replica; the ms it took. */
  async failover(timeout = 30_000): Promise<number> {
    const started = performance.now();
    const named = await eventually(async () => {
      for (const s of this.sentinels) {
        const addr = (await this.ask(
          s.port,
          "SENTINEL",
          "GET-MASTER-ADDR-BY-NAME",
          SentinelDeployment.NAME,
        )) as string[];
        if (Number(addr[1]) !== this.replica.port) return false;
      }
      return true;
    }, timeout);
    if (!named) throw new Error("no failover");
    return performance.now() - started;
  }

  stop(): void {
    for (const s of this.sentinels) s.stop();
    for (const s of this.servers) s.stop();
  }
}

/** A TCP service on loopback that is not Redis: `garbage` answers every request with an HTTP
 * error, `silent` accepts and never answers. */
export class FakeService {
  readonly #sockets = new Set<Socket>();
  readonly #server = createServer((socket) => {
    this.#sockets.add(socket);
    socket.on("close", () => this.#sockets.delete(socket));
    socket.on("error", () => undefined);
    if (this.kind === "garbage") {
      socket.on("data", () => socket.write("HTTP/1.1 400 Bad Request\r\ncontent-length: 0\r\n\r\n"));
    }
  });
  port = 0;
  constructor(readonly kind: "garbage" | "silent") {}

  static async start(kind: "garbage" | "silent"): Promise<FakeService> {
    const s = new FakeService(kind);
    await new Promise<void>((resolve) => s.#server.listen(0, "127.0.0.1", resolve));
    s.port = (s.#server.address() as { port: number }).port;
    return s;
  }

  stop(): void {
    for (const socket of this.#sockets) socket.destroy();
    this.#server.close();
  }
}

/** A client of `flavour` for `port` that is not awaited to connect (the server may not be
 * there): node-redis starts connecting in the background, ioredis by itself. */
export function unconnected(flavour: Flavour, port: number): unknown {
  if (flavour.name === "ioredis") {
    const c = new Redis({ host: "127.0.0.1", port });
    c.on("error", () => undefined);
    return c;
  }
  const c = createClient({ socket: { host: "127.0.0.1", port } });
  c.on("error", () => undefined);
  void c.connect().catch(() => undefined);
  return c;
}

/** The real adapter, with every command it sends (on the client or its own connections) noted
 * in `sent`; `onSend` runs before each is sent, and `afterReply` may hold a reply back. */
export function recording(
  real: Adapter,
  sent: Arg[][],
  hooks: { onSend?: (args: readonly Arg[]) => void; afterReply?: (args: readonly Arg[]) => Promise<void> } = {},
): Adapter {
  const send = async (args: readonly Arg[], real: (args: readonly Arg[]) => Promise<unknown>): Promise<unknown> => {
    sent.push([...args]);
    hooks.onSend?.(args);
    const reply = await real(args);
    await hooks.afterReply?.(args);
    return reply;
  };
  return {
    name: real.name,
    route: (key) => real.route(key),
    address: (key) => real.address?.(key) ?? real.name,
    send: (key, args) => send(args, (a) => real.send(key, a)),
    connect: async (key, options) => {
      const conn = await real.connect(key, options);
      return { send: (args) => send(args, (a) => conn.send(a)), close: () => conn.close(), ref: (k) => conn.ref(k) };
    },
  };
}

/** What `ReplyDropper` does with the first command holding every one of its words. */
export type ReplyMode =
  /** Forwarded; its link closed instead of passing its reply on (a reply lost with the link). */
  | { drop: true }
  /** Forwarded at once; its reply, and what follows it on that link, passed on `holdFor` ms later. */
  | { holdFor: number }
  /** Never forwarded: answered `reply` (a RESP error, say) by the proxy itself, then `then` runs.
   * Only for a command alone on its link: the replies of commands in flight before it would come
   * after this one. */
  | { refuse: string; then?: () => void };

/** A TCP proxy on loopback to `target` that forwards everything, except the reply to the first
 * command containing every one of `words` in one write (a command's name and an argument's RESP
 * bytes, say), with which it does what `mode` says: by default the server runs it, and the proxy
 * closes the client's link instead of passing its reply on (a reply lost with the link). */
export class ReplyDropper {
  readonly #sockets = new Set<Socket>();
  /** The matching command was met (its reply dropped, held or replaced). */
  dropped = false;
  readonly #server = createServer((client) => {
    const upstream = connect(this.target, "127.0.0.1");
    let dropNext = false;
    /** While a reply is held: what came from the server meanwhile, passed on in order later. */
    let held: Buffer[] | undefined;
    for (const s of [client, upstream]) {
      this.#sockets.add(s);
      s.on("error", () => undefined);
      s.on("close", () => {
        this.#sockets.delete(s);
        client.destroy();
        upstream.destroy();
      });
    }
    client.on("data", (d: Buffer) => {
      const hit = !this.dropped && this.words.every((word) => d.includes(word));
      if (hit && "refuse" in this.mode) {
        const { refuse, then } = this.mode;
        this.dropped = true;
        client.write(refuse);
        return void then?.();
      }
      if (hit) dropNext = true;
      upstream.write(d);
    });
    upstream.on("data", (d: Buffer) => {
      if (held) return void held.push(d);
      if (!dropNext) return void client.write(d);
      dropNext = false;
      this.dropped = true;
      if ("holdFor" in this.mode) {
        const queued = (held = [d]);
        return void setTimeout(() => {
          held = undefined;
          for (const b of queued) client.write(b);
        }, this.mode.holdFor);
      }
      client.destroy();
      upstream.destroy();
    });
  });
  port = 0;
  constructor(
    readonly target: number,
    readonly words: readonly string[],
    readonly mode: ReplyMode = { drop: true },
  ) {}

  static async start(target: number, ...words: string[]): Promise<ReplyDropper> {
    return await ReplyDropper.with(target, { drop: true }, ...words);
  }

  static async with(target: number, mode: ReplyMode, ...words: string[]): Promise<ReplyDropper> {
    const p = new ReplyDropper(target, words, mode);
    await new Promise<void>((resolve) => p.#server.listen(0, "127.0.0.1", resolve));
    p.port = (p.#server.address() as { port: number }).port;
    return p;
  }

  stop(): void {
    for (const socket of this.#sockets) socket.destroy();
    this.#server.close();
  }
}

/** A TCP proxy on loopback to `target` whose link can go down: `down()` closes every connection
 * through it and refuses new ones (each is closed as it comes) until `up()`. */
export class Cutter {
  readonly #sockets = new Set<Socket>();
  #down = false;
  readonly #server = createServer((client) => {
    client.on("error", () => undefined);
    if (this.#down) return void client.destroy();
    const upstream = connect(this.target, "127.0.0.1");
    for (const s of [client, upstream]) {
      this.#sockets.add(s);
      s.on("error", () => undefined);
      s.on("close", () => {
        this.#sockets.delete(s);
        client.destroy();
        upstream.destroy();
      });
    }
    client.pipe(upstream);
    upstream.pipe(client);
  });
  port = 0;
  constructor(readonly target: number) {}

  static async start(target: number): Promise<Cutter> {
    const p = new Cutter(target);
    await new Promise<void>((resolve) => p.#server.listen(0, "127.0.0.1", resolve));
    p.port = (p.#server.address() as { port: number }).port;
    return p;
  }

  down(): void {
    this.#down = true;
    for (const socket of this.#sockets) socket.destroy();
  }

  up(): void {
    this.#down = false;
  }

  stop(): void {
    this.down();
    this.#server.close();
  }
}
