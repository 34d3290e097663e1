"""The doc test, long part: every tagged `dpbench ...` command of a fenced block in README.md and
docs/*.md (an emulated cluster, a GPU, mpirun, torchrun, PyTorch, tens of seconds) runs, shortened,
and exits 0 (doc_commands.py says how; docs/tests.md summarises it). ctest labels it `long`.

A command whose tag's need is unmet here (no GPU, no torchrun...) or that dpbench refuses naming a
missing prerequisite (exit 2: no network namespaces, no etcd...) is skipped with the reason, once
every other command has passed; when one failed, they are listed on stderr instead, so that ctest
shows the failure rather than a skip. Commands tagged `skip` are only listed.

Two tests, two ctest entries, each reporting on its own: the commands on an emulated cluster
(python.test_doc_commands_long, one at a time with the other cluster jobs) and the others
(python.test_doc_commands_long_local, free to run beside them). In CI the split shortened the long
suite by nothing measurable (941 s against 945 s): its other tests already keep both cores busy.

Run from the repository root with Debian's interpreter:
    /usr/bin/python3 -m unittest -v tests/python/test_doc_commands_long.py
The binary is $DPBENCH_BINARY (ctest sets it), else build/release/dpbench.
"""
import pathlib
import sys
import unittest

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
import doc_commands  # noqa: E402  (path set above)


def on_cluster(command):
    """Whether a command runs on an emulated cluster (tagged `cluster`)."""
    return "cluster" in command.tags


class DocCommandsLong(unittest.TestCase):
    def test_cluster_commands(self):
        """Every tagged command on an emulated cluster exits 0, or is skipped with the reason."""
        doc_commands.check_binary(self)
        doc_commands.run_all(self, [c for c in doc_commands.all_commands() if c.long and on_cluster(c)], "long")

    def test_local_commands(self):
        """Every other tagged command exits 0, or is skipped with the reason."""
        doc_commands.check_binary(self)
        doc_commands.run_all(self, [c for c in doc_commands.all_commands() if c.long and not on_cluster(c)],
                             "long")


if __name__ == "__main__":
    unittest.main()
