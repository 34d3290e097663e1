"""Tests of the schema versions compare and report read (results/schema_versions.py).
Run from the repository root:  /usr/bin/python3 -m unittest -v tests/python/test_schema_versions.py
For: version 2 of dpbench-result and dpbench-memory renamed ps's rank 0 from "reducer" to "root";
version 3 of dpbench-result (and 2 of dpbench-projection) call the strategy the others are
compared with the baseline (strategy.reference -> baseline); version 4 of dpbench-result names a
PyTorch reference run's program `program`, not `mode` (reference.runs[].mode -> program).
Version-1, version-2 and version-3 files (the committed baselines are version 1) must still be
read by `compare` (results/compare.py), `report` (plots/report.py, plots/report_data.py) and
results/validate.py, and give the same figures as their version-4 twin; a version none reads (5)
is refused with a one-line error. The twins are made here by renaming the keys in the JSON text,
not by the upgrades, so that those are checked against an independent rewrite.
Not for: what the figures mean (test_compare.py, test_report*.py).
"""
import copy
import dataclasses
import json
import re
import subprocess
import sys
import tempfile
import unittest
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "results"))
sys.path.insert(0, str(ROOT / "plots"))
import compare  # noqa: E402
import report_data  # noqa: E402
import schema_versions  # noqa: E402

COMPARE = ROOT / "results" / "compare.py"
REPORT = ROOT / "plots" / "report.py"
VALIDATE = ROOT / "results" / "validate.py"
# A real 2-core sweep written by dpbench at schema version 1: ps has_reducer with
# reducer_minus_mean_bytes 3627068 at 2 ranks.
V1_SWEEP = ROOT / "tests" / "python" / "data" / "ci-sweep-2core.json"
V1_RESULT_NAMES = (("has_reducer", "has_root"), ("reducer_minus_mean_bytes", "root_minus_mean_bytes"))


def v2_text_of_result(text: str) -> str:
    """The version-2 twin of a version-1 result file's text: the renamed keys and the version."""
    for old, new in V1_RESULT_NAMES:
        text = text.replace(f'"{old}"', f'"{new}"')
    text = re.sub(r'"role":\s*"reducer"', '"role": "root"', text)
    out, n = re.subn(r'("name":\s*"dpbench-result",\s*"version":\s*)1\b', r"\g<1>2", text)
    assert n == 1, "the fixture's schema object changed shape"
    return out


def v3_text_of_result(text: str) -> str:
    """The version-3 twin of a version-2 result file's text (one without a PyTorch reference
    block): the strategy's "reference" trait is its "baseline", and the version."""
    text = text.replace('"reference":', '"baseline":').replace('"ratio_to_reference":', '"ratio_to_baseline":')
    out, n = re.subn(r'("name":\s*"dpbench-result",\s*"version":\s*)2\b', r"\g<1>3", text)
    assert n == 1, "the fixture's schema object changed shape"
    return out


def v4_text_of_result(text: str) -> str:
    """The version-4 twin of a version-3 result file's text (one without a PyTorch reference
    block, so only the version differs)."""
    out, n = re.subn(r'("name":\s*"dpbench-result",\s*"version":\s*)3\b', r"\g<1>4", text)
    assert n == 1, "the fixture's schema object changed shape"
    return out


def memory_doc(version: int) -> dict:
    """A dpbench-memory file: ps (its rank 0 named as `version` names it) 2 GiB above its worker,
    and allreduce replicas, at 2 and 4 ranks."""
    gib = 1024 ** 3
    rank0 = "reducer" if version == 1 else "root"
    rows = []
    for world in (2, 4):
        for mode, role, params in (("allreduce", "replica", 1.0), ("ps", rank0, 2.0), ("ps", "worker", 1.0)):
            b = {"parameters": params * gib, "gradients": params * gib, "optimizer_state": 0.5 * gib,
                 "activations": 0.25 * gib, "comm_buffers": 0.0, "data_staging": 1024.0 ** 2}
            if role == "worker":
                b["optimizer_state"] = 0.0
            rows.append(dict(b, mode=mode, world_size=world, role=role, total_bytes=sum(b.values())))
    return {"schema": {"name": "dpbench-memory", "version": version},
            "model": {"params": 268e6}, "global_batch": 32, "optimizer": "sgd", "precision": "fp32",
            "rows": rows,
            "largest_fitting": [{"mode": m, "world_size": w, "largest_params": 3e9}
                                for m in ("allreduce", "ps") for w in (2, 4)]}


