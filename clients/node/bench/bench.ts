/**
 * `make bench` (bench-node): 32 tasks in one process take one lock in turn, hold it 1 ms and let
 * it go, for BENCH_SECONDS (default 8) per contender, in one run against one server with the
 * release build of the module:
 *
 *   redis-lock-client  `locks.acquire(key)` waits in the server's FIFO queue
 *   redlock            node-redlock 5.0.0-beta.2, single instance, retrying every 10 ms
 *                      (± 5 ms jitter, without limit: tuned for this load; its defaults are
 *                      200 ms ± 200 and give up after 10 tries)
 *
 * on the same ioredis client (redlock's only kind), plus redis-lock-client on node-redis. Prints
 * grants/s, Jain's fairness index over the tasks' grant counts (1 = all equal), the p99 of the
 * time from asking to holding, and the ratios against redlock. Bounded: about 30 s in all.
 */
import { Redis } from "ioredis";
import { createClient } from "redis";
import Redlock from "redlock";
import { Locks } from "redis-lock-client";
import { Server, sleep } from "../test/support.js";

const TASKS = 32;
const HOLD_MS = 1;
const SECONDS = Number(process.env.BENCH_SECONDS ?? 8);

interface Result {
  name: string;
  grants: number;
  perSecond: number;
  jain: number;
  p50: number;
  p99: number;
  overlaps: number;
}

type Take = () => Promise<() => Promise<unknown>>;

/** `TASKS` tasks looping take -> hold 1 ms -> release until the time is up. */
async function run(name: string, take: Take): Promise<Result> {
  const counts = new Array<number>(TASKS).fill(0);
  const waits: number[] = [];
  let inside = 0;
  let overlaps = 0;
  const started = performance.now();
  const end = started + SECONDS * 1000;
  await Promise.all(
    counts.map(async (_, i) => {
      while (performance.now() < end) {
        const asked = performance.now();
        const release = await take();
        waits.push(performance.now() - asked);
        if (++inside > 1) overlaps++;
        await sleep(HOLD_MS);
        inside--;
        await release();
        counts[i]!++;
      }
    }),
  );
  const took = (performance.now() - started) / 1000;
  const grants = counts.reduce((a, b) => a + b, 0);
  const jain = grants ** 2 / (TASKS * counts.reduce((a, b) => a + b * b, 0));
  waits.sort((a, b) => a - b);
  const q = (p: number): number => waits[Math.min(waits.length - 1, Math.floor(p * waits.length))] ?? NaN;
  return { name, grants, perSecond: grants / took, jain, p50: q(0.5), p99: q(0.99), overlaps };
}

const server = await Server.start();
try {
  const io = new Redis({ port: server.port, host: "127.0.0.1" });
  const nr = await createClient({ socket: { port: server.port, host: "127.0.0.1" } }).connect();
  const ours = new Locks(io, { idleConnections: TASKS });
  const oursNr = new Locks(nr, { idleConnections: TASKS });
  const redlock = new Redlock([io], { retryCount: -1, retryDelay: 10, retryJitter: 5 }) as unknown as {
    acquire(r: string[], d: number): Promise<{ release(): Promise<unknown> }>;
  };

  const results: Result[] = [];
  results.push(
    await run("redis-lock-client (ioredis)", async () => {
      const hold = await ours.acquire("bench:ours", { ttl: 5000 });
      return () => hold.release();
    }),
  );
  results.push(
    await run("redis-lock-client (node-redis)", async () => {
      const hold = await oursNr.acquire("bench:ours-nr", { ttl: 5000 });
      return () => hold.release();
    }),
  );
  results.push(
    await run("redlock (ioredis, single instance)", async () => {
      const lock = await redlock.acquire(["bench:redlock"], 5000);
      return () => lock.release();
    }),
  );

  const base = results[results.length - 1]!;
  const pad = (s: string, n: number): string => s.padEnd(n);
  console.log(
    `\n${TASKS} tasks, one lock, ${HOLD_MS} ms holds, ${SECONDS} s each, ${process.env.LOCK_TEST_SERVER ?? "redis-server"}\n`,
  );
  console.log(
    pad("", 36) + pad("grants/s", 11) + pad("Jain", 8) + pad("wait p50", 11) + pad("wait p99", 11) + "overlaps",
  );
  for (const r of results) {
    console.log(
      pad(r.name, 36) +
        pad(r.perSecond.toFixed(0), 11) +
        pad(r.jain.toFixed(3), 8) +
        pad(`${r.p50.toFixed(1)} ms`, 11) +
        pad(`${r.p99.toFixed(1)} ms`, 11) +
        r.overlaps,
    );
  }
  console.log("\nagainst redlock:");
  for (const r of results.slice(0, -1)) {
    console.log(
      `  ${pad(r.name, 34)} grants/s x${(r.perSecond / base.perSecond).toFixed(2)}, ` +
        `Jain x${(r.jain / base.jain).toFixed(2)}, wait p99 x${(r.p99 / base.p99).toFixed(3)} (${(base.p99 / r.p99).toFixed(1)} times shorter)`,
    );
  }
  if (results.some((r) => r.overlaps > 0)) throw new Error("two holders at once");
  ours.close();
  oursNr.close();
  io.disconnect();
  await nr.quit();
} finally {
  server.stop();
}
