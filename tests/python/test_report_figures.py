"""Tests of the report's figure rules (plots/figures.py, report_data.py, report.py): one source of truth.

Run from the repository root:  /usr/bin/python3 -m unittest -v tests/python/test_report_figures.py

For: what the figures draw, read back from the matplotlib artists of each figure (captured as
figures_common.save writes it), and what the report's captions say, against values this file computes
from the result JSON itself:
- no bar is clipped: the step breakdown's y axis holds every stacked bar, hidden-comm segment and
  step-time error bar whole, with headroom;
- spread: throughput that has repetitions is drawn with a bar from the smallest to the largest
  repetition, and the throughput-vs-world-size figure names every line in its legend;
- one order: ps (the baseline) first, then the others as the file first names them, in the run
  table, the failed points, the verdict and its notes, every legend, panel and bar group, and the
  projection's curves;
- overlap: the hatched "comm hidden by overlap" segment only at more than one rank, for a strategy
  whose strategy.overlaps_backward is true, where comm - comm_exposed > 0 (and the caption says so);
- captions quote the verdict: the memory imbalance, the throughput ratios and the exposed-comm
  shares are the same strings in the caption as in the verdict;
- files without repetitions or without optional fields still give a report;
- a `dpbench project --simulate` file: each mode's simulated step time as a dashed line in its
  colour, only through the points that have one, and the findings quoted in the caption, in order;
  load_projection rejects findings that are not a list of objects with a text.
Data: tests/python/data/ci-sweep-3-repetitions.json (the committed CI sweep: ps, sharded_ps and
allreduce at 1 and 2 ranks, 3 repetitions each; per-step losses stripped) and hand-made sweeps
built with test_report's fixtures.
Not for: the report's other sections (test_report.py, test_report_network.py).
"""
from __future__ import annotations

import contextlib
import copy
import json
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import unittest
from pathlib import Path
from unittest import mock

ROOT = Path(__file__).resolve().parents[2]
REPORT = ROOT / "plots" / "report.py"
SWEEP = ROOT / "tests" / "python" / "data" / "ci-sweep-3-repetitions.json"
PHASES_IN_STEP = ("data_wait", "h2d", "forward", "backward", "comm_exposed", "optimizer")

sys.path.insert(0, str(ROOT / "plots"))
sys.path.insert(0, str(Path(__file__).resolve().parent))
import figures  # noqa: E402
import figures_common  # noqa: E402  (owns save, which the parts call)
import report_data  # noqa: E402
from test_report import (document, failed_run, make_run, projection_fixture, simulated_projection_fixture,  # noqa: E402
                         with_strategy)


# --------------------------------------------------------------------------------------------
# what the JSON says, computed here without plots/


def traits_of(run: dict) -> dict:
    """label, baseline, overlaps_backward of a run: its strategy block (schema version 3's
    "baseline", the "reference" of versions before it), else what a file from before the traits
    means (ps: the baseline, no overlap; allreduce: ring, overlaps)."""
    if isinstance(run.get("strategy"), dict):
        s = run["strategy"]
        return {"label": s["label"], "baseline": bool(s["baseline"] if "baseline" in s else s["reference"]),
                "overlaps_backward": bool(s["overlaps_backward"])}
    if run["mode"] == "ps":
        return {"label": f"ps ({run.get('transport', 'collective')})", "baseline": True,
                "overlaps_backward": False}
    if run["mode"] == "allreduce":
        return {"label": "allreduce (ring)", "baseline": False, "overlaps_backward": True}
    return {"label": run["mode"], "baseline": False, "overlaps_backward": False}


def expected_order(doc: dict, key: str = "label") -> list:
    """Labels (or modes) in the one order: reference first, then by first appearance in runs[]."""
    first = {}
    for i, run in enumerate(doc["runs"]):
        t = traits_of(run)
        first.setdefault(t["label"] if key == "label" else run["mode"], (not t["baseline"], i))
    return sorted(first, key=first.get)


def grid(doc: dict) -> dict:
    """{(label, world_size, global_batch, num_workers): [ok runs]} of a document."""
    out: dict = {}
    for run in doc["runs"]:
        if run.get("status", "ok") == "ok":
            key = (traits_of(run)["label"], run["world_size"], run["global_batch"], run["config"]["num_workers"])
            out.setdefault(key, []).append(run)
    return out


def phase(runs: list, name: str) -> float:
    """The median over repetitions of one phase (seconds)."""
    return statistics.median(r["phases_s"].get(name, 0.0) for r in runs)


