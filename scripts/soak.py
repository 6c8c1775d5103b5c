#!/usr/bin/env python3
"""Find the tests that fail only sometimes: run suites (make targets) round-robin, RUNS times
each, while a CPU hog (stress-ng --cpu <cores>, or busy Python processes without it) competes
for every core; then print each test that failed at least once and a table (suite, server,
runs, failed runs, tests that failed).

    scripts/soak.py [--runs N] [--jobs N] [--no-hog] [--record FILE] TARGET...  (make test-soak)
    scripts/soak.py --report FILE

--jobs N runs up to N suites of a round at once, as make test does (scripts/suites.py).
The log of every failed run stays in <target dir>/soak/<target>.<run>.log. Interrupted
(Ctrl-C, SIGINT or SIGTERM), it stops the suites running and reports the runs so far.
--record FILE appends a JSON line per run (commit, target, ok, tests that failed), so that
soaks of several sittings add up; --report FILE prints their table, with the commits they ran.
"""

import argparse
import json
import multiprocessing
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
from collections import Counter, defaultdict

import suites


def _spin() -> None:
    # Ctrl-C reaches the whole process group: the hog ends by stop_hog's SIGTERM, quietly.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    # The parent turns SIGTERM into KeyboardInterrupt (to report early); the spinner inherits
    # that, so stop_hog's terminate() printed a traceback per core: end quietly instead.
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    while True:
        pass


def start_hog() -> list:
    """One busy process per core; stress-ng when installed (scripts/deps.sh test)."""
    cores = os.cpu_count() or 2
    if shutil.which("stress-ng"):
        proc = subprocess.Popen(
            ["stress-ng", "--cpu", str(cores), "--quiet"], start_new_session=True
        )
        return [proc]
    procs = [multiprocessing.Process(target=_spin, daemon=True) for _ in range(cores)]
    for p in procs:
        p.start()
    return procs


def stop_hog(hog: list) -> None:
    for proc in hog:
        if isinstance(proc, subprocess.Popen):
            os.killpg(proc.pid, signal.SIGTERM)
            proc.wait()
        else:
            proc.terminate()
            proc.join()


class Tally:
    """Runs, failed runs, and how often each test failed, per target."""

    def __init__(self):
        self.runs = Counter()
        self.failed_runs = Counter()
        self.failed_tests = defaultdict(Counter)
        self.last_ok = {}
        self.commits = Counter()

    def add(self, target: str, ok: bool, failures: list[str], commit: str = "") -> None:
        self.runs[target] += 1
        self.last_ok[target] = ok
        self.commits[commit] += 1
        if not ok:
            self.failed_runs[target] += 1
            self.failed_tests[target].update(failures)


def head_commit() -> str:
    out = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True,
                         cwd=suites.ROOT)
    return out.stdout.strip()


def soak(targets: list[str], runs: int, jobs: int, tally: Tally, record: str | None) -> None:
    soak_dir = suites.target_dir() / "soak"
    commit, lock = head_commit(), threading.Lock()
    for run in range(1, runs + 1):
        def one(target: str) -> suites.Result:
            log_path = soak_dir / f"{target}.log"
            result = suites.run_one(target, log_path)
            if suites.interrupted.is_set():
                return result  # stopped by the interruption: not a run
            status = "ok" if result.ok else "FAILED " + " ".join(result.counts.failures)
            print(f"run {run}/{runs} {target}: {status} ({result.seconds:.0f} s)", flush=True)
            names = result.counts.failures or [f"(no test named: {result.note or 'exit'})"]
            with lock:
                tally.add(target, result.ok, names, commit)
                if record:
                    line = {"commit": commit, "time": time.strftime("%Y-%m-%dT%H:%M:%SZ",
                            time.gmtime()), "target": target, "ok": result.ok,
                            "failed": [] if result.ok else names,
                            "seconds": round(result.seconds)}
                    with open(record, "a") as f:
                        f.write(json.dumps(line) + "\n")
            if not result.ok:
                log_path.rename(soak_dir / f"{target}.{run}.log")
            return result

        suites.run_all(targets, jobs, one)


def read_record(path: str) -> tuple[list[str], Tally]:
    targets, tally = [], Tally()
    with open(path) as f:
        for line in f:
            run = json.loads(line)
            if run["target"] not in targets:
                targets.append(run["target"])
            tally.add(run["target"], run["ok"], run["failed"], run["commit"])
    return targets, tally


def report(targets: list[str], tally: Tally) -> None:
    print()
    for target, tests in tally.failed_tests.items():
        for name, times in tests.most_common():
            print(f"{target}: {name} failed {times} of {tally.runs[target]} runs")
    rows = []
    for target in targets:
        suite, server = suites.suite_and_server(target)
        last = {True: "ok", False: "FAILED", None: "-"}[tally.last_ok.get(target)]
        row = [tally.runs[target], tally.failed_runs[target], len(tally.failed_tests[target])]
        rows.append([suite, server] + [str(n) for n in row] + [last])
    print()
    header = ["suite", "server", "runs", "failed runs", "tests that failed", "last run"]
    print(suites.table(rows, header))
    commits = ", ".join(f"{c or '?'} ({n} runs)" for c, n in tally.commits.items())
    print(f"\ncommits: {commits}")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=10)
    parser.add_argument("--jobs", type=int, default=1)
    parser.add_argument("--no-hog", action="store_true", help="no CPU hog")
    parser.add_argument("--record", help="append a JSON line per run to this file")
    parser.add_argument("--report", help="print the table of a record and stop")
    parser.add_argument("targets", nargs="*")
    args = parser.parse_args()
    if args.report:
        report(*read_record(args.report))
        return 0
    if not args.targets:
        parser.error("no targets")
    # Interrupted by Ctrl-C or `kill`, even when started in the background (where a shell
    # leaves SIGINT ignored): stop the suites running and report the runs so far.
    signal.signal(signal.SIGINT, signal.default_int_handler)
    signal.signal(signal.SIGTERM, signal.default_int_handler)
    hog = [] if args.no_hog else start_hog()
    tally = Tally()
    try:
        soak(args.targets, args.runs, args.jobs, tally, args.record)
    except KeyboardInterrupt:
        print("\ninterrupted: the runs so far")
    finally:
        stop_hog(hog)
    report(args.targets, tally)
    return 1 if tally.failed_runs else 0


if __name__ == "__main__":
    sys.exit(main())
