#!/usr/bin/env python3
"""Run test suites (make targets), every one even when another one failed, each one's output
in <target dir>/test-logs/<target>.log; then one table (suite, server, passed, failed, seconds)
and exit 1 if any failed.

    scripts/suites.py [--jobs N] TARGET...     (make test: the SUITES of the Makefile)

--jobs N (default 1; make test: SUITE_JOBS, 2) runs up to N suites at once, taken in the
order given; suites that build in the same directory of the tree (npm's build/, Maven's
target/, pip's egg-info, the dist modules) never run beside each other (exclusive_group).

A target test-<suite>-<server> is <suite> on redis or valkey; any other is a suite of its own.
A failed suite's failures and the end of its log are printed as soon as it ends.
LOCK_TEST_VERBOSE=1 also streams each log to the terminal. SUITE_TIMEOUT (seconds, default
2400) stops a suite that wedges: its whole process group is killed and it counts as failed.
A suite that cannot run here (make test-aarch64 in CI without qemu) prints a line
"SUITE SKIPPED: <reason>" and exits 0: the table says "skipped" and the reason follows it.
"""

import argparse
import os
import re
import signal
import subprocess
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path

import suite_logs

SERVERS = ("redis", "valkey")
ROOT = Path(__file__).resolve().parent.parent


def target_dir() -> Path:
    return Path(os.environ.get("CARGO_TARGET_DIR") or ROOT / "target").resolve()


def suite_and_server(target: str) -> tuple[str, str]:
    name = target.removeprefix("test-")
    for server in SERVERS:
        if name.endswith("-" + server):
            return name[: -len(server) - 1], server
    return name, "-"


@dataclass
class Result:
    target: str
    ok: bool
    seconds: float
    counts: suite_logs.Counts
    note: str = ""
    skipped: bool = False

    @property
    def status(self) -> str:
        return "FAILED" if not self.ok else "skipped" if self.skipped else "ok"


# The suites running now (their make processes), for stop_all.
_running: set[subprocess.Popen] = set()
_running_lock = threading.Lock()
# Set once a run is interrupted: the suites stopped then did not fail on their own.
interrupted = threading.Event()


