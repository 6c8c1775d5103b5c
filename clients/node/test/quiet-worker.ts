/**
 * Rule 18: a process that takes holds (one released, one lost to an operator), closes its `Locks`
 * and then its Redis client, and prints nothing but "done": parity.test.ts reads its output.
 * argv: flavour port
 */
import { Locks } from "redis-lock-client";
import { FLAVOURS } from "./support.js";

const [name, port] = process.argv.slice(2);
const flavour = FLAVOURS.find((f) => f.name === name)!;
const client = await flavour.client(Number(port));
const locks = new Locks(client);
const kept = await locks.acquire("quiet", { ttl: 600 });
const taken = await locks.acquire("quiet2", { ttl: 600 });
await locks.adapter.send("quiet2", ["LOCK.FORCERELEASE", "quiet2"]);
await taken.lost;
await (await locks.acquire("quiet3", { wait: 1000 })).release();
await kept.release();
await taken.release();
locks.close();
await flavour.close(client);
console.log("done");
