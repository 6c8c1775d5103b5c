/**
 * Real servers for the tests: a redis-server (or valkey-server) with the freshly built module on
 * a free loopback port (never 6379), stopped by PID. LOCK_TEST_SERVER picks the binary (default
 * redis-server), LOCK_MODULE the module (default ../../target/debug/libredis_lock.so).
 *
 * `FLAVOURS` are the two Redis libraries: every behaviour test runs once with each.
 */
import { spawn, type ChildProcess } from "node:child_process";
import { mkdtempSync, rmSync } from "node:fs";
import { createServer } from "node:net";
import { tmpdir } from "node:os";
import { dirname, join, resolve } from "node:path";
import { fileURLToPath } from "node:url";
import { Redis, Cluster } from "ioredis";
import { createClient, createCluster, createSentinel } from "redis";

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

/** Polls `cond` every 10 ms until it holds or `timeout` ms pass; whether it held. */
export async function eventually(cond: () => boolean | Promise<boolean>, timeout = 5000): Promise<boolean> {
  const end = performance.now() + timeout;
  while (performance.now() < end) {
    try {
      if (await cond()) return true;
    } catch {
      // not yet
    }
    await sleep(10);
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
    s.proc = spawn(BINARY, ["--port", String(s.port), "--bind", "127.0.0.1", "--dir", s.dir, "--save", "", "--appendonly", "no", ...args], {
      stdio: "ignore",
    });
    s.admin = new Redis({ port: s.port, host: "127.0.0.1", lazyConnect: true, maxRetriesPerRequest: 1, retryStrategy: () => 50 });
    s.admin.on("error", () => undefined);
    const up = await eventually(async () => (await s.admin.ping()) === "PONG", 10_000);
    if (!up) {
      s.stop();
      throw new Error(`${BINARY} with ${MODULE} did not start on ${s.port}`);
    }
    return s;
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
