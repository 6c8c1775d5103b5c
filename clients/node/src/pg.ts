/**
 * Fenced transactions on PostgreSQL with node-postgres (`pg`): `redis-lock-client/pg`. The
 * statements and the rule are `fence.ts`'s; this file only says how to run a statement on a pg
 * client and how to take one from a `Pool` and give it back. It never loads `pg` itself (the
 * imports below are types only): you pass your own `Pool`, `Client` or `PoolClient`.
 */
import type { ClientBase, Pool, PoolClient } from "pg";
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

type Shape = "pool" | "client";

/** A pg `Pool`, or a client (`pg.Client`, pure JS or native, or a pool's `PoolClient`); anything
 * else (another driver's pool, say) is refused before a statement is sent. */
function shapeOf(db: unknown, what: string): Shape {
  if (typeof db === "object" && db !== null) {
    const d = db as Record<string, unknown>;
    if (typeof d.connect === "function" && typeof d.query === "function") {
      if ("totalCount" in d && "idleCount" in d) return "pool";
      if ("connectionParameters" in d) return "client";
    }
  }
  throw new TypeError(`redis-lock-client/pg: ${what} needs a pg Pool, Client or PoolClient, not ${describe(db)}`);
}

/**
 * A client already in a transaction would make the fence its second statement (PostgreSQL
 * answers BEGIN with a warning only), after reads that may predate the previous holder's commit.
 * pg 8.12 and newer say where the client is (`"I"`: idle); older ones are not checked.
 */
function refuseOpenTransaction(client: ClientBase): void {
  const status = transactionStatus(client);
  if (status !== undefined && status !== "I") {
    throw new Error(
      "redis-lock-client/pg: fenced() needs a client outside any transaction " +
        `(its status is ${JSON.stringify(status)}): a read before the fence may be stale`,
    );
  }
}

/** Where `client` is: `"I"` idle, `"T"` in a transaction, `"E"` in a failed one (pg 8.12+). */
function transactionStatus(client: ClientBase): string | undefined {
  const status = (client as { getTransactionStatus?: () => string | null }).getTransactionStatus?.();
  return status ?? undefined;
}

function runOn(client: Pick<ClientBase, "query">): Run {
  return async (text, values) => {
    const r = await client.query({ text, values: [...values], rowMode: "array" });
    return { affected: r.rowCount ?? 0, rows: r.rows, command: r.command };
  };
}

/**
 * Runs `body` in a transaction whose first statement raises the fence to `hold.token`, and
 * resolves with what it returns, after the COMMIT. Given a `Pool`, it takes a client for the
 * transaction and gives it back; given a client, it runs on it (which must not be in a
 * transaction already). The body's error is rethrown unchanged after a ROLLBACK. A larger token
 * stored for the fence (a newer holder has been in) rolls back before the body runs and rejects
 * with `StaleError`. The table is not created here (`createFenceTable`); nothing is retried.
 */
export function fenced<T>(
  db: Pool,
  hold: FenceHold,
  body: (client: PoolClient) => T | PromiseLike<T>,
  options?: FenceOptions,
): Promise<T>;
export function fenced<C extends ClientBase, T>(
  db: C,
  hold: FenceHold,
  body: (client: C) => T | PromiseLike<T>,
  options?: FenceOptions,
): Promise<T>;
export async function fenced<T>(
  db: Pool | PoolClient,
  hold: FenceHold,
  body: (client: PoolClient) => T | PromiseLike<T>,
  options?: FenceOptions,
): Promise<T> {
  const shape = shapeOf(db, "fenced");
  const lend = async (): Promise<Lent<PoolClient>> => {
    if (shape === "client") {
      const client = db as PoolClient; // a client: the overloads hand the body its own type
      refuseOpenTransaction(client);
      return { client, run: runOn(client), giveBack: () => undefined };
    }
    const client = await (db as Pool).connect();
    return { client, run: runOn(client), giveBack: (broken) => client.release(broken) };
  };
  return inTransaction("postgres", lend, hold, body, options);
}

/**
 * Only the fence statement, on `client`, inside a transaction you (or a framework) run: call it
 * right after BEGIN, before any read. Rejects with `StaleError` when a newer token is stored:
 * then roll the transaction back.
 */
export async function fence(client: ClientBase, hold: FenceHold, options?: FenceOptions): Promise<void> {
  if (shapeOf(client, "fence") === "pool") {
    throw new TypeError("redis-lock-client/pg: fence runs in your transaction: pass its client, not the Pool");
  }
  if (transactionStatus(client) === "I") {
    // Outside a transaction the fence would be committed alone and order nothing.
    throw new Error("redis-lock-client/pg: fence() needs a transaction: send BEGIN first, or use fenced()");
  }
  await fenceOn("postgres", runOn(client), hold, options);
}

/** `CREATE TABLE IF NOT EXISTS lock_fences (name text PRIMARY KEY, token bigint NOT NULL)` (or
 * the table named by `options.table`). */
export async function createFenceTable(db: Pool | ClientBase, options?: TableOptions): Promise<void> {
  shapeOf(db, "createFenceTable");
  await createTableOn("postgres", runOn(db), options);
}

/** The SQL this module sends on PostgreSQL (for `options.table`). */
export function statements(options?: TableOptions): FenceStatements {
  return statementsOf("postgres", tableOf(options));
}
