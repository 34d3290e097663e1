"""Tests of the report's memory figures: the memory model's (`dpbench memory`, --memory) and the
model's marks on the measured one (memory.per_rank[].modelled).

Run from the repository root:  /usr/bin/python3 -m unittest -v tests/python/test_report_memory.py

For: read back from the matplotlib artists as figures.save writes them, against values computed
here from the JSON itself:
- memory_model: one bar per (mode, role) at each world size, grouped by world size, each stacked
  by category (parameters, gradients, optimizer_state, activations, comm_buffers, data_staging)
  with segment heights equal to the file's bytes; modes in the report's order (ps first, then
  the result files' order, then the memory file's); "modelled" and the precision and parameter
  count in the title; a log-y panel of the largest parameter count that fits, one line per mode;
  a caption stating the ps root's excess over a worker and which mode fits the most;
- without --memory the figure is the note saying how to produce it; a file that is not a
  dpbench-memory file is a one-line error naming it, exit status 2;
- memory_per_rank stacks the measured categories per rank, and where runs carry the model's
  figures it marks the model's total on each bar and says whether measured equals modelled;
- one fixture is written by the real `dpbench memory` (skipped when build/release/dpbench is
  not built).
Not for: the memory model's numbers (tests/test_memory_model.cpp checks them to the byte).
"""
from __future__ import annotations

import copy
import json
import shutil
import subprocess
import sys
import tempfile
import unittest
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
REPORT = ROOT / "plots" / "report.py"
DPBENCH = ROOT / "build" / "release" / "dpbench"
CATEGORIES = ("parameters", "gradients", "optimizer_state", "activations", "comm_buffers", "data_staging")
GIB = 1024 ** 3
MIB = 1024 ** 2

sys.path.insert(0, str(ROOT / "plots"))
sys.path.insert(0, str(Path(__file__).resolve().parent))
import figures  # noqa: E402
import report_data  # noqa: E402
from test_report import document, make_run  # noqa: E402
from test_report_figures import captured, caption, draw_all, write_json  # noqa: E402


# --------------------------------------------------------------------------------------------
# fixtures


def row(mode: str, world: int, role: str, gib: tuple) -> dict:
    """One rows[] entry: the six categories in GiB (in CATEGORIES order) and their total."""
    bytes_ = {c: float(round(g * GIB)) for c, g in zip(CATEGORIES, gib)}
    return dict(bytes_, mode=mode, world_size=world, role=role, total_bytes=sum(bytes_.values()))


def memory_fixture() -> dict:
    """A dpbench-memory file whose rows name allreduce first (so ps first is the report's doing,
    not the file's): allreduce replicas, a ps root 3.5 GiB above its worker at every world size,
    and sharded_ps servers (with workers at 4 ranks), at 2 and 4 ranks; sharded_ps fits the most."""
    rows = []
    for world in (2, 4):
        act = 4.0 / world
        rows.append(row("allreduce", world, "replica", (1.25, 1.25, 2.5, act, 0.0, 0.001)))
        rows.append(row("ps", world, "root", (2.5, 2.5, 1.25, act, 0.0, 0.003)))
        rows.append(row("ps", world, "worker", (1.25, 1.25, 0.0, act, 0.25, 0.003)))
        rows.append(row("sharded_ps", world, "server", (1.25, 1.25 + 1.25 / world, 2.5 / world, act, 0.0, 0.001)))
        if world == 4:
            rows.append(row("sharded_ps", world, "worker", (1.25, 1.25, 0.0, act, 0.0, 0.001)))
    fitting = [{"mode": m, "world_size": w, "largest_params": v}
               for m, values in (("allreduce", (4.7e9, 4.8e9)), ("ps", (3.1e9, 3.2e9)), ("sharded_ps", (5.4e9, 7.0e9)))
               for w, v in zip((2, 4), values)]
    return {"schema": {"name": "dpbench-memory", "version": 2},
            "model": {"params": 335e6, "activation_bytes_per_sample": 276824064.0,
                      "input_bytes_per_sample": 3076.0, "output_bytes_per_sample": 8.0},
            "global_batch": 32, "optimizer": "adamw", "precision": "fp32", "rows": rows,
            "largest_fitting": fitting}


