"""Tests of results/compare.py, the regression gate for dpbench result files.

Run from the repository root with Debian's interpreter (it has scipy):
    /usr/bin/python3 -m unittest -v tests/python/test_compare.py
Two real result files are produced with the dpbench binary (DPBENCH_BINARY, default
build/release/dpbench): a small synthetic MLP, 2 ranks, both modes, 100 steps, about 2 s each.
A missing binary fails those tests rather than skipping them. The CLI tests check exit codes
through a subprocess; the rest call the module's functions directly.

Not covered here: schema validation of result files (results/validate.py and ctest do that).
"""
import copy
import json
import os
import pathlib
import random
import shutil
import statistics
import subprocess
import sys
import tempfile
import unittest

ROOT = pathlib.Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "results"))
import compare  # noqa: E402  (path set above)

SCRIPT = ROOT / "results" / "compare.py"
BINARY = os.environ.get("DPBENCH_BINARY", str(ROOT / "build" / "release" / "dpbench"))
# 12800 samples / batch 128 = 100 steps (95 timed) per mode.
# A sweep with 3 repetitions, modes alternating, as the CI gate runs it: load that comes and
# goes between runs shows up as spread across repetitions, which raises the ratio floor.
RUN_ARGS = ["sweep", "-q", "--device", "cpu", "--data", "synthetic", "--input", "784", "--hidden", "256",
            "--synthetic-samples", "12800", "--max-steps", "60", "--ranks", "2",
            "--batch-sizes", "128", "--num-workers", "0", "--repetitions", "3",
            "--modes", "ps,allreduce"]

_real = {}
_tmp = tempfile.mkdtemp(prefix="dpbench-compare-test-")


def tearDownModule():
    """Removes the temporary directory."""
    shutil.rmtree(_tmp, ignore_errors=True)


def real_files(tc):
    """Paths of two result files from two runs of the same command (made once per module)."""
    if not _real:
        if not (os.path.isfile(BINARY) and os.access(BINARY, os.X_OK)):
            tc.fail(f"dpbench binary not found at {BINARY}: build it (cmake --build --preset "
                    f"release) or set DPBENCH_BINARY")
        for name in ("first", "second"):
            out = os.path.join(_tmp, f"{name}.json")
            p = subprocess.run([BINARY, *RUN_ARGS, "--out", out], capture_output=True,
                               text=True, timeout=300)
            tc.assertEqual(p.returncode, 0, f"dpbench run failed: {p.stderr}")
            _real[name] = out
    return _real["first"], _real["second"]


def read(path):
    """Parsed JSON file."""
    with open(path) as f:
        return json.load(f)


def write(doc, name):
    """Writes doc to a fresh file in the temporary directory; returns its path."""
    path = os.path.join(_tmp, name)
    with open(path, "w") as f:
        json.dump(doc, f)
    return path


def run_cli(*args):
    """Runs compare.py with the current interpreter; returns the CompletedProcess."""
    return subprocess.run([sys.executable, str(SCRIPT), *map(str, args)], capture_output=True,
                          text=True, timeout=120)


def run_index(doc, mode):
    """Index of the run of the given mode in doc['runs']."""
    return next(i for i, r in enumerate(doc["runs"]) if r["mode"] == mode)


def set_samples(run, samples):
    """Replaces a run's step samples and its throughput consistently (global_batch / median)."""
    run["step_time_s"]["samples"] = list(samples)
    run["step_time_s"]["p50"] = statistics.median(samples)
    run["throughput_samples_per_s"] = run["global_batch"] / statistics.median(samples)


def steady(doc):
    """Copy of doc whose step samples have almost no A/A noise and no spread across repetitions.

    Every run of a mode gets that mode's median over all its runs, with +-2 % in a cycle of five,
    so the interleaved halves agree, repetitions agree and the noise floor is the stated 25 %:
    timing tests then do not depend on how noisy this machine was.
    """
    doc = copy.deepcopy(doc)
    by_mode = {}
    for run in doc["runs"]:
        by_mode.setdefault(run["mode"], []).extend(run["step_time_s"]["samples"])
    for run in doc["runs"]:
        m = statistics.median(by_mode[run["mode"]])
        n = len(run["step_time_s"]["samples"])
        set_samples(run, [m * (1 + 0.01 * ((i % 5) - 2)) for i in range(n)])
    return doc


