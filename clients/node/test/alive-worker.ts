/**
 * A process that takes a hold with its watchdog on, lets it renew, closes its Redis client and
 * then does nothing: it must exit by itself while the hold lives (locks.test.ts).
 * argv: flavour port
 */
import { Locks } from "redis-lock-client";
import { FLAVOURS, sleep } from "./support.js";

const [name, port] = process.argv.slice(2);
const flavour = FLAVOURS.find((f) => f.name === name)!;
const client = await flavour.client(Number(port));
const locks = new Locks(client);
const hold = await locks.acquire("alive", { ttl: 1500 });
await sleep(700); // one renewal (every 500 ms): the watchdog's connection is open
const info = String(await locks.adapter.send("alive", ["INFO", "commandstats"]));
console.log(`renewed ${/cmdstat_lock\.extend:calls=(\d+)/.exec(info)?.[1] ?? 0} token ${hold.token}`);
await flavour.close(client);
locks.close();
