/**
 * docs/clients.md's "Same case, same answer" table (rules 16 and 17), one test per row, once per
 * Redis library, on a real server. What was sent is read from the server's own counters
 * (`INFO commandstats`), or, for the words of a command, from an Adapter that records what the
 * real one sends.
 */
import assert from "node:assert/strict";
import { describe, test } from "node:test";
import { Locks, StaleError, type AcquireOptions, type Arg, type Hold } from "redis-lock-client";
import { adapt } from "./internals.js";
import { Clients, FLAVOURS, Server, eventually, recording, sleep, type Flavour } from "./support.js";

type Hooks = Parameters<typeof recording>[2];

interface Ctx {
  server: Server;
  locks: Locks;
  /** Every command the library sent, through a recording Adapter around the real one. */
  sent: Arg[][];
  other(): Promise<Locks>;
}

async function run(flavour: Flavour, body: (ctx: Ctx) => Promise<void>, hooks?: Hooks): Promise<void> {
  const server = await Server.start();
  const clients = new Clients(flavour);
  const made: Locks[] = [];
  try {
    const sent: Arg[][] = [];
    const locks = new Locks(recording(adapt(await clients.client(server.port)), sent, hooks));
    made.push(locks);
    const other = async (): Promise<Locks> => {
      const l = new Locks(await clients.client(server.port));
      made.push(l);
      return l;
    };
    await body({ server, locks, sent, other });
  } finally {
    for (const l of made) l.close();
    await clients.close();
    server.stop();
  }
}

/** A hold the library knows lost: taken away by an operator, the next renewal (200 ms) says so. */
async function knownLost(locks: Locks, server: Server): Promise<Hold> {
  const hold = await locks.acquire("k", { ttl: 600 });
  await server.cmd("LOCK.FORCERELEASE", "k");
  await hold.lost;
  return hold;
}