def scale_mode(doc, mode, factor):
    """Copy of doc with every step sample of the given mode multiplied by factor."""
    doc = copy.deepcopy(doc)
    for run in doc["runs"]:
        if run["mode"] == mode:
            set_samples(run, [s * factor for s in run["step_time_s"]["samples"]])
    return doc


def synthetic_doc(ps_samples, ar_samples, host="ci"):
    """A minimal dpbench result document with two runs and the given step samples."""
    def run(mode, transport, samples, sent):
        r = {"mode": mode, "transport": transport, "comm": "local", "device": "cpu",
             "workload": "mlp", "world_size": 2, "global_batch": 64, "num_params": 2410,
             "virtual_ranks": False, "steps": {"total": len(samples) + 5, "timed": len(samples),
                                               "warmup": 5},
             "config": {"world_size": 2, "global_batch": 64, "num_workers": 0, "seed": 0,
                        "mode": mode, "transport": "collective", "comm": "local",
                        "device": "cpu", "workload": "mlp"},
             "step_time_s": {"p10": 0, "p50": 0, "p90": 0, "p99": 0, "samples": []},
             "comm_bytes_per_step": {"per_rank": [{"rank": 0, "sent": sent, "received": sent},
                                                  {"rank": 1, "sent": sent, "received": sent}]},
             "memory": {"per_rank": [dict(rank=k, peak_bytes=50000, parameters=9640,
                                          gradients=9640, optimizer_state=9640,
                                          activations=14848, comm_buffers=0, data_staging=8320)
                                     for k in (0, 1)],
                        "imbalance_max_over_mean": 1.0, "reducer_minus_mean_bytes": 0.0},
             "quality": {"final_train_loss": 0.3, "epoch_train_loss": [0.3],
                         "test_accuracy": 0.86},
             "warnings": []}
        set_samples(r, samples)
        return r
    return {"schema": {"name": "dpbench-result", "version": 1},
            "created": "2025-01-01T00:00:00Z", "env": {"host": host, "cpu_model": "x"},
            "config": {"num_workers": 0},
            "runs": [run("ps", "collective", ps_samples, 19112),
                     run("allreduce", "ring", ar_samples, 9640)]}


def jittered(n, median, spread, seed):
    """n samples around median, uniform +-spread (relative), reproducible."""
    rng = random.Random(seed)
    return [median * (1 + rng.uniform(-spread, spread)) for _ in range(n)]


