/**
 * Rule 23 of docs/clients.md, lock sets (`acquireAll`, `tryAcquireAll`, `MultiHold`), on a real
 * server, each test once per Redis library (node-redis, ioredis).
 */
import assert from "node:assert/strict";
import { describe, test } from "node:test";
import { LockLostError, Locks, NotAcquiredError, StaleError, type MultiHold } from "redis-lock-client";
import { Clients, FLAVOURS, Server, eventually, sleep, type Flavour } from "./support.js";

interface Ctx {
  server: Server;
  locks: Locks;
  /** Another Locks on a client of its own (another process, as far as the server can tell). */
  other(): Promise<Locks>;
}

async function run(flavour: Flavour, body: (ctx: Ctx) => Promise<void>): Promise<void> {
  const server = await Server.start();
  const clients = new Clients(flavour);
  const made: Locks[] = [];
  try {
    const locks = new Locks(await clients.client(server.port));
    made.push(locks);
    const other = async (): Promise<Locks> => {
      const l = new Locks(await clients.client(server.port));
      made.push(l);
      return l;
    };
    await body({ server, locks, other });
  } finally {
    for (const l of made) l.close();
    await clients.close();
    server.stop();
  }
}

const LEASE_RAN_OUT = "the lease ran out before it was renewed";
const GONE_AT_RELEASE = "the hold was gone when released (its lease ran out)";

/** Whether none of `keys` is held (or anything else) on `server`. */
async function free(server: Server, ...keys: string[]): Promise<boolean> {
  return Number(await server.cmd("EXISTS", ...keys)) === 0;
}