def with_model(doc: dict) -> dict:
    """The result document with memory.per_rank[].modelled on every rank, equal to what was
    measured (as dpbench writes it for CPU ranks over --comm local)."""
    doc = copy.deepcopy(doc)
    for run in doc["runs"]:
        for m in run["memory"]["per_rank"]:
            m["modelled"] = {c: float(m[c]) for c in CATEGORIES}
            m["modelled"]["role"] = "root" if m["rank"] == 0 and run["mode"] == "ps" else "worker"
            m["modelled"]["total_bytes"] = float(sum(m[c] for c in CATEGORIES))
    return doc


# --------------------------------------------------------------------------------------------
# what the JSON says, computed here without plots/


def expected_modes(doc: dict, result_modes: tuple = ()) -> list:
    """The report's order of a memory file's modes: ps (the reference) first, then the modes the
    result files ran in their order, then the others in the memory file's order."""
    in_file = list(dict.fromkeys(r["mode"] for r in doc["rows"]))
    return sorted(in_file, key=lambda m: (m != "ps", result_modes.index(m) if m in result_modes else len(result_modes),
                                          in_file.index(m)))


def expected_bars(doc: dict, modes: list) -> list:
    """(world size, mode, role, row) per bar: by world size, then mode, then role in file order."""
    bars = []
    for world in sorted({r["world_size"] for r in doc["rows"]}):
        for mode in modes:
            roles = list(dict.fromkeys(r["role"] for r in doc["rows"] if r["mode"] == mode))
            for role in roles:
                for r in doc["rows"]:
                    if (r["mode"], r["world_size"], r["role"]) == (mode, world, role):
                        bars.append((world, mode, role, r))
    return bars


def bar_containers(ax) -> list:
    """The BarContainers of an axes, in drawing order (one per stacked category)."""
    return [c for c in ax.containers if type(c).__name__ == "BarContainer"]


def run_report(out: Path, results: list, memory: list = ()) -> subprocess.CompletedProcess:
    """Runs plots/report.py as a user would, each memory file with its own --memory."""
    cmd = [sys.executable, str(REPORT), *map(str, results), "-o", str(out)]
    for m in memory:
        cmd += ["--memory", str(m)]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=300)


# --------------------------------------------------------------------------------------------
# the memory model's figure