def expected_hidden_ms(doc: dict) -> dict:
    """{(label, world_size): ms} of every point where overlap can exist and was measured."""
    out = {}
    for (label, world, _, _), runs in grid(doc).items():
        hidden = phase(runs, "comm") - phase(runs, "comm_exposed")
        if world > 1 and traits_of(runs[0])["overlaps_backward"] and hidden > 0:
            out[(label, world)] = hidden * 1e3
    return out


def tallest_bar_ms(doc: dict) -> float:
    """The highest point of the step breakdown: a bar's phases (or its median p50 step, when
    larger) with its hidden-comm segment, or the largest repetition's p50 step."""
    hidden = expected_hidden_ms(doc)
    tops = []
    for (label, world, _, _), runs in grid(doc).items():
        p50 = statistics.median(r["step_time_s"]["p50"] for r in runs)
        stacked = max(sum(phase(runs, name) for name in PHASES_IN_STEP), p50) * 1e3
        tops.append(max(stacked + hidden.get((label, world), 0.0),
                        max(r["step_time_s"]["p50"] for r in runs) * 1e3))
    return max(tops)


def compared_world(doc: dict) -> int:
    """The largest world size at which a reference and another strategy ran the same setting."""
    keys = grid(doc)
    refs = {(w, b, n) for (label, w, b, n), runs in keys.items() if traits_of(runs[0])["baseline"]}
    others = {(w, b, n) for (label, w, b, n), runs in keys.items() if not traits_of(runs[0])["baseline"]}
    return max(w for w, _, _ in refs & others)


def expected_ratio_texts(doc: dict) -> list:
    """"1.22x faster than ps" for each other strategy against the (single) reference, at the
    compared world size: the median over matched settings of the ratio of median throughputs."""
    world = compared_world(doc)
    keys = grid(doc)
    [ref] = {label for (label, _, _, _), runs in keys.items() if traits_of(runs[0])["baseline"]}
    ref_name = ref.split(" (")[0]
    texts = []
    for label in expected_order(doc):
        if label == ref:
            continue
        ratios = []
        for (lab, w, b, n), runs in keys.items():
            if lab == label and w == world and (ref, w, b, n) in keys:
                mine = statistics.median(r["throughput_samples_per_s"] for r in runs)
                theirs = statistics.median(r["throughput_samples_per_s"] for r in keys[(ref, w, b, n)])
                ratios.append(mine / theirs)
        if ratios:
            r = statistics.median(ratios)
            texts.append(f"is {r:.2f}x faster than {ref_name}" if r >= 1 else f"is {1 / r:.2f}x slower than {ref_name}")
    return texts


def expected_imbalance_text(doc: dict) -> str:
    """The reference's max/mean memory at the compared world size: per point the median over
    repetitions, then the median over the settings matched by another strategy, as "1.87x"."""
    world = compared_world(doc)
    keys = grid(doc)
    others = {(w, b, n) for (label, w, b, n), runs in keys.items() if not traits_of(runs[0])["baseline"]}
    values = [statistics.median(r["memory"]["imbalance_max_over_mean"] for r in runs)
              for (label, w, b, n), runs in keys.items()
              if traits_of(runs[0])["baseline"] and w == world and (w, b, n) in others]
    return f"{statistics.median(values):.2f}x"


# --------------------------------------------------------------------------------------------
# drawing and reports


@contextlib.contextmanager
def captured():
    """Keeps every matplotlib figure figures.save writes, by key: {key: matplotlib Figure}."""
    kept = {}
    original = figures_common.save

    def keep(fig, out_dir, key):
        kept[key] = fig
        return original(fig, out_dir, key)

    with mock.patch.object(figures_common, "save", keep):
        yield kept


def draw_all(paths: list, out_dir: Path, proj: dict | None = None) -> tuple:
    """(figs {key: Figure record}, drawn {key: matplotlib Figure}, verdict) for result files,
    built the way plots/report.py builds them."""
    import report
    results = report_data.load_results(paths)
    verdict = report_data.compute_verdict(results.points)
    with captured() as drawn:
        figs = report.build_figures(results, None, proj, out_dir, None, verdict)
    return {f.key: f for f in figs}, drawn, verdict


def legend_texts(ax) -> list:
    """The labels of an axes' legend, top to bottom."""
    return [t.get_text() for t in ax.get_legend().get_texts()]