def _make(target: str, log_file, verbose: bool) -> subprocess.Popen:
    # A session of its own, so that a timeout can stop every server the suite started.
    proc = subprocess.Popen(
        ["make", "--no-print-directory", target],
        cwd=ROOT,
        stdout=subprocess.PIPE if verbose else log_file,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    with _running_lock:
        _running.add(proc)
    return proc


def stop_all() -> None:
    """Stops every suite running (an interrupted run), with the servers each one started."""
    with _running_lock:
        procs = list(_running)
    for proc in procs:
        _stop(proc)


def _stop(proc: subprocess.Popen) -> None:
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    proc.wait()


def _tee(stream, log_file) -> None:
    for line in stream:
        log_file.write(line)
        sys.stdout.buffer.write(line)
        sys.stdout.flush()


def run_one(target: str, log_path: Path, verbose: bool = False) -> Result:
    timeout = float(os.environ.get("SUITE_TIMEOUT", "2400"))
    log_path.parent.mkdir(parents=True, exist_ok=True)
    start = time.monotonic()
    note = ""
    with open(log_path, "wb") as log_file:
        proc = _make(target, log_file, verbose)
        # Streamed beside the wait, so that SUITE_TIMEOUT holds in verbose runs too.
        tee = threading.Thread(target=_tee, args=(proc.stdout, log_file)) if verbose else None
        try:
            if tee:
                tee.start()
            proc.wait(timeout=timeout)
            if tee:
                tee.join()
        except subprocess.TimeoutExpired:
            _stop(proc)
            note = f"stopped after {timeout:.0f} s (SUITE_TIMEOUT)"
        except BaseException:
            _stop(proc)
            raise
        finally:
            with _running_lock:
                _running.discard(proc)
    seconds = time.monotonic() - start
    log = log_path.read_text(errors="replace")
    counts = suite_logs.read(suite_and_server(target)[0], log)
    ok = proc.returncode == 0 and not note
    if ok and counts.failed:
        ok, note = False, "make succeeded, but the log counts failures"
    if ok and skip_reason(log):
        return Result(target, ok, seconds, counts, skip_reason(log), True)
    return Result(target, ok, seconds, counts, note)


# Suites that write in the same directory of the tree: the TypeScript tests rebuild build/,
# Maven writes each module's target/, pip's build of the Python client its egg-info, and the
# artifact suites share target/dist and the downloaded servers. Cargo and Go lock their own.
SHARED_DIRS = {
    "python": "python", "install-python": "python",
    "node-check": "node", "node": "node", "install-node": "node",
    "java": "java", "spring6": "java", "install-java": "java",
    "dist": "artifacts", "aarch64": "artifacts", "deb": "artifacts", "matrix": "artifacts",
}


def exclusive_group(target: str) -> str:
    """Targets of one group never run at the same time."""
    return SHARED_DIRS.get(suite_and_server(target)[0], target)


def run_all(targets: list[str], jobs: int, run) -> list[Result]:
    """run(target) for every target, up to `jobs` at once, each one as soon as a slot is free
    and no target of its exclusive group runs; the results in the order of `targets`.
    Interrupted (KeyboardInterrupt in this thread), it stops the suites running and re-raises."""
    pending, busy, results = list(targets), set(), {}
    cond = threading.Condition()

    def next_target():
        with cond:
            while pending:
                ready = next((t for t in pending if exclusive_group(t) not in busy), None)
                if ready:
                    pending.remove(ready)
                    busy.add(exclusive_group(ready))
                    return ready
                cond.wait()
            return None

    def worker():
        while (target := next_target()) is not None:
            try:
                results[target] = run(target)
            finally:
                with cond:
                    busy.discard(exclusive_group(target))
                    cond.notify_all()

    workers = [threading.Thread(target=worker, daemon=True) for _ in range(max(1, jobs))]
    for w in workers:
        w.start()
    try:
        for w in workers:
            while w.is_alive():
                w.join(0.5)  # in slices, so that Ctrl-C and SIGTERM reach this thread
    except KeyboardInterrupt:
        interrupted.set()
        with cond:
            pending.clear()
            cond.notify_all()
        stop_all()
        raise
    return [results[t] for t in targets if t in results]


def skip_reason(log: str) -> str:
    """Why a suite that exited 0 did not run: its "SUITE SKIPPED: <reason>" lines, or ""."""
    return "; ".join(dict.fromkeys(re.findall(r"^SUITE SKIPPED: (.+)$", log, re.M)))


def _cell(value) -> str:
    return "-" if value is None else str(value)


def table(rows: list[list[str]], header: list[str]) -> str:
    widths = [max(len(r[i]) for r in [header] + rows) for i in range(len(header))]
    lines = ["  ".join(c.ljust(w) for c, w in zip(r, widths)).rstrip() for r in [header] + rows]
    lines.insert(1, "  ".join("-" * w for w in widths))
    return "\n".join(lines)


def summary(results: list[Result]) -> str:
    rows = []
    for r in results:
        suite, server = suite_and_server(r.target)
        c = r.counts
        rows.append([suite, server, _cell(c.passed), _cell(c.failed), f"{r.seconds:.0f}", r.status])
    header = ["suite", "server", "passed", "failed", "seconds", "status"]
    skips = [f"skipped {r.target}: {r.note}" for r in results if r.skipped]
    return "\n".join([table(rows, header)] + skips)


def failure_report(result: Result, log_path: Path) -> str:
    suite = suite_and_server(result.target)[0]
    lines = [f"---- {result.target} failed {result.note}".rstrip()]
    lines += [f"  failed: {name}" for name in result.counts.failures]
    lines.append(f"---- from {log_path}:")
    lines.append(suite_logs.excerpt(suite, log_path.read_text(errors="replace")))
    lines.append(f"---- end of {result.target}")
    return "\n".join(lines)


def run_and_report(target: str, verbose: bool) -> Result:
    log_path = target_dir() / "test-logs" / f"{target}.log"
    print(f"==> {target} (log: {os.path.relpath(log_path)})", flush=True)
    result = run_one(target, log_path, verbose)
    c = result.counts
    report = (f"    {target} {result.status}: {_cell(c.passed)} passed, "
              f"{_cell(c.failed)} failed, {result.seconds:.0f} s"
              + (f" ({result.note})" if result.skipped else ""))
    if not result.ok:
        report += "\n" + failure_report(result, log_path)
    print(report, flush=True)  # one write: suites running beside it print too
    return result


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(usage=__doc__)
    parser.add_argument("--jobs", type=int, default=1)
    parser.add_argument("targets", nargs="+")
    args = parser.parse_args(argv)
    verbose = os.environ.get("LOCK_TEST_VERBOSE") == "1"
    started = time.monotonic()
    results = run_all(args.targets, args.jobs, lambda t: run_and_report(t, verbose))
    print()
    print(summary(results))
    failed = [r.target for r in results if not r.ok]
    skipped = [r.target for r in results if r.skipped]
    passed = len(results) - len(failed) - len(skipped)
    minutes = (time.monotonic() - started) / 60
    print(f"\n{passed} of {len(results)} suites passed in {minutes:.1f} min"
          + (f" ({args.jobs} at a time)" if args.jobs > 1 else "")
          + (f"; skipped: {' '.join(skipped)}" if skipped else "")
          + (f"; failed: {' '.join(failed)}" if failed else ""))
    return 1 if failed else 0


if __name__ == "__main__":
    try:
        sys.exit(main(sys.argv[1:]))
    except KeyboardInterrupt:
        sys.exit(130)
