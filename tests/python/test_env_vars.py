"""Every DPBENCH_* environment variable is documented (issue: one meaning per word, no hidden knobs).

Run from the repository root:
    /usr/bin/python3 tests/python/run_suite.py test_env_vars.py

The variables are what the tracked sources read or set as environment: a quoted "DPBENCH_X" in
C++, CUDA and Python, $DPBENCH_X or ${DPBENCH_X in shell, and "DPBENCH_X=" or ;DPBENCH_X= in a
CMake ENVIRONMENT line (CMake's own ${DPBENCH_...} variables and the C++ macros are not
environment). The documented ones are the first column of the table under "Environment variables"
in docs/cli.md. A variable read but not listed fails, and so does one listed that nothing reads.
"""
import pathlib
import re
import subprocess
import unittest

ROOT = pathlib.Path(__file__).resolve().parents[2]
DOC = ROOT / "docs" / "cli.md"
NAME = r"DPBENCH_[A-Z0-9_]+"


def tracked(*patterns):
    """Tracked files matching the git pathspecs."""
    out = subprocess.run(["git", "ls-files", "--", *patterns], cwd=ROOT, capture_output=True, text=True, check=True)
    return [ROOT / line for line in out.stdout.splitlines() if line]


def variables_in_sources():
    """{name: first file that uses it as an environment variable}."""
    found = {}
    rules = [(tracked("*.cpp", "*.hpp", "*.cu", "*.cuh", "*.py"), re.compile(rf'"({NAME})')),
             (tracked("*.sh", ".ci/run"), re.compile(rf"\$\{{?({NAME})")),
             (tracked("CMakeLists.txt", "*/CMakeLists.txt"), re.compile(rf'[";]({NAME})='))]
    for files, pattern in rules:
        for path in files:
            if path.name == "test_env_vars.py":
                continue
            text = path.read_text(errors="replace")
            if path.name == "CMakeLists.txt":  # only its tests' ENVIRONMENT lists
                text = "\n".join(line for line in text.splitlines() if "ENVIRONMENT" in line)
            for name in pattern.findall(text):
                found.setdefault(name, str(path.relative_to(ROOT)))
    return found


def documented():
    """The names in the first column of docs/cli.md's environment table."""
    text = DOC.read_text()
    section = text.split("## Environment variables", 1)[1]
    names = set()
    for line in section.splitlines():
        if line.startswith("| `DPBENCH_"):
            names.update(re.findall(NAME, line.split("|")[1]))
    return names


class EnvVarsTest(unittest.TestCase):
    def test_every_variable_read_is_documented(self):
        found, listed = variables_in_sources(), documented()
        missing = {n: f for n, f in found.items() if n not in listed}
        self.assertEqual({}, missing, "read by these files but not in docs/cli.md's table")
        self.assertGreaterEqual(len(found), 15, "the scan found too few variables: is the pattern broken?")

    def test_no_documented_variable_is_stale(self):
        stale = documented() - set(variables_in_sources())
        self.assertEqual(set(), stale, "listed in docs/cli.md but read nowhere")


if __name__ == "__main__":
    unittest.main()