def errorbar_ranges(ax) -> dict:
    """{legend label: [(x, low, high) of each error bar, by x]} of an axes' error bars."""
    out = {}
    for c in ax.containers:
        if type(c).__name__ == "ErrorbarContainer" and c.lines[2]:
            segs = c.lines[2][0].get_segments()
            out[c.get_label()] = sorted((float(s[0][0]), float(min(s[0][1], s[1][1])), float(max(s[0][1], s[1][1])))
                                        for s in segs)
    return out


def run_report(out: Path, results: list) -> subprocess.CompletedProcess:
    """Runs plots/report.py as a user would."""
    return subprocess.run([sys.executable, str(REPORT), *map(str, results), "-o", str(out)],
                          capture_output=True, text=True, timeout=300)


def caption(md: str, key: str) -> str:
    """The Markdown caption under figure `key`."""
    return re.search(r"^\*(.*)\*$", md.split(f"]({key}.png)")[1], re.M).group(1)


def headline(md: str) -> str:
    """The verdict: the bold first paragraph of report.md."""
    return re.search(r"^\*\*(.*)\*\*$", md, re.M).group(1)


def write_json(path: Path, doc: dict) -> Path:
    """Writes doc to path and returns the path."""
    path.write_text(json.dumps(doc))
    return path


def dashed_lines(ax) -> list:
    """(colour, x data, y data) of every dashed line of an axes that runs along x (the crossover
    marks, dashed too, are vertical and left out)."""
    out = []
    for line in ax.get_lines():
        xs, ys = [float(x) for x in line.get_xdata()], [float(y) for y in line.get_ydata()]
        if line.get_linestyle() == "--" and len(set(xs)) > 1:
            out.append((line.get_color(), xs, ys))
    return out


# --------------------------------------------------------------------------------------------
# the committed CI sweep, 3 repetitions