class CommandLineTests(unittest.TestCase):
    """Exit codes and table contents of the command on real and edited result files."""

    def setUp(self):
        self.first, self.second = real_files(self)
        self.doc = read(self.first)

    def assertExit(self, proc, code):
        """Exit status with the report shown on failure."""
        self.assertEqual(proc.returncode, code,
                         f"stdout:\n{proc.stdout}\nstderr:\n{proc.stderr}")

    def test_same_file_against_itself_exits_0(self):
        p = run_cli(self.first, self.first)
        self.assertExit(p, 0)
        self.assertIn("0 regressions", p.stdout)
        self.assertIn("No figure changed.", p.stdout)

    def test_two_real_runs_of_same_command_deterministic_figures_equal(self):
        p = run_cli(self.first, self.second, "--timing", "none")
        self.assertExit(p, 0)
        self.assertNotIn("REGRESSION", p.stdout)

    def test_two_real_runs_of_same_command_pass_default_gate(self):
        p = run_cli(self.first, self.second)
        self.assertExit(p, 0)
        self.assertIn("noise floor", p.stdout)

    def test_comm_byte_count_changed_by_4_exits_1_and_names_figure(self):
        doc = copy.deepcopy(self.doc)
        doc["runs"][run_index(doc, "allreduce")]["comm_bytes_per_step"]["per_rank"][1]["sent"] += 4
        p = run_cli(self.first, write(doc, "comm4.json"))
        self.assertExit(p, 1)
        line = next(l for l in p.stdout.splitlines() if "REGRESSION" in l)
        self.assertIn("comm_bytes_per_step.per_rank[1].sent", line)
        self.assertIn("allreduce", line)
        self.assertIn("+4", line)
        self.assertIn(", 1 regression;", p.stdout)

    def test_memory_category_changed_exits_1(self):
        doc = copy.deepcopy(self.doc)
        doc["runs"][run_index(doc, "ps")]["memory"]["per_rank"][0]["optimizer_state"] -= 8
        p = run_cli(self.first, write(doc, "mem.json"))
        self.assertExit(p, 1)
        self.assertIn("memory.per_rank[0].optimizer_state", p.stdout)

    def test_accuracy_drop_of_0_02_exits_1(self):
        doc = copy.deepcopy(self.doc)
        doc["runs"][0]["quality"]["test_accuracy"] -= 0.02
        p = run_cli(self.first, write(doc, "acc-down.json"))
        self.assertExit(p, 1)
        self.assertIn("quality.test_accuracy", p.stdout)

    def test_accuracy_rise_of_0_02_exits_0_and_is_reported_improved(self):
        lower = copy.deepcopy(self.doc)
        lower["runs"][0]["quality"]["test_accuracy"] -= 0.02
        p = run_cli(write(lower, "acc-base.json"), self.first)
        self.assertExit(p, 0)
        line = next(l for l in p.stdout.splitlines() if "quality.test_accuracy" in l)
        self.assertIn("improved", line)

    def test_ratio_falls_50_percent_exits_1(self):
        base = steady(self.doc)
        new = scale_mode(base, "allreduce", 2.0)   # allreduce throughput halves
        p = run_cli(write(base, "steady.json"), write(new, "ar-half.json"))
        self.assertExit(p, 1)
        line = next(l for l in p.stdout.splitlines() if "REGRESSION" in l)
        self.assertIn("throughput ratio", line)
        self.assertIn("-50.0 %", line)

    def test_ratio_falls_5_percent_exits_0(self):
        base = steady(self.doc)
        new = scale_mode(base, "allreduce", 1 / 0.95)
        p = run_cli(write(base, "steady5.json"), write(new, "ar-95.json"))
        self.assertExit(p, 0)
        self.assertIn("-5.0 %", p.stdout)
        self.assertIn("within noise", p.stdout)

    def test_missing_run_exits_1(self):
        doc = copy.deepcopy(self.doc)
        del doc["runs"][run_index(doc, "ps")]
        p = run_cli(self.first, write(doc, "missing.json"))
        self.assertExit(p, 1)
        self.assertIn("missing in NEW", p.stdout)

    def test_failed_run_in_new_exits_1(self):
        doc = copy.deepcopy(self.doc)
        i = run_index(doc, "allreduce")
        doc["runs"][i] = {"status": "failed", "error": "rank 1: aborted",
                          "config": doc["runs"][i]["config"]}
        p = run_cli(self.first, write(doc, "failed.json"))
        self.assertExit(p, 1)
        line = next(l for l in p.stdout.splitlines() if "REGRESSION" in l)
        self.assertIn("failed", line)
        self.assertNotIn("missing in NEW", p.stdout)   # matched through its config

    def test_garbage_file_exits_2_with_one_line_naming_it(self):
        path = os.path.join(_tmp, "garbage.json")
        with open(path, "wb") as f:
            f.write(b"\x00\x01 not json {")
        p = run_cli(self.first, path)
        self.assertExit(p, 2)
        self.assertEqual(len(p.stderr.strip().splitlines()), 1)
        self.assertIn(path, p.stderr)

    def test_wrong_schema_name_exits_2(self):
        doc = copy.deepcopy(self.doc)
        doc["schema"]["name"] = "google-benchmark"
        path = write(doc, "other-schema.json")
        p = run_cli(path, self.first)
        self.assertExit(p, 2)
        self.assertIn(path, p.stderr)
        self.assertIn("schema.name", p.stderr)

    def test_missing_file_exits_2(self):
        path = os.path.join(_tmp, "does-not-exist.json")
        p = run_cli(self.first, path)
        self.assertExit(p, 2)
        self.assertIn(path, p.stderr)

    def test_markdown_file_has_the_table(self):
        doc = copy.deepcopy(self.doc)
        doc["runs"][0]["num_params"] += 1
        out = os.path.join(_tmp, "report.md")
        p = run_cli(self.first, write(doc, "params.json"), "--markdown", out)
        self.assertExit(p, 1)
        with open(out) as f:
            text = f.read()
        self.assertEqual(text, p.stdout)
        self.assertIn("| num_params |", text)