for (const flavour of FLAVOURS) {
  const it = (name: string, body: (ctx: Ctx) => Promise<void>): void => {
    test(name, () => run(flavour, body));
  };

  describe(flavour.name, () => {
    it("rule 23: a set has a token per key, in the order given, and releases", async ({ locks, server }) => {
      const keys = ["acct:1", "acct:2", "acct:3"];
      const set = await locks.acquireAll(keys, { ttl: 5000 });
      assert.equal(set.tokens.length, 3);
      assert.deepEqual(
        [...set.tokens],
        [...set.tokens].sort((a, b) => a - b),
        "issued in the order of the keys",
      );
      for (const [i, key] of keys.entries()) {
        assert.equal(set.tokenOf(key), set.tokens[i]);
        assert.equal(Number(await server.cmd("LOCK.FENCE", key)), set.tokens[i]);
      }
      assert.throws(() => set.tokenOf("acct:4"), RangeError);
      assert.equal(set.held, true);
      assert.equal(await set.release(), true);
      assert.ok(await free(server, ...keys));
      assert.equal(await server.calls("lock.macquire"), 1);
      assert.equal(await server.calls("lock.mrelease"), 1);
    });

    it("rule 23: the try-once form is null when one key is busy, and takes nothing", async ({ locks, server }) => {
      await server.cmd("LOCK.ACQUIRE", "b:2", "someone", 60000);
      assert.equal(await locks.tryAcquireAll(["b:1", "b:2", "b:3"]), null);
      assert.equal(await server.calls("lock.macquire"), 1, "one try");
      assert.ok(await free(server, "b:1", "b:3"), "nothing taken, not even the free keys");
      await assert.rejects(locks.acquireAll(["b:1", "b:2"], { wait: 200 }), NotAcquiredError);
      assert.ok(await free(server, "b:1"));
    });

    it("rule 23: two sets in opposite orders, both waiting, are granted in turn", async ({ locks, other, server }) => {
      const holder = await locks.acquireAll(["x", "y"], { ttl: 5000 });
      const granted: string[][] = [];
      const take = async (keys: string[]): Promise<boolean> => {
        const set = await (await other()).acquireAll(keys, { ttl: 5000, wait: 20_000 });
        granted.push([...set.keys]);
        await sleep(200);
        return set.release();
      };
      const forward = take(["x", "y"]);
      assert.ok(await eventually(async () => (await server.waiters("x")) === 1));
      const backward = take(["y", "x"]);
      assert.ok(await eventually(async () => (await server.waiters("x")) === 2 && (await server.waiters("y")) === 2));
      assert.equal(await holder.release(), true);
      assert.deepEqual(await Promise.all([forward, backward]), [true, true]);
      assert.deepEqual(granted, [
        ["x", "y"],
        ["y", "x"],
      ]);
      assert.ok(await free(server, "x", "y"));
    });

    it("rule 23: a set waits for its busy key in the server's queue, taking nothing meanwhile", async ({
      locks,
      server,
    }) => {
      await server.cmd("LOCK.ACQUIRE", "q:2", "someone", 60000);
      const waiting = locks.acquireAll(["q:1", "q:2"], { ttl: 5000, wait: 10_000 });
      assert.ok(await eventually(async () => (await server.waiters("q:2")) === 1));
      assert.ok(await free(server, "q:1"));
      await server.cmd("LOCK.RELEASE", "q:2", "someone");
      const set = await waiting;
      assert.equal(await server.calls("lock.macquire"), 1, "one blocking call, no polling");
      assert.equal(await set.release(), true);
    });

    it("rule 23: the watchdog keeps a set past several ttls", async ({ locks, server }) => {
      const set = await locks.acquireAll(["w:1", "w:2"], { ttl: 1000 });
      await sleep(3500); // over three leases: only renewals keep it
      assert.equal(set.held, true);
      assert.equal(set.lostReason, undefined);
      for (const key of set.keys) assert.equal(Number(await server.cmd("LOCK.FENCE", key)), set.tokenOf(key));
      assert.ok((await server.calls("lock.extend")) >= 2, "each member renewed with LOCK.EXTEND");
      assert.equal(await set.release(), true);
    });

    it("rule 23: a member lost loses the set once, naming the key; the rest are given back", async ({
      locks,
      server,
    }) => {
      const reasons: string[] = [];
      const set = await locks.acquireAll(["m:1", "m:2", "m:3"], {
        ttl: 2000,
        onLost: (r) => reasons.push(r),
        raiseOnLost: false,
      });
      let events = 0;
      set.on("lost", () => events++);
      await server.cmd("LOCK.FORCERELEASE", "m:2");
      const reason = await set.lost;
      assert.equal(reason, `m:2: ${LEASE_RAN_OUT}`);
      assert.equal(set.lostReason, reason);
      assert.equal(set.held, false);
      assert.ok(await eventually(() => free(server, "m:1", "m:3"), 3000), "the other members given back");
      await assert.rejects(set.guard("m:1", "SET", "data", "x"), StaleError);
      const sent = await server.calls("lock.mrelease");
      assert.equal(await set.release(), false);
      assert.equal(await server.calls("lock.mrelease"), sent, "known lost: nothing sent");
      await sleep(1000);
      assert.deepEqual(reasons, [reason], "reported once");
      assert.equal(events, 1);
    });

    it("rule 23: leaving await using throws the loss, naming the key", async ({ locks, server }) => {
      let thrown: unknown;
      try {
        await using set = await locks.acquireAll(["l:1", "l:2"], { ttl: 2000 });
        await server.cmd("LOCK.FORCERELEASE", "l:1");
        await set.lost;
      } catch (e) {
        thrown = e;
      }
      assert.ok(thrown instanceof LockLostError);
      assert.equal(thrown.reason, `l:1: ${LEASE_RAN_OUT}`);
      assert.ok(await eventually(() => free(server, "l:1", "l:2"), 3000));
    });

    it("rule 23: release answers true only if every member was held", async ({ locks, server }) => {
      const whole = await locks.acquireAll(["r:1", "r:2"], { ttl: 5000 });
      assert.equal(await whole.release(), true);
      const sent = await server.calls("lock.mrelease");
      assert.equal(await whole.release(), false, "twice: false");
      assert.equal(await server.calls("lock.mrelease"), sent, "and nothing sent");

      const reasons: string[] = [];
      const set = await locks.acquireAll(["r:1", "r:2", "r:3"], {
        ttl: 5000,
        watchdog: false,
        onLost: (r) => reasons.push(r),
        raiseOnLost: false,
      });
      await server.cmd("LOCK.FORCERELEASE", "r:3");
      assert.equal(await set.release(), false);
      assert.equal(set.lostReason, GONE_AT_RELEASE);
      assert.deepEqual(reasons, [GONE_AT_RELEASE]);
      assert.ok(await free(server, "r:1", "r:2"), "the members still held were released");
    });

    it("rule 23: arguments are checked before anything is sent", async ({ locks, server }) => {
      const many = Array.from({ length: 65 }, (_, i) => `k${i}`);
      for (const keys of [[], ["a", "a"], many]) {
        await assert.rejects(locks.acquireAll(keys), RangeError);
        await assert.rejects(locks.tryAcquireAll(keys), RangeError);
      }
      await assert.rejects(locks.acquireAll("ab" as unknown as string[]), TypeError);
      for (const ttl of [0, 0.5, NaN]) await assert.rejects(locks.acquireAll(["a", "b"], { ttl }), RangeError);
      await assert.rejects(locks.acquireAll(["a", "b"], { wait: -1 }), RangeError);
      await assert.rejects(locks.acquireAll(["a", "b"], { semaphore: { limit: 2 } }), RangeError);
      await assert.rejects(locks.acquireAll(["a", "b"], { replicas: 1 }), RangeError);
      assert.equal(await server.calls("lock.macquire"), 0);
      const set = await locks.acquireAll(many.slice(0, 64), { ttl: 5000 });
      assert.equal(set.tokens.length, 64, "64 keys are fine");
      await assert.rejects(set.guard("nope", "SET", "a", "1"), RangeError);
      await assert.rejects(set.extend(0), RangeError);
      assert.equal(await server.calls("lock.guard"), 0);
      assert.equal(await set.release(), true);
    });

    it("rule 23: a guarded write sends the token of its key", async ({ locks, server }) => {
      const set = await locks.acquireAll(["g:1", "g:2"], { ttl: 5000, raiseOnLost: false });
      assert.equal(await set.guard("g:1", "SET", "data:1", "one"), "OK");
      assert.equal(await set.guard("g:2", "SET", "data:2", "two"), "OK");
      await server.cmd("LOCK.FORCERELEASE", "g:2");
      await server.cmd("LOCK.ACQUIRE", "g:2", "newer", 60000);
      assert.equal(await set.guard("g:1", "SET", "data:1", "uno"), "OK");
      await assert.rejects(set.guard("g:2", "SET", "data:2", "stale"), StaleError);
      assert.deepEqual(await server.cmd("MGET", "data:1", "data:2"), ["uno", "two"]);
      assert.equal(await set.release(), false, "g:2 was gone");
      assert.ok(await free(server, "g:1"));
    });

    it("rule 23: extend moves every member's lease; answered 0, the set is lost naming the key", async ({
      locks,
      server,
    }) => {
      const reasons: string[] = [];
      const set: MultiHold = await locks.acquireAll(["e:1", "e:2"], {
        ttl: 1500,
        watchdog: false,
        onLost: (r) => reasons.push(r),
        raiseOnLost: false,
      });
      assert.equal(await set.extend(10_000), true);
      for (const key of set.keys) assert.ok((await server.leaseLeft(key))! > 5000, "10 s from now on every key");
      await sleep(2000); // past the lease it was granted: the timer moved too
      assert.equal(set.held, true);
      assert.equal(await set.extend(), true, "by default the ttl set last");
      await server.cmd("LOCK.FORCERELEASE", "e:2");
      assert.equal(await set.extend(5000), false);
      assert.equal(set.lostReason, `e:2: ${LEASE_RAN_OUT}`);
      assert.ok(await eventually(() => free(server, "e:1"), 3000), "e:1 given back");
      const sent = await server.calls("lock.extend");
      assert.equal(await set.extend(5000), false);
      assert.equal(await server.calls("lock.extend"), sent, "known lost: nothing sent");
      assert.equal(await set.release(), false);
      assert.deepEqual(reasons, [set.lostReason]);
    });

    it("rule 23: shared sets hold together and keep a writer out", async ({ locks, other }) => {
      const a = await locks.tryAcquireAll(["s:1", "s:2"], { shared: true });
      const b = await (await other()).tryAcquireAll(["s:2", "s:1"], { shared: true });
      assert.ok(a && b);
      assert.equal(await (await other()).tryAcquireAll(["s:2"]), null);
      assert.equal(await a.release(), true);
      assert.equal(await b.release(), true);
      const writer = await (await other()).tryAcquireAll(["s:2"]);
      assert.ok(writer);
      assert.equal(await writer.release(), true);
    });

    it("rule 23: a session set ends with its connection", async ({ locks, server }) => {
      const set = await locks.acquireAll(["n:1", "n:2"], { ttl: 5000, session: true, raiseOnLost: false });
      const info = String(await server.cmd("CLIENT", "LIST"));
      const id = /id=(\d+) [^\n]*cmd=lock\.macquire/.exec(info)?.[1];
      assert.ok(id, "the set's own connection");
      await server.cmd("CLIENT", "KILL", "ID", id);
      assert.ok(await free(server, "n:1", "n:2"), "the server ended every member with it");
      assert.match(await set.lost, /^n:[12]: the session's connection closed: /);
      assert.equal(await set.release(), false);
    });
  });
}
