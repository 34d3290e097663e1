"""The style check: every tracked C++/CUDA source (*.cpp *.hpp *.cu *.cuh *.h *.cc) is formatted as
.clang-format says, checked by `scripts/format.sh --check` (clang-format --dry-run -Werror); the
failure names the files that differ, and `scripts/format.sh` rewrites them.

Run from the repository root with Debian's interpreter:
    /usr/bin/python3 -m unittest -v tests/python/test_format.py
Skipped, saying why, where clang-format is missing (apt-get install clang-format) or is not major
version 14 (Debian 12's, the version .clang-format is tuned for: another version formats some lines
differently, which would fail here with nothing wrong in the code). $CLANG_FORMAT names another
binary, as for the script. Skipped too outside a git checkout (the file list is `git ls-files`).
A few seconds on 2 cores.
"""
import os
import pathlib
import re
import shutil
import subprocess
import unittest

ROOT = pathlib.Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "scripts" / "format.sh"
CLANG_FORMAT = os.environ.get("CLANG_FORMAT", "clang-format")


def skip_reason():
    """Why the check cannot run here, or None: $CLANG_FORMAT missing or not version 14, no git checkout."""
    binary = shutil.which(CLANG_FORMAT)
    if binary is None:
        return f"{CLANG_FORMAT} is not installed (apt-get install clang-format)"
    out = subprocess.run([binary, "--version"], capture_output=True, text=True, check=False).stdout
    match = re.search(r"clang-format version (\d+)", out)
    if match is None or match.group(1) != "14":
        version = match.group(1) if match else "unknown"
        return f"{binary} is version {version}; .clang-format is tuned for clang-format 14"
    if shutil.which("git") is None or not (ROOT / ".git").exists():
        return "not a git checkout: scripts/format.sh lists the sources with git ls-files"
    return None


SKIP = skip_reason()


class Format(unittest.TestCase):
    @unittest.skipIf(SKIP is not None, SKIP or "")
    def test_sources_follow_clang_format(self):
        """scripts/format.sh --check exits 0: no tracked source differs from .clang-format."""
        result = subprocess.run(["bash", str(SCRIPT), "--check"], cwd=ROOT, capture_output=True, text=True,
                                check=False, timeout=600)
        self.assertEqual(result.returncode, 0,
                         f"scripts/format.sh --check exited {result.returncode} "
                         f"(run scripts/format.sh to rewrite the files):\n{result.stdout}{result.stderr}")


if __name__ == "__main__":
    unittest.main()
