/**
 * The schedule of docs/fencing.md, forced step by step on real PostgreSQL and MariaDB servers,
 * with each Redis library: holder A's lease ends while it is "paused" (a fixed 300 ms lease, no
 * watchdog), holder B is granted the lock with a larger token, and A comes back.
 *
 * - Through `fenced`: A's fence statement meets B's newer fence (waiting for B's row lock, or
 *   after B's commit: the outcome is the same), A gets StaleError and its body never runs: one
 *   unit sold, 99 left.
 * - With the old recipe (`UPDATE ... WHERE fence <= :token`, the reads outside any fence): both
 *   writes pass their token check and two units are sold with 99 left: the recipe loses an update.
 * - A paused inside its own fenced transaction: B's fence waits for A's commit, then B reads
 *   what A wrote: two units sold, 98 left, nobody stale.
 */
import assert from "node:assert/strict";
import { after, before, describe, test } from "node:test";
import { Locks, StaleError } from "redis-lock-client";
import { KINDS, LABELS, shop, withServerAndStores, type Store, type Tx } from "./databases.js";
import { FLAVOURS } from "./support.js";

const SKU = "sku9";
const LEASE = 300;

type Tables = Awaited<ReturnType<typeof shop>>;

const qtyOf = async (tx: Tx, t: Tables): Promise<number> =>
  Number((await tx.query(`SELECT qty FROM ${t.stock} WHERE sku = ?`, [SKU]))[0]?.qty);

const salesOf = async (tx: Tx, t: Tables): Promise<number> =>
  Number((await tx.query(`SELECT count(*) AS n FROM ${t.sales}`))[0]?.n);

/** The write of a read-modify-write that read `read`: the new quantity and a sale. */
async function sell(tx: Tx, t: Tables, read: number, token: number): Promise<void> {
  await tx.query(`UPDATE ${t.stock} SET qty = ? WHERE sku = ?`, [read - 1, SKU]);
  await tx.query(`INSERT INTO ${t.sales} (sku, token) VALUES (?, ?)`, [SKU, token]);
}

const live = withServerAndStores();

for (const kind of KINDS) {
  for (const flavour of FLAVOURS) {
    describe(`${LABELS[kind]}, ${flavour.name}`, () => {
      let redis: unknown;
      let locks: Locks;
      let store: Store;
      before(async () => {
        store = live.stores.get(kind)!;
        redis = await flavour.client(live.server.port);
        locks = new Locks(redis);
      });
      after(async () => {
        locks?.close();
        await flavour.close(redis);
      });

      test("the stale holder's fenced transaction is refused: StaleError, its body never runs, one unit sold", async () => {
        const t = await shop(store, SKU, 100);
        const key = `{${t.stock}}:lock`;
        const a = await locks.acquire(key, { ttl: LEASE, watchdog: false });
        const b = await locks.acquire(key, { ttl: 10_000, wait: 5_000 }); // granted when A's lease ends
        try {
          assert.ok(b.token > a.token, `${b.token} > ${a.token}`);
          let aRan = false;
          let late: Promise<void> | undefined;
          await store.fenced(
            b,
            async (tx) => {
              const read = await qtyOf(tx, t);
              assert.equal(read, 100);
              // A wakes while B's transaction is open and enters the helper with its old token.
              late = store.fenced(
                a,
                async (txA) => {
                  aRan = true;
                  await sell(txA, t, await qtyOf(txA, t), a.token);
                },
                { table: t.fences },
              );
              late.catch(() => undefined);
              // Its fence statement waits for B's row lock; if the machine is too slow to see that
              // in 5 s, it comes after B's commit instead, with the same outcome.
              await store.untilLockWait(5_000);
              await sell(tx, t, read, b.token);
            },
            { table: t.fences },
          );
          await assert.rejects(late!, (e: unknown) => {
            assert.ok(e instanceof StaleError, String(e));
            assert.match(e.message, new RegExp(`"\\{${t.stock}\\}:lock".*token ${a.token}\\b`));
            return true;
          });
          assert.equal(aRan, false, "the stale holder's body ran");
          assert.equal(await qtyOf(store, t), 99);
          assert.equal(await salesOf(store, t), 1);
        } finally {
          await b.release();
        }
      });

      test("the old recipe (UPDATE ... WHERE fence <= :token) loses an update: two sold, 99 left", async () => {
        const t = await shop(store, SKU, 100);
        const key = `{${t.stock}}:lock`;
        const recipe = `UPDATE ${t.stock} SET qty = ?, fence = ? WHERE sku = ? AND fence <= ?`;
        const a = await locks.acquire(key, { ttl: LEASE, watchdog: false });
        const readA = await qtyOf(store, t);
        // A pauses: B is granted once A's lease has ended, with a larger token, and reads.
        const b = await locks.acquire(key, { ttl: 10_000, wait: 5_000 });
        try {
          assert.ok(b.token > a.token);
          const readB = await qtyOf(store, t);
          assert.deepEqual([readA, readB], [100, 100]);
          // A wakes and writes; its token check passes (the fence was 0).
          const wroteA = await store.exec(recipe, [readA - 1, a.token, SKU, a.token]);
          await store.exec(`INSERT INTO ${t.sales} (sku, token) VALUES (?, ?)`, [SKU, a.token]);
          // B writes; its token check passes too (tA <= tB).
          const wroteB = await store.exec(recipe, [readB - 1, b.token, SKU, b.token]);
          await store.exec(`INSERT INTO ${t.sales} (sku, token) VALUES (?, ?)`, [SKU, b.token]);
          assert.deepEqual([wroteA.affected, wroteB.affected], [1, 1]);
          assert.equal(await salesOf(store, t), 2);
          assert.equal(await qtyOf(store, t), 99, "100 in stock, two sold, 99 left: one update lost");
        } finally {
          await b.release();
        }
      });

      test("a holder paused inside its fenced transaction: the next one waits for it, then reads its write", async () => {
        const t = await shop(store, SKU, 100);
        const key = `{${t.stock}}:lock`;
        const a = await locks.acquire(key, { ttl: LEASE, watchdog: false });
        let next: Promise<number> | undefined;
        await store.fenced(
          a,
          async (tx) => {
            const read = await qtyOf(tx, t);
            assert.equal(read, 100);
            // A stays in its body past its lease: B is granted and enters the helper.
            next = (async () => {
              const b = await locks.acquire(key, { ttl: 10_000, wait: 5_000 });
              try {
                assert.ok(b.token > a.token);
                return await store.fenced(
                  b,
                  async (txB) => {
                    const readB = await qtyOf(txB, t);
                    await sell(txB, t, readB, b.token);
                    return readB - 1;
                  },
                  { table: t.fences },
                );
              } finally {
                await b.release();
              }
            })();
            next.catch(() => undefined);
            // B's fence statement waits for A's row lock (bounded: the outcome is the same).
            await store.untilLockWait(5_000);
            await sell(tx, t, read, a.token);
          },
          { table: t.fences },
        );
        assert.equal(await next!, 98, "B read what A wrote");
        assert.equal(await qtyOf(store, t), 98);
        assert.equal(await salesOf(store, t), 2);
      });
    });
  }
}
