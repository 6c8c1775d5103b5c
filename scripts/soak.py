#!/usr/bin/env python3
"""Find the tests that fail only sometimes: run suites (make targets) round-robin, RUNS times
each, while a CPU hog (stress-ng --cpu <cores>, or busy Python processes without it) competes
for every core; then print each test that failed at least once and a table (suite, server,
runs, failed runs, tests that failed).

    scripts/soak.py [--runs N] [--no-hog] TARGET...     (make test-soak)

The log of every failed run stays in <target dir>/soak/<target>.<run>.log. Interrupted
(Ctrl-C, SIGINT or SIGTERM), it stops the suite running and reports the runs so far.
"""

import argparse
import multiprocessing
import os
import shutil
import signal
import subprocess
import sys
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


def soak(targets: list[str], runs: int, tally: Tally) -> None:
    soak_dir = suites.target_dir() / "soak"
    for run in range(1, runs + 1):
        for target in targets:
            log_path = soak_dir / f"{target}.log"
            result = suites.run_one(target, log_path)
            status = "ok" if result.ok else "FAILED " + " ".join(result.counts.failures)
            print(f"run {run}/{runs} {target}: {status} ({result.seconds:.0f} s)", flush=True)
            tally.runs[target] += 1
            if not result.ok:
                tally.failed_runs[target] += 1
                names = result.counts.failures or [f"(no test named: {result.note or 'exit'})"]
                tally.failed_tests[target].update(names)
                log_path.rename(soak_dir / f"{target}.{run}.log")


def report(targets: list[str], tally: Tally) -> None:
    print()
    for target, tests in tally.failed_tests.items():
        for name, times in tests.most_common():
            print(f"{target}: {name} failed {times} of {tally.runs[target]} runs")
    rows = []
    for target in targets:
        suite, server = suites.suite_and_server(target)
        row = [tally.runs[target], tally.failed_runs[target], len(tally.failed_tests[target])]
        rows.append([suite, server] + [str(n) for n in row])
    print()
    print(suites.table(rows, ["suite", "server", "runs", "failed runs", "tests that failed"]))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=10)
    parser.add_argument("--no-hog", action="store_true", help="no CPU hog")
    parser.add_argument("targets", nargs="+")
    args = parser.parse_args()
    # Interrupted by Ctrl-C or `kill`, even when started in the background (where a shell
    # leaves SIGINT ignored): stop the suite running and report the runs so far.
    signal.signal(signal.SIGINT, signal.default_int_handler)
    signal.signal(signal.SIGTERM, signal.default_int_handler)
    hog = [] if args.no_hog else start_hog()
    tally = Tally()
    try:
        soak(args.targets, args.runs, tally)
    except KeyboardInterrupt:
        print("\ninterrupted: the runs so far")
    finally:
        stop_hog(hog)
    report(args.targets, tally)
    return 1 if tally.failed_runs else 0

if __name__ == "__main__":
    sys.exit(main())
