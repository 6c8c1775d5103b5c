/**
 * A process that takes a hold with its watchdog on, lets it renew, closes its Redis client and
 * then does nothing: it must exit by itself while the hold lives (locks.test.ts).
 * argv: flavour port
 */
import { Locks } from "redis-lock-client";
import { FLAVOURS, eventually } from "./support.js";

const [name, port] = process.argv.slice(2);
const flavour = FLAVOURS.find((f) => f.name === name)!;
const client = await flavour.client(Number(port));
const locks = new Locks(client);
const renewals = async (): Promise<number> => {
  const info = String(await locks.adapter.send("alive", ["INFO", "commandstats"]));
  return Number(/cmdstat_lock\.extend:calls=(\d+)/.exec(info)?.[1] ?? 0);
};
const before = await renewals();
// A 6 s lease: it outlives this process by seconds, so the test finds it still held.
const hold = await locks.acquire("alive", { ttl: 6000 });
// The first renewal (2 s in): from then on the watchdog's connection is open.
await eventually(async () => (await renewals()) > before, 10_000, 50);
console.log(`renewed ${(await renewals()) - before} token ${hold.token}`);
await flavour.close(client);
locks.close();