class MemoryModelFigureTest(unittest.TestCase):
    """figures.plot_memory_model on the hand-made file."""

    def setUp(self):
        self.tmp = Path(tempfile.mkdtemp(prefix="dpbench-memory-test-"))
        self.doc = memory_fixture()
        self.path = write_json(self.tmp / "memory.json", self.doc)

    def tearDown(self):
        shutil.rmtree(self.tmp, ignore_errors=True)

    def draw(self, points=()):
        """(Figure record, matplotlib figure) of the fixture's memory-model figure."""
        mem = report_data.load_memory(self.path)
        with captured() as drawn:
            fig = figures.plot_memory_model(mem, self.tmp, points)
        self.assertTrue(fig.produced, fig.missing)
        return fig, drawn["memory_model"]

    def assert_stacked_bars(self, ax, bars: list) -> None:
        """Every bar of `bars` is drawn, in order, as its six categories stacked with the file's bytes."""
        self.assertIn("modelled", ax.get_ylabel())
        unit = GIB if max(r["total_bytes"] for *_, r in bars) >= GIB else MIB
        self.assertIn("GiB" if unit == GIB else "MiB", ax.get_ylabel())
        containers = bar_containers(ax)
        self.assertEqual(len(CATEGORIES), len(containers), "one bar series per category")
        self.assertEqual([label for _, label, _ in figures.MEMORY_STYLE], [c.get_label() for c in containers])
        self.assertEqual([c for c, _, _ in figures.MEMORY_STYLE], list(CATEGORIES), "the measured figure's order")
        bottoms = [0.0] * len(bars)
        for cat, container in zip(CATEGORIES, containers):
            self.assertEqual(len(bars), len(container.patches), cat)
            for i, (patch, (*_, r)) in enumerate(zip(container.patches, bars)):
                self.assertAlmostEqual(r[cat], patch.get_height() * unit, delta=1e-6 * max(r[cat], 1.0))
                self.assertAlmostEqual(bottoms[i], patch.get_y() * unit, delta=1e-6 * max(bottoms[i], 1.0))
                bottoms[i] += r[cat]
        for total, (*_, r) in zip(bottoms, bars):
            self.assertAlmostEqual(r["total_bytes"], total, delta=1e-6 * total)
        top = max(c.patches[i].get_y() + c.patches[i].get_height() for c in containers for i in range(len(bars)))
        self.assertLess(top, ax.get_ylim()[1], "no bar is clipped")
        self.assertEqual([f"{mode}\n{role}" for _, mode, role, _ in bars], [t.get_text() for t in ax.get_xticklabels()])
        worlds = sorted({w for w, *_ in bars})
        self.assertEqual([f"{w} ranks" for w in worlds], [t.get_text() for t in ax.child_axes[0].get_xticklabels()])

    def test_one_stacked_bar_per_mode_role_and_world_size_with_the_files_bytes(self):
        fig, drawn = self.draw()
        modes = expected_modes(self.doc)
        self.assertEqual(["ps", "allreduce", "sharded_ps"], modes)
        bars = expected_bars(self.doc, modes)
        self.assertEqual(9, len(bars))
        self.assert_stacked_bars(drawn.axes[0], bars)
        self.assertEqual(("ps", "root"), bars[0][1:3])
        self.assertEqual(("ps", "worker"), bars[1][1:3])

    def test_modes_follow_the_result_files_order_after_ps(self):
        runs = [make_run(m, 2, 256, 0, 1000.0) for m in ("sharded_ps", "ps", "allreduce")]
        doc = document(runs)
        results = report_data.load_results([write_json(self.tmp / "r.json", doc)])
        modes = expected_modes(self.doc, ("sharded_ps", "allreduce"))
        self.assertEqual(["ps", "sharded_ps", "allreduce"], modes)
        self.assertEqual(modes, report_data.memory_modes(report_data.load_memory(self.path), results.points))
        _, drawn = self.draw(results.points)
        self.assert_stacked_bars(drawn.axes[0], expected_bars(self.doc, modes))

    def test_title_and_caption_say_modelled_and_quote_the_file(self):
        fig, drawn = self.draw()
        suptitle = drawn._suptitle.get_text()
        for part in ("Modelled", "335M parameters", "fp32", "adamw", "global batch 32"):
            self.assertIn(part, suptitle)
        self.assertIn("fp32", fig.title)
        self.assertTrue(fig.caption.startswith("Modelled, not measured"), fig.caption)
        excess = {r["world_size"]: r["total_bytes"] for r in self.doc["rows"] if r["role"] == "root"}
        for r in self.doc["rows"]:
            if r["role"] == "worker" and r["mode"] == "ps":
                excess[r["world_size"]] -= r["total_bytes"]
        [gib] = {f"{v / GIB:.2f}" for v in excess.values()}  # the same at both world sizes
        self.assertEqual("3.50", gib)
        self.assertIn(f"The ps root holds {gib} GiB more than a ps worker at 2 and 4 ranks.", fig.caption)
        self.assertIn("sharded_ps fits the most parameters at every world size (5.40e9 at 2 ranks to 7.00e9 at 4)",
                      fig.caption)
        self.assertIn("3.10e9 at 2 ranks to 3.20e9 at 4 for ps", fig.caption)

    def test_largest_fitting_panel_one_line_per_mode_log_y(self):
        _, drawn = self.draw()
        self.assertEqual(2, len(drawn.axes), "the bars and the largest-fitting panel")
        fit = drawn.axes[1]
        self.assertEqual("log", fit.get_yscale())
        lines = [line for line in fit.get_lines() if not line.get_label().startswith("_")]
        self.assertEqual(["ps", "allreduce", "sharded_ps"], [line.get_label() for line in lines])
        self.assertEqual(figures.COLORS[0], lines[0].get_color(), "ps keeps the first colour")
        for line in lines:
            want = sorted((f["world_size"], f["largest_params"]) for f in self.doc["largest_fitting"]
                          if f["mode"] == line.get_label())
            self.assertEqual([w for w, _ in want], list(line.get_xdata()))
            self.assertEqual([v for _, v in want], list(line.get_ydata()))

    def test_no_largest_fitting_no_second_panel(self):
        doc = memory_fixture()
        doc["largest_fitting"] = []
        doc["model"] = {"workload": "mlp", "hidden": [512, 256]}
        self.path = write_json(self.tmp / "builtin.json", doc)
        fig, drawn = self.draw()
        self.assertEqual(1, len(drawn.axes), "no largest_fitting: the bars alone")
        self.assert_stacked_bars(drawn.axes[0], expected_bars(doc, expected_modes(doc)))
        self.assertNotIn("fits the most", fig.caption)
        self.assertIn("built-in mlp", drawn._suptitle.get_text())

    def test_without_a_file_the_figure_is_a_note(self):
        fig = figures.plot_memory_model(None, self.tmp)
        self.assertFalse(fig.produced)
        self.assertEqual("memory_model", fig.key)
        self.assertIn("dpbench memory", fig.missing)
        self.assertIn("-o memory.json", fig.missing)
        self.assertIn("--memory memory.json", fig.missing)
        self.assertFalse((self.tmp / "memory_model.png").exists())