class RealSweepTest(unittest.TestCase):
    """The figures and captions of the committed CI sweep (3 repetitions per point)."""

    @classmethod
    def setUpClass(cls):
        cls.tmp = Path(tempfile.mkdtemp(prefix="dpbench-figures-test-"))
        cls.doc = json.loads(SWEEP.read_text())
        cls.figs, cls.drawn, cls.verdict = draw_all([SWEEP], cls.tmp)
        cls.proc = run_report(cls.tmp / "report", [SWEEP])
        cls.md = (cls.tmp / "report" / "report.md").read_text() if cls.proc.returncode == 0 else ""

    @classmethod
    def tearDownClass(cls):
        shutil.rmtree(cls.tmp, ignore_errors=True)

    def setUp(self):
        self.assertEqual(0, self.proc.returncode, self.proc.stderr)

    def test_fixture_has_repetitions_and_the_three_strategies(self):
        self.assertEqual({3}, {len(runs) for runs in grid(self.doc).values()})
        self.assertEqual(["ps (collective)", "sharded_ps (collective)", "allreduce (ring)"],
                         expected_order(self.doc))

    def test_step_breakdown_holds_every_bar_whole(self):
        ax = self.drawn["step_breakdown"].axes[0]
        bottom, top = ax.get_ylim()
        tallest = tallest_bar_ms(self.doc)
        self.assertEqual(0, bottom)
        self.assertGreater(top, 1.03 * tallest, "the tallest bar (or error bar) needs headroom under the frame")
        for patch in ax.patches:
            self.assertLessEqual(patch.get_y() + patch.get_height(), top)
        for label, bars in errorbar_ranges(ax).items():
            self.assertTrue(all(high <= top for _, _, high in bars), label)

    def test_step_time_marker_has_its_min_max_bar(self):
        ax = self.drawn["step_breakdown"].axes[0]
        [bars] = errorbar_ranges(ax).values()
        expected = sorted((min(r["step_time_s"]["p50"] for r in runs) * 1e3,
                           max(r["step_time_s"]["p50"] for r in runs) * 1e3)
                          for runs in grid(self.doc).values())
        self.assertEqual(len(expected), len(bars))
        for (lo, hi), (_, low, high) in zip(expected, sorted(bars, key=lambda b: (b[1], b[2]))):
            self.assertAlmostEqual(lo, low, places=9)
            self.assertAlmostEqual(hi, high, places=9)

    def test_throughput_figure_labels_every_line_and_draws_min_max(self):
        ax = self.drawn["throughput_vs_world_size"].axes[0]
        self.assertEqual(expected_order(self.doc), legend_texts(ax))
        ranges = errorbar_ranges(ax)
        self.assertEqual(expected_order(self.doc), list(ranges), "one min-max error bar line per strategy")
        for (label, world, _, _), runs in grid(self.doc).items():
            tps = [r["throughput_samples_per_s"] for r in runs]
            index = sorted({w for (lab, w, _, _) in grid(self.doc) if lab == label}).index(world)
            _, low, high = ranges[label][index]
            self.assertAlmostEqual(min(tps), low, places=6)
            self.assertAlmostEqual(max(tps), high, places=6)
        self.assertIn("medians over 3 repetitions", self.figs["throughput_vs_world_size"].caption)

    def test_overlap_drawn_only_where_it_can_exist(self):
        ax = self.drawn["step_breakdown"].axes[0]
        hatched = sorted(p.get_height() for p in ax.patches if p.get_hatch() and p.get_height() > 0)
        expected = sorted(expected_hidden_ms(self.doc).values())
        self.assertTrue(all(world > 1 for _, world in expected_hidden_ms(self.doc)))
        self.assertEqual(len(expected), len(hatched), (expected, hatched))
        for want, got in zip(expected, hatched):
            self.assertAlmostEqual(want, got, places=9)
        # The JSON has hidden comm at 1 rank (sharded_ps, allreduce) that must not be drawn.
        one_rank = [runs for (label, world, _, _), runs in grid(self.doc).items()
                    if world == 1 and phase(runs, "comm") > phase(runs, "comm_exposed")]
        self.assertTrue(one_rank, "the fixture should show the 1-rank case")
        text = caption(self.md, "step_breakdown")
        for part in ("more than one rank", "strategy.overlaps_backward", "comm - comm_exposed) above zero"):
            self.assertIn(part, text)

    def test_modes_in_one_order_in_table_verdict_and_figures(self):
        modes = expected_order(self.doc, "mode")
        labels = expected_order(self.doc)
        runs_md = self.md.split("## Runs")[1].split("\n## ")[0]
        table = [m for m in re.findall(r"^\| (\w+) \|", runs_md, re.M) if m != "mode"]
        self.assertEqual(modes, list(dict.fromkeys(table)))
        verdict = headline(self.md)
        others = [m for m in modes if m != "ps"]
        self.assertEqual(others, sorted(others, key=lambda m: verdict.index(f"{m} is")))
        note = next(n for n in self.md.splitlines() if n.startswith("- Exposed communication"))
        self.assertEqual(modes, re.findall(r"of the (\w+) step", note))
        step = self.drawn["step_breakdown"].axes[0]
        self.assertEqual(labels, [t.get_text() for t in step.child_axes[0].get_xticklabels()])
        memory = [ax.get_title() for ax in self.drawn["memory_per_rank"].axes if ax.get_visible()]
        self.assertEqual(labels, memory)
        self.assertEqual(modes, re.findall(r"of the (\w+) step", caption(self.md, "step_breakdown")))

    def test_captions_quote_the_verdicts_numbers(self):
        verdict = headline(self.md)
        ratios = expected_ratio_texts(self.doc)
        self.assertEqual(2, len(ratios))
        pattern = r"is \d+\.\d\dx (?:faster|slower) than \w+"
        self.assertEqual(ratios, re.findall(pattern, verdict))
        self.assertEqual(ratios, re.findall(pattern, caption(self.md, "throughput_vs_world_size")))
        imbalance = expected_imbalance_text(self.doc)
        self.assertEqual([imbalance], re.findall(r"root holds (\d+\.\d\dx)", verdict))
        self.assertEqual([imbalance], re.findall(r"root (?:peaks at|at) (\d+\.\d\dx)", caption(self.md, "memory_per_rank")))
        note = next(n for n in self.md.splitlines() if n.startswith("- Exposed communication"))
        self.assertEqual(re.findall(r"(\d+%) of the (\w+) step", note),
                         re.findall(r"(\d+%) of the (\w+) step", caption(self.md, "step_breakdown")))
        # The records the report is built from hold those very strings.
        self.assertEqual(ratios, [r.text for r in self.verdict.ratios])
        self.assertEqual([imbalance], [m.text for m in self.verdict.imbalance])


# --------------------------------------------------------------------------------------------
# hand-made sweeps


