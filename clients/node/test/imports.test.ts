/**
 * No import circle among the package's modules (`src/*.ts`, type-only imports included): each
 * file imports only files that do not import it back, however indirectly. Read from the source.
 */
import assert from "node:assert/strict";
import { readdirSync, readFileSync } from "node:fs";
import { test } from "node:test";

const SRC = new URL("../../src/", import.meta.url);

/** Each module of `src` and the modules of `src` it imports (`./x.js` in any import or export). */
function graph(): Map<string, string[]> {
  const modules = new Map<string, string[]>();
  for (const file of readdirSync(SRC).filter((f) => f.endsWith(".ts"))) {
    const text = readFileSync(new URL(file, SRC), "utf8");
    const imports = [...text.matchAll(/^(?:import|export)\b[^;]*?["']\.\/([\w.-]+)\.js["']/gms)].map(
      (m) => `${m[1]}.ts`,
    );
    modules.set(file, imports);
  }
  return modules;
}

/** The first circle found (`a.ts -> b.ts -> a.ts`), or undefined. */
function circle(modules: Map<string, string[]>): string[] | undefined {
  const done = new Set<string>();
  const path: string[] = [];
  const visit = (m: string): string[] | undefined => {
    if (path.includes(m)) return [...path.slice(path.indexOf(m)), m];
    if (done.has(m)) return undefined;
    path.push(m);
    for (const next of modules.get(m) ?? []) {
      const found = visit(next);
      if (found) return found;
    }
    path.pop();
    done.add(m);
    return undefined;
  };
  for (const m of modules.keys()) {
    const found = visit(m);
    if (found) return found;
  }
  return undefined;
}

test("no import circle in src/", () => {
  const modules = graph();
  assert.ok(modules.get("locks.ts")?.includes("adapt.ts"), "the imports are read");
  assert.equal(circle(modules)?.join(" -> "), undefined);
});

test("the check finds a circle", () => {
  const modules = new Map([
    ["a.ts", ["b.ts"]],
    ["b.ts", ["c.ts"]],
    ["c.ts", ["a.ts"]],
  ]);
  assert.equal(circle(modules)?.join(" -> "), "a.ts -> b.ts -> c.ts -> a.ts");
});
