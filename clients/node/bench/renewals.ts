/**
 * docs/clients.md rule 6, measured (scripts/bench_renewals.py runs `bench/renewals`, which builds
 * and runs this): one `Locks` keeps N holds alive with its one renewal loop.
 *
 *   clients/node/bench/renewals --port P --holds N --ttl-ms T --seconds S
 *
 * On 127.0.0.1:P: one client (ioredis; RENEWALS_LIBRARY=node-redis for node-redis) and its
 * `Locks`, one PING, then `connected_clients` (INFO, on a connection of this program's own kept
 * open all along); N holds `renew:<i>` (`tryAcquire`, the watchdog on), `connected_clients`
 * sampled every second for S seconds (the most kept); each renewal's lag (its reply's arrival
 * minus when it fell due) from the library's `diagnostics_channel`; then hold 0 released, two
 * renewal periods waited, the others checked live here and on the server, all released. Prints
 * one JSON line last.
 */
import { subscribe } from "node:diagnostics_channel";
import { parseArgs } from "node:util";
import { Redis } from "ioredis";
import { createClient } from "redis";
import { Locks, type Hold } from "redis-lock-client";

/** The library's renewal channel (loop.ts): `{ key, lag }` per renewal answered. */
const RENEWAL_CHANNEL = "redis-lock-client:renewal";

const sleep = (ms: number): Promise<void> => new Promise((r) => setTimeout(r, ms));

const { values } = parseArgs({
  options: {
    port: { type: "string" },
    holds: { type: "string", default: "1000" },
    "ttl-ms": { type: "string", default: "3000" },
    seconds: { type: "string", default: "30" },
  },
});
const port = Number(values.port);
const holdCount = Number(values.holds);
const ttl = Number(values["ttl-ms"]);
const seconds = Number(values.seconds);
const library = process.env.RENEWALS_LIBRARY ?? "ioredis";

/** The application's client, its first command sent; and how to close it. */
async function client(): Promise<{ client: unknown; close: () => Promise<void> }> {
  if (library === "node-redis") {
    const c = createClient({ socket: { host: "127.0.0.1", port } });
    await c.connect();
    await c.ping();
    return { client: c, close: async () => void (await c.quit()) };
  }
  const c = new Redis({ host: "127.0.0.1", port });
  await c.ping();
  return { client: c, close: async () => void c.disconnect() };
}

const admin = new Redis({ host: "127.0.0.1", port });
const connected = async (): Promise<number> =>
  Number(/^connected_clients:(\d+)/m.exec(String(await admin.info("clients")))?.[1]);

/** Whether every hold of `holds` is the live holder of its key on the server. */
async function liveOnServer(holds: Hold[]): Promise<boolean> {
  for (let i = 0; i < holds.length; i += 1000) {
    const chunk = holds.slice(i, i + 1000);
    const pipeline = admin.pipeline();
    for (const h of chunk) pipeline.call("LOCK.FENCE", h.key);
    const rows = (await pipeline.exec()) ?? [];
    if (!chunk.every((h, j) => Number(rows[j]?.[1]) === h.token)) return false;
  }
  return true;
}

function percentile(sorted: number[], p: number): number {
  return sorted.length === 0 ? 0 : sorted[Math.min(sorted.length - 1, Math.floor((p / 100) * sorted.length))]!;
}

const lags: number[] = [];
subscribe(RENEWAL_CHANNEL, (message) => void lags.push((message as { lag: number }).lag));

const app = await client();
const locks = new Locks(app.client);
const before = await connected();
let lost = 0;
const reasons = new Map<string, number>();
const onLost = (reason: string): void => {
  lost++;
  reasons.set(reason, (reasons.get(reason) ?? 0) + 1);
};
const holds = await Promise.all(
  Array.from({ length: holdCount }, async (_, i) => {
    const hold = await locks.tryAcquire(`renew:${i}`, { ttl, onLost });
    if (!hold) throw new Error(`renew:${i} was not granted`);
    return hold;
  }),
);
let most = before;
for (let s = 0; s < seconds; s++) {
  await sleep(1000);
  most = Math.max(most, await connected());
}
const [first, ...others] = holds as [Hold, ...Hold[]];
await first.release();
await sleep((2 * ttl) / 3);
const othersLive = lost === 0 && others.every((h) => h.held) && (await liveOnServer(others));
await Promise.all(others.map((h) => h.release()));
locks.close();
await app.close();
admin.disconnect();

for (const [reason, count] of reasons) console.error(`lost ${count}: ${reason}`);
lags.sort((a, b) => a - b);
const round = (ms: number): number => Math.round(ms * 10) / 10;
console.log(
  JSON.stringify({
    client: "node",
    library,
    holds: holdCount,
    connections_before: before,
    connections_after: most,
    lost,
    lag_ms: { p50: round(percentile(lags, 50)), p99: round(percentile(lags, 99)), max: round(lags.at(-1) ?? 0) },
    renewals: lags.length,
    others_live_after_release: othersLive,
  }),
);
