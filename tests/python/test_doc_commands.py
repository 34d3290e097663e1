"""The doc test, fast part: every untagged `dpbench ...` command of a fenced block in README.md and
docs/*.md runs, shortened, and exits 0 (doc_commands.py says how commands are found, tagged and
shortened; docs/tests.md summarises it). Tagged commands (an emulated cluster, a GPU, mpirun,
torchrun, PyTorch, minutes of time) are test_doc_commands_long.py's.

Run from the repository root with Debian's interpreter:
    /usr/bin/python3 -m unittest -v tests/python/test_doc_commands.py
The binary is $DPBENCH_BINARY (ctest sets it), else build/release/dpbench. A few seconds on
2 cores.
"""
import pathlib
import sys
import unittest

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
import doc_commands  # noqa: E402  (path set above)


class DocCommands(unittest.TestCase):
    def test_commands_are_found(self):
        """The scan finds the documented commands (a broken scan would find none, and pass)."""
        commands = doc_commands.all_commands()
        self.assertGreaterEqual(len(commands), 20, [c.where for c in commands])
        self.assertGreaterEqual(len([c for c in commands if not c.long]), 4)

    def test_tags_are_known(self):
        """Every `doc-test:` comment is right before a fence and names known tags."""
        for path in doc_commands.doc_files():
            lines = path.read_text().split("\n")
            for n, line in enumerate(lines):
                if doc_commands.TAG_COMMENT.match(line):
                    with self.subTest(f"{path.relative_to(doc_commands.ROOT)}:{n + 1}"):
                        following = lines[n + 1] if n + 1 < len(lines) else ""
                        self.assertRegex(following, r"^\s*```", "a doc-test tag belongs on the line before a fence")
                        _, _, error = doc_commands.parse_tags(doc_commands.TAG_COMMENT.match(line).group(1))
                        self.assertEqual(error, "")

    def test_commands_carry_the_tags_they_need(self):
        """A command with --nodes, --device cuda, a launcher or --reference is tagged so: an untagged
        one would run in the fast test, which skips nothing."""
        for c in doc_commands.all_commands():
            if c.skip_reason:
                continue
            missing = doc_commands.required_tags(c) - set(c.tags)
            with self.subTest(c.where):
                self.assertFalse(missing, f"{c.where}: {c.text}\n  needs <!-- doc-test: "
                                          f"{' '.join(sorted(set(c.tags) | missing))} --> before its block")

    def test_untagged_commands(self):
        """Every untagged command exits 0."""
        doc_commands.check_binary(self)
        doc_commands.run_all(self, [c for c in doc_commands.all_commands() if not c.long], "fast")


if __name__ == "__main__":
    unittest.main()