def imbalance_sweep() -> dict:
    """ps and allreduce at 2 and 4 ranks, batch 64, 256 and 1024: the ps root's max/mean at
    4 ranks is 1.77, 1.87 and 1.97, so the verdict's median (1.87) is not the largest batch's."""
    runs = []
    for ranks in (2, 4):
        for batch, imbalance in ((64, 1.77), (256, 1.87), (1024, 1.97)):
            runs.append(make_run("ps", ranks, batch, 0, 1000.0 * batch / 64, imbalance=imbalance))
            runs.append(make_run("allreduce", ranks, batch, 0, 1300.0 * batch / 64 * (1 + 0.1 * ranks)))
    return document(runs)


def ordered_sweep() -> dict:
    """allreduce, sharded_ps, ps and one_bucket (in that file order) at 1, 2 and 4 ranks, 3
    repetitions, and a failed point of allreduce and of ps: alphabetical order, file order and the
    report's order (ps, allreduce, sharded_ps, one_bucket) all differ. sharded_ps overlaps
    backward; one_bucket has comm beyond its exposed part but does not overlap."""
    runs = []
    for ranks in (1, 2, 4):
        for rep, noise in enumerate((0.97, 1.0, 1.05)):
            runs.append(make_run("allreduce", ranks, 256, 0, 1200.0 * ranks * noise, repetition=rep))
            runs.append(with_strategy(make_run("allreduce", ranks, 256, 0, 1100.0 * ranks * noise, repetition=rep),
                                      "sharded_ps", "collective", False, False))
            runs.append(make_run("ps", ranks, 256, 0, 900.0 * ranks ** 0.8 * noise, imbalance=1.6, repetition=rep))
            one = with_strategy(make_run("allreduce", ranks, 256, 0, 1000.0 * ranks * noise, repetition=rep),
                                "one_bucket", "ring", False, False)
            one["strategy"]["overlaps_backward"] = False
            runs.append(one)
    runs.append(failed_run("allreduce", 8, 256, 0, "fixture: allreduce failed"))
    runs.append(failed_run("ps", 8, 256, 0, "fixture: ps failed"))
    return document(runs)


def ten_line_sweep() -> dict:
    """Five strategies at 1, 2, 4, 8 ranks and batch 64 and 256, 3 repetitions: ten lines."""
    runs = []
    for ranks in (1, 2, 4, 8):
        for batch in (64, 256):
            for rep, noise in enumerate((0.95, 1.0, 1.08)):
                base = (batch / 64) ** 0.3 * noise
                runs.append(make_run("ps", ranks, batch, 0, 1000 * ranks ** 0.5 * base, imbalance=1.9, repetition=rep))
                runs.append(make_run("ps", ranks, batch, 0, 900 * ranks ** 0.5 * base, transport="p2p",
                                     imbalance=1.8, repetition=rep))
                runs.append(with_strategy(make_run("allreduce", ranks, batch, 0, 1300 * ranks ** 0.6 * base,
                                                   repetition=rep), "sharded_ps", "collective", False, False))
                runs.append(make_run("allreduce", ranks, batch, 0, 1200 * ranks ** 0.7 * base, repetition=rep))
                runs.append(with_strategy(make_run("allreduce", ranks, batch, 0, 1100 * ranks ** 0.7 * base,
                                                   repetition=rep), "hier", "tree", False, False))
    return document(runs)


