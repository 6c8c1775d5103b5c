/**
 * Cluster routing: 3 masters; node-redis `createCluster` and ioredis `Cluster`. Every command of
 * a hold (the acquire, a wait on its own connection, the watchdog's renewals, guarded writes, the
 * release) goes to the master that serves the key's slot, and a hash tag keeps the data with it.
 */
import assert from "node:assert/strict";
import { after, before, describe, test } from "node:test";
import { Locks } from "redis-lock-client";
import { protocol } from "./internals.js";
import { ClusterServers, FLAVOURS, eventually, sleep } from "./support.js";

let cluster: ClusterServers;
before(async () => {
  cluster = await ClusterServers.start();
});
after(() => cluster?.stop());

const KEYS = ["{sku:1}:lock", "{sku:2}:lock", "{sku:3}:lock", "{sku:4}:lock", "{sku:5}:lock", "{sku:6}:lock"];

for (const flavour of FLAVOURS) {
  describe(`${flavour.name} cluster`, () => {
    test("the slot of a key is the server's", async () => {
      for (const key of [...KEYS, "order:42", "foo", ""]) {
        assert.equal(protocol.slotOf(key), Number(await cluster.nodes[0]!.cmd("CLUSTER", "KEYSLOT", key)), key);
      }
    });

    test("holds, guarded writes and releases go to the key's master, on every master", async () => {
      const client = await flavour.cluster(cluster.ports);
      const locks = new Locks(client);
      try {
        const owners = new Set<number>();
        for (const key of KEYS) {
          const stock = key.replace(":lock", ":stock");
          const owner = await cluster.ownerOf(key);
          owners.add(owner.port);
          await owner.cmd("SET", stock, 5);
          await using hold = await locks.acquire(key, { ttl: 5000 });
          assert.equal(await owner.cmd("LOCK.FENCE", key), hold.token);
          assert.equal(Number(await hold.guard("DECRBY", stock, 1)), 4);
          assert.equal(await owner.cmd("GET", stock), "4");
        }
        assert.equal(owners.size, 3, "the keys span the three masters");
        for (const key of KEYS) assert.equal(await (await cluster.ownerOf(key)).cmd("EXISTS", key), 0, "released");
      } finally {
        locks.close();
        await flavour.close(client);
      }
    });

    test("waits, aborts and the watchdog on the key's master", async () => {
      const client = await flavour.cluster(cluster.ports);
      const locks = new Locks(client);
      try {
        const key = KEYS[1]!;
        const owner = await cluster.ownerOf(key);
        const extendsBefore = await owner.calls("lock.extend");
        // A renewal every 500 ms: each may be up to 1 s late before the lease (1.5 s) ends.
        const ttl = 1500;
        const holder = await locks.acquire(key, { ttl });
        const acquired = performance.now(); // its first lease ends before acquired + ttl
        const ctl = new AbortController();
        const aborted = locks.acquire(key, { signal: ctl.signal });
        assert.ok(await eventually(async () => (await owner.waiters(key)) === 1), "waits on its master");
        ctl.abort();
        await assert.rejects(aborted, { name: "AbortError" });
        assert.ok(await eventually(async () => (await owner.waiters(key)) === 0), "left the queue");
        // Queued: had the hold lapsed, this waiter would have been granted and the fence moved on.
        const waiting = locks.acquire(key, { ttl: 5000, wait: 20_000 });
        assert.ok(
          await eventually(async () => (await owner.calls("lock.extend")) - extendsBefore >= 1),
          "renewed on the master of the key",
        );
        await sleep(acquired + ttl + 500 - performance.now()); // past its first lease
        assert.equal(await owner.cmd("LOCK.FENCE", key), holder.token, "kept past its first lease");
        assert.equal(await holder.release(), true);
        const next = await waiting;
        assert.equal(await owner.cmd("LOCK.FENCE", key), next.token);
        assert.equal(await next.release(), true);
      } finally {
        locks.close();
        await flavour.close(client);
      }
    });
  });
}
