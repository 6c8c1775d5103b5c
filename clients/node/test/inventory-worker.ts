/**
 * One process of the inventory scenario (inventory.test.ts): `tasks` concurrent tasks selling
 * one item per hold through `guard`, until the stock is gone. Prints {"sold": n, "stale": n}.
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

let holds = 0;

async function sell(): Promise<void> {
  for (;;) {
    // The owner names this process, so the parent can pause the holder (its pid) mid-hold.
    const owner = `${process.pid}:${++holds}`;
    await using hold = await locks.acquire("{sku:9}:lock", { ttl: 300, owner, raiseOnLost: false });
    const stock = Number(await locks.adapter.send("{sku:9}:stock", ["GET", "{sku:9}:stock"]));
    if (stock <= 0) return;
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
console.log(JSON.stringify({ sold, stale }));
locks.close();
await flavour.close(client);
