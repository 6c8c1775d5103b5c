// `node scripts/no-stray-files.mjs <command> [args...]`: runs the command (the test suite, the
// bench) here, then fails if it left files in this directory that git does not know (untracked,
// not ignored) and that were not there before it: a test writes only in temporary directories of
// its own. (A Redis server started here without `--dir` writes its epoch file,
// `dump.rdb.lock-epoch`, in this directory; one was committed by accident once.) Untracked files
// the tree had before the run are not counted, nor changes to tracked files. Outside a git
// checkout the command just runs. The exit status is the command's, else 1 for stray files.
import { spawnSync } from "node:child_process";

/** The untracked files under the current directory, or undefined outside a git checkout. */
function untracked() {
  const out = spawnSync("git", ["status", "--porcelain=v1", "-z", "--untracked-files=all", "--", "."], {
    encoding: "utf8",
  });
  if (out.error || out.status !== 0) return undefined;
  return new Set(
    out.stdout
      .split("\0")
      .filter((entry) => entry.startsWith("?? "))
      .map((entry) => entry.slice(3)),
  );
}

const [command, ...args] = process.argv.slice(2);
if (!command) {
  console.error("usage: node scripts/no-stray-files.mjs <command> [args...]");
  process.exit(2);
}
const before = untracked();
const run = spawnSync(command, args, { stdio: "inherit" });
if (run.error) console.error(`${command}: ${run.error.message}`);
const status = run.status ?? 1;
const after = untracked();
const stray = before && after ? [...after].filter((file) => !before.has(file)).sort() : [];
if (stray.length > 0) {
  console.error(
    `\n${command} ${args.join(" ")} left files that git does not know (write them in a temporary directory):\n` +
      stray.map((file) => `  ${file}\n`).join(""),
  );
}
process.exit(status !== 0 ? status : stray.length > 0 ? 1 : 0);
