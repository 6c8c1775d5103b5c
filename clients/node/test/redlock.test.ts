/**
 * `redis-lock-client/redlock`: code written for node-redlock v5 runs unchanged on it (the same
 * `scenario` runs on redlock itself, with ioredis, its only client), on both libraries; and what
 * it does better: fencing tokens, `using` that always settles and signals a loss, no crash on
 * extending an expired lock.
 */
import assert from "node:assert/strict";
import { describe, test } from "node:test";
import RealRedlock from "redlock";
import Redlock, { ExecutionError } from "redis-lock-client/redlock";
import { LockLostError } from "redis-lock-client";
import { FLAVOURS, Server, sleep, type Flavour } from "./support.js";

interface RedlockLike {
  acquire(
    resources: string[],
    duration: number,
    settings?: object,
  ): Promise<{ release(): Promise<unknown>; extend(d: number): Promise<{ release(): Promise<unknown> }> }>;
  using<T>(
    resources: string[],
    duration: number,
    settings: { automaticExtensionThreshold: number },
    routine: (signal: AbortSignal & { error?: Error }) => Promise<T>,
  ): Promise<T>;
}

/** What an application written for redlock does. */
async function scenario(redlock: RedlockLike, server: Server): Promise<void> {
  const lock = await redlock.acquire(["a", "b"], 5000); // redlock extends only before it ends
  assert.equal(await server.cmd("EXISTS", "a", "b"), 2);
  await assert.rejects(redlock.acquire(["b"], 1000, { retryCount: 2, retryDelay: 50 }), { name: "ExecutionError" });
  const extended = await lock.extend(2000);
  await extended.release();
  assert.equal(await server.cmd("EXISTS", "a", "b"), 0);
  // redlock extends when automaticExtensionThreshold ms are left (500 by default), ours every
  // duration/3: with these, an extension may be 1.9 s late (redlock's, every ~80 ms) or 1.3 s
  // late (ours) before the lease (2 s) ends.
  const value = await redlock.using(["c"], 2000, { automaticExtensionThreshold: 1900 }, async (signal) => {
    await sleep(2300); // past the first lease: extended automatically
    assert.equal(signal.aborted, false);
    assert.equal(await server.cmd("EXISTS", "c"), 1, "still held past its first lease");
    return 42;
  });
  assert.equal(value, 42);
  assert.equal(await server.cmd("EXISTS", "c"), 0);
}

test("the scenario on node-redlock itself (ioredis)", async () => {
  const server = await Server.start();
  const ioredis = FLAVOURS.find((f) => f.name === "ioredis")!;
  const client = await ioredis.client(server.port);
  try {
    await scenario(new RealRedlock([client as never]) as unknown as RedlockLike, server);
  } finally {
    await ioredis.close(client);
    server.stop();
  }
});

async function withRedlock(flavour: Flavour, body: (redlock: Redlock, server: Server) => Promise<void>): Promise<void> {
  const server = await Server.start();
  const client = await flavour.client(server.port);
  const redlock = new Redlock([client]);
  try {
    await body(redlock, server);
  } finally {
    redlock.locks.close();
    await flavour.close(client);
    server.stop();
  }
}

for (const flavour of FLAVOURS) {
  describe(`${flavour.name} redlock adapter`, () => {
    test("the scenario, unchanged", () => withRedlock(flavour, (redlock, server) => scenario(redlock, server)));

    test("locks carry fencing tokens; waits are the server's queue", () =>
      withRedlock(flavour, async (redlock, server) => {
        const lock = await redlock.acquire(["x"], 5000);
        assert.equal(await server.cmd("LOCK.FENCE", "x"), lock.tokens[0]);
        const waiting = redlock.acquire(["x"], 5000, { retryCount: 20, retryDelay: 100 });
        await sleep(200);
        await lock.release();
        const next = await waiting;
        assert.ok(next.tokens[0]! > lock.tokens[0]!);
        assert.equal(await server.calls("lock.acquire"), 2, "no retries: one wait");
        await next.release();
      }));

    test("extending or releasing an expired lock rejects, as redlock, and never crashes", () =>
      withRedlock(flavour, async (redlock) => {
        const lock = await redlock.acquire(["e"], 200);
        await sleep(300);
        await assert.rejects(
          lock.extend(1000),
          (e: Error) => e instanceof ExecutionError && /already-expired/.test(e.message),
        );
        await assert.rejects(lock.release(), ExecutionError);
      }));

    test("using signals a lost lock with signal.error, and always settles", () =>
      withRedlock(flavour, async (redlock, server) => {
        const seen = await redlock.using(["u"], 600, async (signal) => {
          await server.cmd("LOCK.FORCERELEASE", "u");
          await new Promise((resolve) => signal.addEventListener("abort", resolve));
          return signal.error;
        });
        assert.ok(seen instanceof LockLostError);
        const boom = new Error("boom");
        await assert.rejects(
          redlock.using(["u"], 600, async () => {
            throw boom;
          }),
          (e) => e === boom,
        );
        assert.equal(await server.cmd("EXISTS", "u"), 0);
      }));

    test("one client only: the module is not a quorum", () =>
      withRedlock(flavour, async () => {
        assert.throws(() => new Redlock([]), TypeError);
        assert.throws(() => new Redlock([{}, {}]), TypeError);
      }));
  });
}
