/**
 * The rules of docs/clients.md on a real server, each test once per Redis library (node-redis,
 * ioredis): `describe(flavour.name)` below. Each test starts its own server.
 */
import assert from "node:assert/strict";
import { describe, test } from "node:test";
import {
  DeadlockError,
  LockLostError,
  Locks,
  NotAcquiredError,
  StaleError,
  type Arg,
  type Hold,
} from "redis-lock-client";
import { adapt, type Adapter } from "./internals.js";
import { Clients, FLAVOURS, Server, eventually, sleep, type Flavour } from "./support.js";

interface Ctx {
  server: Server;
  clients: Clients;
  locks: Locks;
  /** Another Locks on a client of its own (another process, as far as the server can tell). */
  other(): Promise<Locks>;
}

async function run(flavour: Flavour, body: (ctx: Ctx) => Promise<void>, ...serverArgs: string[]): Promise<void> {
  const server = await Server.start(...serverArgs);
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
    await body({ server, clients, locks, other });
  } finally {
    for (const l of made) l.close();
    await clients.close();
    server.stop();
  }
}

const UUID = /^[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$/;

for (const flavour of FLAVOURS) {
  const it = (name: string, body: (ctx: Ctx) => Promise<void>, ...args: string[]): void => {
    test(name, () => run(flavour, body, ...args));
  };

  describe(flavour.name, () => {
    it("rule 1: each acquire has a fresh owner unless given one", async ({ locks, server }) => {
      const a = await locks.acquire("a");
      const b = await locks.acquire("b");
      assert.match(a.owner, UUID);
      assert.notEqual(a.owner, b.owner);
      assert.equal(await locks.tryAcquire("a"), null, "two acquires never share a hold");
      const mine = await locks.acquire("c", { owner: "worker-7" });
      const info = (await server.cmd("LOCK.INFO", "c")) as unknown[];
      assert.equal(info[info.indexOf("owner") + 1], "worker-7");
      for (const h of [a, b, mine]) assert.equal(await h.release(), true);
    });

    it("rule 2: a wait is one blocking call in the server's queue, no polling", async ({ locks, other, server }) => {
      const first = await locks.acquire("job", { ttl: 5000 });
      const waiting = (await other()).acquire("job", { ttl: 5000 });
      assert.ok(await eventually(async () => (await server.info("clients", "blocked_clients")) === "1"));
      await sleep(300);
      assert.equal(await first.release(), true);
      const second = await waiting;
      assert.ok(second.token > first.token);
      assert.equal(await server.calls("lock.acquire"), 2, "one call each, no retries");
      await second.release();
    });

    it("rule 2: the client's own command timeout never cuts a wait short", async ({ locks, server, clients }) => {
      const holder = await locks.acquire("slow");
      // ioredis's commandTimeout, node-redis's commandOptions.timeout
      const impatient =
        flavour.name === "ioredis"
          ? clients.track(
              new (await import("ioredis")).Redis({ port: server.port, host: "127.0.0.1", commandTimeout: 200 }),
            )
          : clients.track(
              await (
                await import("redis")
              )
                .createClient({ socket: { port: server.port, host: "127.0.0.1" }, commandOptions: { timeout: 200 } })
                .on("error", () => undefined)
                .connect(),
            );
      setTimeout(() => void holder.release(), 1000);
      const hold = await new Locks(impatient).acquire("slow", { wait: 5000 });
      assert.equal(await server.calls("lock.acquire"), 2, "one wait, never cut short and asked again");
      assert.equal(await hold.release(), true);
    });

    it("the wait time: acquire rejects NotAcquiredError, tryAcquire answers null", async ({ locks, other, server }) => {
      await server.cmd("LOCK.ACQUIRE", "held", "someone", 60000);
      const l = await other();
      const started = performance.now();
      await assert.rejects(l.acquire("held", { wait: 300 }), NotAcquiredError);
      const took = performance.now() - started;
      assert.ok(took >= 280 && took < 2000, `waited ${took} ms`);
      const asked = await server.calls("lock.acquire");
      assert.equal(await l.tryAcquire("held"), null);
      assert.equal(await server.calls("lock.acquire"), asked + 1, "tryAcquire asks once, it never waits");
      assert.equal(await l.tryAcquire("held", { wait: 200 }), null);
      assert.equal(await server.waiters("held"), 0);
      const free = await locks.tryAcquire("free");
      assert.ok(free && (await free.release()));
    });

    it("rule 3: an aborted wait leaves the queue, its connection closed, and is never granted", async ({
      locks,
      other,
      server,
    }) => {
      const holder = await locks.acquire("h", { ttl: 10_000 });
      const l = await other();
      const baseline = Number(await server.info("clients", "connected_clients"));
      for (let i = 0; i < 5; i++) {
        const ctl = new AbortController();
        const waiting = l.acquire("h", { signal: ctl.signal });
        assert.ok(await eventually(async () => (await server.waiters("h")) === 1));
        ctl.abort();
        await assert.rejects(waiting, { name: "AbortError" });
        assert.ok(await eventually(async () => (await server.waiters("h")) === 0, 2000), "the waiter left the queue");
      }
      const reason = new Error("shutting down");
      await assert.rejects(l.acquire("h", { signal: AbortSignal.abort(reason) }), (e) => e === reason);
      await assert.rejects(l.acquire("h", { signal: AbortSignal.timeout(100) }), { name: "TimeoutError" });
      assert.ok(
        await eventually(async () => Number(await server.info("clients", "connected_clients")) <= baseline, 2000),
        "no connection kept",
      );
      assert.equal(await holder.release(), true);
      assert.equal(await server.cmd("EXISTS", "h"), 0, "the release granted nobody");
      const next = await l.tryAcquire("h");
      assert.ok(next && (await next.release()));
    });

    it("rule 4: a connection error while waiting is retried with the same owner", async ({ locks, other, server }) => {
      const holder = await locks.acquire("retry", { ttl: 5000 });
      const waiter = (await other()).acquire("retry", { ttl: 5000, wait: 10_000 });
      assert.ok(await eventually(async () => (await server.info("clients", "blocked_clients")) === "1"));
      const before = (await server.cmd("LOCK.INFO", "retry")) as unknown[];
      const queued = (before[before.indexOf("queue") + 1] as string[])[0];
      await server.cmd("CLIENT", "KILL", "TYPE", "normal", "SKIPME", "yes"); // every link breaks
      assert.ok(
        await eventually(async () => (await server.info("clients", "blocked_clients")) === "1"),
        "it waits again",
      );
      assert.equal(await holder.release(), true);
      const hold = await waiter;
      assert.equal(hold.owner, queued, "asked again with the owner it queued with");
      assert.equal(await server.cmd("LOCK.FENCE", "retry"), hold.token);
      assert.equal(await hold.release(), true);
    });

    it("rule 4: the holder asking again gets the same token", async ({ locks }) => {
      const a = await locks.acquire("same", { owner: "me" });
      const b = await locks.acquire("same", { owner: "me" });
      assert.equal(b.token, a.token);
      await b.release();
    });

    it("rule 5: guard writes only while held, STALE as StaleError, nothing run", async ({ locks, server }) => {
      await server.cmd("SET", "{sku:9}:stock", 10);
      // A long lease for the two writes while held, then shortened to 100 ms: the sleep below
      // only gets longer on a loaded machine, so the lease has surely ended after it.
      const hold = await locks.acquire("{sku:9}:lock", { ttl: 10_000, watchdog: false });
      assert.equal(await hold.guard("DECRBY", "{sku:9}:stock", 1), 9);
      await assert.rejects(
        hold.guard("HSET", "{sku:9}:stock", "f", "v"),
        (e: Error) => !(e instanceof StaleError) && /WRONGTYPE/.test(e.message),
      );
      assert.equal(await server.cmd("LOCK.EXTEND", "{sku:9}:lock", hold.owner, 100), 1);
      await sleep(300);
      await assert.rejects(hold.guard("DECRBY", "{sku:9}:stock", 1), StaleError);
      assert.equal(await server.cmd("GET", "{sku:9}:stock"), "9");
      assert.equal(await hold.release(), false);
      await assert.rejects(hold.guard("GET", "{sku:9}:stock"), StaleError);
    });

    it("rule 6: the watchdog keeps a hold past several leases, on a connection of its own", async ({
      locks,
      other,
      server,
    }) => {
      // A renewal every second: each may be up to 2 s late before the lease (3 s) ends (1 s was
      // once too little for an event loop starved by a loaded machine).
      const ttl = 3000;
      const hold = await locks.acquire("w", { ttl });
      // Queued: the moment the hold lapsed, this waiter would be granted and the fence move on.
      const waiting = (await other()).acquire("w", { ttl, wait: 30_000 });
      for (let i = 0; i < 10; i++) {
        await sleep(1000); // 10 s in all: more than three leases
        assert.equal(await server.cmd("LOCK.FENCE", "w"), hold.token);
      }
      assert.equal(hold.lostReason, undefined);
      assert.ok((await server.calls("lock.extend")) >= 1, "renewed by LOCK.EXTEND");
      const list = String(await server.cmd("CLIENT", "LIST"));
      const renewing = list.split("\n").filter((l) => / cmd=lock\.extend /.test(l));
      assert.equal(renewing.length, 1, "one connection renews");
      assert.equal(await hold.release(), true);
      const second = await waiting;
      assert.ok(second.token > hold.token);
      await second.release();
    });

    it("rule 7: release stops the watchdog in the same step: no renewal after it", async ({ locks, server }) => {
      // A renewal every 500 ms; each release comes before the first lease (1.5 s) ends, with
      // at least 740 ms to spare for a late timer.
      const ttl = 1500;
      for (let i = 0; i < 3; i++) {
        const hold = await locks.acquire(`r${i}`, { ttl });
        await sleep((ttl / 6) * (i + 1) + 10); // before, at and after the first renewal
        assert.equal(await hold.release(), true);
      }
      const extends_ = await server.calls("lock.extend");
      await sleep(ttl / 3 + 200); // past the renewal a watchdog left running would send next
      assert.equal(await server.calls("lock.extend"), extends_, "no renewal after release");
      const hold = await locks.acquire("twice");
      assert.equal(await hold.release(), true);
      assert.equal(await hold.release(), false, "a second call answers false (rule 16)");
      assert.equal(await server.calls("lock.release"), 4, "and sends nothing");
    });

    it("rule 8: lost within one renewal period after LOCK.FORCERELEASE, once, with a reason", async ({
      locks,
      server,
    }) => {
      const ttl = 3000;
      const reasons: string[] = [];
      const events: string[] = [];
      const hold = await locks.acquire("lost", { ttl, onLost: (r) => reasons.push(r) });
      const acquired = performance.now(); // the lease ends before acquired + ttl
      hold.on("lost", (r) => events.push(r));
      await sleep(100);
      const forced = performance.now();
      await server.cmd("LOCK.FORCERELEASE", "lost");
      const reason = await hold.lost;
      const took = performance.now() - forced;
      // Told by the first renewal (1 s after the acquire, 0.9 s after the force), not at the
      // lease's end (2.9 s after it): the bound leaves 1.6 s for a late renewal.
      assert.ok(took < ttl - 500, `lost after ${took.toFixed(0)} ms, a renewal period is ${ttl / 3}`);
      assert.match(reason, /ran out/);
      assert.equal(hold.lostReason, reason);
      assert.equal(hold.held, false);
      await assert.rejects(hold.guard("SET", "x", 1), StaleError);
      await sleep(acquired + ttl + 200 - performance.now()); // past the end of the lease it had
      assert.deepEqual(reasons, [reason]);
      assert.deepEqual(events, [reason]);
      assert.equal(await hold.release(), false);
      await assert.rejects(hold[Symbol.asyncDispose](), LockLostError);
      assert.deepEqual(reasons, [reason], "signalled once");
    });

    it("rule 8: a watchdog that cannot reach the server loses the hold when the lease ends", async ({
      locks,
      server,
    }) => {
      const ttl = 1500;
      const hold = await locks.acquire("k", { ttl });
      assert.ok(await eventually(async () => (await server.calls("lock.extend")) >= 1));
      await server.cmd("CONFIG", "SET", "maxclients", 1); // every new connection is refused
      const list = String(await server.cmd("CLIENT", "LIST"));
      const id = /id=(\d+) .* cmd=lock\.extend /.exec(list)?.[1];
      assert.ok(id);
      await server.cmd("CLIENT", "KILL", "ID", id);
      const started = performance.now();
      const reason = await hold.lost;
      assert.match(reason, /could not be reached/); // only said once the lease has ended
      // The last renewal was sent before the kill, so its lease ends within ttl of it; 1 s of
      // margin for late retries.
      const took = performance.now() - started;
      assert.ok(took < ttl + 1000, `lost ${took.toFixed(0)} ms after the kill`);
      await server.cmd("CONFIG", "SET", "maxclients", 10000);
    });

    it("rule 8: any other watchdog failure loses the hold at once (a custom Adapter)", async ({ clients, server }) => {
      const real = adapt(await clients.client(server.port));
      const garbled: Adapter = {
        ...real,
        name: "garbled",
        route: (key) => real.route(key),
        send: (key, args) => real.send(key, args),
        connect: async (key, options) => {
          const conn = await real.connect(key, options);
          const send = async (args: readonly Arg[]): Promise<unknown> =>
            args[0] === "LOCK.EXTEND" ? "not a number" : conn.send(args);
          return { send, close: () => conn.close(), ref: (keep) => conn.ref(keep) };
        },
      };
      const ttl = 3000;
      const hold = await new Locks(garbled).acquire("g", { ttl });
      const started = performance.now();
      const reason = await hold.lost;
      assert.match(reason, /the watchdog failed/);
      // The first renewal is 1 s in; the lease ends at 3 s: 1.5 s of margin for a late renewal.
      const took = performance.now() - started;
      assert.ok(took < ttl - 500, `lost after ${took.toFixed(0)} ms: at the first renewal, not at the lease's end`);
      await assert.rejects(hold.guard("SET", "x", 1), StaleError);
      assert.equal(await hold.release(), false, "a hold given up answers false");
    });

    it("a fixed lease (watchdog: false) ends with its ttl; release answers false", async ({ locks }) => {
      const hold = await locks.acquire("fixed", { ttl: 200, watchdog: false });
      // Lost by its own timer at the lease's end (200 ms); 10 s for an event loop starved by a
      // loaded machine (make test-soak once saw it still live at 300 ms).
      assert.ok(await eventually(() => hold.lostReason !== undefined, 10_000), "lost at its end (rule 15)");
      assert.match(hold.lostReason ?? "", /a fixed lease/);
      assert.equal(await hold.release(), false);
      // Each sleep leaves 800 ms of its lease for a late timer; both together outlast the first.
      const again = await locks.acquire("fixed2", { ttl: 2000, watchdog: false });
      await sleep(1200);
      assert.equal(await again.extend(2000), true);
      await sleep(1200);
      assert.equal(await again.release(), true, "extended past its first lease");
    });

    it("await using releases at the end of the scope, also on a thrown error", async ({ locks, server }) => {
      const boom = new Error("boom");
      let token = 0;
      const work = async (): Promise<void> => {
        await using hold = await locks.acquire("scoped", { ttl: 5000 });
        token = hold.token;
        assert.equal(await server.cmd("LOCK.FENCE", "scoped"), token);
        throw boom;
      };
      await assert.rejects(work(), (e) => e === boom, "the scope's own error, not a SuppressedError");
      assert.ok(token > 0);
      assert.equal(await server.cmd("EXISTS", "scoped"), 0, "released");
      {
        await using hold = await locks.acquire("scoped", { ttl: 5000 });
        assert.ok(hold.token > token);
      }
      assert.equal(await server.cmd("EXISTS", "scoped"), 0);
      const lost = async (): Promise<void> => {
        await using hold = await locks.acquire("scoped", { ttl: 300 });
        await server.cmd("LOCK.FORCERELEASE", "scoped");
        await hold.lost;
      };
      await assert.rejects(lost(), LockLostError, "leaving the scope of a lost hold throws");
    });

    it("using(key, options, routine) releases and reports a loss through its signal", async ({ locks, server }) => {
      assert.equal(await locks.using("u", { ttl: 5000 }, async (hold) => hold.token > 0), true);
      assert.equal(await server.cmd("EXISTS", "u"), 0);
      await assert.rejects(
        locks.using("u", { ttl: 300 }, async (_hold, signal) => {
          await server.cmd("LOCK.FORCERELEASE", "u");
          await new Promise((resolve) => signal.addEventListener("abort", resolve));
          assert.ok(signal.reason instanceof LockLostError);
        }),
        LockLostError,
      );
    });

    it("rule 9: shared holds, semaphores and the upgrade deadlock", async ({ locks, other }) => {
      const l2 = await other();
      const r1 = await locks.acquire("doc", { shared: true });
      const r2 = await l2.acquire("doc", { shared: true });
      assert.notEqual(r1.token, r2.token);
      assert.equal(await locks.tryAcquire("doc"), null, "a writer waits for the readers");
      await assert.rejects(r1.guard("GET", "x"), StaleError, "a shared hold never guards a write");
      await assert.rejects(locks.tryAcquire("doc", { owner: r1.owner }), DeadlockError);
      await r1.release();
      await r2.release();
      const a = await locks.acquire("pool", { semaphore: { limit: 2 } });
      const b = await l2.acquire("pool", { semaphore: { limit: 2 } });
      assert.equal(await locks.tryAcquire("pool", { semaphore: { limit: 2 } }), null);
      await assert.rejects(a.guard("GET", "x"), StaleError);
      const waiting = locks.acquire("pool", { semaphore: { limit: 2, permits: 2 }, wait: 5000 });
      await a.release();
      await b.release();
      const both = await waiting;
      assert.ok(both.token > b.token);
      await both.release();
      await assert.rejects(locks.acquire("pool", { semaphore: { limit: 2, permits: 3 } }), RangeError);
    });

    it("rule 9: a session hold ends with its connection", async ({ locks, other, server }) => {
      const hold = await locks.acquire("s", { ttl: 60_000, session: true });
      const info = (await server.cmd("LOCK.INFO", "s")) as unknown[];
      const holder = (info[info.indexOf("holders") + 1] as unknown[][])[0]!;
      const session = holder[holder.indexOf("session") + 1];
      assert.ok(typeof session === "number", "bound to a connection");
      const waiting = (await other()).acquire("s", { wait: 10_000 });
      assert.ok(await eventually(async () => (await server.waiters("s")) === 1));
      const started = performance.now();
      await server.cmd("CLIENT", "KILL", "ID", session); // what the death of this process does
      const next = await waiting;
      // At the connection's close, not at the end of the 60 s lease: 10 s covers a loaded machine.
      assert.ok(performance.now() - started < 10_000);
      await next.release();
      assert.equal(await hold.release(), false);
      const clean = await locks.acquire("s2", { session: true });
      const clientsBefore = Number(await server.info("clients", "connected_clients"));
      assert.equal(await clean.release(), true);
      assert.ok(
        await eventually(async () => Number(await server.info("clients", "connected_clients")) === clientsBefore - 1),
        "its connection closes with it",
      );
    });

    it("rule 9: a durable grant needs its replicas (WAIT), else not granted and nothing held", async ({
      locks,
      clients,
    }) => {
      assert.equal(await locks.tryAcquire("d", { replicas: 1, replicasTimeout: 200 }), null);
      await assert.rejects(locks.acquire("d", { replicas: 1, replicasTimeout: 200, wait: 100 }), NotAcquiredError);
      const master = await Server.start("--repl-diskless-sync-delay", "0");
      const replica = await Server.start("--replicaof", "127.0.0.1", String(master.port));
      try {
        assert.ok(
          await eventually(async () => (await replica.info("replication", "master_link_status")) === "up", 20_000),
        );
        const durable = new Locks(await clients.client(master.port));
        // The replica acknowledges within milliseconds; 10 s (not the default 1 s) leaves room
        // for a loaded machine: what is tested is that the grant waits for it.
        const hold = await durable.acquire("d", { replicas: 1, replicasTimeout: 10_000 });
        assert.equal(await replica.cmd("LOCK.FENCE", "d"), hold.token);
        assert.equal(await hold.release(), true);
        durable.close();
      } finally {
        replica.stop();
        master.stop();
      }
    });

    it("a hold never keeps the process alive (the watchdog's timer and connection are unref'ed)", async ({
      server,
    }) => {
      const { spawnSync } = await import("node:child_process");
      const worker = new URL("./alive-worker.js", import.meta.url).pathname;
      // A process kept alive by its hold would be killed at the timeout (status null): its exit
      // with 0 is the proof. It needs about 3 s (start, the first renewal 2 s in, exit).
      const out = spawnSync(process.execPath, [worker, flavour.name, String(server.port)], {
        encoding: "utf8",
        timeout: 20_000,
      });
      assert.equal(out.status, 0, out.stderr);
      assert.match(out.stdout, /renewed [1-9]\d*/);
      // Its last renewal was sent just before it exited, so its 6 s lease has most of it left.
      assert.equal(await server.cmd("EXISTS", "alive"), 1, "its hold lives on until its lease ends");
    });

    it("the module missing is said plainly", async ({ clients }) => {
      const plain = await Server.startPlain();
      try {
        const l = new Locks(await clients.client(plain.port));
        await assert.rejects(l.acquire("k"), /module is not loaded/);
      } finally {
        plain.stop();
      }
    });
  });
}

export type { Hold };
