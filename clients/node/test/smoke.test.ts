import { test } from "node:test";
import assert from "node:assert/strict";
import { Locks } from "redis-lock-client";
import { FLAVOURS, Server, Clients } from "./support.js";

for (const flavour of FLAVOURS) {
  test(`${flavour.name}: smoke`, async () => {
    const server = await Server.start();
    const clients = new Clients(flavour);
    try {
      const locks = new Locks(await clients.client(server.port));
      {
        await using hold = await locks.acquire("k", { ttl: 600 });
        assert.equal(await server.cmd("LOCK.FENCE", "k"), hold.token);
        const other = locks.acquire("k", { wait: 2000 });
        await new Promise((r) => setTimeout(r, 1000));
        assert.equal(await server.cmd("LOCK.FENCE", "k"), hold.token);
        assert.ok((await server.calls("lock.extend")) >= 2);
        void other.then((h) => h.release());
      }
      await new Promise((r) => setTimeout(r, 100));
      locks.close();
    } finally {
      await clients.close();
      server.stop();
    }
  });
}
