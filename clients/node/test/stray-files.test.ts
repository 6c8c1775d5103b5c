/**
 * `npm run test:only` (and the bench) run under scripts/no-stray-files.mjs, which fails when the
 * run left files in this package that git does not know: checked here in a scratch git checkout.
 */
import assert from "node:assert/strict";
import { spawnSync } from "node:child_process";
import { mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { test } from "node:test";
import { fileURLToPath } from "node:url";

const SCRIPT = fileURLToPath(new URL("../../scripts/no-stray-files.mjs", import.meta.url));

/** The script running `node -e code` in a fresh git checkout, after `setup` in it. */
function check(
  code: string,
  setup: (dir: string) => void = () => undefined,
): { status: number | null; stderr: string } {
  const dir = mkdtempSync(join(tmpdir(), "redislock-node-stray-"));
  try {
    const init = spawnSync("git", ["init", "-q", dir], { encoding: "utf8" });
    assert.equal(init.status, 0, init.stderr);
    setup(dir);
    const out = spawnSync(process.execPath, [SCRIPT, process.execPath, "-e", code], { cwd: dir, encoding: "utf8" });
    return { status: out.status, stderr: out.stderr };
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
}

test("a run that leaves a file git does not know fails, naming it", () => {
  const { status, stderr } = check(`require("node:fs").writeFileSync("dump.rdb.lock-epoch", "1\\n")`);
  assert.equal(status, 1, stderr);
  assert.match(stderr, /left files that git does not know/);
  assert.match(stderr, /dump\.rdb\.lock-epoch/);
});

test("untracked files from before the run, and ignored ones, are not counted", () => {
  const code = `const fs = require("node:fs"); fs.mkdirSync("build"); fs.writeFileSync("build/out.js", "")`;
  const { status, stderr } = check(code, (dir) => {
    writeFileSync(join(dir, "notes.txt"), "mine\n");
    writeFileSync(join(dir, ".gitignore"), "build/\n");
  });
  assert.equal(status, 0, stderr);
});

test("the command's failure is the exit status", () => {
  assert.equal(check("process.exit(3)").status, 3);
});
