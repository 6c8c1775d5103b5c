/**
 * One process of the fenced inventory soak (fence-soak.test.ts): sells one unit per hold through
 * the package's `fenced` helper until the stock is gone (acquire with WAIT, then in the
 * transaction: read the quantity, stop at 0, write it less one, record the sale), and once, on
 * its `stopAt`-th read, SIGSTOPs itself inside the transaction, past its lease (the test
 * resumes it). A stale hold is counted and the next one taken; a deadlock or a lock wait that
 * timed out is rolled back (by the helper) and retried. Prints
 * {"sold": n, "stale": n, "retried": n, "stopped": bool}.
 * argv: one JSON `WorkerConfig`.
 */
import { Locks, StaleError } from "redis-lock-client";
import { Database, mysqlStore, pgStore, type Kind } from "./databases.js";
import { FLAVOURS } from "./support.js";

export interface WorkerConfig {
  kind: Kind;
  url: string;
  port: number;
  flavour: string;
  key: string;
  sku: string;
  stock: string;
  sales: string;
  fences: string;
  ttl: number;
  stopAt: number;
}

const config = JSON.parse(process.argv[2]!) as WorkerConfig;
const flavour = FLAVOURS.find((f) => f.name === config.flavour)!;
// The server was started by the test; this process only connects to it.
const db = new Database(config.kind, "", config.url);
const store = config.kind === "postgres" ? pgStore(db, { max: 2 }) : mysqlStore(db, { connectionLimit: 2 });
const client = await flavour.client(config.port);
const locks = new Locks(client);

let sold = 0;
let stale = 0;
let retried = 0;
let reads = 0;
let stopped = false;

for (let holds = 1; ; holds++) {
  // The owner names this process, so the test can pause the holder (its pid) mid-hold.
  const hold = await locks.acquire(config.key, {
    ttl: config.ttl,
    owner: `${process.pid}:${holds}`,
    raiseOnLost: false,
  });
  let outcome: "sold" | "empty";
  try {
    outcome = await store.fenced(
      hold,
      async (tx) => {
        const qty = Number((await tx.query(`SELECT qty FROM ${config.stock} WHERE sku = ?`, [config.sku]))[0]?.qty);
        if (qty <= 0) return "empty";
        if (++reads === config.stopAt) {
          stopped = true;
          process.kill(process.pid, "SIGSTOP"); // paused inside the transaction, past the lease
        }
        await tx.query(`UPDATE ${config.stock} SET qty = ? WHERE sku = ?`, [qty - 1, config.sku]);
        await tx.query(`INSERT INTO ${config.sales} (sku, token, pid) VALUES (?, ?, ?)`, [
          config.sku,
          hold.token,
          process.pid,
        ]);
        return "sold";
      },
      { table: config.fences },
    );
  } catch (e) {
    if (e instanceof StaleError) stale++;
    else if (store.retryable(e)) retried++;
    else throw e;
    continue;
  } finally {
    await hold.release();
  }
  if (outcome === "empty") break;
  sold++;
}

console.log(JSON.stringify({ sold, stale, retried, stopped }));
locks.close();
await flavour.close(client);
await store.close();
