/**
 * The inventory scenario of the field reports: a stock of 100, 16 concurrent tasks in 4
 * processes selling one item per hold through `hold.guard("DECRBY", ...)` on a stock key in the
 * lock's slot, while the parent pauses the process of the current holder (read from LOCK.INFO:
 * the workers' owners start with their pid) with SIGSTOP for 400 ms, past the 300 ms lease (a GC
 * pause, swap), again and again; and each process freezes itself once mid-hold, past its lease
 * (inventory-worker.ts): exactly 100 sold, never 101, and the frozen holders' writes refused as
 * stale. Whether a SIGSTOP lands between a holder's GET and its write is the scheduler's
 * choice, so only the self-frozen writes are counted on. Once per Redis library.
 */
import assert from "node:assert/strict";
import { spawn } from "node:child_process";
import { test } from "node:test";
import { FLAVOURS, Server, sleep } from "./support.js";

const WORKER = new URL("./inventory-worker.js", import.meta.url).pathname;

for (const flavour of FLAVOURS) {
  test(`${flavour.name}: 100 in stock, 16 tasks in 4 processes, holders paused: exactly 100 sold`, async () => {
    const server = await Server.start();
    try {
      await server.cmd("SET", "{sku:9}:stock", 100);
      const workers = Array.from({ length: 4 }, () => {
        const child = spawn(process.execPath, [WORKER, flavour.name, String(server.port), "4"], {
          stdio: ["ignore", "pipe", "inherit"],
        });
        let out = "";
        child.stdout.on("data", (d: Buffer) => (out += d.toString()));
        const done = new Promise<{ sold: number; stale: number; froze: number }>((resolve, reject) =>
          child.on("exit", (code) =>
            code === 0 ? resolve(JSON.parse(out)) : reject(new Error(`worker exited ${code}: ${out}`)),
          ),
        );
        return { child, done, alive: true };
      });
      for (const w of workers) void w.done.finally(() => (w.alive = false)).catch(() => undefined);
      let pauses = 0;
      const deadline = performance.now() + 60_000;
      while (workers.some((w) => w.alive) && performance.now() < deadline) {
        const info = (await server.cmd("LOCK.INFO", "{sku:9}:lock")) as unknown[] | null;
        const pid = info ? Number(String(info[info.indexOf("owner") + 1]).split(":")[0]) : 0;
        const victim = workers.find((w) => w.child.pid === pid);
        if (victim?.alive && pauses < 8) {
          victim.child.kill("SIGSTOP"); // the holder, paused past its 300 ms lease
          pauses++;
          await sleep(400);
          victim.child.kill("SIGCONT");
        }
        await sleep(pauses === 0 ? 1 : 20); // until a holder has been paused, look often
      }
      for (const w of workers) w.child.kill("SIGCONT");
      const results = await Promise.all(workers.map((w) => w.done));
      const sold = results.reduce((n, r) => n + r.sold, 0);
      const stale = results.reduce((n, r) => n + r.stale, 0);
      const froze = results.reduce((n, r) => n + r.froze, 0);
      assert.equal(Number(await server.cmd("GET", "{sku:9}:stock")), 0);
      assert.equal(sold, 100, `sold ${sold}`);
      // The first hold of all found stock, so at least one process froze; each freeze makes one
      // stale write (the SIGSTOPs and late renewals may add more).
      assert.ok(froze > 0 && stale >= froze, `${froze} processes froze, ${stale} stale writes`);
      assert.ok(pauses > 0, "a holder was paused");
      console.log(
        `# ${flavour.name}: 100 sold, ${stale} guarded writes refused as stale, ${pauses} pauses, ${froze} freezes`,
        JSON.stringify(results),
      );
    } finally {
      server.stop();
    }
  });
}
