/**
 * Every ```ts example of this package's README and of the main README is type-checked against
 * the package's own types (tsc, strict) and run, as written, against a real server with the
 * module (`process.env.REDIS_URL` names it), and, for the fenced transactions, a PostgreSQL and a
 * MariaDB server (`DATABASE_URL`, `MYSQL_URL`) started once for all. Each runs on a fresh Redis
 * server; afterwards no lock may be left held (each example releases what it takes).
 */
import assert from "node:assert/strict";
import { spawnSync } from "node:child_process";
import { mkdirSync, readFileSync, writeFileSync } from "node:fs";
import { dirname, join } from "node:path";
import { after, before, test } from "node:test";
import { fileURLToPath } from "node:url";
import ts from "typescript";
import { startDatabases, type Database } from "./databases.js";
import { ROOT, Server } from "./support.js";

const PACKAGE = join(dirname(fileURLToPath(import.meta.url)), "../..");
const PAGES = ["clients/node/README.md", "README.md"];

function snippets(): { where: string; code: string }[] {
  const found: { where: string; code: string }[] = [];
  for (const page of PAGES) {
    const text = readFileSync(join(ROOT, page), "utf8");
    for (const m of text.matchAll(/^```ts\n([\s\S]*?)^```$/gm)) {
      found.push({ where: `${page}:${text.slice(0, m.index).split("\n").length + 1}`, code: m[1]! });
    }
  }
  return found;
}

/** The example as a module: its imports first, the rest in a block (so `await using` disposes
 * there), then an exit (the example's own clients may still be open). */
function asModule(code: string): string {
  const lines = code.split("\n");
  const imports = lines.filter((l) => l.startsWith("import "));
  const body = lines.filter((l) => !l.startsWith("import "));
  return `${imports.join("\n")}\n{\n${body.join("\n")}\n}\nprocess.exit(0);\n`;
}

const all = snippets();
const dir = join(PACKAGE, "build/snippets");
mkdirSync(dir, { recursive: true });
const files = all.map((s, i) => {
  const file = join(dir, `snippet${i}.ts`);
  writeFileSync(file, asModule(s.code));
  return file;
});

test("the pages have TypeScript examples", () => {
  assert.deepEqual(new Set(all.map((s) => s.where.split(":")[0])), new Set(PAGES));
  assert.ok(all.length >= 5);
});

test("every example type-checks (strict) against the package's types", () => {
  const program = ts.createProgram(files, {
    strict: true,
    target: ts.ScriptTarget.ES2022,
    module: ts.ModuleKind.NodeNext,
    moduleResolution: ts.ModuleResolutionKind.NodeNext,
    lib: ["lib.es2022.d.ts", "lib.esnext.disposable.d.ts"],
    types: ["node"],
    skipLibCheck: true,
    outDir: dir,
    rootDir: dir,
  });
  const emitted = program.emit();
  const diagnostics = [...ts.getPreEmitDiagnostics(program), ...emitted.diagnostics].map((d) => {
    const file = d.file ? files.indexOf(d.file.fileName) : -1;
    return `${file >= 0 ? all[file]!.where : "?"}: ${ts.flattenDiagnosticMessageText(d.messageText, "\n")}`;
  });
  assert.deepEqual(diagnostics, []);
});

let databases: Database[] = [];
before(async () => {
  databases = await startDatabases();
});
after(async () => {
  for (const db of databases) await db.stop();
});

/** The databases' URLs as the examples read them. */
function databaseEnv(): Record<string, string> {
  const url = (kind: string): string => databases.find((d) => d.kind === kind)?.url ?? "";
  return { DATABASE_URL: url("postgres"), MYSQL_URL: url("mariadb") };
}

for (const [i, s] of all.entries()) {
  test(`${s.where} runs`, async () => {
    const server = await Server.start();
    try {
      const out = spawnSync(process.execPath, [join(dir, `snippet${i}.js`)], {
        env: { ...process.env, ...databaseEnv(), REDIS_URL: `redis://127.0.0.1:${server.port}` },
        encoding: "utf8",
        timeout: 20_000,
      });
      assert.equal(out.status, 0, `${s.where}\n${out.stdout}\n${out.stderr}`);
      const keys = (await server.cmd("KEYS", "*")) as string[];
      for (const key of keys) assert.notEqual(await server.cmd("TYPE", key), "redislock", `${key} is still held`);
    } finally {
      server.stop();
    }
  });
}
