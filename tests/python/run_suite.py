"""Runs one test file's unittest suite for ctest and says how it went through the exit code:
0 when every test passed, 77 (ctest's SKIP_RETURN_CODE) when none failed but some were skipped
(python3-torch, Chromium, a GPU or namespaces missing; each reason printed), 1 on any failure or
error, whatever else was skipped. Matching skips in the output instead would report a file with a
failure and a skip as skipped.

    /usr/bin/python3 tests/python/run_suite.py test_report.py [-k PATTERN ...]
"""
import pathlib
import sys
import unittest

SKIPPED = 77


def main(argv):
    here = pathlib.Path(__file__).resolve().parent
    pattern, names = argv[0], []
    for i, arg in enumerate(argv[1:]):
        if arg != "-k" and (i == 0 or argv[i] != "-k"):
            raise SystemExit(f"run_suite.py: unexpected argument {arg} (give FILE [-k PATTERN]...)")
        if arg != "-k":
            names.append(arg)
    loader = unittest.TestLoader()
    if names:
        loader.testNamePatterns = [f"*{n}*" for n in names]
    suite = loader.discover(str(here), pattern=pattern, top_level_dir=str(here))
    result = unittest.TextTestRunner(verbosity=2).run(suite)
    if not result.wasSuccessful() or result.testsRun == 0:
        if result.testsRun == 0:
            print(f"run_suite.py: no test of {pattern} matched", file=sys.stderr)
        return 1
    if result.skipped:
        for test, reason in result.skipped:
            print(f"skipped {test.id()}: {reason}", file=sys.stderr)
        return SKIPPED
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