class FunctionTests(unittest.TestCase):
    """The module's functions on real and synthetic documents."""

    def test_unchanged_figures_are_counted_not_listed(self):
        doc = synthetic_doc(jittered(50, 1e-3, 0.01, 1), jittered(50, 8e-4, 0.01, 2))
        report = compare.compare(doc, copy.deepcopy(doc))
        self.assertEqual(report.rows, [])
        # per run: num_params, 2 step counts, 2 ranks x 2 comm, 2 ranks x 7 memory, accuracy = 22
        # plus one throughput ratio
        self.assertEqual(report.compared, 2 * 22 + 1)
        self.assertEqual(report.exit_code, 0)

    def test_aa_difference_of_alternating_samples(self):
        samples = [10e-3, 11e-3] * 50        # even halves 10 ms, odd halves 11 ms
        self.assertAlmostEqual(compare.aa_difference(samples), 0.1, places=12)
        self.assertEqual(compare.aa_difference([5e-3] * 40), 0.0)
        self.assertIsNone(compare.aa_difference([5e-3]))

    def test_noise_floor_is_three_times_largest_aa_when_above_stated(self):
        noisy = synthetic_doc([10e-3, 11e-3] * 50, [10e-3] * 100)       # A/A 10 %
        quiet = synthetic_doc([10e-3] * 100, [10e-3, 10.2e-3] * 50)     # A/A 2 %
        floor = compare.noise_floor([("BASE", quiet), ("NEW", noisy)], 0.25)
        self.assertAlmostEqual(floor.largest_aa, 0.1, places=12)
        self.assertAlmostEqual(floor.value, 0.3, places=12)
        self.assertIn("ps/collective", floor.aa_source)
        self.assertIn("NEW", floor.aa_source)
        floor = compare.noise_floor([("BASE", quiet), ("NEW", quiet)], 0.25)
        self.assertAlmostEqual(floor.largest_aa, 0.02, places=12)
        self.assertEqual(floor.value, 0.25)

    def test_noise_floor_reaches_the_ratio_gate(self):
        # ratio falls 28 %: a regression under the stated 25 %, not under 3 x 10 % A/A noise
        base = synthetic_doc([10e-3] * 100, [8e-3] * 100)
        new = synthetic_doc([10e-3] * 100, [8e-3 / 0.72] * 100)
        self.assertEqual(compare.compare(base, new).exit_code, 1)
        new = synthetic_doc([10e-3, 11e-3] * 50, [8e-3 / 0.72, 8e-3 * 1.1 / 0.72] * 50)
        report = compare.compare(base, new)
        self.assertAlmostEqual(report.noise.value, 0.3, places=12)
        self.assertEqual(report.exit_code, 0, report.markdown())

    def test_noise_floor_over_100_percent_is_called_out(self):
        noisy = synthetic_doc([10e-3, 30e-3] * 50, [8e-3] * 100)       # A/A 200 %
        report = compare.compare(noisy, synthetic_doc([10e-3] * 100, [80e-3] * 100))
        self.assertEqual(report.exit_code, 0)        # ratio fell 90 %, floor 600 %
        self.assertAlmostEqual(report.noise.value, 6.0, places=9)
        self.assertTrue(any("too noisy to gate on" in n for n in report.notes))

    def test_repetition_spread_raises_the_floor(self):
        # Two repetitions whose ratios differ by 60 % (load moved between runs): a 40 % fall of
        # the median ratio in NEW is within 2 x that spread, so it is not a regression.
        base = synthetic_doc([10e-3] * 20, [10e-3] * 20)
        rep1 = copy.deepcopy(base["runs"])
        for run in rep1:
            run["repetition"] = 1
        rep1[1]["step_time_s"]["samples"] = [16e-3] * 20  # allreduce slower in repetition 1
        base["runs"] += rep1
        self.assertAlmostEqual(compare.repetition_spread([1.0, 1.0 / 1.6]), (1 - 1 / 1.6) / 0.8125)
        new = copy.deepcopy(base)
        for run in new["runs"]:
            if run["mode"] == "allreduce":
                run["step_time_s"]["samples"] = [x * 1.4 for x in run["step_time_s"]["samples"]]
        report = compare.compare(base, new)
        self.assertEqual(report.exit_code, 0, report.markdown())
        self.assertTrue(any("spread" in n for n in report.notes), report.notes)

    def test_single_repetition_has_no_spread(self):
        self.assertEqual(compare.repetition_spread([1.3]), 0.0)

    def test_ratio_from_samples_matches_throughput_field(self):
        doc = read(real_files(self)[0])
        (ratios,) = compare.mode_ratios(doc).values()  # one group, three repetitions
        self.assertEqual(len(ratios), 3)
        for rep, ratio in enumerate(ratios):
            tp = {r["mode"]: r["throughput_samples_per_s"] for r in doc["runs"]
                  if r["repetition"] == rep}
            self.assertAlmostEqual(ratio, tp["allreduce"] / tp["ps"], places=6)

    def test_failed_run_is_keyed_like_its_ok_run(self):
        doc = read(real_files(self)[0])
        for run in doc["runs"]:
            failed = {"status": "failed", "error": "x", "config": run["config"],
                      "repetition": run.get("repetition", 0)}
            self.assertEqual(compare.run_key(failed, doc), compare.run_key(run, doc))

    def test_new_run_and_repetition_are_reported_not_regressions(self):
        base = synthetic_doc([1e-3] * 20, [1e-3] * 20)
        new = copy.deepcopy(base)
        extra = copy.deepcopy(new["runs"][0])
        extra["repetition"] = 1
        new["runs"].append(extra)
        report = compare.compare(base, new)
        self.assertEqual(report.exit_code, 0)
        (row,) = [r for r in report.rows if r.status == "new"]
        self.assertIn("rep=1", row.run)

    def test_failed_in_base_ok_in_new_is_not_a_regression(self):
        new = synthetic_doc([1e-3] * 20, [1e-3] * 20)
        base = copy.deepcopy(new)
        base["runs"][1] = {"status": "failed", "error": "x", "config": base["runs"][1]["config"]}
        report = compare.compare(base, new)
        self.assertEqual(report.exit_code, 0, report.markdown())
        self.assertTrue(any(r.status == "fixed" for r in report.rows))

    def test_mwu_flags_a_2x_slowdown(self):
        base = synthetic_doc(jittered(100, 10e-3, 0.1, 3), jittered(100, 8e-3, 0.1, 4))
        slow = copy.deepcopy(base)
        for run in slow["runs"]:
            set_samples(run, [2 * s for s in run["step_time_s"]["samples"]])
        report = compare.compare(base, slow, compare.Options(timing="mwu"))
        self.assertEqual(report.exit_code, 1)
        self.assertEqual(len(report.regressions), 2)
        self.assertTrue(all("step_time_s" in r.figure for r in report.regressions))
        p, rel, bad = compare.mwu_check(base["runs"][0]["step_time_s"]["samples"],
                                        slow["runs"][0]["step_time_s"]["samples"], 0.25)
        self.assertLess(p, 1e-10)
        self.assertAlmostEqual(rel, 1.0, places=9)
        self.assertTrue(bad)

    def test_mwu_passes_an_identical_copy(self):
        base = synthetic_doc(jittered(100, 10e-3, 0.1, 5), jittered(100, 8e-3, 0.1, 6))
        report = compare.compare(base, copy.deepcopy(base), compare.Options(timing="mwu"))
        self.assertEqual(report.exit_code, 0)
        self.assertEqual(report.regressions, [])
        p, rel, bad = compare.mwu_check(*[base["runs"][0]["step_time_s"]["samples"]] * 2, 0.25)
        self.assertGreater(p, 0.4)
        self.assertEqual(rel, 0.0)
        self.assertFalse(bad)

    def test_mwu_small_significant_slowdown_is_within_floor(self):
        base = synthetic_doc(jittered(200, 10e-3, 0.01, 7), jittered(200, 8e-3, 0.01, 8))
        slower = copy.deepcopy(base)
        for run in slower["runs"]:
            set_samples(run, [1.10 * s for s in run["step_time_s"]["samples"]])
        report = compare.compare(base, slower, compare.Options(timing="mwu"))
        self.assertEqual(report.exit_code, 0, report.markdown())
        self.assertTrue(all("within noise floor" in r.status for r in report.rows))

    def test_timing_none_ignores_a_slowdown(self):
        base = synthetic_doc([10e-3] * 50, [8e-3] * 50)
        new = synthetic_doc([10e-3] * 50, [80e-3] * 50)
        self.assertEqual(compare.compare(base, new, compare.Options(timing="none")).exit_code, 0)
        self.assertEqual(compare.compare(base, new).exit_code, 1)

    def test_check_doc_rejects_non_dpbench_documents(self):
        for bad in ([], {"schema": {"name": "dpbench-result", "version": 2}, "runs": [{}]},
                    {"schema": {"name": "dpbench-result", "version": 1}, "runs": []},
                    {"schema": {"name": "dpbench-result", "version": 1}, "runs": [{"mode": "ps"}]}):
            with self.assertRaises(compare.InputError):
                compare.check_doc(bad, "x.json")



