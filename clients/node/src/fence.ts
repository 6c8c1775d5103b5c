/**
 * Fenced transactions (docs/fencing.md; rule 13 of docs/clients.md), written once for every
 * driver: the fence table's statements per database, the rule that reads their answer, and the
 * transaction around the caller's body. The drivers' adapters (`pg.ts`, `mysql2.ts`) only say
 * how to run a statement on a connection, and how to take one from a pool and give it back.
 *
 * The transaction's FIRST statement raises the resource's fence to the hold's token unless a
 * larger token is stored; that takes the fence row's write lock until the transaction ends, so
 * two holders' transactions on one resource run one after the other, and a holder whose lease
 * ended while it was paused finds the newer token and rolls back before its body runs.
 */
import { StaleError } from "./errors.js";
import type { Hold } from "./hold.js";

/** The databases whose fence statements this file knows. */
export type Dialect = "postgres" | "mysql";

/** What a fence needs of a hold: its lock's key (the fence's default name) and its token. */
export type FenceHold = Pick<Hold, "key" | "token">;

export interface TableOptions {
  /** The fence table (default `lock_fences`), an identifier, optionally schema-qualified
   * (`app.lock_fences`). */
  table?: string;
}

export interface FenceOptions extends TableOptions {
  /** The fence's name, one per resource (default: the hold's lock key). */
  name?: string;
}

/** The SQL a helper sends: the DDL of the fence table and the fence statement(s), in order. */
export interface FenceStatements {
  /** `CREATE TABLE IF NOT EXISTS ...` with the DDL of docs/fencing.md. */
  createTable: string;
  /** The fence, the transaction's first statement(s): parameters (name, token), then (name). */
  fence: readonly [string, ...string[]];
}

export const DEFAULT_TABLE = "lock_fences";

const IDENTIFIER = /^[A-Za-z_][A-Za-z0-9_]*(?:\.[A-Za-z_][A-Za-z0-9_]*)?$/;

/** MariaDB's `name VARBINARY(255)`: a longer name would be refused (or, outside strict mode,
 * cut short, which could make two fences one). */
const MYSQL_NAME_BYTES = 255;

/** The table option, checked: it is written into the SQL, so only an identifier passes. */
/** What a value handed to a helper is, for its error message: "a Pool", "undefined". */
export function describe(db: unknown): string {
  if (typeof db !== "object" || db === null) return String(db);
  return `a ${db.constructor?.name ?? "object"}`;
}

export function tableOf(options: TableOptions | undefined): string {
  const table: unknown = options?.table ?? DEFAULT_TABLE;
  if (typeof table !== "string" || !IDENTIFIER.test(table)) {
    throw new TypeError(
      `the fence table must be an identifier ([A-Za-z_][A-Za-z0-9_]*, optionally schema.table), not ${JSON.stringify(table)}`,
    );
  }
  return table;
}

/** The statements of `dialect` on `table` (an identifier checked by `tableOf`). */
export function statementsOf(dialect: Dialect, table: string): FenceStatements {
  switch (dialect) {
    case "postgres":
      return {
        createTable: `CREATE TABLE IF NOT EXISTS ${table} (name text PRIMARY KEY, token bigint NOT NULL)`,
        fence: [
          `INSERT INTO ${table} (name, token) VALUES ($1, $2) ON CONFLICT (name) DO UPDATE SET token = EXCLUDED.token WHERE ${table}.token <= EXCLUDED.token`,
        ],
      };
    case "mysql":
      return {
        createTable: `CREATE TABLE IF NOT EXISTS ${table} (name VARBINARY(255) PRIMARY KEY, token BIGINT NOT NULL) ENGINE = InnoDB`,
        fence: [
          `INSERT INTO ${table} (name, token) VALUES (?, ?) ON DUPLICATE KEY UPDATE token = GREATEST(token, VALUES(token))`,
          `SELECT token FROM ${table} WHERE name = ? FOR UPDATE`,
        ],
      };
  }
}

/** How each database starts a transaction. (MySQL: never `WITH CONSISTENT SNAPSHOT`, which would
 * take the snapshot before the fence waited for the previous holder's commit.) */
const BEGIN: Record<Dialect, string> = { postgres: "BEGIN", mysql: "START TRANSACTION" };

/** What an adapter answers for one statement: rows affected, the rows (as arrays), and the
 * command tag where the driver has one (PostgreSQL's COMMIT answers `ROLLBACK` for a transaction
 * that had failed). */
export interface Outcome {
  affected: number;
  rows: readonly unknown[][];
  command?: string;
}

/** Runs one statement with its parameters on one connection. */
export type Run = (sql: string, params: readonly unknown[]) => Promise<Outcome>;

/** One connection of the caller's database, as an adapter lends it to a transaction. */
export interface Lent<C> {
  /** What the body gets. */
  client: C;
  run: Run;
  /** Give it back (to its pool, if it came from one); `broken`: a COMMIT or ROLLBACK failed, so
   * it must not be reused. */
  giveBack(broken: boolean): void;
}

