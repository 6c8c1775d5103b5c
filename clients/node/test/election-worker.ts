/**
 * One candidate of the election tests (election.test.ts), in a process of its own: it campaigns
 * on `key` as `identity` with a `ttl` ms lease and, while it leads, appends `identity:term` to
 * `<key>:writes` every 100 ms with `leadership.guard` (a fenced write). When it loses the
 * leadership it says so and sends one more fenced write with its old term to the server as it is
 * (`LOCK.GUARD key term ...` on its client, not answered from what the library knows): the server
 * must refuse it. Prints one JSON line per event, each with `at` (`Date.now()`): `leader` (term),
 * `lost` (reason, whether the signal aborted), `fenced` (ok, error), `resigned` (released),
 * `pong`, `error`. Reads commands on stdin: `campaign`, `resign`, `ping`.
 * argv: flavour port key identity ttl
 */
import { createInterface } from "node:readline";
import { Locks, StaleError, type Leadership } from "redis-lock-client";
import { FLAVOURS, sleep } from "./support.js";

const [name, port, key, identity, ttl] = process.argv.slice(2) as [string, string, string, string, string];
const flavour = FLAVOURS.find((f) => f.name === name)!;
const client = await flavour.client(Number(port));
const locks = new Locks(client);
const election = locks.election(key, { identity });
const writes = `${key}:writes`;
let leadership: Leadership | undefined;

const say = (event: Record<string, unknown>): void => console.log(JSON.stringify({ ...event, at: Date.now() }));

async function campaign(): Promise<void> {
  try {
    const l = await election.campaign({ ttl: Number(ttl) });
    leadership = l;
    say({ e: "leader", term: l.term });
    l.signal.addEventListener("abort", () => void lost(l), { once: true });
    void write(l);
  } catch (e) {
    say({ e: "error", error: String(e) });
  }
}

/** Fenced writes while this process leads. */
async function write(l: Leadership): Promise<void> {
  while (l.leading) {
    try {
      await l.guard("RPUSH", writes, `${identity}:${l.term}`);
    } catch (e) {
      if (!(e instanceof StaleError)) say({ e: "error", error: String(e) });
      return;
    }
    await sleep(100);
  }
}

async function lost(l: Leadership): Promise<void> {
  say({ e: "lost", reason: l.lostReason, aborted: l.signal.aborted, name: (l.signal.reason as Error).name });
  try {
    await locks.adapter.send(key, ["LOCK.GUARD", key, l.term, "RPUSH", writes, `${identity}:${l.term}:late`]);
    say({ e: "fenced", ok: true });
  } catch (e) {
    say({ e: "fenced", ok: false, error: (e as Error).message });
  }
}

createInterface({ input: process.stdin }).on("line", (line) => {
  if (line === "campaign") void campaign();
  else if (line === "ping") say({ e: "pong" });
  else if (line === "resign")
    void leadership!.resign().then(
      (released) => say({ e: "resigned", released }),
      (e: unknown) => say({ e: "error", error: String(e) }),
    );
});
say({ e: "ready" });
void campaign();