def with_traits(run, name, transport, reference, label=None):
    """The run renamed to strategy `name`, carrying the traits a result file records."""
    run = copy.deepcopy(run)
    run["mode"], run["transport"] = name, transport
    run["config"]["mode"] = name
    run["strategy"] = {"name": name, "label": label or f"{name} ({transport})",
                       "transport": transport, "reference": reference,
                       "overlaps_backward": not reference, "has_reducer": reference,
                       "projection": name, "busbw_factor": None}
    return run


class StrategyTraitTests(unittest.TestCase):
    """The comparison reads the reference role and transports from the runs' traits; these files
    use strategy names compare.py has never seen."""

    def made_up_doc(self, ref_ms, other_ms, third_ms):
        """A file with a reference `dp_baseline` and two other strategies, as a new dpbench with
        a third strategy would write it."""
        doc = synthetic_doc([ref_ms * 1e-3] * 20, [other_ms * 1e-3] * 20)
        ref, other = doc["runs"]
        third = copy.deepcopy(other)
        set_samples(third, [third_ms * 1e-3] * 20)
        doc["runs"] = [with_traits(ref, "dp_baseline", "chain", True),
                       with_traits(other, "ring_sync", "ring", False),
                       with_traits(third, "sharded_ps", "collective", False)]
        return doc

    def test_every_other_strategy_is_paired_with_the_reference(self):
        doc = self.made_up_doc(10.0, 8.0, 5.0)
        ratios = {pair: r for (_, pair), r in compare.mode_ratios(doc).items()}
        self.assertEqual(set(ratios), {"ring_sync/ring / dp_baseline/chain",
                                       "sharded_ps/collective / dp_baseline/chain"})
        self.assertAlmostEqual(ratios["ring_sync/ring / dp_baseline/chain"][0], 10.0 / 8.0)
        self.assertAlmostEqual(ratios["sharded_ps/collective / dp_baseline/chain"][0], 2.0)

    def test_a_third_strategy_slowing_down_is_a_regression(self):
        base = self.made_up_doc(10.0, 8.0, 5.0)
        new = self.made_up_doc(10.0, 8.0, 10.0)   # sharded_ps halves its throughput
        report = compare.compare(base, new)
        self.assertEqual(report.exit_code, 1, report.markdown())
        (row,) = report.regressions
        self.assertEqual(row.figure, "throughput ratio sharded_ps/collective / dp_baseline/chain")
        self.assertIn("-50.0 %", row.change)

    def test_failed_point_is_keyed_by_its_traits_transport(self):
        doc = self.made_up_doc(10.0, 8.0, 5.0)
        ok = doc["runs"][1]
        failed = {"status": "failed", "mode": ok["mode"], "strategy": ok["strategy"],
                  "error": "x", "config": ok["config"]}
        self.assertEqual(compare.run_key(failed, doc), compare.run_key(ok, doc))
        self.assertEqual(compare.run_key(failed, doc)[1], "ring")  # not config's "collective"

    def test_no_reference_no_ratio(self):
        doc = self.made_up_doc(10.0, 8.0, 5.0)
        doc["runs"][0]["strategy"]["reference"] = False
        self.assertEqual(compare.mode_ratios(doc), {})
        report = compare.compare(doc, doc)
        self.assertTrue(any("reference strategy" in n for n in report.notes), report.notes)

    def test_legacy_file_without_traits_pairs_allreduce_with_ps(self):
        # Files written before the traits, which had ps and allreduce only (the committed CI
        # baseline's runs of those modes, traits removed): they are derived from mode and transport.
        base = json.loads((ROOT / "results" / "baselines" / "ci-sweep.json").read_text())
        base["runs"] = [run for run in base["runs"] if run["mode"] in ("ps", "allreduce")]
        for run in base["runs"]:
            run.pop("strategy", None)
        pairs = {pair for _, pair in compare.mode_ratios(base)}
        self.assertEqual(pairs, {"allreduce/ring / ps/collective"})


if __name__ == "__main__":
    unittest.main()
