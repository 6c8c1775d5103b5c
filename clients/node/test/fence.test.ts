/**
 * The fenced-transaction helpers (`redis-lock-client/pg`, `redis-lock-client/mysql2`), rule 13
 * of docs/clients.md: the SQL per database is docs/fencing.md's, the table is checked as an
 * identifier, each subpath refuses another driver's objects before sending anything; then, on
 * real PostgreSQL and MariaDB servers: the body's result is committed with the fence raised
 * first, an older token is stale (rolled back, the body never run), the body's own error comes
 * back unchanged with its writes rolled back and the connection given back to the pool, the
 * table and name options, the helper never creates the table, `fence` inside a transaction the
 * caller runs, and each driver's own cases.
 */
import assert from "node:assert/strict";
import { createRequire } from "node:module";
import { after, before, describe, test } from "node:test";
import mysql from "mysql2/promise";
import pg from "pg";
import { Locks, StaleError } from "redis-lock-client";
import * as onMysql from "redis-lock-client/mysql2";
import * as onPg from "redis-lock-client/pg";
import {
  KINDS,
  LABELS,
  mysqlStore,
  pgStore,
  startDatabases,
  storeOf,
  unique,
  type Database,
  type Store,
} from "./databases.js";
import { FLAVOURS, Server } from "./support.js";

const require = createRequire(import.meta.url);