class MadeSweepTest(unittest.TestCase):
    """Figures of hand-made sweeps built for one rule each."""

    def setUp(self):
        self.tmp = Path(tempfile.mkdtemp(prefix="dpbench-figures-made-"))

    def tearDown(self):
        shutil.rmtree(self.tmp, ignore_errors=True)

    def report(self, doc: dict, name: str = "r.json") -> str:
        """report.md of doc (exit status 0 asserted)."""
        proc = run_report(self.tmp / "out", [write_json(self.tmp / name, doc)])
        self.assertEqual(0, proc.returncode, proc.stderr)
        return (self.tmp / "out" / "report.md").read_text()

    def test_memory_caption_is_the_verdicts_median_not_one_settings(self):
        doc = imbalance_sweep()
        imbalance = expected_imbalance_text(doc)
        self.assertEqual("1.87x", imbalance)  # the median of 1.77, 1.87, 1.97
        md = self.report(doc)
        self.assertEqual([imbalance], re.findall(r"root holds (\d+\.\d\dx)", headline(md)))
        self.assertEqual([imbalance], re.findall(r"root (?:peaks at|at) (\d+\.\d\dx)", caption(md, "memory_per_rank")))
        self.assertNotIn("1.97x", caption(md, "memory_per_rank"))
        ratios = expected_ratio_texts(doc)
        pattern = r"is \d+\.\d\dx (?:faster|slower) than \w+"
        self.assertEqual(ratios, re.findall(pattern, headline(md)))
        self.assertEqual(ratios, re.findall(pattern, caption(md, "throughput_vs_world_size")))

    def test_one_order_everywhere(self):
        doc = ordered_sweep()
        modes = expected_order(doc, "mode")
        labels = expected_order(doc)
        self.assertEqual(["ps", "allreduce", "sharded_ps", "one_bucket"], modes)
        md = self.report(doc)
        runs_md = md.split("## Runs")[1].split("\n## ")[0]
        self.assertEqual(modes, list(dict.fromkeys(m for m in re.findall(r"^\| (\w+) \|", runs_md, re.M)
                                                   if m != "mode")))
        failed_md = md.split("## Failed points")[1].split("\n## ")[0]
        self.assertEqual(["ps", "allreduce"], [m for m in re.findall(r"^\| (\w+) \|", failed_md, re.M) if m != "mode"])
        verdict = headline(md)
        self.assertEqual(modes[1:], sorted(modes[1:], key=lambda m: verdict.index(f"{m} is")))
        figs, drawn, _ = draw_all([self.tmp / "r.json"], self.tmp)
        self.assertEqual(labels, legend_texts(drawn["throughput_vs_world_size"].axes[0]))
        self.assertEqual(labels, list(errorbar_ranges(drawn["throughput_vs_world_size"].axes[0])))
        step = drawn["step_breakdown"].axes[0]
        self.assertEqual(labels, [t.get_text() for t in step.child_axes[0].get_xticklabels()])
        self.assertEqual(labels, [ax.get_title() for ax in drawn["memory_per_rank"].axes if ax.get_visible()])
        # One colour per strategy, given in the same order (ps gets the first).
        colours = {c.get_label(): c.lines[0].get_color() for c in drawn["throughput_vs_world_size"].axes[0].containers}
        self.assertEqual([figures.COLORS[i] for i in range(len(labels))], [colours[label] for label in labels])

    def test_projection_curves_reference_first(self):
        proj = projection_fixture()  # a file without `curves`: its points name allreduce first
        self.assertEqual("allreduce", proj["points"][0]["curve"])
        with captured() as drawn:
            figures.plot_projection(proj, self.tmp)
        left = drawn["projection"].axes[0]
        self.assertEqual(["ps (collective)", "ps (p2p)", "allreduce (ring)"], legend_texts(left)[:3])

    def test_projection_draws_the_points_on_its_setting_each_with_its_error(self):
        proj = projection_fixture()
        proj["scaling"] = {"kind": "strong", "global_batch": 256, "text": "strong: a global batch of 256"}
        for i, m in enumerate(proj["measured"]):
            m["on_curve"] = m["world_size"] == 2  # the 4-rank points: another setting
            m["relative_error"] = 0.01 * (i + 1)
        with captured() as drawn:
            fig = figures.plot_projection(proj, self.tmp)
        left = drawn["projection"].axes[0]
        drawn_errors = sorted(t.get_text() for t in left.texts if t.get_text().endswith("%"))
        self.assertEqual(["+1%", "+2%", "+3%"], drawn_errors)
        for label, error in (("allreduce (ring)", "+1%"), ("ps (collective)", "+2%"), ("ps (p2p)", "+3%")):
            self.assertIn(f"{label} p=2: {error}", fig.caption)
        self.assertNotIn("p=4:", fig.caption)  # (the crossover sentence says "from p=4")
        self.assertIn("3 more measured points", fig.caption)
        self.assertIn("strong scaling", drawn["projection"]._suptitle.get_text())

    def test_projection_draws_the_simulation_dashed_and_its_findings_in_the_caption(self):
        proj = simulated_projection_fixture()
        expected = {}  # mode: [(world size, simulated ms)], the points that have one
        for p in sorted(proj["points"], key=lambda p: p["world_size"]):
            if "simulated_step_s" in p["simulation"]:
                expected.setdefault(p["curve"], []).append((p["world_size"], 1e3 * p["simulation"]["simulated_step_s"]))
        self.assertEqual([1, 2], [x for x, _ in expected["allreduce"]])  # not simulated at 4 ranks
        with captured() as drawn:
            fig = figures.plot_projection(proj, self.tmp)
        left = drawn["projection"].axes[0]
        solid = {line.get_label(): line.get_color() for line in left.get_lines() if line.get_linestyle() == "-"}
        dashed = dashed_lines(left)
        self.assertEqual(2, len(dashed))
        for mode, label in (("ps_p2p", "ps (p2p)"), ("allreduce", "allreduce (ring)")):
            match = [d for d in dashed if len(d[1]) == len(expected[mode])
                     and all(abs(y - ms) < 1e-9 and x == w for (w, ms), x, y in zip(expected[mode], d[1], d[2]))]
            self.assertEqual(1, len(match), f"{mode}: no dashed line through its simulated step times")
            self.assertEqual(solid[label], match[0][0], f"{mode}: the dashed line has the mode's colour")
        self.assertEqual(1, legend_texts(left).count("simulated (SimGrid), dashed"))
        self.assertIn("SimGrid simulation", drawn["projection"]._suptitle.get_text())
        texts = [f["text"] for f in proj["findings"]]
        for text in texts:
            self.assertIn(text, fig.caption)
        self.assertLess(fig.caption.index(texts[0]), fig.caption.index(texts[1]))
        self.assertIn("Dashed lines: SimGrid's simulation of each mode's message schedule", fig.caption)
        self.assertIn("preset fixture-preset", fig.caption)
        self.assertIn("allreduce (ring) p=4: SimGrid gave up", fig.caption)

    def test_projection_without_simulation_draws_no_dashed_line(self):
        with captured() as drawn:
            fig = figures.plot_projection(projection_fixture(), self.tmp)
        left = drawn["projection"].axes[0]
        self.assertEqual([], dashed_lines(left))
        self.assertNotIn("simulated (SimGrid), dashed", legend_texts(left))
        self.assertTrue(drawn["projection"]._suptitle.get_text().startswith("Alpha-beta projection ("))
        self.assertNotIn("Dashed lines", fig.caption)

    def test_load_projection_checks_the_findings(self):
        good = simulated_projection_fixture()
        loaded = report_data.load_projection(write_json(self.tmp / "good.json", good))
        self.assertEqual(good["findings"], loaded["findings"])
        bad = (({"text": "one"}, "findings is not a list"), ([{"text": "one"}, "two"], "findings[1]"),
               ([{"kind": "nic_saturation"}], "findings[0]"), ([{"text": "one"}, {"text": 3}], "findings[1]"))
        for i, (findings, said) in enumerate(bad):
            path = write_json(self.tmp / f"bad-{i}.json", dict(good, findings=findings))
            with self.assertRaises(report_data.InputError) as raised:
                report_data.load_projection(path)
            self.assertIn(path.name, str(raised.exception))
            self.assertIn(said, str(raised.exception))

    def test_overlap_only_for_strategies_that_overlap_and_beyond_one_rank(self):
        doc = ordered_sweep()
        write_json(self.tmp / "r.json", doc)
        hidden = expected_hidden_ms(doc)
        self.assertEqual({("allreduce (ring)", 2), ("allreduce (ring)", 4), ("sharded_ps (collective)", 2),
                          ("sharded_ps (collective)", 4)}, set(hidden))
        # one_bucket measured comm beyond its exposed part, at every rank count, but cannot overlap.
        self.assertTrue(all(phase(runs, "comm") > phase(runs, "comm_exposed")
                            for (label, _, _, _), runs in grid(doc).items() if label == "one_bucket (ring)"))
        _, drawn, _ = draw_all([self.tmp / "r.json"], self.tmp)
        ax = drawn["step_breakdown"].axes[0]
        hatched = sorted(p.get_height() for p in ax.patches if p.get_hatch() and p.get_height() > 0)
        self.assertEqual(len(hidden), len(hatched))
        for want, got in zip(sorted(hidden.values()), hatched):
            self.assertAlmostEqual(want, got, places=9)

    def test_ten_lines_each_in_the_legend_with_its_spread(self):
        doc = ten_line_sweep()
        write_json(self.tmp / "r.json", doc)
        figs, drawn, _ = draw_all([self.tmp / "r.json"], self.tmp)
        ax = drawn["throughput_vs_world_size"].axes[0]
        expected = [f"{label}, batch {batch}" for label in expected_order(doc) for batch in (64, 256)]
        self.assertEqual(10, len(expected))
        self.assertEqual(expected, legend_texts(ax))
        ranges = errorbar_ranges(ax)
        self.assertEqual(expected, list(ranges))
        for (label, world, batch, _), runs in grid(doc).items():
            tps = [r["throughput_samples_per_s"] for r in runs]
            _, low, high = ranges[f"{label}, batch {batch}"][[1, 2, 4, 8].index(world)]
            self.assertAlmostEqual(min(tps), low, places=6)
            self.assertAlmostEqual(max(tps), high, places=6)

    def test_legend_keeps_the_order_when_only_some_lines_have_a_spread(self):
        # ps measured once, the others three times: matplotlib alone would list ps's plain line
        # first for the wrong reason, and an error-bar line drawn before it after it.
        doc = ordered_sweep()
        doc["runs"] = [r for r in doc["runs"] if r.get("status") == "failed" or r["mode"] != "allreduce"
                       or r.get("repetition") == 0]
        write_json(self.tmp / "r.json", doc)
        self.assertEqual({1}, {len(runs) for (label, _, _, _), runs in grid(doc).items() if label == "allreduce (ring)"})
        _, drawn, _ = draw_all([self.tmp / "r.json"], self.tmp)
        ax = drawn["throughput_vs_world_size"].axes[0]
        self.assertEqual(expected_order(doc), legend_texts(ax))
        self.assertEqual([label for label in expected_order(doc) if label != "allreduce (ring)"],
                         list(errorbar_ranges(ax)))

    def test_workers_and_batch_figures_draw_the_spread(self):
        runs = []
        for batch in (64, 256):
            for workers in (0, 2):
                for rep, noise in enumerate((0.9, 1.0, 1.2)):
                    runs.append(make_run("allreduce", 2, batch, workers, 2000.0 * batch / 64 * noise, repetition=rep))
                    runs.append(make_run("ps", 2, batch, workers, 1500.0 * batch / 64 * noise, repetition=rep))
        doc = document(runs)
        write_json(self.tmp / "r.json", doc)
        figs, drawn, _ = draw_all([self.tmp / "r.json"], self.tmp)
        # The workers figure shows the largest batch (256); the batch figure the fewest workers (0).
        for key, held, varied in (("workers", (2, 256), 3), ("batch_size", (3, 0), 2)):
            ranges = errorbar_ranges(drawn[key].axes[0])
            self.assertEqual(["ps (collective)", "allreduce (ring)"], list(ranges), key)
            for label, bars in ranges.items():
                want = sorted((k[varied], min(r["throughput_samples_per_s"] for r in rs),
                               max(r["throughput_samples_per_s"] for r in rs))
                              for k, rs in grid(doc).items() if k[0] == label and k[held[0]] == held[1])
                self.assertEqual(2, len(want))
                self.assertEqual(len(want), len(bars), key)
                for (_, lo, hi), (_, low, high) in zip(want, bars):
                    self.assertAlmostEqual(lo, low, places=6)
                    self.assertAlmostEqual(hi, high, places=6)
            self.assertIn("medians over 3 repetitions", figs[key].caption)

    def test_single_measurements_and_missing_fields_still_report(self):
        doc = json.loads(SWEEP.read_text())
        once = copy.deepcopy(doc)
        once["runs"] = [r for r in once["runs"] if r["repetition"] == 0]
        md = self.report(once, "once.json")
        self.assertIn("Each point was measured once, so no spread is drawn.", caption(md, "throughput_vs_world_size"))
        _, drawn, _ = draw_all([self.tmp / "once.json"], self.tmp)
        self.assertEqual({}, errorbar_ranges(drawn["throughput_vs_world_size"].axes[0]))
        self.assertEqual({}, errorbar_ranges(drawn["step_breakdown"].axes[0]))
        bare = copy.deepcopy(doc)
        for run in bare["runs"]:
            for key in ("strategy", "repetition", "status", "quality", "stall_ratio_p90_p50"):
                run.pop(key, None)
            run["phases_s"].pop("comm")
            for q in ("p10", "p90", "p99"):
                run["step_time_s"].pop(q)
        md = self.report(bare, "bare.json")
        out = self.tmp / "out"
        for key in ("throughput_vs_world_size", "memory_per_rank", "step_breakdown"):
            self.assertTrue((out / f"{key}.png").is_file(), key)
        self.assertIn("(no bar here meets that)", caption(md, "step_breakdown"))
        self.assertRegex(md, r"\| ps \| collective \| 2 \| 256 \| 0 \| 3 \| [\d,]+ \| [\d.]+ / - \|")


if __name__ == "__main__":
    unittest.main()
