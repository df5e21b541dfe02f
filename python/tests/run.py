#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""Runs python/tests cases one at a time for CTest (tests/python.cmake), with CTest's codes.

    run.py --list             every case as module.Class.test_name, one per line, followed by
                              its extra CTest labels (_util.labels) where it has any
    run.py ID [ID ...]        runs them; exit 0 passed, 1 failed, 77 all skipped

A case that skips (unittest.SkipTest: no torch, no GPU, no matplotlib) exits 77, which CTest
reports as skipped rather than passed. Only the standard library is needed.
"""

from __future__ import annotations

import sys
import unittest
from pathlib import Path

HERE = Path(__file__).resolve().parent


def discover() -> unittest.TestSuite:
    """Every test_*.py beside this file."""
    return unittest.defaultTestLoader.discover(str(HERE), pattern="test_*.py",
                                               top_level_dir=str(HERE))


def flatten(suite: unittest.TestSuite):
    """The test cases of a suite, depth first; import failures surface as their own cases."""
    for item in suite:
        if isinstance(item, unittest.TestSuite):
            yield from flatten(item)
        else:
            yield item


def main(argv: list) -> int:
    sys.path.insert(0, str(HERE))
    if argv == ["--list"]:
        for case in flatten(discover()):
            if type(case).__name__ in ("_FailedTest", "ModuleImportFailure"):
                # A test module that does not import: make the discovery fail loudly.
                case.run(unittest.TestResult())
                print(f"cannot import {case.id()}", file=sys.stderr)
                return 1
            method = getattr(case, case.id().rsplit(".", 1)[1], None)
            extra = getattr(method, "ctest_labels", ()) or getattr(case, "ctest_labels", ())
            print(" ".join((case.id(),) + tuple(extra)))
        return 0
    if not argv:
        print(__doc__, file=sys.stderr)
        return 2
    suite = unittest.defaultTestLoader.loadTestsFromNames(argv)
    result = unittest.TextTestRunner(verbosity=2, stream=sys.stderr).run(suite)
    if not result.wasSuccessful():
        return 1
    # A module-level skip (setUpModule) runs no test and records one skip.
    if result.skipped and len(result.skipped) >= result.testsRun:
        return 77
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
