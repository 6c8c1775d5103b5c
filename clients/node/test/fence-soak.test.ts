/**
 * The inventory of the field reports, end to end through `fenced`, once per database: 4 worker
 * processes (fence-worker.ts, two on node-redis, two on ioredis) sell 100 units, one per hold
 * with a 300 ms lease. Holders are SIGSTOPped past their lease: each worker stops itself inside
 * its transaction once (after its read, on a sale it is told), and the test stops the current
 * holder at random moments; any worker stopped for 2 leases is resumed (SIGCONT). Asserted: every
 * process exits 0, the sales recorded plus the quantity left make 100, nothing oversold, the
 * workers' own counts add up to the sales recorded, and the sales' tokens never go down in the
 * order they were recorded. Not asserted: how many holds went stale or changed hands (the
 * scheduler decides). Bounded: 60 s, then the workers are killed by PID.
 */
import assert from "node:assert/strict";
import { spawn, type ChildProcess } from "node:child_process";
import { readFileSync } from "node:fs";
import { test } from "node:test";
import { KINDS, LABELS, shop, withServerAndStores, type Store } from "./databases.js";
import type { WorkerConfig } from "./fence-worker.js";
import { FLAVOURS, sleep } from "./support.js";

const WORKER = new URL("./fence-worker.js", import.meta.url).pathname;
const SKU = "sku9";
const TTL = 300;
const WORKERS = 4;
const RANDOM_PAUSES = 4;
const DEADLINE = 60_000;

interface Worker {
  child: ChildProcess;
  done: Promise<{ sold: number; stale: number; retried: number; stopped: boolean }>;
  alive: boolean;
  stoppedSince?: number | undefined;
}

function spawnWorker(config: WorkerConfig): Worker {
  const child = spawn(process.execPath, [WORKER, JSON.stringify(config)], { stdio: ["ignore", "pipe", "inherit"] });
  let out = "";
  child.stdout!.on("data", (d: Buffer) => (out += d.toString()));
  const w: Worker = {
    child,
    alive: true,
    done: new Promise((resolve, reject) =>
      child.on("exit", (code, signal) => {
        w.alive = false;
        if (code === 0) resolve(JSON.parse(out));
        else reject(new Error(`worker ${child.pid} exited ${code ?? signal}: ${out}`));
      }),
    ),
  };
  w.done.catch(() => undefined);
  return w;
}

/** The process state of /proc/PID/stat ("T": stopped by a signal), or undefined once it is gone. */
function stateOf(pid: number): string | undefined {
  try {
    const stat = readFileSync(`/proc/${pid}/stat`, "utf8");
    return stat.slice(stat.lastIndexOf(")") + 2, stat.lastIndexOf(")") + 3);
  } catch {
    return undefined;
  }
}

const live = withServerAndStores();

for (const kind of KINDS) {
  test(
    `${LABELS[kind]}: 4 processes sell 100 through fenced, holders SIGSTOPped past their lease: sold + left = 100`,
    { timeout: DEADLINE + 30_000 },
    async () => {
      const store = live.stores.get(kind)!;
      const t = await shop(store, SKU, 100);
      const key = `{${t.stock}}:lock`;
      const workers = Array.from({ length: WORKERS }, (_, i) =>
        spawnWorker({
          kind,
          url: store.db.url,
          port: live.server.port,
          flavour: FLAVOURS[i % FLAVOURS.length]!.name,
          key,
          sku: SKU,
          ...t,
          ttl: TTL,
          stopAt: 3 + i, // its 3rd, 4th, ... read
        }),
      );
      let pauses = 0;
      let resumed = 0;
      try {
        const deadline = performance.now() + DEADLINE;
        let nextPause = performance.now() + 200 + Math.random() * 400;
        while (workers.some((w) => w.alive)) {
          const now = performance.now();
          assert.ok(now < deadline, `the soak did not end in ${DEADLINE} ms`);
          for (const w of workers) {
            if (w.alive && stateOf(w.child.pid!) === "T") {
              w.stoppedSince ??= now;
              if (now - w.stoppedSince >= 2 * TTL) {
                w.child.kill("SIGCONT");
                w.stoppedSince = undefined;
                resumed++;
              }
            } else {
              w.stoppedSince = undefined;
            }
          }
          if (pauses < RANDOM_PAUSES && now >= nextPause) {
            const info = (await live.server.cmd("LOCK.INFO", key)) as unknown[] | null;
            const pid = info ? Number(String(info[info.indexOf("owner") + 1]).split(":")[0]) : 0;
            const holder = workers.find((w) => w.child.pid === pid && w.alive && w.stoppedSince === undefined);
            if (holder) {
              holder.child.kill("SIGSTOP"); // the holder, wherever it is: in its transaction or not
              pauses++;
              nextPause = now + 200 + Math.random() * 400;
            }
          }
          await sleep(25);
        }
        const reports = await Promise.all(workers.map((w) => w.done));
        const left = Number((await store.query(`SELECT qty FROM ${t.stock} WHERE sku = ?`, [SKU]))[0]?.qty);
        const sales = await store.query(`SELECT token FROM ${t.sales} ORDER BY id`);
        const reported = reports.reduce((n, r) => n + r.sold, 0);
        assert.ok(left >= 0, `${left} left: oversold`);
        assert.equal(sales.length + left, 100, `${sales.length} sales recorded and ${left} left`);
        assert.equal(reported, sales.length, `the workers report ${reported} sales, ${sales.length} recorded`);
        const tokens = sales.map((r) => Number(r.token));
        for (let i = 1; i < tokens.length; i++) {
          assert.ok(tokens[i]! >= tokens[i - 1]!, `sale ${i} has token ${tokens[i]} after ${tokens[i - 1]}`);
        }
        console.log(
          `# ${LABELS[kind]}: ${sales.length} sold, ${left} left; ${pauses} random pauses, ${resumed} resumed`,
          JSON.stringify(reports),
        );
      } finally {
        for (const w of workers) {
          if (w.alive) {
            w.child.kill("SIGCONT");
            w.child.kill("SIGKILL");
          }
        }
      }
    },
  );
}
