/**
 * Fenced transactions on MySQL and MariaDB (InnoDB) with `mysql2/promise`:
 * `redis-lock-client/mysql2`. The statements and the rule are `fence.ts`'s; this file only says
 * how to run a statement on a connection and how to take one from a pool and give it back. It
 * never loads `mysql2` itself (the imports below are types only): you pass your own pool or
 * connection.
 */
import type { Connection, Pool, PoolConnection, PoolNamespace, ResultSetHeader, RowDataPacket } from "mysql2/promise";
import {
  createTableOn,
  describe,
  fenceOn,
  inTransaction,
  statementsOf,
  tableOf,
  type FenceHold,
  type FenceOptions,
  type FenceStatements,
  type Lent,
  type Run,
  type TableOptions,
} from "./fence.js";

export type { FenceHold, FenceOptions, FenceStatements, TableOptions } from "./fence.js";

type Shape = "pool" | "connection";

/** A `mysql2/promise` pool (or pool cluster namespace), or a connection; mysql2's callback API
 * and other drivers' objects are refused before a statement is sent. */
function shapeOf(db: unknown, what: string): Shape {
  if (typeof db === "object" && db !== null) {
    const d = db as Record<string, unknown>;
    if (typeof d.promise === "function" && typeof d.query === "function") {
      throw new TypeError(
        `redis-lock-client/mysql2: ${what} needs mysql2's promise API: pass ${describe(db)}.promise(), or create it with mysql2/promise`,
      );
    }
    if (typeof d.query === "function") {
      if (typeof d.getConnection === "function") return "pool";
      if (typeof d.beginTransaction === "function" && "connection" in d) return "connection";
    }
  }
  throw new TypeError(
    `redis-lock-client/mysql2: ${what} needs a mysql2/promise Pool or Connection, not ${describe(db)}`,
  );
}

function runOn(conn: Pick<Connection, "query">): Run {
  return async (sql, values) => {
    // rowsAsArray: the token is read by position, whatever the pool's own row options.
    const [result] = await conn.query<ResultSetHeader | RowDataPacket[][]>({
      sql,
      values: [...values],
      rowsAsArray: true,
    });
    if (Array.isArray(result)) return { affected: 0, rows: result };
    return { affected: result.affectedRows, rows: [] };
  };
}

/**
 * Runs `body` in a transaction whose first statements raise the fence to `hold.token` (and read
 * it back under the row lock), and resolves with what it returns, after the COMMIT. Given a pool,
 * it takes a connection for the transaction and gives it back; given a connection, it runs on it
 * (which must not be in a transaction already: mysql2 cannot tell, and the START TRANSACTION
 * sent here commits whatever the connection had open). The body's error is rethrown unchanged after a
 * ROLLBACK. A larger token stored for the fence (a newer holder has been in) rolls back before
 * the body runs and rejects with `StaleError`. The table is not created here
 * (`createFenceTable`); nothing is retried (a deadlock, 1213, is yours to retry).
 */
export function fenced<T>(
  db: Pool | PoolNamespace,
  hold: FenceHold,
  body: (connection: PoolConnection) => T | PromiseLike<T>,
  options?: FenceOptions,
): Promise<T>;
export function fenced<C extends Connection, T>(
  db: C,
  hold: FenceHold,
  body: (connection: C) => T | PromiseLike<T>,
  options?: FenceOptions,
): Promise<T>;
export async function fenced<T>(
  db: Pool | PoolNamespace | PoolConnection,
  hold: FenceHold,
  body: (connection: PoolConnection) => T | PromiseLike<T>,
  options?: FenceOptions,
): Promise<T> {
  const shape = shapeOf(db, "fenced");
  const lend = async (): Promise<Lent<PoolConnection>> => {
    if (shape === "connection") {
      const conn = db as PoolConnection; // a connection: the overloads hand the body its own type
      return { client: conn, run: runOn(conn), giveBack: () => undefined };
    }
    const conn = await (db as Pool | PoolNamespace).getConnection();
    return { client: conn, run: runOn(conn), giveBack: (broken) => (broken ? conn.destroy() : conn.release()) };
  };
  return inTransaction("mysql", lend, hold, body, options);
}

/**
 * Only the fence statements, on `connection`, inside a transaction you (or a framework) run: call
 * it right after START TRANSACTION, before any read. Rejects with `StaleError` when a newer token
 * is stored: then roll the transaction back.
 */
export async function fence(connection: Connection, hold: FenceHold, options?: FenceOptions): Promise<void> {
  if (shapeOf(connection, "fence") === "pool") {
    throw new TypeError("redis-lock-client/mysql2: fence runs in your transaction: pass its connection, not the pool");
  }
  await fenceOn("mysql", runOn(connection), hold, options);
}

/** `CREATE TABLE IF NOT EXISTS lock_fences (name VARBINARY(255) PRIMARY KEY, token BIGINT NOT
 * NULL) ENGINE = InnoDB` (or the table named by `options.table`). */
export async function createFenceTable(db: Pool | PoolNamespace | Connection, options?: TableOptions): Promise<void> {
  shapeOf(db, "createFenceTable");
  await createTableOn("mysql", runOn(db), options);
}

/** The SQL this module sends on MySQL and MariaDB (for `options.table`). */
export function statements(options?: TableOptions): FenceStatements {
  return statementsOf("mysql", tableOf(options));
}
