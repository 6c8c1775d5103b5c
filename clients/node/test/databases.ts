/**
 * Real databases for the fenced-transaction tests: throwaway PostgreSQL and MariaDB servers
 * started by the repository's scripts/testdb.sh (once per test process, each test with tables of
 * its own) and stopped by it, by PID. `Store` runs the same test on either: the SQL of the tests
 * is written with `?` placeholders (numbered for PostgreSQL here), and `fenced` goes through the
 * package's own helper for the database (`redis-lock-client/pg` or `/mysql2`).
 */
import { execFile } from "node:child_process";
import { mkdtempSync, readFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { promisify } from "node:util";
import mysql from "mysql2/promise";
import pg from "pg";
import * as onMysql from "redis-lock-client/mysql2";
import * as onPg from "redis-lock-client/pg";
import type { FenceHold, FenceOptions, TableOptions } from "redis-lock-client/pg";
import { after, before } from "node:test";
import { ROOT, Server, eventually } from "./support.js";

const run = promisify(execFile);
const SCRIPT = join(ROOT, "scripts/testdb.sh");

export type Kind = "postgres" | "mariadb";
export const KINDS: Kind[] = ["postgres", "mariadb"];
export const LABELS: Record<Kind, string> = { postgres: "PostgreSQL", mariadb: "MariaDB" };

/** One server of scripts/testdb.sh. */
export class Database {
  constructor(
    readonly kind: Kind,
    readonly dir: string,
    readonly url: string,
  ) {}

  /**
   * Starts one in a new directory under the system temp dir (the server's user must reach it);
   * the script stops it by itself if this process dies first. TMPDIR is that directory too: the
   * server's temporary files (MariaDB's bootstrap names them by its pid) stay its own, apart
   * from other servers' in the shared /tmp.
   */
  static async start(kind: Kind): Promise<Database> {
    const dir = mkdtempSync(join(tmpdir(), `redislock-node-${kind}-`));
    try {
      const { stdout } = await run("bash", [SCRIPT, "start", kind, dir, String(process.pid)], {
        timeout: 120_000,
        env: { ...process.env, TMPDIR: dir },
      });
      const url = /^URL=(.*)$/m.exec(stdout)?.[1];
      if (!url) throw new Error(`testdb.sh printed no URL: ${stdout}`);
      return new Database(kind, dir, url);
    } catch (e) {
      const logs = ["init.log", "server.log"].map((f) => {
        try {
          return `${f}: ${readFileSync(join(dir, f), "utf8").slice(-2000)}`;
        } catch {
          return "";
        }
      });
      await run("bash", [SCRIPT, "stop", dir]).catch(() => undefined); // by PID, if it got that far
      throw new Error(`${kind} did not start: ${String(e)}\n${logs.join("\n")}`, { cause: e });
    }
  }

  async stop(): Promise<void> {
    await run("bash", [SCRIPT, "stop", this.dir], { timeout: 60_000 });
  }
}

/** Both databases, started at once. */
export async function startDatabases(): Promise<Database[]> {
  const started = await Promise.allSettled(KINDS.map((k) => Database.start(k)));
  const up = started.flatMap((s) => (s.status === "fulfilled" ? [s.value] : []));
  const failed = started.find((s) => s.status === "rejected");
  if (failed) {
    await Promise.all(up.map((d) => d.stop()));
    throw failed.reason;
  }
  return up;
}

export type Row = Record<string, unknown>;

/** A transaction (or a pool) as the tests talk to it. */
export interface Tx {
  query(sql: string, params?: unknown[]): Promise<Row[]>;
}

/** The same tests on either database. */
export interface Store extends Tx {
  readonly label: string;
  readonly db: Database;
  /** One statement on the pool: its rows and how many rows it changed. */
  exec(sql: string, params?: unknown[]): Promise<{ rows: Row[]; affected: number }>;
  /** The package's helper on this store's pool. */
  fenced<T>(hold: FenceHold, body: (tx: Tx) => Promise<T>, options?: FenceOptions): Promise<T>;
  createFenceTable(options?: TableOptions): Promise<void>;
  /** Until a transaction waits for a row lock (true), or `timeout` ms pass (false). */
  untilLockWait(timeout: number): Promise<boolean>;
  /** A deadlock, a serialization failure or a lock wait that timed out: roll back and retry. */
  retryable(e: unknown): boolean;
  /** `CREATE TABLE` for the tests' tables. */
  stockTable(table: string): string;
  salesTable(table: string): string;
  close(): Promise<void>;
}

/** `?` placeholders numbered for PostgreSQL. */
const numbered = (sql: string): string => {
  let n = 0;
  return sql.replace(/\?/g, () => `$${++n}`);
};

const pgTx = (client: pg.ClientBase): Tx => ({
  async query(sql, params = []) {
    return (await client.query(numbered(sql), params)).rows;
  },
});

const mysqlTx = (conn: mysql.Connection): Tx => ({
  async query(sql, params = []) {
    const [rows] = await conn.query(sql, params);
    return Array.isArray(rows) ? (rows as Row[]) : [];
  },
});

export function pgStore(db: Database, config: pg.PoolConfig = {}): Store & { pool: pg.Pool } {
  const pool = new pg.Pool({ connectionString: db.url, max: 6, ...config });
  pool.on("error", () => undefined); // a client of the pool dropped by the server while idle
  return {
    label: LABELS.postgres,
    db,
    pool,
    query: async (sql, params = []) => (await pool.query(numbered(sql), params)).rows,
    async exec(sql, params = []) {
      const r = await pool.query(numbered(sql), params);
      return { rows: r.rows, affected: r.rowCount ?? 0 };
    },
    fenced: (hold, body, options) => onPg.fenced(pool, hold, (client) => body(pgTx(client)), options),
    createFenceTable: (options) => onPg.createFenceTable(pool, options),
    untilLockWait: (timeout) =>
      eventually(async () => {
        const r = await pool.query(
          "SELECT count(*)::int AS n FROM pg_stat_activity WHERE wait_event_type = 'Lock' AND datname = current_database()",
        );
        return Number(r.rows[0]?.n) > 0;
      }, timeout),
    retryable: (e) => ["40001", "40P01", "55P03"].includes(String((e as { code?: unknown })?.code)),
    stockTable: (t) =>
      `CREATE TABLE ${t} (sku text PRIMARY KEY, qty integer NOT NULL, fence bigint NOT NULL DEFAULT 0)`,
    salesTable: (t) =>
      `CREATE TABLE ${t} (id bigserial PRIMARY KEY, sku text NOT NULL, token bigint NOT NULL, pid int)`,
    close: () => pool.end(),
  };
}

export function mysqlStore(db: Database, config: mysql.PoolOptions = {}): Store & { pool: mysql.Pool } {
  const pool = mysql.createPool({ uri: db.url, connectionLimit: 6, ...config });
  return {
    label: LABELS.mariadb,
    db,
    pool,
    query: mysqlTx(pool).query,
    async exec(sql, params = []) {
      const [r] = await pool.query(sql, params);
      return Array.isArray(r) ? { rows: r as Row[], affected: 0 } : { rows: [], affected: r.affectedRows };
    },
    fenced: (hold, body, options) => onMysql.fenced(pool, hold, (conn) => body(mysqlTx(conn)), options),
    createFenceTable: (options) => onMysql.createFenceTable(pool, options),
    // InnoDB refreshes innodb_trx only once it has not been read for 100 ms: polled every 150 ms.
    untilLockWait: (timeout) =>
      eventually(
        async () => {
          const [rows] = await pool.query(
            "SELECT count(*) AS n FROM information_schema.innodb_trx WHERE trx_state = 'LOCK WAIT'",
          );
          return Number((rows as Row[])[0]?.n) > 0;
        },
        timeout,
        150,
      ),
    retryable: (e) => [1213, 1205].includes(Number((e as { errno?: unknown })?.errno)),
    stockTable: (t) =>
      `CREATE TABLE ${t} (sku VARCHAR(64) PRIMARY KEY, qty INT NOT NULL, fence BIGINT NOT NULL DEFAULT 0) ENGINE = InnoDB`,
    salesTable: (t) =>
      `CREATE TABLE ${t} (id BIGINT AUTO_INCREMENT PRIMARY KEY, sku VARCHAR(64) NOT NULL, token BIGINT NOT NULL, pid INT) ENGINE = InnoDB`,
    close: () => pool.end(),
  };
}

export function storeOf(db: Database): Store {
  return db.kind === "postgres" ? pgStore(db) : mysqlStore(db);
}

let made = 0;
/** A table name no other test of this process (or another) uses. */
export const unique = (prefix: string): string => `${prefix}_${process.pid}_${++made}`;

/** A stock table with `qty` of `sku`, a sales table and a fence table, all new. */
export async function shop(
  store: Store,
  sku: string,
  qty: number,
): Promise<{ stock: string; sales: string; fences: string }> {
  const t = { stock: unique("stock"), sales: unique("sales"), fences: unique("fences") };
  await store.exec(store.stockTable(t.stock));
  await store.exec(store.salesTable(t.sales));
  await store.createFenceTable({ table: t.fences });
  await store.exec(`INSERT INTO ${t.stock} (sku, qty) VALUES (?, ?)`, [sku, qty]);
  return t;
}

/**
 * A Redis server with the module and a `Store` on each database, started before the file's
 * tests and stopped (by PID) after them: read `server` and `stores` inside the tests.
 */
export function withServerAndStores(): { server: Server; stores: Map<Kind, Store> } {
  const live = { server: undefined as unknown as Server, stores: new Map<Kind, Store>() };
  before(async () => {
    const [s, dbs] = await Promise.all([Server.start(), startDatabases()]);
    live.server = s;
    for (const db of dbs) live.stores.set(db.kind, storeOf(db));
  });
  after(async () => {
    for (const store of live.stores.values()) {
      await store.close().catch(() => undefined);
      await store.db.stop();
    }
    live.server?.stop();
  });
  return live;
}
