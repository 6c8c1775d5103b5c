/**
 * One observer of the election tests (election.test.ts), in a process of its own: prints each
 * leader `election.observe()` reports as a JSON line `{"e":"observed","leader":...,"at":...}`
 * (`leader`: `{identity, term}` or null; `at`: `Date.now()`).
 * argv: flavour port key
 */
import { Locks } from "redis-lock-client";
import { FLAVOURS } from "./support.js";

const [name, port, key] = process.argv.slice(2) as [string, string, string];
const flavour = FLAVOURS.find((f) => f.name === name)!;
const client = await flavour.client(Number(port));
const election = new Locks(client).election(key);
for await (const leader of election.observe()) {
  console.log(JSON.stringify({ e: "observed", leader, at: Date.now() }));
}