for (const flavour of FLAVOURS) {
  const it = (name: string, body: (ctx: Ctx) => Promise<void>, hooks?: Hooks): void => {
    test(name, () => run(flavour, body, hooks));
  };

  describe(flavour.name, () => {
    it("table: a release finds the lease already gone: false, and the hold is lost", async ({ locks, server }) => {
      const reasons: string[] = [];
      const hold = await locks.acquire("k", { ttl: 30_000, onLost: (r) => reasons.push(r) });
      await server.cmd("LOCK.FORCERELEASE", "k"); // the next renewal is 10 s away
      assert.equal(await hold.release(), false);
      assert.match(await hold.lost, /gone when released/);
      assert.deepEqual(reasons, [hold.lostReason], "the lost signal fired, once");
      await assert.rejects(hold[Symbol.asyncDispose](), /the hold was lost/);
    });

    it("table: release of a hold known lost: false, nothing sent", async ({ locks, server }) => {
      const hold = await knownLost(locks, server);
      const before = await server.calls("lock.release");
      assert.equal(await hold.release(), false);
      assert.equal(await server.calls("lock.release"), before, "no LOCK.RELEASE reached the server");
    });

    it("table: guarded write of a hold known lost: StaleError, nothing sent", async ({ locks, server }) => {
      const hold = await knownLost(locks, server);
      await assert.rejects(hold.guard("SET", "x", 1), StaleError);
      assert.equal(await server.calls("lock.guard"), 0, "no LOCK.GUARD reached the server");
      assert.equal(await server.cmd("EXISTS", "x"), 0);
    });

    it("table: release twice: true, false, the second sends nothing", async ({ locks, server }) => {
      const hold = await locks.acquire("k");
      assert.equal(await hold.release(), true);
      assert.equal(await hold.release(), false);
      assert.equal(await server.calls("lock.release"), 1);
      await hold[Symbol.asyncDispose](); // the scope's exit after a release in time: no error
    });

    it("table: ttl 0 or under 1 ms: RangeError, nothing sent", async ({ locks, sent }) => {
      for (const ttl of [0, 0.5, -1, Number.NaN]) {
        await assert.rejects(locks.acquire("k", { ttl }), RangeError, `ttl ${ttl}`);
        await assert.rejects(locks.tryAcquire("k", { ttl }), RangeError, `ttl ${ttl}`);
      }
      assert.deepEqual(sent, []);
      const hold = await locks.acquire("k", { ttl: 1000, watchdog: false });
      await assert.rejects(hold.extend(0.5), RangeError);
      assert.equal(await hold.release(), true);
    });

    it("table: a ttl of 1.5 ms: a 2 ms lease", async ({ locks, sent }) => {
      const hold = await locks.tryAcquire("k", { ttl: 1.5, watchdog: false });
      assert.ok(hold);
      assert.deepEqual(sent[0]?.slice(0, 4), ["LOCK.ACQUIRE", "k", hold.owner, 2]);
      await sleep(20); // the lease has ended by then: the hold is lost, nothing more to send
      assert.equal(await hold.release(), false);
    });

    it("table: default wait of the blocking acquire: without limit", async ({ locks, server, other, sent }) => {
      const first = await (await other()).acquire("k");
      const waiting = locks.acquire("k");
      assert.ok(await eventually(async () => (await server.waiters("k")) === 1));
      assert.deepEqual(sent[0]?.slice(-2), ["WAIT", 0], "WAIT 0: the server's wait without limit");
      await sleep(1500); // still queued: no client-side limit cut it short
      assert.equal(await server.waiters("k"), 1);
      assert.equal(await first.release(), true);
      assert.equal(await (await waiting).release(), true);
    });

    it("table: the form that tries once: tryAcquire(key)", async ({ locks, server, other, sent }) => {
      const first = await (await other()).acquire("k");
      assert.equal(await locks.tryAcquire("k"), null);
      assert.equal(sent.length, 1);
      assert.ok(!sent[0]!.includes("WAIT"), "one try, no wait");
      assert.equal(await server.waiters("k"), 0);
      await first.release();
    });

    it("rule 18: closing the Locks and then the client logs nothing", async ({ server }) => {
      const { spawnSync } = await import("node:child_process");
      const worker = new URL("./quiet-worker.js", import.meta.url).pathname;
      const out = spawnSync(process.execPath, [worker, flavour.name, String(server.port)], {
        encoding: "utf8",
        timeout: 20_000,
      });
      assert.equal(out.status, 0, out.stderr);
      assert.equal(out.stdout, "done\n");
      assert.equal(out.stderr, "");
    });

    {
      // The watchdog's renewal (200 ms in) reaches the server and answers 1, but its reply is
      // held back until the release has begun: a release in time, then no lost signal.
      let renewing!: () => void;
      const renewalSent = new Promise<void>((resolve) => (renewing = resolve));
      let answer!: () => void;
      const replyHeld = new Promise<void>((resolve) => (answer = resolve));
      const afterReply = async (args: readonly Arg[]): Promise<void> => {
        if (args[0] !== "LOCK.EXTEND") return;
        renewing();
        await replyHeld;
      };
      it(
        "a release while a renewal is in flight: true, and no lost signal after",
        async ({ locks, server }) => {
          const ttl = 600;
          const lost: string[] = [];
          const hold = await locks.acquire("k", { ttl, onLost: (r) => lost.push(r) });
          hold.on("lost", (r) => lost.push(r));
          await renewalSent;
          const released = hold.release();
          answer();
          assert.equal(await released, true);
          // past the end of the lease the renewal would have set (timers fire in order)
          await sleep(ttl + 300);
          assert.deepEqual(lost, []);
          assert.equal(hold.lostReason, undefined);
          assert.equal(await server.cmd("EXISTS", "k"), 0);
          await hold[Symbol.asyncDispose](); // a release in time: the scope's exit throws nothing
        },
        { afterReply },
      );
    }

    it("table: non-finite numbers: NaN or infinite ttl RangeError at once; an infinite wait without limit", async ({
      locks,
      sent,
      server,
      other,
    }) => {
      const bad: AcquireOptions[] = [
        { ttl: Infinity },
        { ttl: Number.NaN },
        { replicas: 1, replicasTimeout: Infinity },
        { replicas: 1, replicasTimeout: Number.NaN },
        { replicas: Infinity },
        { wait: Number.NaN },
      ];
      for (const o of bad) {
        const started = performance.now();
        await assert.rejects(locks.acquire("k", o), RangeError, JSON.stringify(o));
        await assert.rejects(locks.tryAcquire("k", o), RangeError, JSON.stringify(o));
        const ms = performance.now() - started;
        assert.ok(ms < 500, `${ms.toFixed(0)} ms (500 ms margin): at once, not retried as a link failure`);
      }
      assert.equal(sent.length, 0, "nothing sent");
      const hold = await locks.acquire("k", { ttl: 1000, watchdog: false });
      await assert.rejects(hold.extend(Infinity), RangeError);
      await assert.rejects(hold.extend(Number.NaN), RangeError);
      assert.equal(await hold.release(), true);
      const first = await (await other()).acquire("k");
      const waiting = locks.acquire("k", { wait: Infinity });
      assert.ok(await eventually(async () => (await server.waiters("k")) === 1));
      assert.deepEqual(sent[sent.length - 1]?.slice(-2), ["WAIT", 0], "WAIT 0: the server's wait without limit");
      assert.equal(await first.release(), true);
      assert.equal(await (await waiting).release(), true);
    });

    it("table: a wait of 1 ms or less on a free lock: granted (one try is always sent)", async ({ locks, sent }) => {
      for (const wait of [1, 0.5, Number.MIN_VALUE]) {
        const hold = await locks.acquire("k", { wait });
        assert.equal(await hold.release(), true, `wait ${wait}`);
        const tried = await locks.tryAcquire("k", { wait });
        assert.ok(tried, `tryAcquire wait ${wait}`);
        assert.equal(await tried.release(), true);
      }
      assert.ok(
        sent.filter((c) => c[0] === "LOCK.ACQUIRE").every((c) => c[c.length - 1] === 1),
        "WAIT 1: the shortest",
      );
    });

    it("table: a fixed lease reaches its end: lost then, release and guard answer without the server", async ({
      locks,
      server,
    }) => {
      const ttl = 300;
      const before = performance.now();
      const hold = await locks.acquire("k", { ttl, watchdog: false });
      assert.match(await hold.lost, /fixed lease/);
      // no earlier than the lease's end (20 ms for timer rounding)
      assert.ok(performance.now() >= before + ttl - 20);
      await assert.rejects(hold.guard("SET", "x", 1), StaleError);
      assert.equal(await hold.release(), false);
      assert.equal(await server.calls("lock.guard"), 0, "no LOCK.GUARD reached the server");
      assert.equal(await server.calls("lock.release"), 0, "no LOCK.RELEASE reached the server");
    });

    it("table: negative wait: RangeError, nothing sent", async ({ locks, sent }) => {
      await assert.rejects(locks.acquire("k", { wait: -1 }), RangeError);
      await assert.rejects(locks.tryAcquire("k", { wait: -1 }), RangeError);
      await assert.rejects(locks.acquire("k", { wait: Number.NaN }), RangeError);
      assert.deepEqual(sent, []);
    });
  });
}