# --------------------------------------------------------------------------------------------
# report.py with and without --memory


class MemoryReportTest(unittest.TestCase):
    """plots/report.py --memory, as a user runs it."""

    def setUp(self):
        self.tmp = Path(tempfile.mkdtemp(prefix="dpbench-memory-report-"))
        self.results = write_json(self.tmp / "r.json", document([make_run("ps", 2, 256, 0, 1000.0, imbalance=1.8),
                                                                 make_run("allreduce", 2, 256, 0, 1200.0)]))

    def tearDown(self):
        shutil.rmtree(self.tmp, ignore_errors=True)

    def test_memory_figure_drawn_after_the_measured_one_and_listed_as_input(self):
        mem = write_json(self.tmp / "memory.json", memory_fixture())
        out = self.tmp / "out"
        proc = run_report(out, [self.results], [mem])
        self.assertEqual(0, proc.returncode, proc.stderr)
        md = (out / "report.md").read_text()
        self.assertTrue((out / "memory_model.png").is_file())
        self.assertLess(md.index("](memory_per_rank.png)"), md.index("](memory_model.png)"))
        self.assertLess(md.index("](memory_model.png)"), md.index("](step_breakdown.png)"))
        self.assertIn("The ps root holds 3.50 GiB more", caption(md, "memory_model"))
        self.assertIn(f"`{mem}` (memory model)", md)
        self.assertIn("(memory model)", (out / "report.html").read_text())
        # Without --memory, the same directory loses the stale PNG and gets the note.
        proc = run_report(out, [self.results])
        self.assertEqual(0, proc.returncode, proc.stderr)
        md = (out / "report.md").read_text()
        self.assertFalse((out / "memory_model.png").exists())
        self.assertIn("> Not drawn: The modelled per-rank memory needs", md)
        self.assertIn("--memory memory.json", md)

    def test_two_files_two_figures(self):
        first = write_json(self.tmp / "fp32.json", memory_fixture())
        mixed = memory_fixture()
        mixed["precision"] = "mixed (projection)"
        second = write_json(self.tmp / "mixed.json", mixed)
        out = self.tmp / "out"
        proc = run_report(out, [self.results], [first, second])
        self.assertEqual(0, proc.returncode, proc.stderr)
        self.assertTrue((out / "memory_model.png").is_file())
        self.assertTrue((out / "memory_model_2.png").is_file())
        self.assertIn("### Modelled per-rank memory, mixed (projection), mixed.json", (out / "report.md").read_text())

    def test_not_a_memory_file_exits_2_naming_it(self):
        for name, doc, words in (
                ("result.json", {"schema": {"name": "dpbench-result", "version": 2}, "runs": []},
                 "not a dpbench-memory file"),
                ("norows.json", {"schema": {"name": "dpbench-memory", "version": 2}}, "has no rows[] array"),
                ("badrow.json", dict(memory_fixture(), rows=[{"mode": "ps", "world_size": 2}]), "rows[0] needs")):
            bad = write_json(self.tmp / name, doc)
            proc = run_report(self.tmp / "out", [self.results], [bad])
            self.assertEqual(2, proc.returncode, name)
            self.assertEqual(1, len(proc.stderr.strip().splitlines()), proc.stderr)
            self.assertIn(name, proc.stderr)
            self.assertIn(words, proc.stderr)
        with self.assertRaises(report_data.InputError):
            report_data.load_memory(self.tmp / "result.json")