class Twins(unittest.TestCase):
    """The v1 sweep and its v2, v3 and v4 twins, each written as results.json in a directory of its own
    (so that the reports, which name their inputs, differ only in that directory)."""

    @classmethod
    def setUpClass(cls):
        cls.tmp = Path(tempfile.mkdtemp(prefix="dpbench-schema-versions-"))
        text = V1_SWEEP.read_text()
        cls.v1 = cls.write("v1", text)
        cls.v2 = cls.write("v2", v2_text_of_result(text))
        cls.v3 = cls.write("v3", v3_text_of_result(v2_text_of_result(text)))
        cls.v4 = cls.write("v4", v4_text_of_result(v3_text_of_result(v2_text_of_result(text))))

    @classmethod
    def tearDownClass(cls):
        subprocess.run(["rm", "-rf", str(cls.tmp)], check=False)

    @classmethod
    def write(cls, sub: str, text: str) -> Path:
        (cls.tmp / sub).mkdir(parents=True, exist_ok=True)
        path = cls.tmp / sub / "results.json"
        path.write_text(text)
        return path

    def run_tool(self, *args, **kw) -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, *map(str, args)], capture_output=True, text=True,
                              timeout=300, **kw)


class ResultFileTests(Twins):
    def test_fixture_is_version_1_with_the_old_names(self):
        doc = json.loads(self.v1.read_text())
        self.assertEqual(doc["schema"], {"name": "dpbench-result", "version": 1})
        self.assertTrue(any(r["strategy"]["has_reducer"] for r in doc["runs"]))
        self.assertIn("reducer_minus_mean_bytes", doc["runs"][0]["memory"])
        self.assertNotIn("has_root", self.v1.read_text())
        self.assertNotIn("reducer", self.v2.read_text())

    def test_upgrade_v1_gives_the_v2_twin_and_leaves_its_input_alone(self):
        v1, v2 = json.loads(self.v1.read_text()), json.loads(self.v2.read_text())
        before = copy.deepcopy(v1)
        self.assertEqual(v2, schema_versions.upgrade_v1(v1))
        self.assertEqual(before, v1)
        v3 = json.loads(self.v3.read_text())
        self.assertEqual(v3, schema_versions.upgrade_v2(v2))
        v4 = json.loads(self.v4.read_text())
        self.assertEqual(v4, schema_versions.upgrade_v3(v3))
        self.assertEqual(v4, schema_versions.upgrade(v1))
        self.assertEqual(v4, schema_versions.upgrade(v2))
        self.assertEqual(v4, schema_versions.upgrade(v3))
        self.assertIs(v4, schema_versions.upgrade(v4))  # current files pass through untouched
        self.assertNotIn('"reference"', self.v3.read_text())
        self.assertEqual(18, self.v3.read_text().count('"baseline"'))

    def test_upgrade_v1_renames_the_modelled_role_and_the_reference_memory(self):
        doc = {"schema": {"name": "dpbench-result", "version": 1},
               "runs": [{"mode": "ps", "memory": {"per_rank": [{"rank": 0, "modelled": {"role": "reducer"}},
                                                               {"rank": 1, "modelled": {"role": "worker"}}],
                                                  "reducer_minus_mean_bytes": 8.0}}],
               "reference": {"runs": [{"mode": "dataparallel",
                                       "memory": {"reducer_minus_mean_bytes": 4.0}}]}}
        up = schema_versions.upgrade_v1(doc)
        self.assertEqual(["root", "worker"], [m["modelled"]["role"] for m in up["runs"][0]["memory"]["per_rank"]])
        self.assertEqual({"per_rank", "root_minus_mean_bytes"}, set(up["runs"][0]["memory"]))
        self.assertEqual({"root_minus_mean_bytes": 4.0}, up["reference"]["runs"][0]["memory"])
        self.assertEqual(2, up["schema"]["version"])

    def test_upgrade_v3_names_a_reference_run_s_program_program(self):
        doc = {"schema": {"name": "dpbench-result", "version": 3},
               "runs": [{"mode": "allreduce", "world_size": 2}],
               "reference": {"framework": "pytorch",
                             "runs": [{"mode": "ddp", "dpbench_mode": "allreduce", "dpbench_label": "allreduce (ring)",
                                       "dpbench_equivalent": "allreduce"}],
                             "failures": [{"dpbench_mode": "ps", "error": "x"}]}}
        before = copy.deepcopy(doc)
        up = schema_versions.upgrade_v3(doc)
        self.assertEqual(before, doc)  # the input is left alone
        self.assertEqual(4, up["schema"]["version"])
        self.assertEqual([{"program": "ddp", "dpbench_mode": "allreduce", "dpbench_label": "allreduce (ring)",
                           "dpbench_equivalent": "allreduce"}], up["reference"]["runs"])
        self.assertEqual(doc["runs"], up["runs"])  # dpbench's runs keep their mode
        self.assertEqual(doc["reference"]["failures"], up["reference"]["failures"])
        self.assertEqual(up, schema_versions.upgrade(doc))
        v2 = dict(copy.deepcopy(doc), schema={"name": "dpbench-result", "version": 2})
        self.assertEqual(up, schema_versions.upgrade(v2))  # version 2 through upgrade_v2, then upgrade_v3
        self.assertEqual(4, schema_versions.CURRENT_VERSION["dpbench-result"])

    def test_compare_loads_v1_v2_and_v3_under_v4_names(self):
        self.assertEqual(compare.load(self.v4), compare.load(self.v1))
        self.assertEqual(compare.load(self.v4), compare.load(self.v2))
        self.assertEqual(compare.load(self.v4), compare.load(self.v3))

    def test_compare_v1_base_against_v2_new_as_the_ci_gate_does(self):
        # scripts/ci_gate.sh: a fresh (version-2) sweep against the committed version-1 baseline.
        p = self.run_tool(COMPARE, self.v1, self.v2)
        self.assertEqual(0, p.returncode, p.stdout + p.stderr)
        self.assertIn("0 regressions", p.stdout)
        self.assertNotIn("REGRESSION", p.stdout)

    def test_compare_gives_the_same_table_for_v1_and_v2(self):
        outs = []
        for base, new in ((self.v1, self.v1), (self.v2, self.v2), (self.v2, self.v1), (self.v3, self.v1),
                          (self.v4, self.v1)):
            p = self.run_tool(COMPARE, base, new, "--timing", "ratio")
            self.assertEqual(0, p.returncode, p.stdout + p.stderr)
            outs.append(p.stdout.replace(str(base), "FILE").replace(str(new), "FILE"))
        self.assertEqual(outs[0], outs[1])
        self.assertEqual(outs[0], outs[2])
        self.assertEqual(outs[0], outs[3])
        self.assertEqual(outs[0], outs[4])

    def test_report_data_gives_the_same_points(self):
        p1 = report_data.load_results([self.v1])
        p2 = report_data.load_results([self.v2])
        self.assertEqual(p2.points, p1.points)
        self.assertEqual(report_data.load_results([self.v3]).points, p1.points)
        self.assertEqual(report_data.load_results([self.v4]).points, p1.points)
        ps = [p for p in p1.points if p.mode == "ps" and p.world_size == 2]
        self.assertTrue(ps and all(p.has_root for p in ps))
        self.assertEqual({3627068.0}, {p.root_minus_mean_bytes for p in ps})
        self.assertEqual(report_data.compute_verdict(p2.points), report_data.compute_verdict(p1.points))

    def test_report_writes_the_same_report_for_v1_and_v2(self):
        mds = []
        for path in (self.v1, self.v2, self.v3, self.v4):
            out = path.parent / "report"
            p = self.run_tool(REPORT, path, "-o", out)
            self.assertEqual(0, p.returncode, p.stdout + p.stderr)
            mds.append((out / "report.md").read_text().replace(str(path.parent), "DIR"))
        self.assertEqual(mds[0], mds[1])
        self.assertEqual(mds[0], mds[2])
        self.assertEqual(mds[0], mds[3])
        self.assertIn("the ps root holds", mds[0])

    def test_validate_reads_v1_v2_and_v3_as_v4(self):
        p = self.run_tool(VALIDATE, self.v1, self.v2, self.v3, self.v4)
        self.assertEqual(0, p.returncode, p.stdout + p.stderr)
        self.assertEqual([f"{self.v1}: valid as version 4 (18 runs)", f"{self.v2}: valid as version 4 (18 runs)",
                          f"{self.v3}: valid as version 4 (18 runs)", f"{self.v4}: valid (18 runs)"],
                         p.stdout.splitlines())


