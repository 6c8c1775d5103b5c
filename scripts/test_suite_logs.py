#!/usr/bin/env python3
"""Unit tests of scripts/suite_logs.py and the summary of scripts/suites.py, on log lines as each
test runner prints them (make unit runs this file)."""

import sys
import threading
import time
import unittest
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import suite_logs  # noqa: E402
import suites  # noqa: E402

CARGO = """\
running 3 tests
test grant::a_free_lock_is_granted ... ok
test queue::a_waiter_is_served_first ... FAILED
test guard::guard_refuses_stale ... ok
test result: FAILED. 2 passed; 1 failed; 0 ignored; 0 measured; 0 filtered out
test result: ok. 5 passed; 0 failed; 0 ignored; 0 measured; 0 filtered out
"""


class Readers(unittest.TestCase):
    def test_cargo_sums_every_test_binary_and_names_the_failed(self):
        counts = suite_logs.read("rust", CARGO)
        self.assertEqual((counts.passed, counts.failed), (7, 1))
        self.assertEqual(counts.failures, ["queue::a_waiter_is_served_first"])

    def test_cargo_names_a_failed_test_that_printed_before_failing(self):
        log = "test processes::kill9 ... \nthread 'processes::kill9' panicked at x.rs:1:2:\n" \
            "FAILED\ntest waiters::exact ... ok\n\nfailures:\n\n---- processes::kill9 stdout ----\n" \
            "\nfailures:\n    processes::kill9\n\n" \
            "test result: FAILED. 1 passed; 1 failed; 0 ignored; 0 measured; 0 filtered out\n"
        counts = suite_logs.read("rust", log)
        self.assertEqual((counts.passed, counts.failed), (1, 1))
        self.assertEqual(counts.failures, ["processes::kill9"])

    def test_pytest_counts_errors_as_failures(self):
        log = "FAILED tests/test_a.py::test_x - assert 1 == 2\nERROR tests/test_b.py::test_y\n" \
            "===== 1 failed, 178 passed, 3 skipped, 1 error in 95.20s =====\n"
        counts = suite_logs.read("python", log)
        self.assertEqual((counts.passed, counts.failed), (178, 2))
        self.assertEqual(counts.failures, ["tests/test_a.py::test_x", "tests/test_b.py::test_y"])

    def test_node_counts_cancelled_tests_as_failed(self):
        log = "not ok 3 - rule 6 watchdog # time=12ms\n# pass 120\n# fail 1\n# cancelled 2\n"
        counts = suite_logs.read("node", log)
        self.assertEqual((counts.passed, counts.failed), (120, 3))
        self.assertEqual(counts.failures, ["rule 6 watchdog"])

    def test_go_counts_subtests_and_a_package_that_did_not_build(self):
        log = "--- PASS: TestA (0.01s)\n    --- PASS: TestA/sub (0.00s)\n--- FAIL: TestB (1.00s)\n"
        counts = suite_logs.read("go", log)
        self.assertEqual((counts.passed, counts.failed, counts.failures), (2, 1, ["TestB"]))
        broken = suite_logs.read("go", "FAIL\texample.com/redislock [build failed]\n")
        self.assertEqual(broken.failures, ["example.com/redislock (package)"])

    def test_maven_sums_modules_and_leaves_out_the_skipped(self):
        log = "[ERROR] Tests run: 93, Failures: 1, Errors: 1, Skipped: 2\n" \
            "[INFO] Tests run: 10, Failures: 0, Errors: 0, Skipped: 0\n" \
            "[ERROR] io.redislock.LockTest.rule6  -- Time elapsed: 2.1 s  <<< FAILURE!\n"
        counts = suite_logs.read("java", log)
        self.assertEqual((counts.passed, counts.failed), (99, 2))
        self.assertEqual(counts.failures, ["io.redislock.LockTest.rule6"])

    def test_a_log_without_counts_reads_as_unknown(self):
        counts = suite_logs.read("node-check", "eslint: no problems\n")
        self.assertEqual((counts.passed, counts.failed), (None, None))

    def test_a_cargo_excerpt_starts_at_the_failure(self):
        log = "failures:\n\n---- queue::x stdout ----\npanicked at x\n\nfailures:\n    queue::x\n"
        self.assertTrue(suite_logs.excerpt("rust", log).startswith("failures:\n\n---- queue::x"))


class Summary(unittest.TestCase):
    def test_a_skipped_suite_says_why_and_does_not_count_as_passed(self):
        log = "SUITE SKIPPED: no qemu\nSUITE SKIPPED: no qemu\n"
        self.assertEqual(suites.skip_reason(log), "no qemu")
        self.assertEqual(suites.skip_reason("ran\n  SUITE SKIPPED: not at a line's start\n"), "")
        skipped = suites.Result("test-aarch64", True, 7, suite_logs.Counts(), "no qemu", True)
        failed = suites.Result("test-go-valkey", False, 80, suite_logs.Counts(3, 1), "")
        text = suites.summary([skipped, failed])
        self.assertIn("aarch64  -       -       -       7        skipped", text)
        self.assertIn("go       valkey  3       1       80       FAILED", text)
        self.assertTrue(text.endswith("skipped test-aarch64: no qemu"))

    def test_targets_split_into_suite_and_server(self):
        self.assertEqual(suites.suite_and_server("test-rust-client-valkey"), ("rust-client", "valkey"))
        self.assertEqual(suites.suite_and_server("node-check"), ("node-check", "-"))


class Schedule(unittest.TestCase):
    TARGETS = ["node-check", "test-node-redis", "test-go-redis", "test-java-redis",
               "test-java-valkey", "test-spring6-redis", "test-go-valkey", "test-install-java"]

    def test_two_of_one_group_never_run_together_and_every_target_runs_once(self):
        running, overlaps, lock = [], [], threading.Lock()

        def run(target):
            with lock:
                group = suites.exclusive_group(target)
                overlaps.extend((r, target) for r in running if suites.exclusive_group(r) == group)
                running.append(target)
            time.sleep(0.02)
            with lock:
                running.remove(target)
            return suites.Result(target, True, 0.02, suite_logs.Counts())

        results = suites.run_all(self.TARGETS, 3, run)
        self.assertEqual(overlaps, [])
        self.assertEqual([r.target for r in results], self.TARGETS)

    def test_a_group_keeps_the_order_given(self):
        started, lock = [], threading.Lock()

        def run(target):
            with lock:
                started.append(target)
            time.sleep(0.01)
            return suites.Result(target, True, 0.01, suite_logs.Counts())

        suites.run_all(self.TARGETS, 2, run)
        java = [t for t in started if suites.exclusive_group(t) == "java"]
        self.assertEqual(java, ["test-java-redis", "test-java-valkey", "test-spring6-redis",
                                "test-install-java"])
        self.assertEqual(started.index("node-check"), 0)
        self.assertLess(started.index("node-check"), started.index("test-node-redis"))


if __name__ == "__main__":
    unittest.main()