@unittest.skipUnless(DPBENCH.is_file(), f"{DPBENCH} is not built (cmake --preset release && cmake --build build/release)")
class RealMemoryCommandTest(unittest.TestCase):
    """A file the real `dpbench memory` writes (bert-large with AdamW, 2, 4 and 8 ranks, 80 GB)."""

    @classmethod
    def setUpClass(cls):
        cls.tmp = Path(tempfile.mkdtemp(prefix="dpbench-memory-real-"))
        cls.path = cls.tmp / "mem.json"
        cls.proc = subprocess.run(
            [str(DPBENCH), "memory", "--params", "335e6", "--activation-bytes-per-sample", "276824064",
             "--input-bytes-per-sample", "3076", "--output-bytes-per-sample", "8", "--batch-size", "32",
             "--optimizer", "adamw", "--ranks", "2,4,8", "--capacity-gb", "80", "-o", str(cls.path)],
            capture_output=True, text=True, timeout=120)

    @classmethod
    def tearDownClass(cls):
        shutil.rmtree(cls.tmp, ignore_errors=True)

    def setUp(self):
        self.assertEqual(0, self.proc.returncode, self.proc.stderr)

    def test_real_file_draws_every_row_stacked_ps_first(self):
        doc = json.loads(self.path.read_text())
        mem = report_data.load_memory(self.path)
        with captured() as drawn:
            fig = figures.plot_memory_model(mem, self.tmp)
        self.assertTrue(fig.produced)
        modes = expected_modes(doc)
        self.assertEqual("ps", modes[0])
        bars = expected_bars(doc, modes)
        self.assertEqual(len(doc["rows"]), len(bars), "one bar per row of the file")
        MemoryModelFigureTest.assert_stacked_bars(self, drawn["memory_model"].axes[0], bars)
        fit = drawn["memory_model"].axes[1]
        self.assertEqual(modes, [line.get_label() for line in fit.get_lines() if not line.get_label().startswith("_")])
        self.assertIn("The ps root holds", fig.caption)
        self.assertIn("fits the most parameters", fig.caption)
        self.assertIn("335M parameters", drawn["memory_model"]._suptitle.get_text())

    def test_report_reads_it(self):
        results = write_json(self.tmp / "r.json", document([make_run("ps", 2, 256, 0, 1000.0, imbalance=1.8),
                                                            make_run("allreduce", 2, 256, 0, 1200.0)]))
        proc = run_report(self.tmp / "out", [results], [self.path])
        self.assertEqual(0, proc.returncode, proc.stderr)
        self.assertTrue((self.tmp / "out" / "memory_model.png").is_file())


