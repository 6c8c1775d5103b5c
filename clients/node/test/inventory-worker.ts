/**
 * One process of the inventory scenario (inventory.test.ts): `tasks` concurrent tasks selling
 * one item per hold through `guard`, until the stock is gone. The first hold that finds stock
 * freezes the whole process once, mid-hold, past its lease (a long GC pause): its write is then
 * refused as stale for certain, whether or not the parent's SIGSTOPs land mid-hold.
 * Prints {"sold": n, "stale": n, "froze": 0 or 1}.
 * argv: flavour port tasks
 */
import { Locks, StaleError } from "redis-lock-client";
import { FLAVOURS, sleep } from "./support.js";

const [name, port, tasks] = process.argv.slice(2);
const flavour = FLAVOURS.find((f) => f.name === name)!;
const client = await flavour.client(Number(port));
const locks = new Locks(client);
let sold = 0;
let stale = 0;
let froze = 0;
/** The lease of each hold, and how long the process freezes itself: 300 ms past the lease. */
const TTL = 300;
const FREEZE = 600;

let holds = 0;

async function sell(): Promise<void> {
  for (;;) {
    // The owner names this process, so the parent can pause the holder (its pid) mid-hold.
    const owner = `${process.pid}:${++holds}`;
    await using hold = await locks.acquire("{sku:9}:lock", { ttl: TTL, owner, raiseOnLost: false });
    const stock = Number(await locks.adapter.send("{sku:9}:stock", ["GET", "{sku:9}:stock"]));
    if (stock <= 0) return;
    if (froze === 0) {
      froze = 1;
      // Stop the world: no timer, no renewal, nothing runs. The last renewal was sent before,
      // so the lease ends at most TTL after the freeze began; the 300 ms past it cover the
      // server taking that renewal late.
      Atomics.wait(new Int32Array(new SharedArrayBuffer(4)), 0, 0, FREEZE);
    }
    await sleep(5); // the parent may SIGSTOP this process here, past the lease
    try {
      await hold.guard("DECRBY", "{sku:9}:stock", 1);
      sold++;
    } catch (e) {
      if (!(e instanceof StaleError)) throw e;
      stale++;
    }
  }
}

await Promise.all(Array.from({ length: Number(tasks) }, sell));
console.log(JSON.stringify({ sold, stale, froze }));
locks.close();
await flavour.close(client);