class MemoryFileTests(unittest.TestCase):
    def test_v1_memory_file_reads_as_its_v2_twin(self):
        with tempfile.TemporaryDirectory(prefix="dpbench-schema-memory-") as tmp:
            paths = []
            for version in (1, 2):
                paths.append(Path(tmp) / f"memory-v{version}.json")
                paths[-1].write_text(json.dumps(memory_doc(version)))
            m1, m2 = (report_data.load_memory(p) for p in paths)
        self.assertEqual(dataclasses.replace(m2, source=m1.source), m1)
        excess = report_data.root_excess(m1, ["ps", "allreduce"])
        self.assertEqual([("ps", 2, 2.5 * 1024 ** 3), ("ps", 4, 2.5 * 1024 ** 3)], excess)


class UnknownVersionTests(Twins):
    """Result version 5 and memory version 3 are neither current nor upgradable: one line on
    stderr, exit 2."""

    @classmethod
    def setUpClass(cls):
        super().setUpClass()
        doc = json.loads(cls.v4.read_text())
        doc["schema"]["version"] = 5
        cls.v5 = cls.write("v5", json.dumps(doc))
        mem = memory_doc(2)
        mem["schema"]["version"] = 3
        cls.mem3 = cls.tmp / "v3" / "memory.json"
        cls.mem3.write_text(json.dumps(mem))

    def test_compare_refuses_version_5(self):
        p = self.run_tool(COMPARE, self.v1, self.v5)
        self.assertEqual(2, p.returncode, p.stdout + p.stderr)
        self.assertEqual([f"compare.py: {self.v5}: schema version 5 is not supported "
                          "(expected versions 1, 2, 3 and 4)"], p.stderr.splitlines())
        with self.assertRaisesRegex(compare.InputError, "schema version 5 is not supported"):
            compare.load(self.v5)

    def test_report_refuses_version_5(self):
        p = self.run_tool(REPORT, self.v5, "-o", self.tmp / "v5" / "report")
        self.assertEqual(2, p.returncode, p.stdout + p.stderr)
        self.assertEqual([f"report.py: error: {self.v5}: dpbench-result version 5 is not supported "
                          "(this report reads versions 1, 2, 3 and 4)"], p.stderr.splitlines())

    def test_report_refuses_a_version_3_memory_file(self):
        with self.assertRaisesRegex(report_data.InputError, r"dpbench-memory version 3 is not supported "
                                    r"\(this report reads versions 1 and 2\)"):
            report_data.load_memory(self.mem3)


if __name__ == "__main__":
    unittest.main()