# --------------------------------------------------------------------------------------------
# the measured figure: stacked by category, with the model's total marked


class MeasuredMemoryFigureTest(unittest.TestCase):
    """memory_per_rank: the measured categories stacked per rank; the model's tick and sentence."""

    def setUp(self):
        self.tmp = Path(tempfile.mkdtemp(prefix="dpbench-memory-measured-"))
        self.doc = document([make_run("ps", 4, 256, 0, 1000.0, imbalance=1.8), make_run("allreduce", 4, 256, 0, 1200.0)])

    def tearDown(self):
        shutil.rmtree(self.tmp, ignore_errors=True)

    def draw(self, doc: dict):
        """(Figure record, matplotlib figure) of memory_per_rank for doc."""
        figs, drawn, _ = draw_all([write_json(self.tmp / "r.json", doc)], self.tmp)
        return figs["memory_per_rank"], drawn["memory_per_rank"]

    def model_ticks(self, ax) -> list:
        """(x start, y) of the model's ticks on one panel, by x."""
        out = []
        for c in ax.collections:
            if c.get_label() == figures.MODEL_TICK_LABEL:
                out += [(float(s[0][0]), float(s[0][1])) for s in c.get_segments()]
        return sorted(out)

    def test_stacks_the_categories_per_rank(self):
        fig, drawn = self.draw(self.doc)
        panels = [ax for ax in drawn.axes if ax.get_visible() and ax.get_title()]
        self.assertEqual(["ps (collective)", "allreduce (ring)"], [ax.get_title() for ax in panels])
        for ax, run in zip(panels, self.doc["runs"]):
            containers = bar_containers(ax)
            self.assertEqual([label for _, label, _ in figures.MEMORY_STYLE], [c.get_label() for c in containers])
            bottoms = [0.0] * len(run["memory"]["per_rank"])
            for cat, container in zip(CATEGORIES, containers):
                for i, (patch, m) in enumerate(zip(container.patches, run["memory"]["per_rank"])):
                    self.assertAlmostEqual(m[cat] / MIB, patch.get_height(), places=9)
                    self.assertAlmostEqual(bottoms[i], patch.get_y(), places=9)
                    bottoms[i] += m[cat] / MIB
            self.assertEqual([], self.model_ticks(ax), "no model figures in the file: no tick")
        self.assertNotIn("modelled", fig.caption)

    def test_marks_the_models_total_and_says_it_equals_the_measurement(self):
        doc = with_model(self.doc)
        fig, drawn = self.draw(doc)
        panels = [ax for ax in drawn.axes if ax.get_visible() and ax.get_title()]
        for ax, run in zip(panels, doc["runs"]):
            ticks = self.model_ticks(ax)
            want = [m["modelled"]["total_bytes"] / MIB for m in run["memory"]["per_rank"]]
            self.assertEqual(len(want), len(ticks))
            for y, (_, got) in zip(want, ticks):
                self.assertAlmostEqual(y, got, places=9)
        self.assertIn("Measured equals modelled on every rank drawn", fig.caption)
        self.assertIn(figures.MODEL_TICK_LABEL, [t.get_text() for t in drawn.legends[0].get_texts()])

    def test_says_where_measured_and_modelled_differ(self):
        doc = with_model(self.doc)
        rank = doc["runs"][0]["memory"]["per_rank"][0]
        rank["modelled"]["optimizer_state"] += 2 * MIB
        rank["modelled"]["total_bytes"] += 2 * MIB
        fig, _ = self.draw(doc)
        self.assertNotIn("Measured equals modelled", fig.caption)
        self.assertIn("Measured differs from modelled on 1 of 8 ranks", fig.caption)
        self.assertIn("ps (collective) rank 0", fig.caption)
        self.assertIn("(-2.0 MiB)", fig.caption)


if __name__ == "__main__":
    unittest.main()
