"""Tests of the report builder plots/report.py (with plots/figures.py, plots/report_data.py).

Run from the repository root:  /usr/bin/python3 -m unittest -v tests/python/test_report.py

For: the verdict computed from hand-made results with known numbers, every figure drawn from a
rich fixture (the memory model's from a --memory file; its own tests are in
test_report_memory.py), the sentences that replace figures whose data is missing, a
self-contained HTML (data: images only), failed sweep points, repetitions aggregated by median,
the PyTorch reference runs (`dpbench run --reference pytorch`) tabled beside dpbench's, the
findings of a `dpbench project --simulate` file listed under the projection figure, Google
Benchmark name parsing, and a headless Chromium render that must load every image. Chromium is
required: without it the render test fails and says how to install it.
Not for: dpbench's own measurements (the GoogleTest suites under tests/ do that). The fixtures
are built here and validated against results/schema/dpbench-result.schema.json, so they keep the
shape real dpbench output has.
"""
from __future__ import annotations

import base64
import copy
import dataclasses
import html.parser
import json
import math
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import unittest
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
REPORT = ROOT / "plots" / "report.py"
BINARY = Path(os.environ.get("DPBENCH_BINARY", ROOT / "build" / "release" / "dpbench"))
SCHEMA = ROOT / "results" / "schema" / "dpbench-result.schema.json"
CHROMIUM = Path("/usr/bin/chromium")
PNG_MAGIC = b"\x89PNG\r\n\x1a\n"
ALL_FIGURES = ("throughput_vs_world_size", "memory_per_rank", "memory_model", "step_breakdown", "workers",
               "batch_size", "collectives_busbw", "allreduce_implementations", "projection")
MIB = 1024 ** 2

sys.path.insert(0, str(ROOT / "plots"))
import report_data  # noqa: E402


# --------------------------------------------------------------------------------------------
# fixtures


def memory(ranks: int, imbalance: float, batch: int) -> list:
    """Per-rank memory whose max/mean is `imbalance`: rank 0 carries the extra."""
    worker = {"parameters": 2 * MIB, "gradients": 2 * MIB, "optimizer_state": 0,
              "activations": batch * 1024, "comm_buffers": 256 * 1024, "data_staging": batch * 800}
    base = sum(worker.values())
    # rank0 / mean = imbalance  =>  rank0 = imbalance (n-1) base / (n - imbalance)
    rank0 = base if ranks == 1 else int(round(imbalance * (ranks - 1) * base / (ranks - imbalance)))
    rows = []
    for r in range(ranks):
        row = dict(worker, rank=r)
        if r == 0:
            row["optimizer_state"] = rank0 - base
        row["peak_bytes"] = sum(v for k, v in row.items() if k != "rank")
        rows.append(row)
    return rows


