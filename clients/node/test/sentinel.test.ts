/**
 * Sentinel failover: a master and a replica with the module, three Sentinels (quorum 2, a
 * master down after 1 s), all on loopback; the client is node-redis `createSentinel` or an
 * ioredis `Redis` with `sentinels`. The master is killed with kill -9 while one client holds a
 * durable lock (`replicas: 1`) and another waits for it: the holder's watchdog renews on the
 * promoted replica and keeps the hold, the waiter asks again with its owner there and is
 * granted when the holder releases. And a grant the replica never received: the promoted
 * replica does not know the hold, so the watchdog's first renewal there reports it lost.
 */
import assert from "node:assert/strict";
import { test } from "node:test";
import { Locks } from "redis-lock-client";
import { FLAVOURS, SentinelDeployment, eventually, type Flavour } from "./support.js";

/** `body` with a fresh deployment and a `Locks` maker on `flavour`'s Sentinel clients. */
async function withDeployment(
  flavour: Flavour,
  body: (d: SentinelDeployment, locks: () => Promise<Locks>) => Promise<void>,
): Promise<void> {
  const d = await SentinelDeployment.start();
  const made: unknown[] = [];
  const all: Locks[] = [];
  try {
    await body(d, async () => {
      const c = await flavour.sentinel(d.sentinelPorts, SentinelDeployment.NAME);
      made.push(c);
      const l = new Locks(c);
      all.push(l);
      return l;
    });
  } finally {
    for (const l of all) l.close();
    for (const c of made) await flavour.close(c).catch(() => undefined);
    d.stop();
  }
}

for (const flavour of FLAVOURS) {
  test(`${flavour.name} sentinel: across kill -9 of the master, the holder keeps its hold and the waiter is granted`, async () => {
    const d = await SentinelDeployment.start();
    const made: unknown[] = [];
    const locks: Locks[] = [];
    try {
      const client = async (): Promise<Locks> => {
        const c = await flavour.sentinel(d.sentinelPorts, SentinelDeployment.NAME);
        made.push(c);
        const l = new Locks(c);
        locks.push(l);
        return l;
      };
      const lost: string[] = [];
      // A renewal every ~6.7 s: the one after the kill that reaches the promoted replica may be
      // the second (the first can come while the Sentinels still name the dead master), so
      // the failover has from 6.7 to 13 s before the lease (20 s) ends.
      const holder = await (await client()).acquire("k", { ttl: 20_000, replicas: 1, onLost: (r) => lost.push(r) });
      assert.equal(await d.replica.cmd("LOCK.FENCE", "k"), holder.token, "a durable grant: the replica has it");
      const waiting = (await client()).acquire("k", { ttl: 5000, wait: 60_000 });
      assert.ok(await eventually(async () => (await d.master.waiters("k")) === 1));
      const info = (await d.master.cmd("LOCK.INFO", "k")) as unknown[];
      const queued = (info[info.indexOf("queue") + 1] as string[])[0];
      d.killMaster();
      const took = await d.failover();
      const next = d.replica;
      assert.ok(
        await eventually(async () => (await next.calls("lock.extend")) >= 1, 15_000),
        "renewed on the new master",
      );
      assert.equal(
        await next.cmd("LOCK.FENCE", "k"),
        holder.token,
        JSON.stringify([await next.cmd("LOCK.INFO", "k"), holder.lostReason, queued, holder.owner]),
      );
      assert.ok(
        await eventually(async () => (await next.waiters("k")) === 1, 15_000),
        "the waiter waits again, on the new master",
      );
      assert.ok(holder.held && lost.length === 0, `not lost: ${lost}`);
      assert.equal(await holder.release(), true, "released on the new master");
      const hold = await waiting;
      assert.ok(hold.token > holder.token);
      assert.equal(hold.owner, queued, "granted to the owner it asked with first");
      assert.equal(await next.cmd("LOCK.FENCE", "k"), hold.token);
      assert.equal(await hold.release(), true);
      console.log(`# ${flavour.name}: failover took ${(took / 1000).toFixed(1)} s after the kill`);
    } finally {
      for (const l of locks) l.close();
      for (const c of made) await flavour.close(c).catch(() => undefined);
      d.stop();
    }
  });
}

for (const flavour of FLAVOURS) {
  test(`${flavour.name} sentinel: a hold the promoted replica lacks is reported lost`, () =>
    withDeployment(flavour, async (d, locks) => {
      const l = await locks();
      d.replica.signal("SIGSTOP");
      try {
        await d.master.cmd("CLIENT", "KILL", "TYPE", "replica"); // the grant never reaches it
        const lost: string[] = [];
        const hold = await l.acquire("k", { ttl: 6000, onLost: (r) => lost.push(r) });
        d.killMaster();
        d.replica.signal("SIGCONT");
        await d.failover();
        const reason = await hold.lost;
        // Its renewal on the promoted replica answers 0 (ran out), or, if the failover outlasts
        // the lease, the renewals never reach a master before it ends: lost either way.
        assert.match(reason, /ran out|could not be reached/);
        assert.deepEqual(lost, [reason]);
        assert.equal(await hold.release(), false);
      } finally {
        d.replica.signal("SIGCONT");
      }
      assert.equal(await d.replica.cmd("EXISTS", "k"), 0);
    }));
}
