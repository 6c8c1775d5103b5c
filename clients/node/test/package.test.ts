/**
 * The package as an application gets it: the ESM and CommonJS builds export the same API (one
 * `Symbol.asyncDispose` for both), types are declared, and no runtime dependency is pulled in:
 * not even by the database subpaths, which take the application's own `pg` or `mysql2` objects.
 */
import assert from "node:assert/strict";
import { readFileSync, existsSync } from "node:fs";
import { createRequire } from "node:module";
import { test } from "node:test";
import * as esm from "redis-lock-client";
import * as esmMysql from "redis-lock-client/mysql2";
import * as esmPg from "redis-lock-client/pg";
import * as esmRedlock from "redis-lock-client/redlock";

const require = createRequire(import.meta.url);
const pkg = JSON.parse(readFileSync(new URL("../../package.json", import.meta.url), "utf8"));

test("ESM and CommonJS export the same names", () => {
  const cjs = require("redis-lock-client");
  assert.deepEqual(Object.keys(cjs).sort(), Object.keys(esm).sort());
  // The API the README shows, and nothing of the internals (adapters, protocol, key slots).
  assert.deepEqual(Object.keys(esm).sort(), [
    "DeadlockError",
    "Election",
    "Hold",
    "Leadership",
    "LeadershipLostError",
    "LockError",
    "LockLostError",
    "Locks",
    "MultiHold",
    "NotAcquiredError",
    "StaleError",
    "UnavailableError",
  ]);
  const cjsRedlock = require("redis-lock-client/redlock");
  assert.equal(typeof cjsRedlock.default, "function");
  assert.equal(typeof esmRedlock.default, "function");
  for (const [sub, esmSub] of [
    ["pg", esmPg],
    ["mysql2", esmMysql],
  ] as const) {
    const cjsSub = require(`redis-lock-client/${sub}`);
    assert.deepEqual(Object.keys(cjsSub).sort(), Object.keys(esmSub).sort());
    assert.deepEqual(Object.keys(esmSub).sort(), ["createFenceTable", "fence", "fenced", "statements"]);
  }
  // Loading the subpaths loads no driver: the application's own pg or mysql2 is the one used.
  const drivers = Object.keys(require.cache).filter((f) => /\/node_modules\/(pg|mysql2)\//.test(f));
  assert.deepEqual(drivers, []);
  assert.equal(typeof cjs.Hold.prototype[Symbol.asyncDispose], "function");
  assert.equal(typeof esm.Hold.prototype[Symbol.asyncDispose], "function");
});

test("types are declared for both builds", () => {
  for (const cond of ["import", "require"] as const) {
    for (const entry of [".", "./redlock", "./pg", "./mysql2"]) {
      const types = pkg.exports[entry][cond].types as string;
      assert.ok(existsSync(new URL(`../../${types}`, import.meta.url)), types);
    }
  }
});

test("no runtime dependency; the Redis libraries and the database drivers are optional peers", () => {
  assert.equal(pkg.dependencies, undefined);
  const peers = ["ioredis", "mysql2", "pg", "redis"];
  assert.deepEqual(Object.keys(pkg.peerDependencies).sort(), peers);
  for (const peer of peers) assert.equal(pkg.peerDependenciesMeta[peer].optional, true, peer);
  for (const file of [
    "index",
    "locks",
    "hold",
    "adapter",
    "node-redis",
    "ioredis",
    "protocol",
    "errors",
    "redlock",
    "dispose",
    "fence",
    "pg",
    "mysql2",
  ]) {
    const src = readFileSync(new URL(`../../dist/esm/${file}.js`, import.meta.url), "utf8");
    const imports = [...src.matchAll(/^(?:(?:import|export) [^;\n]* from |import )"([^"]+)";$/gm)].map((m) => m[1]!);
    for (const i of imports) assert.ok(i.startsWith("./") || i.startsWith("node:"), `${file}.js imports ${i}`);
  }
});

test("Symbol.asyncDispose is Node's own symbol (polyfilled the same way before Node 20.5)", () => {
  assert.equal(Symbol.asyncDispose, Symbol.for("nodejs.asyncDispose"));
});