/** The fence's name, token and table, checked before anything is sent. */
interface Fence {
  dialect: Dialect;
  table: string;
  name: string;
  token: number;
}

function fenceOf(dialect: Dialect, hold: FenceHold, options: FenceOptions | undefined): Fence {
  const table = tableOf(options);
  if (typeof hold !== "object" || hold === null) throw new TypeError("a fence needs a hold (its key and token)");
  const name: unknown = options?.name ?? hold.key;
  if (typeof name !== "string" || name === "") {
    throw new TypeError(`the fence's name must be a non-empty string (the hold's key by default), not ${String(name)}`);
  }
  if (dialect === "mysql" && Buffer.byteLength(name) > MYSQL_NAME_BYTES) {
    throw new RangeError(`the fence's name is longer than ${MYSQL_NAME_BYTES} bytes (the column is VARBINARY(255))`);
  }
  const token: unknown = hold.token;
  if (typeof token !== "number" || !Number.isSafeInteger(token) || token < 0) {
    throw new TypeError(`the hold's token must be a non-negative integer, not ${String(token)}`);
  }
  return { dialect, table, name, token };
}

/** The stored token MySQL reads back: a number, or a string or bigint where the pool is set up
 * to return big numbers so. */
function integer(value: unknown): bigint | undefined {
  if (typeof value === "bigint") return value;
  if (typeof value === "number" && Number.isSafeInteger(value)) return BigInt(value);
  if (typeof value === "string" && /^-?\d+$/.test(value)) return BigInt(value);
  return undefined;
}

function stale(f: Fence, stored?: bigint): StaleError {
  const held = stored === undefined ? "a token newer than" : `token ${stored}, newer than`;
  return new StaleError(
    `the fence "${f.name}" in ${f.table} holds ${held} this hold's token ${f.token}: a newer holder has been here; rolled back`,
  );
}

/** The fence statement(s) on `run`, read by the rule of `f.dialect`: returns when the fence is
 * this token's, throws `StaleError` when a larger one is stored. */
async function raise(run: Run, f: Fence): Promise<void> {
  const [upsert, readBack] = statementsOf(f.dialect, f.table).fence;
  const raised = await run(upsert, [f.name, f.token]);
  if (readBack === undefined) {
    // PostgreSQL: 1 row = raised (or already this token), 0 = the WHERE found a larger one.
    if (raised.affected === 1) return;
    if (raised.affected === 0) throw stale(f);
    throw new Error(`the fence statement on ${f.table} affected ${raised.affected} rows (1 or 0 expected)`);
  }
  // MySQL/MariaDB: the affected-row count cannot tell "newer" from "the same"; the token read
  // back under the row lock the upsert took can.
  const stored = integer((await run(readBack, [f.name])).rows[0]?.[0]);
  const token = BigInt(f.token);
  if (stored === token) return;
  if (stored !== undefined && stored > token) throw stale(f, stored);
  throw new Error(`the fence "${f.name}" in ${f.table} reads back ${String(stored)} after raising it to ${f.token}`);
}

/** `fence(...)`: only the fence statement, on a connection whose transaction the caller runs. */
export async function fenceOn(dialect: Dialect, run: Run, hold: FenceHold, options?: FenceOptions): Promise<void> {
  await raise(run, fenceOf(dialect, hold, options));
}

/** `createFenceTable(...)`: the DDL, idempotent. */
export async function createTableOn(dialect: Dialect, run: Run, options?: TableOptions): Promise<void> {
  await run(statementsOf(dialect, tableOf(options)).createTable, []);
}

/**
 * `fenced(...)`: on a connection from `lend`, BEGIN, the fence, the body, COMMIT. The body's
 * error is rethrown unchanged after a ROLLBACK; a newer fence rolls back before the body runs
 * and throws `StaleError`. No retries: the database decides, the caller chooses what to do.
 */
export async function inTransaction<C, T>(
  dialect: Dialect,
  lend: () => Promise<Lent<C>>,
  hold: FenceHold,
  body: (client: C) => T | PromiseLike<T>,
  options?: FenceOptions,
): Promise<T> {
  const f = fenceOf(dialect, hold, options);
  if (typeof body !== "function") throw new TypeError("the body must be a function (client) => result");
  const conn = await lend();
  let broken = false;
  try {
    try {
      await conn.run(BEGIN[dialect], []);
    } catch (e) {
      broken = true;
      throw e;
    }
    let result: T;
    try {
      await raise(conn.run, f);
      result = await body(conn.client);
    } catch (e) {
      try {
        await conn.run("ROLLBACK", []);
      } catch {
        broken = true; // the body's error is the one to report; the connection is not reused
      }
      throw e;
    }
    let committed: Outcome;
    try {
      committed = await conn.run("COMMIT", []);
    } catch (e) {
      broken = true;
      throw e;
    }
    if (committed.command === "ROLLBACK") {
      throw new Error(
        "the transaction was rolled back at COMMIT: a statement in the body had failed (its error was caught), so nothing was written",
      );
    }
    return result;
  } finally {
    conn.giveBack(broken);
  }
}