def make_run(mode: str, ranks: int, batch: int, workers: int, throughput: float, *,
             transport: str | None = None, imbalance: float | None = None, accuracy: float = 0.85,
             warnings=(), repetition: int | None = None) -> dict:
    """One schema-valid run entry whose throughput and memory imbalance are the given numbers."""
    transport = transport or ("ring" if mode == "allreduce" else "collective")
    imbalance = 1.0 if ranks == 1 else (imbalance or (1.0 if mode == "allreduce" else 1.8))
    step = batch / throughput
    exposed = 0.10 if mode == "allreduce" else 0.35
    mem = memory(ranks, imbalance, batch)
    peaks = [m["peak_bytes"] for m in mem]
    run = {
        "mode": mode, "transport": transport, "comm": "local", "device": "cpu", "workload": "mlp",
        "world_size": ranks, "global_batch": batch, "num_params": 535818, "virtual_ranks": False,
        "config": {"world_size": ranks, "global_batch": batch, "num_workers": workers, "seed": 0,
                   "mode": mode, "transport": "collective" if mode == "allreduce" else transport,
                   "workload": "mlp", "comm": "local", "hidden": [512, 256], "epochs": 1},
        "steps": {"total": 25, "timed": 20, "warmup": 5},
        "throughput_samples_per_s": throughput,
        "step_time_s": {"p10": 0.9 * step, "p50": step, "p90": 1.2 * step, "p99": 1.5 * step,
                        "samples": [step] * 20},
        "phases_s": {"data_wait": (0.10 if workers == 0 else 0.01) * step, "h2d": 0.0,
                     "forward": 0.2 * step, "backward": 0.3 * step, "comm": 0.35 * step,
                     "comm_exposed": exposed * step, "optimizer": 0.05 * step},
        "comm_bytes_per_step": {"per_rank": [{"rank": r, "sent": 1000, "received": 1000} for r in range(ranks)]},
        "memory": {"per_rank": mem, "imbalance_max_over_mean": imbalance,
                   "root_minus_mean_bytes": float(peaks[0] - sum(peaks) / len(peaks))},
        "per_rank": [{"rank": r, "local_batch": batch // ranks, "step_time_p50_s": step} for r in range(ranks)],
        "quality": {"final_train_loss": 0.4, "epoch_train_loss": [0.4], "test_accuracy": accuracy},
        "warnings": list(warnings),
    }
    if repetition is not None:
        run["status"] = "ok"
        run["repetition"] = repetition
    return run


def failed_run(mode: str, ranks: int, batch: int, workers: int, error: str, repetition: int = 0) -> dict:
    """A failed sweep point, as `dpbench sweep` writes it."""
    return {"status": "failed", "mode": mode, "world_size": ranks, "global_batch": batch,
            "config": {"world_size": ranks, "global_batch": batch, "num_workers": workers, "seed": 0,
                       "mode": mode, "transport": "collective", "workload": "mlp", "comm": "local",
                       "hidden": [512, 256], "epochs": 1},
            "error": error, "repetition": repetition}


def document(runs: list) -> dict:
    """A result file around `runs`."""
    return {
        "schema": {"name": "dpbench-result", "version": 4}, "created": "2026-01-01T00:00:00Z",
        "env": {"git_commit": "abc123def456", "host": "fixture-host", "os": "Linux 6.1 x86_64",
                "cpu_model": "Fixture CPU @ 3.0GHz", "cpu_cores": 8, "compiler": "GNU 12.2.0",
                "cxx_flags": "-O3 -DNDEBUG", "build_type": "Release", "blas": "OpenBLAS 0.3.21",
                "cuda": {"built_with_cuda": False, "usable": False, "runtime_version": 0, "driver_version": 0},
                "gpus": [], "nccl_version": None, "mpi": None},
        "config": {"workload": "mlp", "modes": ["ps", "allreduce"], "comm": "local", "device": "cpu",
                   "world_size": 4, "global_batch": 256, "epochs": 1, "lr": 0.1, "momentum": 0.9,
                   "seed": 0, "hidden": [512, 256], "bucket_cap_mb": 25.0, "num_workers": 0, "data": "synthetic"},
        "runs": runs,
    }


def rich_runs() -> list:
    """A full sweep: ps (collective, p2p) and allreduce at 1, 2, 4 ranks, batch 64 and 256,
    0 and 2 workers, two repetitions each, plus one failed point."""
    runs = []
    for ranks in (1, 2, 4):
        for batch in (64, 256):
            for workers in (0, 2):
                for rep in (0, 1):
                    scale = (1.0 + 0.3 * (ranks - 1)) * (1.0 if batch == 64 else 1.6) * (1.0 if workers == 0 else 1.1)
                    noise = 1.0 + 0.02 * rep
                    warn = ["4 ranks share 2 CPU cores: ranks are time-sliced"] if ranks == 4 else []
                    runs.append(make_run("allreduce", ranks, batch, workers, 5000 * scale * noise,
                                         warnings=warn, repetition=rep))
                    runs.append(make_run("ps", ranks, batch, workers, 4000 * scale / (1 + 0.2 * (ranks - 1)) * noise,
                                         imbalance=1.5 + 0.1 * ranks, warnings=warn, repetition=rep))
                    runs.append(make_run("ps", ranks, batch, workers, 3500 * scale / (1 + 0.3 * (ranks - 1)) * noise,
                                         transport="p2p", imbalance=1.6 + 0.1 * ranks, warnings=warn, repetition=rep))
    runs.append(failed_run("allreduce", 4, 6, 0, "--batch-size 6: not divisible by --ranks 4 | fixture"))
    return runs


def collectives_fixture() -> dict:
    """Google Benchmark JSON shaped like dpbench_collectives' output."""
    benchmarks = []
    for name in ("AllReduce", "Broadcast"):
        for ranks in (2, 4):
            for exp in range(10, 27, 4):
                size = 2 ** exp
                busbw = 20.0 * size / (size + 2 ** 18) * (1.0 if ranks == 2 else 0.8)
                base = f"BM_{name}/ranks:{ranks}/bytes:{size}/manual_time"
                if name == "Broadcast":  # with repetitions: aggregates must win over iterations
                    for rep, value in enumerate((busbw * 0.5, busbw * 2.0)):
                        benchmarks.append({"name": base, "run_name": base, "run_type": "iteration",
                                           "repetition_index": rep, "algbw": value, "busbw": value})
                    benchmarks.append({"name": base + "_median", "run_name": base, "run_type": "aggregate",
                                       "aggregate_name": "median", "algbw": busbw, "busbw": busbw})
                    benchmarks.append({"name": base + "_mean", "run_name": base, "run_type": "aggregate",
                                       "aggregate_name": "mean", "algbw": 99.0, "busbw": 99.0})
                else:
                    benchmarks.append({"name": base, "run_type": "iteration",
                                       "algbw": busbw * ranks / (2 * (ranks - 1)), "busbw": busbw})
    for exp in range(10, 27, 4):
        benchmarks.append({"name": f"BM_Memcpy/bytes:{2 ** exp}/manual_time", "run_type": "iteration",
                           "GBps": 40.0 * 2 ** exp / (2 ** exp + 2 ** 14)})
    return {"context": {"host_name": "fixture-host", "num_cpus": 8}, "benchmarks": benchmarks}


def process_collectives_fixture() -> dict:
    """dpbench_collectives' output under mpirun: Open MPI's and gloo's all-reduce at 2 and 4
    processes, 4 B to 64 MiB, gloo slower than Open MPI at every size."""
    benchmarks = []
    for name, peak in (("AllReduceMpi", 6.0), ("AllReduceGlooRing", 1.0), ("AllReduceGlooHalvingDoubling", 0.9)):
        for ranks in (2, 4):
            for exp in range(2, 27, 3):
                size = 2 ** exp
                busbw = peak * size / (size + 2 ** 16)
                benchmarks.append({"name": f"BM_{name}/ranks:{ranks}/bytes:{size}/min_time:0.100/manual_time",
                                   "run_type": "iteration", "algbw": busbw * ranks / (2 * (ranks - 1)),
                                   "busbw": busbw, "wrong": 0})
    return {"context": {"host_name": "fixture-host", "processes": "4"}, "benchmarks": benchmarks}


def memory_model_fixture() -> dict:
    """A `dpbench memory` file: ps (root, worker) and allreduce at 2 and 4 ranks, with the
    largest parameter count each fits."""
    def row(mode, world, role, parameters, optimizer):
        cats = {"parameters": parameters, "gradients": parameters, "optimizer_state": optimizer,
                "activations": 64 * MIB / world, "comm_buffers": 0.0, "data_staging": 1024.0}
        return dict(cats, mode=mode, world_size=world, role=role, total_bytes=sum(cats.values()))
    rows = []
    for world in (2, 4):
        rows += [row("ps", world, "root", 200 * MIB, 100 * MIB), row("ps", world, "worker", 100 * MIB, 0.0),
                 row("allreduce", world, "replica", 100 * MIB, 100 * MIB)]
    return {"schema": {"name": "dpbench-memory", "version": 2}, "model": {"workload": "mlp", "hidden": [512, 256]},
            "global_batch": 256, "optimizer": "sgd", "precision": "fp32", "rows": rows,
            "largest_fitting": [{"mode": m, "world_size": w, "largest_params": v * w ** 0.1}
                                for m, v in (("ps", 2e9), ("allreduce", 3e9)) for w in (2, 4)]}


def projection_fixture() -> dict:
    """A `dpbench project` file: three curves to 1024 ranks, crossover at 4."""
    points = []
    compute, n, beta = 0.02, 2.0e6, 1 / 25e9
    for k in range(11):
        p = 2 ** k
        comm = {"allreduce": 2 * (p - 1) / p * n * beta, "ps_collective": 2 * n * beta * (1 if p > 1 else 0),
                "ps_p2p": 2 * (p - 1) * n * beta}
        for mode, c in comm.items():
            step = compute + c
            points.append({"world_size": p, "curve": mode, "step_time_s": step,
                           "throughput_samples_per_s": 256 * p / step, "speedup": p * compute / step,
                           "efficiency": compute / step})
    measured = [{"world_size": p, "curve": m, "step_time_s": compute * 1.1, "predicted_step_time_s": compute,
                 "relative_error": -0.09, "model_applies": p < 4, "global_batch": 256, "num_workers": 0}
                for p in (2, 4) for m in ("allreduce", "ps_collective", "ps_p2p")]
    return {"schema": {"name": "dpbench-projection", "version": 2},
            "link": {"name": "pcie4", "alpha_s": 5e-6, "beta_s_per_byte": beta},
            "calibration": {"calibration_run": {"global_batch": 256, "mode": "allreduce", "num_workers": 0}},
            "points": points, "crossover_world_size": 4, "measured": measured}


def simulated_projection_fixture() -> dict:
    """A small `dpbench project --simulate` file: ps (p2p) and allreduce at 1, 2 and 4 ranks,
    every point simulated but allreduce's at 4 ranks (unavailable there), a topology and two
    findings."""
    points = []
    for p in (1, 2, 4):
        for mode, comm in (("ps_p2p", 0.004 * (p - 1)), ("allreduce", 0.002 * (p - 1) / p)):
            step = 0.01 + comm
            sim = ({"unavailable": "SimGrid gave up"} if (mode, p) == ("allreduce", 4) else
                   {"simulated_step_s": 0.0105 + 1.5 * comm, "wall_s": 0.1, "messages": 4 * (p - 1),
                    "node0_nic_time_fraction": 0.2 * (p - 1)})
            points.append({"world_size": p, "curve": mode, "step_time_s": step, "speedup": p * 0.01 / step,
                           "efficiency": 0.01 / step, "simulation": sim})
    findings = [
        {"kind": "nic_saturation", "curve": "ps_p2p", "world_size": 4, "time_fraction_at_largest": 0.96,
         "largest_world_size": 4, "text": "ps (p2p): the root's NIC (node 0) needs 90 % of the simulated "
                                          "step or more for its bytes from 4 ranks on (96 % at 4)"},
        {"kind": "straggler_cost", "world_size": 4, "nic_share": 0.5, "costs": {"ps_p2p": 0.21, "allreduce": 0.04},
         "text": "one straggler (the last node's NIC at 50 % of its rate) at 4 ranks costs each mode's "
                 "simulated step: ps (p2p) +21 %, allreduce (ring) +4 %"}]
    topology = {"ranks_per_node": 2, "nodes_per_leaf": 2, "oversubscription": 2.0, "preset": "fixture-preset",
                "preset_source": "two ranks per node on a made-up NIC", "what_if": True,
                "platform_at_max_ranks": {}, "simulator": "SimGrid (sim/simulate.hpp)", "compute": "per rank"}
    return {"schema": {"name": "dpbench-projection", "version": 2},
            "link": {"name": "pcie4", "alpha_s": 5e-6, "beta_s_per_byte": 1 / 25e9},
            "points": points, "measured": [], "findings": findings, "topology": topology}


# --------------------------------------------------------------------------------------------
# helpers


def write_json(path: Path, doc: dict) -> Path:
    """Writes doc to path and returns the path."""
    path.write_text(json.dumps(doc, indent=1))
    return path


def schema_check(test: unittest.TestCase, doc: dict) -> None:
    """Asserts that the ok runs of a fixture satisfy the result schema (failed sweep points
    are left out: they have no measurements by design)."""
    import jsonschema
    ok = dict(doc, runs=[r for r in doc["runs"] if r.get("status", "ok") == "ok"])
    errors = list(jsonschema.Draft202012Validator(json.loads(SCHEMA.read_text())).iter_errors(ok))
    test.assertEqual([], [f"{'/'.join(map(str, e.path))}: {e.message}" for e in errors[:3]])


def run_report(out: Path, results: list, collectives: Path | list | None = None,
               projection: Path | None = None, memory: Path | None = None,
               trends: Path | None = None) -> subprocess.CompletedProcess:
    """Runs plots/report.py as a user would; collectives: one file or a list, each passed with
    its own --collectives; memory: a `dpbench memory` file for --memory."""
    cmd = [sys.executable, str(REPORT), *map(str, results), "-o", str(out)]
    for c in ([] if collectives is None else collectives if isinstance(collectives, list) else [collectives]):
        cmd += ["--collectives", str(c)]
    if projection:
        cmd += ["--projection", str(projection)]
    if memory:
        cmd += ["--memory", str(memory)]
    if trends:
        cmd += ["--trends", str(trends)]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=300)


class Tags(html.parser.HTMLParser):
    """Collects every tag with its attributes."""

    def __init__(self):
        super().__init__()
        self.tags = []

    def handle_starttag(self, tag, attrs):
        self.tags.append((tag, dict(attrs)))


def parse_tags(text: str) -> list:
    """(tag, attrs) of every start tag in an HTML document."""
    parser = Tags()
    parser.feed(text)
    return parser.tags


def chromium_images_loaded(html_path: Path) -> str:
    """Renders a copy of html_path, alone in an empty directory (so that a reference to a file
    next to it cannot load), in headless Chromium and returns the body's data-images-loaded
    value ("" when absent). Fails the calling test with an install hint when Chromium is missing."""
    if not CHROMIUM.exists():
        raise AssertionError(f"{CHROMIUM} not found: the render test needs Debian's chromium. "
                             "Install it with `apt-get install -y chromium` (scripts/setup.sh does).")
    with tempfile.TemporaryDirectory() as profile, tempfile.TemporaryDirectory() as alone:
        page = Path(alone) / html_path.name
        shutil.copyfile(html_path, page)
        proc = subprocess.run(
            [str(CHROMIUM), "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic",
             "--no-first-run", "--disable-background-networking", "--disable-component-update",
             "--disable-sync", f"--user-data-dir={profile}", "--virtual-time-budget=10000",
             "--dump-dom", page.as_uri()],
            capture_output=True, text=True, timeout=180)
    if proc.returncode != 0:
        raise AssertionError(f"chromium exited {proc.returncode}: {proc.stderr[-2000:]}")
    body = next((attrs for tag, attrs in parse_tags(proc.stdout) if tag == "body"), None)
    if body is None:
        raise AssertionError(f"chromium dumped no <body>: {proc.stdout[:500]!r}")
    return body.get("data-images-loaded", "")


# --------------------------------------------------------------------------------------------
# tests


class RichReportTest(unittest.TestCase):
    """One report from a full sweep with collectives and a projection, shared by the tests."""

    @classmethod
    def setUpClass(cls):
        cls.tmp = Path(tempfile.mkdtemp(prefix="dpbench-report-test-"))
        cls.doc = document(rich_runs())
        results = write_json(cls.tmp / "sweep.json", cls.doc)
        collectives = [write_json(cls.tmp / "collectives.json", collectives_fixture()),
                       write_json(cls.tmp / "processes.json", process_collectives_fixture())]
        projection = write_json(cls.tmp / "projection.json", projection_fixture())
        cls.memory = write_json(cls.tmp / "memory.json", memory_model_fixture())
        cls.out = cls.tmp / "report"
        cls.proc = run_report(cls.out, [results], collectives, projection, cls.memory)
        cls.md = (cls.out / "report.md").read_text() if cls.proc.returncode == 0 else ""
        cls.html = (cls.out / "report.html").read_text() if cls.proc.returncode == 0 else ""

    @classmethod
    def tearDownClass(cls):
        shutil.rmtree(cls.tmp, ignore_errors=True)

    def setUp(self):
        self.assertEqual(0, self.proc.returncode, self.proc.stderr)

    def test_allreduce_caption_ranks_the_implementations(self):
        md = self.md
        # Largest size every implementation has at 2 ranks: 2^26 (threads: 2^10..2^26; processes: 2^2..2^26).
        self.assertIn("At 2 ranks and 64 MiB: dpbench ring (threads)", md)
        caption = md[md.index("At 2 ranks and 64 MiB"):].split("\n")[0]
        self.assertLess(caption.index("MPI_Allreduce"), caption.index("gloo ring"))
        self.assertLess(caption.index("gloo ring"), caption.index("gloo halving-doubling"))

    def test_fixture_matches_the_result_schema(self):
        schema_check(self, self.doc)

    def test_every_figure_is_produced_and_non_empty(self):
        for key in ALL_FIGURES:
            path = self.out / f"{key}.png"
            self.assertTrue(path.is_file(), f"{path} missing")
            data = path.read_bytes()
            self.assertTrue(data.startswith(PNG_MAGIC), f"{path} is not a PNG")
            self.assertGreater(len(data), 5000, f"{path} is suspiciously small")
            self.assertIn(f"]({key}.png)", self.md)
        self.assertNotIn("Not drawn", self.md)
        self.assertNotIn("Not drawn", self.html)

    def test_html_contains_only_data_images(self):
        tags = parse_tags(self.html)
        images = [attrs for tag, attrs in tags if tag == "img"]
        self.assertEqual(len(ALL_FIGURES), len(images))
        for attrs in images:
            src = attrs.get("src", "")
            self.assertTrue(src.startswith("data:image/png;base64,"), src[:80])
            self.assertTrue(base64.b64decode(src.split(",", 1)[1], validate=True).startswith(PNG_MAGIC))
        for tag, attrs in tags:
            self.assertNotEqual("link", tag, "no external stylesheets or icons")
            for name in ("src", "href", "srcset", "poster", "data"):
                value = attrs.get(name)
                if value is not None and not (tag == "img" and name == "src"):
                    self.fail(f"<{tag} {name}={value[:80]!r}>: the HTML must not reference other files")
        self.assertIsNone(re.search(r"https?:|url\(|@import", self.html), "external reference in the HTML")

    def test_failed_sweep_point_is_listed_not_plotted(self):
        for text in (self.md, self.html):
            self.assertIn("Failed points", text)
            self.assertIn("not divisible by --ranks 4", text)
        self.assertIn("\\| fixture", self.md, "a | inside a Markdown cell must be escaped")
        runs_md = self.md.split("## Runs")[1].split("## Figures")[0]
        rows = [line for line in runs_md.splitlines() if re.match(r"\| (ps|allreduce) \| (ring|collective|p2p) \|", line)]
        self.assertEqual(36, len(rows), "one table row per ok grid point")
        self.assertFalse(any("| 6 |" in r for r in rows), "the failed batch-6 point must not be a run row")
        # The failed allreduce point (a file without traits) is listed with the ring it would have run.
        failed_md = self.md.split("## Failed points")[1]
        self.assertRegex(failed_md, r"\| allreduce \| ring \| 4 \| 6 \|")

    def test_verdict_compares_at_the_largest_world_size(self):
        self.assertRegex(self.md, r"\*\*allreduce is \d\.\d\dx faster than ps \(collective\) and "
                                  r"\d\.\d\dx faster than ps \(p2p\) at 4 ranks")
        self.assertIn("time-sliced", self.md)

    def test_warnings_and_environment(self):
        for text in (self.md, self.html):
            self.assertIn("ranks are time-sliced", text)
            self.assertIn("fixture-host", text)
            self.assertIn("Fixture CPU @ 3.0GHz", text)
            self.assertIn("abc123def456", text)

    def test_figures_are_byte_identical_when_rebuilt(self):
        again = self.tmp / "again"
        proc = run_report(again, [self.tmp / "sweep.json"], [self.tmp / "collectives.json", self.tmp / "processes.json"],
                          self.tmp / "projection.json", self.memory)
        self.assertEqual(0, proc.returncode, proc.stderr)
        for key in ALL_FIGURES:
            self.assertEqual((self.out / f"{key}.png").read_bytes(), (again / f"{key}.png").read_bytes(), key)
        self.assertEqual(self.html, (again / "report.html").read_text().replace(str(again), str(self.out)))

    def test_chromium_loads_every_image(self):
        self.assertEqual(f"{len(ALL_FIGURES)}/{len(ALL_FIGURES)}", chromium_images_loaded(self.out / "report.html"))


def with_strategy(run: dict, name: str, transport: str, baseline: bool, has_root: bool) -> dict:
    """The run renamed to strategy `name`, carrying the traits a result file records."""
    run = dict(run, mode=name, transport=transport, config=dict(run["config"], mode=name))
    run["strategy"] = {"name": name, "label": f"{name} ({transport})", "transport": transport,
                       "baseline": baseline, "overlaps_backward": not has_root,
                       "has_root": has_root, "projection": name, "busbw_factor": None}
    return run


class MadeUpStrategyTest(unittest.TestCase):
    """The report reads labels, the reference role and the root from the result file's traits
    and the projection file's modes: strategies it has never heard of are compared with no code
    change."""

    @classmethod
    def setUpClass(cls):
        cls.tmp = Path(tempfile.mkdtemp(prefix="dpbench-madeup-test-"))
        runs = []
        for ranks, base in ((2, 1000.0), (4, 1000.0)):
            runs.append(with_strategy(make_run("ps", ranks, 256, 0, base, imbalance=1.9),
                                      "dp_baseline", "chain", True, True))
            runs.append(with_strategy(make_run("allreduce", ranks, 256, 0, 2 * base),
                                      "ring_sync", "ring", False, False))
            runs.append(with_strategy(make_run("allreduce", ranks, 256, 0, 3 * base),
                                      "sharded_ps", "collective", False, False))
        cls.doc = doc = document(runs)
        proj = projection_fixture()
        rename = {"ps_collective": "dp_baseline", "allreduce": "ring_sync", "ps_p2p": "sharded_ps"}
        for p in proj["points"] + proj["measured"]:
            p["curve"] = rename[p["curve"]]
        proj["curves"] = [{"curve": "dp_baseline", "strategy": "dp_baseline", "label": "dp_baseline (chain)",
                          "transport": "chain", "baseline": True},
                         {"curve": "ring_sync", "strategy": "ring_sync", "label": "ring_sync (ring)",
                          "transport": "ring", "baseline": False},
                         {"curve": "sharded_ps", "strategy": "sharded_ps", "label": "sharded_ps (collective)",
                          "transport": "collective", "baseline": False}]
        proj["crossovers"] = [{"curve": "ring_sync", "baseline": "dp_baseline", "world_size": 8},
                              {"curve": "sharded_ps", "baseline": "dp_baseline", "world_size": None}]
        del proj["crossover_world_size"]
        proc = run_report(cls.tmp / "out", [write_json(cls.tmp / "r.json", doc)],
                          projection=write_json(cls.tmp / "p.json", proj))
        assert proc.returncode == 0, proc.stderr
        cls.md = (cls.tmp / "out" / "report.md").read_text()

    @classmethod
    def tearDownClass(cls):
        shutil.rmtree(cls.tmp, ignore_errors=True)

    def test_fixture_with_traits_is_schema_valid(self):
        schema_check(self, self.doc)

    def test_verdict_compares_every_strategy_with_the_reference(self):
        self.assertIn("**ring_sync is 2.00x faster than dp_baseline, and sharded_ps is 3.00x faster than "
                      "dp_baseline at 4 ranks (batch 256, 0 workers); the dp_baseline root holds 1.90x "
                      "the mean per-rank memory.**", self.md)

    def test_labels_come_from_the_file(self):
        for label in ("dp_baseline (chain)", "ring_sync (ring)", "sharded_ps (collective)"):
            self.assertIn(label, self.md)

    def test_root_caption_and_projection_crossover_use_the_traits(self):
        self.assertIn("the dp_baseline root peaks at 1.90x the mean rank", self.md)
        self.assertIn("ring_sync (ring) pulls ahead of dp_baseline (chain) from p=8", self.md)


class ProjectionFindingsTest(unittest.TestCase):
    """A projection from `dpbench project --simulate`: its findings listed under the figure."""

    def test_findings_listed_in_markdown_and_html(self):
        proj = simulated_projection_fixture()
        with tempfile.TemporaryDirectory() as tmp:
            tmp = Path(tmp)
            results = write_json(tmp / "r.json", document([make_run("ps", 2, 256, 0, 1000.0),
                                                           make_run("allreduce", 2, 256, 0, 1500.0)]))
            proc = run_report(tmp / "out", [results], projection=write_json(tmp / "p.json", proj))
            self.assertEqual(0, proc.returncode, proc.stderr)
            md = (tmp / "out" / "report.md").read_text()
            page = html.unescape((tmp / "out" / "report.html").read_text())
        heading = "Projection at scale: what the simulation finds"
        section = md.split(f"#### {heading}")[1].split("\n## ")[0]
        self.assertEqual([f["text"] + "." for f in proj["findings"]], re.findall(r"^- (.*)$", section, re.M))
        self.assertIn("fixture-preset", section)
        self.assertIn(heading, page)
        for f in proj["findings"]:
            self.assertIn(f"<li>{f['text']}.</li>", page)

    def test_no_findings_no_section(self):
        with tempfile.TemporaryDirectory() as tmp:
            tmp = Path(tmp)
            results = write_json(tmp / "r.json", document([make_run("ps", 2, 256, 0, 1000.0)]))
            proc = run_report(tmp / "out", [results], projection=write_json(tmp / "p.json", projection_fixture()))
            self.assertEqual(0, proc.returncode, proc.stderr)
            self.assertNotIn("what the simulation finds", (tmp / "out" / "report.md").read_text())

    def test_findings_without_text_exit_2_naming_the_file(self):
        proj = simulated_projection_fixture()
        del proj["findings"][1]["text"]
        with tempfile.TemporaryDirectory() as tmp:
            tmp = Path(tmp)
            results = write_json(tmp / "r.json", document([make_run("ps", 2, 256, 0, 1000.0)]))
            proc = run_report(tmp / "out", [results], projection=write_json(tmp / "bad-proj.json", proj))
        self.assertEqual(2, proc.returncode)
        self.assertIn("bad-proj.json", proc.stderr)
        self.assertIn("findings[1]", proc.stderr)


class VerdictTest(unittest.TestCase):
    """The opening sentence, from results with known numbers."""

    def setUp(self):
        self.tmp = Path(tempfile.mkdtemp(prefix="dpbench-verdict-test-"))

    def tearDown(self):
        shutil.rmtree(self.tmp, ignore_errors=True)

    def report(self, runs: list) -> str:
        """report.md for these runs (schema-checked first)."""
        doc = document(runs)
        schema_check(self, doc)
        proc = run_report(self.tmp / "out", [write_json(self.tmp / "r.json", doc)])
        self.assertEqual(0, proc.returncode, proc.stderr)
        return (self.tmp / "out" / "report.md").read_text()

    def test_faster_with_known_ratio_and_imbalance(self):
        md = self.report([
            make_run("ps", 2, 256, 0, 1000.0, imbalance=1.40),
            make_run("allreduce", 2, 256, 0, 1500.0),
            make_run("ps", 4, 256, 0, 1000.0, imbalance=1.90),
            make_run("allreduce", 4, 256, 0, 2000.0),
            make_run("allreduce", 8, 256, 0, 9000.0),  # no ps at 8 ranks: not the comparison
        ])
        self.assertIn("**allreduce is 2.00x faster than ps at 4 ranks (batch 256, 0 workers); "
                      "the ps root holds 1.90x the mean per-rank memory.**", md)

    def test_slower_when_ps_wins(self):
        md = self.report([make_run("ps", 4, 256, 0, 1000.0, imbalance=1.90),
                          make_run("allreduce", 4, 256, 0, 500.0)])
        self.assertIn("allreduce is 2.00x slower than ps at 4 ranks", md)

    def test_only_one_mode(self):
        md = self.report([make_run("allreduce", 4, 256, 0, 500.0)])
        self.assertIn("Only allreduce was measured", md)
        self.assertIn("run every mode side by side", md)

    def test_repetitions_aggregated_by_median(self):
        runs = [make_run("ps", 1, 256, 0, t, repetition=i) for i, t in enumerate((1000.0, 3000.0, 2000.0))]
        md = self.report(runs + [make_run("allreduce", 1, 256, 0, 4000.0, repetition=0)])
        row = next(line for line in md.splitlines() if line.startswith("| ps | collective | 1 |"))
        self.assertIn("| 3 | 2,000 |", row, "3 repetitions, median throughput 2,000")
        self.assertIn("allreduce is 2.00x faster than ps at 1 ranks", md)


class OneVerdictTest(unittest.TestCase):
    """A `dpbench run --repetitions 3` file: the report's headline states each ratio by the run's
    own rule (its range over the repetitions; "does not differ beyond noise" where the range holds
    1) and does not say the points were measured once."""

    def setUp(self):
        self.tmp = Path(tempfile.mkdtemp(prefix="dpbench-one-verdict-test-"))

    def tearDown(self):
        shutil.rmtree(self.tmp, ignore_errors=True)

    @staticmethod
    def with_repetitions(run: dict, throughputs: list, ratios: list | None = None) -> dict:
        """`run` as `dpbench run` writes a point of 3 repetitions: their throughputs in one entry,
        and, for a strategy other than ps, its ratios to ps per repetition."""
        run["repetitions"] = {"count": len(throughputs), "throughput_samples_per_s": throughputs}
        run["throughput_samples_per_s"] = statistics.median(throughputs)
        if ratios is not None:
            run["ratio_to_baseline"] = {"by_repetition": ratios, "min": min(ratios), "max": max(ratios),
                                        "median": statistics.median(ratios), "baseline": "ps"}
        return run

    def test_a_range_that_holds_one_is_noise_in_the_report_too(self):
        runs = [self.with_repetitions(make_run("ps", 2, 256, 0, 1000.0), [1000.0, 1250.0, 800.0]),
                self.with_repetitions(make_run("allreduce", 2, 256, 0, 1000.0), [870.0, 1300.0, 1160.0],
                                      [0.87, 1.04, 1.45]),
                self.with_repetitions(make_run("sharded_ps", 2, 256, 0, 1000.0), [1300.0, 1750.0, 1200.0],
                                      [1.30, 1.40, 1.50])]
        doc = document(runs)
        schema_check(self, doc)
        proc = run_report(self.tmp / "out", [write_json(self.tmp / "r.json", doc)])
        self.assertEqual(0, proc.returncode, proc.stderr)
        md = (self.tmp / "out" / "report.md").read_text()
        self.assertIn("**allreduce does not differ beyond noise from ps (0.87-1.45x over 3 repetitions), and "
                      "sharded_ps is 1.40x faster than ps (1.30-1.50x over 3 repetitions) at 2 ranks", md)
        self.assertNotIn("measured once", md)
        row = next(line for line in md.splitlines() if line.startswith("| ps | collective | 2 |"))
        self.assertIn("| 3 |", row, "the point's 3 repetitions")

    @unittest.skipUnless(BINARY.exists(), f"{BINARY} is not built (bash scripts/build.sh)")
    def test_the_report_repeats_the_runs_own_ranges(self):
        out = self.tmp / "run.json"
        proc = subprocess.run([str(BINARY), "run", "--data", "synthetic", "--input", "16", "--synthetic-samples", "600",
                               "--hidden", "8", "--epochs", "1", "--batch-size", "20", "--max-steps", "8",
                               "--warmup-steps", "2", "--repetitions", "3", "--ranks", "2", "--out", str(out)],
                              capture_output=True, text=True, timeout=300)
        self.assertEqual(0, proc.returncode, proc.stderr)
        ranges = re.findall(r"(\w+) (?:runs at|does not differ beyond noise) .*?\((\d+\.\d\d)-(\d+\.\d\d)x? over 3",
                            proc.stdout)
        self.assertEqual(2, len(ranges), proc.stdout)
        report = run_report(self.tmp / "out", [out])
        self.assertEqual(0, report.returncode, report.stderr)
        head = (self.tmp / "out" / "report.md").read_text().split("\n\n")[1]
        for mode, lo, hi in ranges:
            self.assertRegex(head, rf"{mode} [^,]*\({lo}-{hi}x over 3 repetitions\)")
        self.assertEqual("does not differ beyond noise" in proc.stdout, "does not differ beyond noise" in head)


@unittest.skipUnless(BINARY.exists(), f"{BINARY} is not built (bash scripts/build.sh)")
class TrendsTest(unittest.TestCase):
    """The history, end to end as a team would run it: result files of 12 commits (a 20 % drop in
    allreduce's throughput planted from the 7th) go into `dpbench history add`, `history show`
    marks the drop at its commit, and the report draws the trend with the change point."""

    def setUp(self):
        self.tmp = Path(tempfile.mkdtemp(prefix="dpbench-trends-test-"))

    def tearDown(self):
        shutil.rmtree(self.tmp, ignore_errors=True)

    def dpbench(self, *args) -> subprocess.CompletedProcess:
        return subprocess.run([str(BINARY), *map(str, args)], capture_output=True, text=True, timeout=300)

    def test_history_to_trend_figure(self):
        files = []
        for i in range(12):
            doc = document([make_run("ps", 2, 256, 0, 1000.0 * (1 + 0.01 * (i % 3))),
                            make_run("allreduce", 2, 256, 0, 1500.0 * (0.8 if i >= 6 else 1.0) * (1 + 0.01 * (i % 2)))])
            doc["env"]["git_commit"] = f"commit{i:02d}"
            doc["created"] = f"2026-01-{i + 1:02d}T00:00:00Z"
            files.append(write_json(self.tmp / f"r{i}.json", doc))
        db = self.tmp / "h.sqlite"
        add = self.dpbench("history", "add", *files, "--db", db)
        self.assertEqual(0, add.returncode, add.stderr)
        self.assertIn("from 12 files", add.stdout)
        shown = self.dpbench("history", "show", "--db", db, "--config", '"mode":"allreduce"')
        self.assertEqual(0, shown.returncode, shown.stderr)
        marked = [line for line in shown.stdout.splitlines() if "change point" in line]
        self.assertEqual(1, len(marked), shown.stdout)
        self.assertTrue(marked[0].strip().startswith("commit06"), marked[0])
        self.assertIn("-20.", marked[0])
        ps = self.dpbench("history", "show", "--db", db, "--config", '"mode":"ps"')
        self.assertNotIn("change point", ps.stdout)  # 1 % wobble only
        trends = self.dpbench("history", "show", "--db", db, "--json")
        self.assertEqual(0, trends.returncode, trends.stderr)
        path = write_json(self.tmp / "trends.json", json.loads(trends.stdout))
        proc = run_report(self.tmp / "out", [files[-1]], trends=path)
        self.assertEqual(0, proc.returncode, proc.stderr)
        md = (self.tmp / "out" / "report.md").read_text()
        self.assertIn("### Trends across commits", md)
        self.assertRegex(md, r"Change points \(red\): allreduce, 2 ranks, batch 256 at commit06 \(-20\.\d %")
        self.assertTrue((self.tmp / "out" / "trends.png").exists())

    def test_bad_input_is_one_line(self):
        bad = write_json(self.tmp / "bad.json", {"schema": {"name": "dpbench-memory"}})
        for args in (["history", "add", bad, "--db", self.tmp / "h.sqlite"],
                     ["history", "add", self.tmp / "missing.json", "--db", self.tmp / "h.sqlite"],
                     ["history", "show", "--db", self.tmp / "h.sqlite", "--metric", "nothing"],
                     ["history", "prune", "--keep", "0", "--db", self.tmp / "h.sqlite"]):
            proc = self.dpbench(*args)
            self.assertEqual(2, proc.returncode, (args, proc.stderr))
            self.assertEqual(1, proc.stderr.count("\n"), (args, proc.stderr))
        proc = run_report(self.tmp / "out", [write_json(self.tmp / "r.json", document([make_run("ps", 2, 256, 0, 1.0)]))],
                          trends=bad)
        self.assertEqual(2, proc.returncode)
        self.assertIn("not a `dpbench history show --json` file", proc.stderr)


class MissingDataTest(unittest.TestCase):
    """A single point per mode: the figures that need more are replaced by a sentence."""

    def test_missing_figures_become_sentences(self):
        with tempfile.TemporaryDirectory() as tmp:
            tmp = Path(tmp)
            out = tmp / "out"
            out.mkdir()
            (out / "workers.png").write_bytes(b"stale")  # from an earlier, richer report
            results = write_json(tmp / "r.json", document([
                make_run("ps", 4, 256, 0, 1000.0, imbalance=1.9), make_run("allreduce", 4, 256, 0, 1200.0)]))
            proc = run_report(out, [results])
            self.assertEqual(0, proc.returncode, proc.stderr)
            md = (out / "report.md").read_text()
            page = (out / "report.html").read_text()
            for key in ("memory_per_rank", "step_breakdown"):
                self.assertTrue((out / f"{key}.png").is_file(), key)
            for key in ("throughput_vs_world_size", "workers", "batch_size", "collectives_busbw",
                        "allreduce_implementations", "projection", "memory_model"):
                self.assertFalse((out / f"{key}.png").exists(), f"{key}.png must not be drawn without data")
            self.assertEqual(7, md.count("> Not drawn:"))
            self.assertEqual(7, page.count('class="missing"'))
            for hint in ("--ranks 1,2,4", "--num-workers 0,2,4", "--batch-sizes 64,256,1024",
                         "--collectives collectives.json", "--projection projection.json",
                         "-o memory.json", "--memory memory.json"):
                self.assertIn(hint, md)
                self.assertIn(hint, page)
            self.assertEqual(2, sum(1 for tag, _ in parse_tags(page) if tag == "img"))
            self.assertEqual("2/2", chromium_images_loaded(out / "report.html"))


def gpu_document() -> dict:
    """A GPU run file as `dpbench run --device cuda --ranks 4` writes it on one GPU: virtual ranks,
    tf32, a host-to-device phase, and each rank's device memory view."""
    runs = []
    for mode, throughput in (("ps", 90000.0), ("allreduce", 140000.0)):
        run = make_run(mode, 4, 256, 0, throughput,
                       warnings=["virtual ranks: 4 ranks share 1 GPU(s) on this node; results check "
                                 "correctness, and step times include the ranks contending for one device"])
        run["device"] = "cuda"
        run["precision"] = "tf32"
        run["virtual_ranks"] = True
        run["phases_s"]["h2d"] = 0.05 * run["step_time_s"]["p50"]
        for row in run["memory"]["per_rank"]:
            row["device"] = {"index": 0, "used_before_bytes": 600 * MIB, "used_after_bytes": 900 * MIB,
                             "total_bytes": 80 * 1024 * MIB}
        runs.append(run)
    doc = document(runs)
    doc["config"]["device"] = "cuda"
    doc["env"]["cuda"] = {"built_with_cuda": True, "usable": True, "runtime_version": 13000,
                          "driver_version": 13000}
    doc["env"]["gpus"] = [{"index": 0, "name": "Fixture GPU H100", "memory_bytes": 80 * 1024 * MIB,
                           "pci_bus_id": "0000:01:00.0"}]
    doc["env"]["nccl_version"] = 22809  # NCCL_VERSION_CODE, as env_info writes it
    return doc


class GpuReportTest(unittest.TestCase):
    """A report from GPU runs: the schema takes their fields, and the report names the GPU and
    the virtual ranks."""

    def test_gpu_runs_validate_and_report(self):
        doc = gpu_document()
        schema_check(self, doc)
        tmp = Path(tempfile.mkdtemp(prefix="dpbench-report-gpu-"))
        try:
            proc = run_report(tmp / "report", [write_json(tmp / "gpu.json", doc)])
            self.assertEqual(0, proc.returncode, proc.stderr)
            md = (tmp / "report" / "report.md").read_text()
            self.assertIn("Fixture GPU H100", md)
            self.assertIn("virtual", md)
            self.assertRegex(md, r"allreduce is \d\.\d\dx faster than ps")
        finally:
            shutil.rmtree(tmp, ignore_errors=True)

    def test_schema_rejects_an_unknown_precision(self):
        import jsonschema
        doc = gpu_document()
        doc["runs"][0]["precision"] = "fp8"
        errors = list(jsonschema.Draft202012Validator(json.loads(SCHEMA.read_text())).iter_errors(doc))
        self.assertTrue(any("fp8" in e.message for e in errors), [e.message for e in errors])


def reference_run(dpbench_mode: str, program: str, processes: int, throughput: float, max_rel_diff: float,
                  *, within: bool = True, steps: int = 200, rss: int = 300 * MIB) -> dict:
    """One reference.runs[] entry as `dpbench run --reference pytorch` writes it: the PyTorch
    program that reproduces dpbench's mode dpbench_mode."""
    return {
        "program": program, "dpbench_mode": dpbench_mode, "dpbench_label": f"{dpbench_mode} (ring)",
        "processes": processes, "threads_per_process": 1, "comm": "gloo", "device": "cpu",
        "torch_version": "1.13.0a0", "world_size": processes,
        "launch": f"dpbench: {processes} ranks as threads of one process; PyTorch: {processes} processes",
        "throughput_samples_per_s": throughput,
        "step_time_s": {"p10": 0.9 * 256 / throughput, "p50": 256 / throughput, "p90": 1.2 * 256 / throughput,
                        "p99": 1.5 * 256 / throughput, "samples": [256 / throughput] * 20},
        "memory": {"per_rank": [{"rank": r, "peak_rss_bytes": rss} for r in range(processes)]},
        "quality": {"final_train_loss": 0.41, "test_accuracy": 0.83, "step_train_loss": [0.5] * steps,
                    "epoch_train_loss": [0.41]},
        "loss_agreement": {"steps": steps, "max_rel_diff": max_rel_diff, "at_step": 17, "tolerance": 1e-4,
                           "within": within},
    }


def reference_document(*reference_runs) -> dict:
    """ps and allreduce at 2 ranks (1,000 and 1,500 samples/s) with a reference block."""
    doc = document([make_run("ps", 2, 256, 0, 1000.0, imbalance=1.4),
                    make_run("allreduce", 2, 256, 0, 1500.0, accuracy=0.86)])
    doc["config"]["reference"] = "pytorch"
    doc["reference"] = {"framework": "pytorch", "python": "/usr/bin/python3", "runs": list(reference_runs)}
    return doc


class ReferenceReportTest(unittest.TestCase):
    """PyTorch's runs of the same work, from a result file's `reference` block, beside dpbench's."""

    def setUp(self):
        self.tmp = Path(tempfile.mkdtemp(prefix="dpbench-reference-test-"))

    def tearDown(self):
        shutil.rmtree(self.tmp, ignore_errors=True)

    def section(self, md: str) -> str:
        """The "PyTorch on the same work" section of report.md."""
        self.assertIn("## PyTorch on the same work", md)
        return md.split("## PyTorch on the same work")[1].split("\n## ")[0]

    def test_reference_run_beside_its_dpbench_run(self):
        doc = reference_document(reference_run("allreduce", "ddp", 2, 600.0, 3.1e-7))
        schema_check(self, doc)
        path = write_json(self.tmp / "r.json", doc)
        validate = subprocess.run([sys.executable, str(ROOT / "results" / "validate.py"), str(path)],
                                  capture_output=True, text=True, timeout=60)
        self.assertEqual(0, validate.returncode, validate.stdout + validate.stderr)

        [ref] = report_data.load_results([path]).reference
        self.assertEqual(("ddp", "allreduce", 2, 1), (ref.program, ref.dpbench_mode, ref.processes, ref.threads))
        self.assertAlmostEqual(2.5, ref.ratio)  # 1,500 / 600
        self.assertEqual(doc["runs"][1]["memory"]["per_rank"][0]["peak_bytes"], ref.dpbench_peak_bytes)
        self.assertEqual(300 * MIB, ref.peak_rss_bytes)
        self.assertEqual((0.86, 0.83), (ref.dpbench_test_accuracy, ref.test_accuracy))

        proc = run_report(self.tmp / "out", [path])
        self.assertEqual(0, proc.returncode, proc.stderr)
        md = (self.tmp / "out" / "report.md").read_text()
        section = self.section(md)
        row = next((line for line in section.splitlines() if line.startswith("| allreduce (ring) |")), None)
        self.assertIsNotNone(row, section)
        self.assertIn("| ddp (2 processes × 1 thread) | 1,500 / 600 | 2.50x |", row)
        self.assertIn("| 170.67 / 426.67 |", row, "step p50 in ms, dpbench / PyTorch")
        self.assertIn("| 86.00 % / 83.00 % |", row)
        self.assertIn("/ 300.0 |", row, "PyTorch's rank-0 peak RSS in MiB")
        self.assertIn("3.1e-07 over 200 steps", row)
        self.assertNotIn("(!)", row, "within tolerance: not flagged")
        self.assertIn("allocator peak", section)
        self.assertIn("peak RSS", section)
        self.assertEqual(1, sum(1 for line in section.splitlines() if line.startswith("| allreduce")))
        page = (self.tmp / "out" / "report.html").read_text()
        self.assertIn("PyTorch on the same work", page)
        self.assertIn("2.50x", page)
        self.assertIn("3.1e-07 over 200 steps", page)

    def test_version_3_file_names_the_program_mode_and_reads_the_same(self):
        # Version 3 named a reference run's PyTorch program "mode" (results/schema_versions.py, upgrade_v3).
        doc = reference_document(reference_run("allreduce", "ddp", 2, 600.0, 3.1e-7))
        old = copy.deepcopy(doc)
        old["schema"]["version"] = 3
        old["reference"]["runs"][0]["mode"] = old["reference"]["runs"][0].pop("program")
        [new_ref] = report_data.load_results([write_json(self.tmp / "v4.json", doc)]).reference
        [old_ref] = report_data.load_results([write_json(self.tmp / "v3.json", old)]).reference
        self.assertEqual(dataclasses.replace(new_ref, source=old_ref.source), old_ref)
        self.assertEqual("ddp", old_ref.program)

    def test_loss_outside_tolerance_is_flagged(self):
        path = write_json(self.tmp / "r.json", reference_document(
            reference_run("allreduce", "ddp", 2, 600.0, 3.0e-2, within=False)))
        proc = run_report(self.tmp / "out", [path])
        self.assertEqual(0, proc.returncode, proc.stderr)
        section = self.section((self.tmp / "out" / "report.md").read_text())
        self.assertIn("3.0e-02 over 200 steps **(!) exceeds the 1e-04 tolerance at step 17**", section)

    def test_no_reference_block_no_section(self):
        doc = reference_document()
        del doc["reference"]
        proc = run_report(self.tmp / "out", [write_json(self.tmp / "r.json", doc)])
        self.assertEqual(0, proc.returncode, proc.stderr)
        self.assertNotIn("PyTorch on the same work", (self.tmp / "out" / "report.md").read_text())
        self.assertNotIn("PyTorch on the same work", (self.tmp / "out" / "report.html").read_text())

    def test_reference_run_without_loss_agreement_is_an_error_naming_it(self):
        run = reference_run("allreduce", "ddp", 2, 600.0, 3.1e-7)
        del run["loss_agreement"]
        path = write_json(self.tmp / "lacking.json", reference_document(run))
        with self.assertRaisesRegex(report_data.InputError, r"lacking\.json: reference\.runs\[0\] lacks 'loss_agreement'"):
            report_data.load_results([path])
        proc = run_report(self.tmp / "out", [path])
        self.assertEqual(2, proc.returncode, proc.stdout)
        self.assertEqual(1, len(proc.stderr.strip().splitlines()), proc.stderr)
        self.assertIn("lacking.json", proc.stderr)
        self.assertIn("loss_agreement", proc.stderr)


class InputTest(unittest.TestCase):
    """Reading inputs: bad files, Google Benchmark names and aggregates."""

    def test_not_a_result_file_exits_2_naming_it(self):
        with tempfile.TemporaryDirectory() as tmp:
            bad = write_json(Path(tmp) / "bad.json", {"schema": {"name": "something-else", "version": 1}})
            proc = run_report(Path(tmp) / "out", [bad])
            self.assertEqual(2, proc.returncode)
            self.assertEqual(1, len(proc.stderr.strip().splitlines()), proc.stderr)
            self.assertIn("bad.json", proc.stderr)
            self.assertIn("not a dpbench-result file", proc.stderr)

    def test_benchmark_names_split_into_key_value_parts(self):
        self.assertEqual(("AllReduce", {"ranks": "2", "bytes": "67108864", "min_time": "0.100"}),
                         report_data.parse_benchmark_name("BM_AllReduce/ranks:2/bytes:67108864/min_time:0.100/manual_time"))
        self.assertEqual(64 * MIB, report_data.parse_size("64M"))

    def test_allreduce_implementations_combine_thread_and_process_files(self):
        with tempfile.TemporaryDirectory() as tmp:
            threads = report_data.load_collectives(write_json(Path(tmp) / "t.json", collectives_fixture()))
            procs = report_data.load_collectives(write_json(Path(tmp) / "p.json", process_collectives_fixture()))
        self.assertEqual({}, report_data.allreduce_implementations(threads))  # one implementation: nothing to compare
        panels = report_data.allreduce_implementations(report_data.merge_collectives([threads, procs]))
        self.assertEqual([2, 4], list(panels))
        self.assertEqual(["dpbench ring (threads)", "MPI_Allreduce", "gloo ring", "gloo halving-doubling"],
                         list(panels[4]))
        self.assertEqual(9, len(panels[2]["MPI_Allreduce"]))
        self.assertEqual(sorted(b.bytes for b in panels[2]["gloo ring"]), [b.bytes for b in panels[2]["gloo ring"]])
        # The thread file's memcpy reference survives the merge; Broadcast is not an all-reduce.
        merged = report_data.merge_collectives([threads, procs])
        self.assertEqual(5, len(merged.memcpy["memcpy"]))
        self.assertNotIn("Broadcast", [b.collective for line in panels[2].values() for b in line])

    def test_collectives_prefer_median_aggregates(self):
        with tempfile.TemporaryDirectory() as tmp:
            coll = report_data.load_collectives(write_json(Path(tmp) / "c.json", collectives_fixture()))
        bcast = [b for b in coll.points if b.collective == "Broadcast" and b.ranks == 2 and b.bytes == 2 ** 26]
        self.assertEqual(1, len(bcast))
        expected = 20.0 * 2 ** 26 / (2 ** 26 + 2 ** 18)
        self.assertTrue(math.isclose(expected, bcast[0].busbw), bcast[0])  # the median, not 99 or 2x
        self.assertEqual({"AllReduce", "Broadcast"}, {b.collective for b in coll.points})
        self.assertEqual(["memcpy"], list(coll.memcpy))
        self.assertEqual(5, len(coll.memcpy["memcpy"]))


class ChromiumCheckTest(unittest.TestCase):
    """The render check itself can fail: a broken image is not counted as loaded."""

    def test_broken_image_is_not_counted(self):
        good = "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNk+M9QDwADhgGAWjR9awAAAABJRU5ErkJggg=="
        template = (ROOT / "plots" / "templates" / "report.html.j2").read_text()
        script = template[template.index("<script>"):template.index("</script>") + len("</script>")]
        with tempfile.TemporaryDirectory() as tmp:
            page = Path(tmp) / "broken.html"
            page.write_text(f'<!DOCTYPE html><html><body><img src="data:image/png;base64,{good}">'
                            f'<img src="data:image/png;base64,{good[:40]}">{script}</body></html>')
            self.assertEqual("1/2", chromium_images_loaded(page))


if __name__ == "__main__":
    unittest.main()
