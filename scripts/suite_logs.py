"""What a test suite's log says: how many tests passed and failed, and which failed.

One reader per test runner the suites use (cargo test, pytest, node --test, go test -v, Maven
Surefire), picked by the suite's name (scripts/suites.py). A reader that finds no count
returns None for it, and the table shows "-": the suite's exit status still decides.
"""

import re
from dataclasses import dataclass, field


@dataclass
class Counts:
    passed: int | None = None
    failed: int | None = None
    failures: list[str] = field(default_factory=list)


def _sum(matches, group):
    values = [int(m.group(group)) for m in matches]
    return sum(values) if values else None


def _unique(names):
    return list(dict.fromkeys(names))


def cargo(log: str) -> Counts:
    # "test result: ok. 12 passed; 0 failed; 1 ignored; ..." once per test binary
    results = list(re.finditer(r"^test result: \w+\. (\d+) passed; (\d+) failed;", log, re.M))
    failures = re.findall(r"^test (\S+)(?: - should panic)? \.\.\. FAILED$", log, re.M)
    # A test that prints (the fault suite runs with --nocapture) puts FAILED on a line of its
    # own: the closing "failures:" list names it.
    for block in re.findall(r"^failures:\n((?:    \S+\n)+)", log, re.M):
        failures += block.split()
    return Counts(_sum(results, 1), _sum(results, 2), _unique(failures))


def pytest(log: str) -> Counts:
    # the last line: "2 failed, 178 passed, 3 skipped in 95.20s" (any order, any subset)
    summary = re.findall(r"^=*\s*((?:\d+ \w+(?:, )?)+) in [\d.]+s", log, re.M)
    counts = {}
    for number, word in re.findall(r"(\d+) (\w+)", summary[-1] if summary else ""):
        counts[word] = int(number)
    failed = None
    if summary:
        failed = counts.get("failed", 0) + counts.get("errors", 0) + counts.get("error", 0)
    failures = re.findall(r"^(?:FAILED|ERROR) (\S+)", log, re.M)
    return Counts(counts.get("passed", 0 if summary else None), failed, _unique(failures))


def node(log: str) -> Counts:
    # node --test's closing lines: "# pass 120" / "ℹ pass 120" and the same for fail
    passed = re.findall(r"^\S+ pass (\d+)$", log, re.M)
    failed = re.findall(r"^\S+ fail (\d+)$", log, re.M)
    cancelled = re.findall(r"^\S+ cancelled (\d+)$", log, re.M)
    # TAP: "not ok 3 - name"; spec: "✖ name (12ms)" (repeated in its closing list)
    failures = re.findall(r"^\s*not ok \d+ - (.+?)(?: #.*)?$", log, re.M)
    failures += re.findall(r"^\s*✖ (.+?) \([\d.]+m?s\)$", log, re.M)
    return Counts(
        int(passed[-1]) if passed else None,
        int(failed[-1]) + int(cancelled[-1] if cancelled else 0) if failed else None,
        _unique(f for f in failures if f != "failing tests:"),
    )


def go(log: str) -> Counts:
    # go test -v: "--- PASS: TestX (0.01s)", subtests indented; a package's build failure
    # or panic shows only as "FAIL\tpath" (counted as one failure, named by the package)
    passed = re.findall(r"^\s*--- PASS: (\S+)", log, re.M)
    failures = re.findall(r"^\s*--- FAIL: (\S+)", log, re.M)
    packages = re.findall(r"^FAIL\s+(\S+)\s+(?:\[.*\]|[\d.]+s)", log, re.M)
    failures += [f"{p} (package)" for p in packages if not failures]
    if not passed and not failures and "no test files" not in log and "ok  " not in log:
        return Counts(None, None, [])
    return Counts(len(passed), len(_unique(failures)), _unique(failures))


def maven(log: str) -> Counts:
    # Surefire's per-module summary, without the per-class "-- in <class>" tail:
    # "[ERROR] Tests run: 93, Failures: 1, Errors: 0, Skipped: 0"
    pattern = r"^\[\w+\] Tests run: (\d+), Failures: (\d+), Errors: (\d+), Skipped: (\d+)$"
    runs = list(re.finditer(pattern, log, re.M))
    failures = re.findall(r"^\[ERROR\] (\S+)\s+--\s+Time elapsed.*<<< (?:FAILURE|ERROR)!", log, re.M)
    if not runs:
        return Counts(None, None, _unique(failures))
    total, failed, errors, skipped = (_sum(runs, g) for g in (1, 2, 3, 4))
    return Counts(total - failed - errors - skipped, failed + errors, _unique(failures))


def no_counts(log: str) -> Counts:
    return Counts()


READERS = {
    "unit": cargo,
    "rust": cargo,
    "rust-client": cargo,
    "faults": cargo,
    "matrix": cargo,
    "upgrade": cargo,
    "dist": cargo,
    "aarch64": cargo,
    "prometheus": cargo,
    "python": pytest,
    "node": node,
    "go": go,
    "java": maven,
    "spring6": maven,
}


def read(suite: str, log: str) -> Counts:
    return READERS.get(suite, no_counts)(log)


def _go_sections(log: str, failures: list[str]) -> list[str]:
    # go test -v prints a test's output between its "=== RUN" and its "--- FAIL" lines
    sections = []
    for name in (f for f in failures if "/" not in f and " " not in f):
        start = log.rfind(f"=== RUN   {name}\n")
        end = log.find(f"--- FAIL: {name} ", max(start, 0))
        if start >= 0 and end >= 0:
            lines = log[start : log.find("\n", end)].splitlines()
            sections.append("\n".join(lines[:200]))
    return sections


def excerpt(suite: str, log: str, tail: int = 120) -> str:
    """What to print of a failed suite: each failure's own section where the runner marks one
    (cargo's "failures:" blocks, pytest's FAILURES section, go test's lines between a failed
    test's RUN and FAIL), then the log's last lines."""
    sections = []
    if READERS.get(suite) is cargo:
        sections = re.findall(r"^failures:\n\n---- .*?(?=^failures:\n    )", log, re.M | re.S)
    elif suite == "python":
        sections = re.findall(r"^=+ FAILURES =+$.*?(?=^=+ short test summary)", log, re.M | re.S)
    elif suite == "go":
        sections = _go_sections(log, go(log).failures)
        tail = 30
    lines = log.splitlines()
    shown = "\n".join(sections)
    return (shown + "\n" if shown else "") + "\n".join(lines[-tail:])