describe("the SQL, the table, the driver (no database)", () => {
  test("the statements are docs/fencing.md's, on the table named", () => {
    assert.deepEqual(onPg.statements(), {
      createTable: "CREATE TABLE IF NOT EXISTS lock_fences (name text PRIMARY KEY, token bigint NOT NULL)",
      fence: [
        "INSERT INTO lock_fences (name, token) VALUES ($1, $2) ON CONFLICT (name) DO UPDATE SET token = EXCLUDED.token WHERE lock_fences.token <= EXCLUDED.token",
      ],
    });
    assert.deepEqual(onMysql.statements(), {
      createTable:
        "CREATE TABLE IF NOT EXISTS lock_fences (name VARBINARY(255) PRIMARY KEY, token BIGINT NOT NULL) ENGINE = InnoDB",
      fence: [
        "INSERT INTO lock_fences (name, token) VALUES (?, ?) ON DUPLICATE KEY UPDATE token = GREATEST(token, VALUES(token))",
        "SELECT token FROM lock_fences WHERE name = ? FOR UPDATE",
      ],
    });
    const named = onPg.statements({ table: "app.fences" });
    assert.match(named.createTable, /^CREATE TABLE IF NOT EXISTS app\.fences \(/);
    assert.match(named.fence[0]!, /^INSERT INTO app\.fences .* WHERE app\.fences\.token <= EXCLUDED\.token$/);
    assert.match(onMysql.statements({ table: "fences" }).fence[1]!, /^SELECT token FROM fences WHERE/);
  });

  test("the table must be an identifier, optionally schema-qualified, checked before any statement", async () => {
    for (const table of ["lock_fences", "app.lock_fences", "_f1", "F.G_2"]) {
      assert.doesNotThrow(() => onPg.statements({ table }));
      assert.doesNotThrow(() => onMysql.statements({ table }));
    }
    // Pools that would fail to connect: the refusal comes before any connection.
    const pgPool = new pg.Pool({ host: "127.0.0.1", port: 1 });
    const myPool = mysql.createPool({ host: "127.0.0.1", port: 1 });
    const hold = { key: "k", token: 1 };
    const body = async (): Promise<void> => assert.fail("the body ran");
    try {
      for (const table of ["", "1abc", "a.b.c", "a.", ".a", "a-b", "a b", '"q"', "lock_fences; DROP TABLE x", "x--"]) {
        assert.throws(() => onPg.statements({ table }), TypeError, table);
        assert.throws(() => onMysql.statements({ table }), TypeError, table);
        await assert.rejects(onPg.fenced(pgPool, hold, body, { table }), TypeError, table);
        await assert.rejects(onMysql.fenced(myPool, hold, body, { table }), TypeError, table);
        await assert.rejects(onPg.createFenceTable(pgPool, { table }), TypeError, table);
        await assert.rejects(onMysql.createFenceTable(myPool, { table }), TypeError, table);
      }
    } finally {
      await pgPool.end();
      await myPool.end();
    }
  });

  test("the hold's token and the fence's name are checked before any statement", async () => {
    const pgPool = new pg.Pool({ host: "127.0.0.1", port: 1 });
    const myPool = mysql.createPool({ host: "127.0.0.1", port: 1 });
    const body = async (): Promise<void> => assert.fail("the body ran");
    try {
      for (const token of [-1, 1.5, NaN, 2 ** 53, "3"]) {
        const hold = { key: "k", token } as unknown as { key: string; token: number };
        await assert.rejects(onPg.fenced(pgPool, hold, body), TypeError, String(token));
        await assert.rejects(onMysql.fenced(myPool, hold, body), TypeError, String(token));
      }
      await assert.rejects(onPg.fenced(pgPool, { key: "", token: 1 }, body), TypeError);
      await assert.rejects(onMysql.fenced(myPool, { key: "k", token: 1 }, body, { name: "" }), TypeError);
      // MariaDB's VARBINARY(255): a longer name is refused rather than cut short into another's.
      await assert.rejects(onMysql.fenced(myPool, { key: "é".repeat(128), token: 1 }, body), RangeError);
    } finally {
      await pgPool.end();
      await myPool.end();
    }
  });

  test("each subpath takes its own driver's pools and clients, and refuses others before sending anything", async () => {
    const pgPool = new pg.Pool({ host: "127.0.0.1", port: 1 });
    const pgClient = new pg.Client({ host: "127.0.0.1", port: 1 });
    const myPool = mysql.createPool({ host: "127.0.0.1", port: 1 });
    const callbackPool = require("mysql2").createPool({ host: "127.0.0.1", port: 1 });
    const hold = { key: "k", token: 1 };
    const body = async (): Promise<void> => assert.fail("the body ran");
    const wrong = (pattern: RegExp) => (e: unknown) => e instanceof TypeError && pattern.test(e.message);
    try {
      for (const other of [myPool, callbackPool, {}, null, "postgres://x", { query() {} }] as unknown[]) {
        const driver = /pg Pool, Client or PoolClient/;
        await assert.rejects(onPg.fenced(other as pg.Pool, hold, body), wrong(driver));
        await assert.rejects(onPg.fence(other as pg.Client, hold), wrong(driver));
        await assert.rejects(onPg.createFenceTable(other as pg.Pool), wrong(driver));
      }
      for (const other of [pgPool, pgClient, {}, null, { query() {} }] as unknown[]) {
        const driver = /mysql2\/promise Pool or Connection/;
        await assert.rejects(onMysql.fenced(other as mysql.Pool, hold, body), wrong(driver));
        await assert.rejects(onMysql.fence(other as mysql.Connection, hold), wrong(driver));
        await assert.rejects(onMysql.createFenceTable(other as mysql.Pool), wrong(driver));
      }
      // mysql2's callback API: the error says what to pass instead.
      await assert.rejects(onMysql.fenced(callbackPool, hold, body), wrong(/\.promise\(\)/));
      // `fence` runs inside the caller's transaction: a pool would run each statement elsewhere.
      await assert.rejects(onPg.fence(pgPool as unknown as pg.Client, hold), wrong(/not the Pool/));
      await assert.rejects(onMysql.fence(myPool, hold), wrong(/not the pool/));
    } finally {
      await pgPool.end();
      await myPool.end();
      callbackPool.end();
    }
  });
});

let databases: Database[] = [];
const stores = new Map<string, Store>();

before(async () => {
  databases = await startDatabases();
  for (const db of databases) stores.set(db.kind, storeOf(db));
});

after(async () => {
  for (const store of stores.values()) await store.close().catch(() => undefined);
  for (const db of databases) await db.stop();
});

/** The token stored for `name` in `table`, or undefined. */
async function stored(store: Store, table: string, name: string): Promise<number | undefined> {
  const rows = await store.query(`SELECT token FROM ${table} WHERE name = ?`, [name]);
  return rows[0] === undefined ? undefined : Number(rows[0].token);
}

/** A new fence table and a table of notes (the body's writes). */
async function tables(store: Store): Promise<{ fences: string; notes: string }> {
  const t = { fences: unique("fences"), notes: unique("notes") };
  await store.createFenceTable({ table: t.fences });
  await store.exec(`CREATE TABLE ${t.notes} (note VARCHAR(64) NOT NULL)`);
  return t;
}

const notesOf = async (store: Store, table: string): Promise<string[]> =>
  (await store.query(`SELECT note FROM ${table} ORDER BY note`)).map((r) => String(r.note));

for (const kind of KINDS) {
  describe(LABELS[kind], () => {
    let store: Store;
    before(() => {
      store = stores.get(kind)!;
    });

    test("commits the body's result, after the fence raised to the token under the lock's key", async () => {
      const t = await tables(store);
      const result = await store.fenced(
        { key: "{order:1}:lock", token: 7 },
        async (tx) => {
          // the fence came first, in this transaction
          assert.equal(Number((await tx.query(`SELECT token FROM ${t.fences}`))[0]?.token), 7);
          await tx.query(`INSERT INTO ${t.notes} (note) VALUES (?)`, ["seven"]);
          return { sold: 1 };
        },
        { table: t.fences },
      );
      assert.deepEqual(result, { sold: 1 });
      assert.deepEqual(await notesOf(store, t.notes), ["seven"]);
      assert.equal(await stored(store, t.fences, "{order:1}:lock"), 7);
    });

    test("the same token fences again; a larger one raises it; an older one is stale: rolled back, body not run", async () => {
      const t = await tables(store);
      const options = { table: t.fences };
      const note = (n: string) => async (tx: { query(sql: string, p?: unknown[]): Promise<unknown> }) => {
        await tx.query(`INSERT INTO ${t.notes} (note) VALUES (?)`, [n]);
      };
      await store.fenced({ key: "k", token: 5 }, note("a"), options);
      await store.fenced({ key: "k", token: 5 }, note("b"), options); // one hold, several transactions
      await store.fenced({ key: "k", token: 9 }, note("c"), options);
      let ran = false;
      await assert.rejects(
        store.fenced(
          { key: "k", token: 8 },
          async () => {
            ran = true;
          },
          options,
        ),
        (e: unknown) => {
          assert.ok(e instanceof StaleError, String(e));
          assert.match(e.message, /"k"/);
          assert.match(e.message, /token 8\b/);
          return true;
        },
      );
      assert.equal(ran, false);
      assert.equal(await stored(store, t.fences, "k"), 9, "the stale fence statement changed nothing");
      assert.deepEqual(await notesOf(store, t.notes), ["a", "b", "c"]);
    });

    // A connection not given back would hang the next call: the timeout makes that a failure.
    test(
      "the body's error comes back unchanged, its writes rolled back, the connection given back",
      { timeout: 30_000 },
      async () => {
        // One connection in the pool.
        const db = stores.get(kind)!.db;
        const one = kind === "postgres" ? pgStore(db, { max: 1 }) : mysqlStore(db, { connectionLimit: 1 });
        try {
          const t = await tables(one);
          const boom = new Error("boom");
          await one.fenced({ key: "s", token: 2 }, async () => undefined, { table: t.fences });
          for (let i = 0; i < 3; i++) {
            await assert.rejects(
              one.fenced(
                { key: "k", token: 1 },
                async (tx) => {
                  await tx.query(`INSERT INTO ${t.notes} (note) VALUES (?)`, ["lost"]);
                  throw boom;
                },
                { table: t.fences },
              ),
              (e: unknown) => e === boom,
            );
            // a stale fence gives it back too
            await assert.rejects(
              one.fenced({ key: "s", token: 1 }, async () => undefined, { table: t.fences }),
              StaleError,
            );
          }
          assert.deepEqual(await notesOf(one, t.notes), []);
          assert.equal(await one.fenced({ key: "k", token: 1 }, async () => "ok", { table: t.fences }), "ok");
        } finally {
          await one.close();
        }
      },
    );

    test("fences by name: `name` names one, the lock's key is the default", async () => {
      const t = await tables(store);
      const options = { table: t.fences };
      await store.fenced({ key: "lock", token: 10 }, async () => undefined, { ...options, name: "sku:1" });
      await store.fenced({ key: "lock", token: 4 }, async () => undefined, { ...options, name: "sku:2" });
      await store.fenced({ key: "lock", token: 3 }, async () => undefined, options);
      await assert.rejects(
        store.fenced({ key: "other", token: 9 }, async () => undefined, { ...options, name: "sku:1" }),
        StaleError,
      );
      assert.deepEqual([await stored(store, t.fences, "sku:1"), await stored(store, t.fences, "sku:2")], [10, 4]);
      assert.equal(await stored(store, t.fences, "lock"), 3);
    });

    test("the helper never creates the table: the database's error, nothing written; createFenceTable is idempotent", async () => {
      const table = unique("fences");
      await assert.rejects(
        store.fenced({ key: "k", token: 1 }, async () => assert.fail("the body ran"), { table }),
        (e: unknown) => !(e instanceof StaleError) && /exist/i.test(String(e)),
      );
      await assert.rejects(store.query(`SELECT * FROM ${table}`));
      await store.createFenceTable({ table });
      await store.createFenceTable({ table });
      await store.fenced({ key: "k", token: 1 }, async () => undefined, { table });
      assert.equal(await stored(store, table, "k"), 1);
    });

    test("a schema-qualified table", async () => {
      const schema = unique("app");
      await store.exec(kind === "postgres" ? `CREATE SCHEMA ${schema}` : `CREATE DATABASE ${schema}`);
      const table = `${schema}.lock_fences`;
      await store.createFenceTable({ table });
      await store.fenced({ key: "k", token: 3 }, async () => undefined, { table });
      await assert.rejects(
        store.fenced({ key: "k", token: 2 }, async () => undefined, { table }),
        StaleError,
      );
      assert.equal(await stored(store, table, "k"), 3);
    });

    test("a released hold still fences: the database decides, not the lease", async () => {
      const server = await Server.start();
      const flavour = FLAVOURS[0]!;
      const redis = await flavour.client(server.port);
      try {
        const t = await tables(store);
        const locks = new Locks(redis);
        const hold = await locks.acquire("{fence}:lock", { ttl: 5_000 });
        assert.equal(await hold.release(), true);
        assert.equal(await store.fenced(hold, async () => "written", { table: t.fences }), "written");
        assert.equal(await stored(store, t.fences, "{fence}:lock"), hold.token);
        locks.close();
      } finally {
        await flavour.close(redis);
        server.stop();
      }
    });
  });
}

describe("PostgreSQL: pg's own cases", () => {
  let pool: pg.Pool;
  let url: string;
  before(() => {
    const store = stores.get("postgres") as Store & { pool: pg.Pool };
    pool = store.pool;
    url = store.db.url;
  });

  test("fence() in a transaction the caller runs", async () => {
    const table = unique("fences");
    await onPg.createFenceTable(pool, { table });
    const client = await pool.connect();
    try {
      await client.query("BEGIN");
      await onPg.fence(client, { key: "k", token: 6 }, { table });
      await client.query("COMMIT");
      await client.query("BEGIN");
      await assert.rejects(onPg.fence(client, { key: "k", token: 5 }, { table }), StaleError);
      await client.query("ROLLBACK");
    } finally {
      client.release();
    }
    assert.equal((await pool.query(`SELECT token FROM ${table}`)).rows[0]?.token, "6");
  });

  test("a pg.Client and a PoolClient: the transaction runs on them, and they stay the caller's", async () => {
    const table = unique("fences");
    await onPg.createFenceTable(pool, { table });
    const client = new pg.Client({ connectionString: url });
    await client.connect();
    try {
      const got = await onPg.fenced(client, { key: "k", token: 1 }, async (c) => c, { table });
      assert.equal(got, client);
      assert.equal((await client.query("SELECT 1 AS one")).rows[0]?.one, 1, "still open");
    } finally {
      await client.end();
    }
    const pooled = await pool.connect();
    try {
      const got = await onPg.fenced(pooled, { key: "k", token: 2 }, async (c) => c, { table });
      assert.equal(got, pooled);
    } finally {
      pooled.release(); // throws if the helper had released it
    }
  });

  test("fence() outside a transaction is refused: the fence alone would order nothing", async () => {
    const table = unique("fences");
    await onPg.createFenceTable(pool, { table });
    const client = await pool.connect();
    try {
      await assert.rejects(onPg.fence(client, { key: "k", token: 3 }, { table }), /needs a transaction/);
    } finally {
      client.release();
    }
    assert.equal((await pool.query(`SELECT count(*)::int AS n FROM ${table}`)).rows[0]?.n, 0);
  });

  test("a client already in a transaction is refused, and its transaction left as it was", async () => {
    const table = unique("fences");
    await onPg.createFenceTable(pool, { table });
    const client = await pool.connect();
    try {
      await client.query("BEGIN");
      await client.query(`INSERT INTO ${table} (name, token) VALUES ('mine', 1)`);
      await assert.rejects(
        onPg.fenced(client, { key: "k", token: 2 }, () => assert.fail("the body ran"), { table }),
        /outside any transaction/,
      );
      await client.query("COMMIT"); // the caller's own transaction, still open and intact
    } finally {
      client.release();
    }
    const names = (await pool.query(`SELECT name FROM ${table} ORDER BY name`)).rows.map((r) => r.name);
    assert.deepEqual(names, ["mine"]);
  });

  test("a body that catches a failed statement: COMMIT rolls back, and fenced says so", async () => {
    const table = unique("fences");
    await onPg.createFenceTable(pool, { table });
    await assert.rejects(
      onPg.fenced(
        pool,
        { key: "k", token: 1 },
        async (c) => {
          await c.query("SELECT * FROM no_such_table").catch(() => undefined);
        },
        { table },
      ),
      /rolled back at COMMIT/,
    );
    assert.equal((await pool.query(`SELECT count(*)::int AS n FROM ${table}`)).rows[0]?.n, 0);
  });
  test("an error at COMMIT (a deferred constraint) rejects with the database's error; nothing written", async () => {
    const table = unique("fences");
    const notes = unique("notes");
    await onPg.createFenceTable(pool, { table });
    await pool.query(`CREATE TABLE ${notes} (note text, UNIQUE (note) DEFERRABLE INITIALLY DEFERRED)`);
    await assert.rejects(
      onPg.fenced(
        pool,
        { key: "k", token: 1 },
        async (c) => {
          await c.query(`INSERT INTO ${notes} VALUES ('twice'), ('twice')`); // checked at COMMIT
        },
        { table },
      ),
      { code: "23505" },
    );
    assert.equal((await pool.query(`SELECT count(*)::int AS n FROM ${notes}`)).rows[0]?.n, 0);
    assert.equal((await pool.query(`SELECT count(*)::int AS n FROM ${table}`)).rows[0]?.n, 0);
    assert.equal(await onPg.fenced(pool, { key: "k", token: 1 }, async () => "again", { table }), "again");
  });
});

describe("MariaDB: mysql2's own cases", () => {
  let pool: mysql.Pool;
  let url: string;
  before(() => {
    const store = stores.get("mariadb") as Store & { pool: mysql.Pool };
    pool = store.pool;
    url = store.db.url;
  });

  test("fence() in a transaction the caller runs", async () => {
    const table = unique("fences");
    await onMysql.createFenceTable(pool, { table });
    const conn = await pool.getConnection();
    try {
      await conn.beginTransaction();
      await onMysql.fence(conn, { key: "k", token: 6 }, { table });
      await conn.commit();
      await conn.beginTransaction();
      await assert.rejects(onMysql.fence(conn, { key: "k", token: 5 }, { table }), StaleError);
      await conn.rollback();
    } finally {
      conn.release();
    }
    const [rows] = await pool.query(`SELECT token FROM ${table}`);
    assert.equal((rows as { token: number }[])[0]?.token, 6);
  });

  test("a Connection: the transaction runs on it, and it stays the caller's", async () => {
    const table = unique("fences");
    await onMysql.createFenceTable(pool, { table });
    const conn = await mysql.createConnection(url);
    try {
      const got = await onMysql.fenced(conn, { key: "k", token: 1 }, async (c) => c, { table });
      assert.equal(got, conn);
      await conn.query("SELECT 1");
    } finally {
      await conn.end();
    }
  });

  test("pools that return rows as arrays and big numbers as strings: the token read back still compares", async () => {
    const table = unique("fences");
    const odd = mysql.createPool({ uri: url, rowsAsArray: true, supportBigNumbers: true, bigNumberStrings: true });
    try {
      await onMysql.createFenceTable(odd, { table });
      await onMysql.fenced(odd, { key: "k", token: 2 ** 40 }, async () => undefined, { table });
      await onMysql.fenced(odd, { key: "k", token: 2 ** 40 }, async () => undefined, { table });
      await assert.rejects(
        onMysql.fenced(odd, { key: "k", token: 2 ** 40 - 1 }, async () => undefined, { table }),
        {
          name: "StaleError",
          message: new RegExp(`holds token ${2 ** 40}, newer than this hold's token ${2 ** 40 - 1}`),
        },
      );
    } finally {
      await odd.end();
    }
  });
});
