"""Tests of the report's emulated-cluster section (plots/report.py, report_data.py, figures.py).

Run from the repository root:  /usr/bin/python3 -m unittest -v tests/python/test_report_network.py

For: a report built from tests/python/data/netsweep-2-4-nodes-100mbit-1gbit.json, a real
`dpbench sweep --nodes 2,4 --links 100mbit,1gbit` file (ps, sharded_ps and allreduce on 2 and 4
emulated nodes at 100 Mbit/s and 1 Gbit/s; per-step losses stripped). It must draw throughput
against link rate and against node count, as PNG files and embedded in the HTML; its network
verdict must state the ratios to ps recomputed here from the JSON, name crossovers (or say there
are none), and the captions must give the projection's error range recomputed from the JSON.
Files without cluster runs must get no network section and no network figure.
Not for: the figures of ordinary runs (test_report.py) or the compare gate (test_compare.py).
"""
from __future__ import annotations

import base64
import copy
import html
import html.parser
import json
import re
import shutil
import subprocess
import sys
import tempfile
import unittest
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
REPORT = ROOT / "plots" / "report.py"
SCHEMA = ROOT / "results" / "schema" / "dpbench-result.schema.json"
NETSWEEP = ROOT / "tests" / "python" / "data" / "netsweep-2-4-nodes-100mbit-1gbit.json"
BASELINE = ROOT / "results" / "baselines" / "ci-sweep.json"
CHROMIUM = Path("/usr/bin/chromium")
PNG_MAGIC = b"\x89PNG\r\n\x1a\n"
NETWORK_FIGURES = {"network_vs_link": "Throughput against link rate",
                   "network_vs_nodes": "Throughput against node count"}
RATE_TEXT = {"100mbit": "100 Mbit/s", "1gbit": "1 Gbit/s"}

sys.path.insert(0, str(ROOT / "plots"))
import report_data  # noqa: E402


def run_report(out: Path, results: list) -> subprocess.CompletedProcess:
    """Runs plots/report.py as a user would."""
    return subprocess.run([sys.executable, str(REPORT), *map(str, results), "-o", str(out)],
                          capture_output=True, text=True, timeout=300)


def write_json(path: Path, doc: dict) -> Path:
    """Writes doc to path and returns the path."""
    path.write_text(json.dumps(doc))
    return path


class Images(html.parser.HTMLParser):
    """Collects the src of every <img>, by its alt text."""

    def __init__(self):
        super().__init__()
        self.images = {}

    def handle_starttag(self, tag, attrs):
        if tag == "img":
            attrs = dict(attrs)
            self.images[attrs.get("alt")] = attrs.get("src", "")


def expected_throughput(doc: dict) -> dict:
    """{(nodes, link): {mode: throughput_samples_per_s}} straight from the JSON (one repetition
    per point in the fixture)."""
    out: dict = {}
    for run in doc["runs"]:
        point = (run["cluster"]["nodes"], run["cluster"]["link"])
        assert run["mode"] not in out.get(point, {}), "the fixture has one repetition per point"
        out.setdefault(point, {})[run["mode"]] = run["throughput_samples_per_s"]
    return out


def expected_ratios(doc: dict) -> dict:
    """{(nodes, link, mode): throughput / ps's throughput} of every non-ps run in the JSON."""
    return {(nodes, link, mode): tp / tps["ps"]
            for (nodes, link), tps in expected_throughput(doc).items()
            for mode, tp in tps.items() if mode != "ps"}


def stated_ratios(text: str, by: str) -> dict:
    """The ratios a verdict text states, parsed back: {(nodes, link text, mode): "3.01"}.

    by "nodes": sentences "At 4 nodes, allreduce beats ps by 3.01x at 100 Mbit/s and by ...";
    by "link": sentences "At 100 Mbit/s, allreduce beats ps by 2.13x at 2 nodes and by ...".
    """
    out = {}
    for where, body in re.findall(r"At (\d+ nodes|[\d.]+ [kMGT]?bit/s), (.*?)\.(?= |$)", text):
        for clause in body.split("; "):
            mode, values = re.fullmatch(r"(\w+) beats ps by (.*)", clause).groups()
            for ratio, at in re.findall(r"([\d.]+)x at (\d+ nodes|[\d.]+ [kMGT]?bit/s)", values):
                nodes, link = (where, at) if by == "nodes" else (at, where)
                out[(int(nodes.split()[0]), link, mode)] = ratio
    return out


class NetworkReportTest(unittest.TestCase):
    """One report from the real emulated-cluster sweep, shared by the tests."""

    @classmethod
    def setUpClass(cls):
        cls.tmp = Path(tempfile.mkdtemp(prefix="dpbench-report-network-test-"))
        cls.doc = json.loads(NETSWEEP.read_text())
        cls.out = cls.tmp / "report"
        cls.proc = run_report(cls.out, [NETSWEEP])
        cls.md = (cls.out / "report.md").read_text() if cls.proc.returncode == 0 else ""
        cls.html = (cls.out / "report.html").read_text() if cls.proc.returncode == 0 else ""

    @classmethod
    def tearDownClass(cls):
        shutil.rmtree(cls.tmp, ignore_errors=True)

    def setUp(self):
        self.assertEqual(0, self.proc.returncode, self.proc.stderr)

    def paragraph(self) -> str:
        """The network verdict paragraph of report.md."""
        self.assertIn("## Emulated cluster", self.md)
        section = self.md.split("## Emulated cluster")[1].split("\n## ")[0]
        return section.strip().split("\n\n")[0]

    def caption(self, key: str) -> str:
        """The Markdown caption under figure `key`."""
        after = self.md.split(f"]({key}.png)")[1]
        return re.search(r"^\*(.*)\*$", after, re.M).group(1)

    def test_fixture_is_schema_valid(self):
        # The fixture is a version-1 file: valid as results/validate.py reads it, under version 2's
        # names (results/schema_versions.py).
        import jsonschema
        import schema_versions
        errors = list(jsonschema.Draft202012Validator(json.loads(SCHEMA.read_text()))
                      .iter_errors(schema_versions.upgrade(self.doc)))
        self.assertEqual([], [f"{'/'.join(map(str, e.path))}: {e.message}" for e in errors[:3]])

    def test_network_figures_are_files_and_embedded(self):
        parser = Images()
        parser.feed(self.html)
        for key, title in NETWORK_FIGURES.items():
            path = self.out / f"{key}.png"
            self.assertTrue(path.is_file(), f"{path} missing")
            data = path.read_bytes()
            self.assertTrue(data.startswith(PNG_MAGIC), f"{path} is not a PNG")
            self.assertGreater(len(data), 20000, f"{path} is suspiciously small")
            self.assertIn(f"![{title}]({key}.png)", self.md)
            src = parser.images.get(title, "")
            self.assertTrue(src.startswith("data:image/png;base64,"), src[:80])
            self.assertEqual(data, base64.b64decode(src.split(",", 1)[1], validate=True),
                             f"the HTML must embed {key}.png itself")
        # Drawn first, before the figures every report has.
        self.assertLess(self.md.index("(network_vs_nodes.png)"), self.md.index("(throughput_vs_world_size.png)"))
        self.assertLess(self.md.index("(network_vs_link.png)"), self.md.index("(network_vs_nodes.png)"))

    def test_verdict_states_the_ratios_of_the_json(self):
        expected = {(n, RATE_TEXT[link], mode): f"{r:.2f}" for (n, link, mode), r in expected_ratios(self.doc).items()}
        self.assertEqual(8, len(expected))  # sharded_ps and allreduce at 2 x 2 points
        self.assertTrue(all(float(r) > 1 for r in expected.values()), "the sentences below say 'beats'")
        paragraph = self.paragraph()
        self.assertEqual(expected, stated_ratios(paragraph, "nodes"), paragraph)
        in_html = re.search(r'<p id="network-verdict">(.*?)</p>', self.html, re.S)
        self.assertIsNotNone(in_html, "the HTML has no network verdict paragraph")
        self.assertEqual(paragraph, html.unescape(in_html.group(1)))
        # The same numbers in the records the report is built from.
        net = report_data.compute_network_verdict(report_data.load_results([NETSWEEP]).network)
        ratios = {(n, report_data.rate_text(rate), net.names[label]): r
                  for (n, rate), by_label in net.ratios.items() for label, r in by_label.items()}
        self.assertEqual(set(expected), set(ratios))
        for key, r in expected_ratios(self.doc).items():
            self.assertAlmostEqual(r, ratios[(key[0], RATE_TEXT[key[1]], key[2])], places=12)

    def test_verdict_names_the_order_or_the_crossovers(self):
        orders = {tuple(sorted(tps, key=lambda m: -tps[m])) for tps in expected_throughput(self.doc).values()}
        paragraph = self.paragraph()
        if len(orders) == 1:
            (order,) = orders
            self.assertIn(f"No crossover measured: the order {' > '.join(order)} holds at every point "
                          "measured (2, 4 nodes; 100 Mbit/s, 1 Gbit/s).", paragraph)
        else:
            self.assertIn("Crossovers measured:", paragraph)

    def test_table_gives_throughput_and_ratio_per_point(self):
        section = self.md.split("## Emulated cluster")[1].split("\n## ")[0]
        self.assertIn("| nodes | link | ps | sharded_ps | allreduce | projection error |", section)
        for (nodes, link), tps in expected_throughput(self.doc).items():
            cells = [f"{tps['ps']:,.0f}"] + [f"{tps[m]:,.0f} ({tps[m] / tps['ps']:.2f}x)"
                                              for m in ("sharded_ps", "allreduce")]
            self.assertIn(f"| {nodes} | {RATE_TEXT[link]} | " + " | ".join(cells) + " |", section)

    def test_captions_quote_the_verdict_for_their_axis(self):
        expected = {(n, RATE_TEXT[link], mode): f"{r:.2f}" for (n, link, mode), r in expected_ratios(self.doc).items()}
        self.assertEqual(expected, stated_ratios(self.caption("network_vs_link"), "nodes"))
        self.assertEqual(expected, stated_ratios(self.caption("network_vs_nodes"), "link"))
        for key in NETWORK_FIGURES:
            self.assertIn("lines: the projection", self.caption(key))

    def test_captions_give_the_projection_error_range_of_the_json(self):
        errors = [run["network"]["projection"]["error"] for run in self.doc["runs"]]
        self.assertEqual(12, len(errors))
        text = (f"ranges from {100 * min(errors):+.1f}% to {100 * max(errors):+.1f}% over the "
                f"{len(errors)} runs")
        self.assertEqual("ranges from -20.9% to +5.5% over the 12 runs", text)  # the fixture's
        for key in NETWORK_FIGURES:
            self.assertIn(text, self.caption(key))
            figcaption = self.html.split(f'id="fig-{key}"')[1].split("</figcaption>")[0]
            self.assertIn(text, html.unescape(figcaption.split("<figcaption>")[1]))
        self.assertIn(text, self.paragraph())

    def test_run_table_keeps_the_links_apart(self):
        runs_md = self.md.split("## Runs")[1].split("## Figures")[0]
        rows = [line for line in runs_md.splitlines() if re.match(r"\| (ps|sharded_ps|allreduce) \|", line)]
        self.assertEqual(12, len(rows), "one row per (mode, nodes, link): links are not aggregated")
        self.assertEqual(6, sum("| link=100mbit |" in r for r in rows))
        self.assertEqual(6, sum("| link=1gbit |" in r for r in rows))

    @unittest.skipUnless(CHROMIUM.exists(), "needs /usr/bin/chromium (apt-get install -y chromium)")
    def test_chromium_loads_every_image(self):
        with tempfile.TemporaryDirectory() as profile, tempfile.TemporaryDirectory() as alone:
            page = Path(alone) / "report.html"
            shutil.copyfile(self.out / "report.html", page)
            proc = subprocess.run(
                [str(CHROMIUM), "--headless", "--no-sandbox", "--disable-gpu", "--no-first-run",
                 "--disable-background-networking", "--disable-component-update", "--disable-sync",
                 f"--user-data-dir={profile}", "--virtual-time-budget=10000", "--dump-dom", page.as_uri()],
                capture_output=True, text=True, timeout=180)
        self.assertEqual(0, proc.returncode, proc.stderr[-2000:])
        images = self.html.count("<img ")
        self.assertIn(f'data-images-loaded="{images}/{images}"', proc.stdout)


class NetworkVerdictTest(unittest.TestCase):
    """The verdict's crossovers and repetitions, from edited copies of the real sweep."""

    def setUp(self):
        self.tmp = Path(tempfile.mkdtemp(prefix="dpbench-network-verdict-test-"))
        self.doc = json.loads(NETSWEEP.read_text())

    def tearDown(self):
        shutil.rmtree(self.tmp, ignore_errors=True)

    def verdict(self, doc: dict):
        """The NetworkVerdict of doc."""
        results = report_data.load_results([write_json(self.tmp / "sweep.json", doc)])
        return report_data.compute_network_verdict(results.network)

    def run_of(self, doc: dict, mode: str, nodes: int, link: str) -> dict:
        """The run of `mode` at (nodes, link)."""
        return next(r for r in doc["runs"] if r["mode"] == mode and r["cluster"]["nodes"] == nodes
                    and r["cluster"]["link"] == link)

    def test_crossover_between_link_rates_and_node_counts_is_named(self):
        # ps at 2 nodes and 1 Gbit/s made 1.5x faster: it now beats sharded_ps there, but not at
        # 100 Mbit/s (2 nodes) nor at 4 nodes (1 Gbit/s).
        doc = copy.deepcopy(self.doc)
        self.run_of(doc, "ps", 2, "1gbit")["throughput_samples_per_s"] *= 1.5
        tp = {(m, n, link): self.run_of(doc, m, n, link)["throughput_samples_per_s"]
              for m in ("ps", "sharded_ps") for n in (2, 4) for link in ("100mbit", "1gbit")}
        low = tp["sharded_ps", 2, "100mbit"] / tp["ps", 2, "100mbit"]
        high = tp["sharded_ps", 2, "1gbit"] / tp["ps", 2, "1gbit"]
        wide = tp["sharded_ps", 4, "1gbit"] / tp["ps", 4, "1gbit"]
        self.assertGreater(low, 1)
        self.assertLess(high, 1)
        self.assertGreater(wide, 1)
        net = self.verdict(doc)
        self.assertIn(f"at 2 nodes, sharded_ps/ps goes from {low:.2f}x at 100 Mbit/s to {high:.2f}x at "
                      "1 Gbit/s: a crossover between 100 Mbit/s and 1 Gbit/s", net.link_crossovers)
        self.assertIn(f"at 1 Gbit/s, sharded_ps/ps goes from {high:.2f}x at 2 nodes to {wide:.2f}x at "
                      "4 nodes: a crossover between 2 nodes and 4 nodes", net.node_crossovers)
        self.assertTrue(net.crossover_text.startswith("Crossovers measured: "), net.crossover_text)
        self.assertIn(net.crossover_text, net.paragraph)
        self.assertNotIn("No crossover", net.paragraph)
        # Where sharded_ps does not lead everywhere, its ratios are stated as reached, not beaten.
        self.assertIn(f"sharded_ps reaches {low:.2f}x ps's throughput at 100 Mbit/s and {high:.2f}x at 1 Gbit/s",
                      net.link_sentences[2])
        # allreduce still beats ps everywhere: no crossover of theirs is named.
        self.assertFalse([c for c in net.link_crossovers + net.node_crossovers if "allreduce/ps" in c])

    def test_other_settings_of_the_sweep_get_their_own_crossover_sentence(self):
        # The sweep again under another config value (as --zipf-alphas gives each its own
        # dlrm.zipf_alpha), ps 3x faster there: a separate experiment, not more repetitions; the
        # verdict keeps its slice and names the other one's order, with what sets it apart.
        doc = copy.deepcopy(self.doc)
        for run in self.doc["runs"]:
            run = copy.deepcopy(run)
            run["config"]["dlrm"] = {"zipf_alpha": 1.3}
            if run["mode"] == "ps":
                run["throughput_samples_per_s"] *= 3
            doc["runs"].append(run)
        for run in doc["runs"][:len(self.doc["runs"])]:
            run["config"]["dlrm"] = {"zipf_alpha": 0.0}
        net = self.verdict(doc)
        self.assertEqual(1, len({p.variant for p in net.points}))
        self.assertEqual(1, len(net.other_settings), net.other_settings)
        other = net.other_settings[0]
        self.assertTrue(other.startswith("with dlrm.zipf_alpha "), other)
        self.assertIn(other, net.paragraph)
        self.assertIn("the sweep's other settings", net.crossover_text)
        # Each slice's points are its own runs: ps's throughputs differ by the factor 3 point by point.
        main = {(p.nodes, p.link): p.throughput for p in net.points if p.mode == "ps"}
        others = {(p.nodes, p.link): p.throughput
                  for p in report_data.load_results([write_json(self.tmp / "sweep.json", doc)]).network
                  if p.variant != net.points[0].variant and p.mode == "ps"}
        self.assertEqual(set(main), set(others))
        for at, tp in others.items():
            self.assertAlmostEqual(3.0, max(tp, main[at]) / min(tp, main[at]), places=6)

    def test_comm_hooks_are_series_of_one_experiment(self):
        # A sweep over --comm-hooks: the allreduce runs again under fp16, 2x faster. Each hook is
        # a series of its own (the label names it), in the same experiment (variant) as the plain
        # hook, so the figures against link rate and node count draw them side by side.
        doc = copy.deepcopy(self.doc)
        for run in [r for r in self.doc["runs"] if r["mode"] == "allreduce"]:
            hooked = copy.deepcopy(run)
            hooked["config"]["comm_hook"] = "fp16"
            hooked["strategy"]["label"] = "allreduce (ring, fp16)"  # as dpbench records it
            hooked["throughput_samples_per_s"] *= 2
            doc["runs"].append(hooked)
        net = self.verdict(doc)
        allreduce = [p for p in net.points if p.mode == "allreduce"]
        self.assertEqual({"allreduce (ring)", "allreduce (ring, fp16)"}, {p.label for p in allreduce})
        self.assertEqual(1, len({p.variant for p in allreduce}))
        plain = next(p for p in allreduce if p.label == "allreduce (ring)" and p.nodes == 4 and p.link == "100mbit")
        fp16 = next(p for p in allreduce if p.label != plain.label and p.nodes == 4 and p.link == "100mbit")
        self.assertAlmostEqual(2 * plain.throughput, fp16.throughput)

    def test_a_straggler_link_is_named_in_the_setting(self):
        # A sweep with --link-of 1=10mbit: every run's cluster block lists node 1 at its own rate.
        doc = copy.deepcopy(self.doc)
        for run in doc["runs"]:
            block = run["cluster"]
            bits = {"100mbit": 1e8, "1gbit": 1e9}[block["link"]]
            block["links"] = [{"node": n, "requested_bits_per_s": 1e7 if n == 1 else bits}
                              for n in range(block["nodes"])]
        self.assertIn("node 1's link at 10 Mbit/s", self.verdict(doc).setting)
        self.assertNotIn("link at", self.verdict(self.doc).setting)

    def test_time_to_target_loss_counts_steps_at_the_measured_step_time(self):
        # Every run falls 0.1 per step from 2.0; sharded_ps at half that pace. On the trailing
        # 5-step mean, sharded_ps ends highest: that is the target, which it reaches at its last
        # step and the others where their mean first gets there.
        doc = copy.deepcopy(self.doc)
        for run in doc["runs"]:
            pace = 0.05 if run["mode"] == "sharded_ps" else 0.1
            run["quality"]["step_train_loss"] = [2.0 - pace * i for i in range(12)]
        net = self.verdict(doc)
        means = report_data.trailing_mean(tuple(2.0 - 0.05 * i for i in range(12)))
        self.assertAlmostEqual(means[-1], net.target_loss)
        plain = report_data.trailing_mean(tuple(2.0 - 0.1 * i for i in range(12)))
        steps = next(i + 1 for i, m in enumerate(plain) if m <= net.target_loss)
        self.assertLess(steps, 12)
        for p in net.points:
            got_steps, seconds = net.time_to_target[(p.nodes, p.link_bits_per_s)][p.label]
            self.assertEqual(12 if p.mode == "sharded_ps" else steps, got_steps, p.label)
            self.assertAlmostEqual(got_steps * p.measured_step_s, seconds)
        # The report prints the table, the target and a bold fastest per row.
        out = self.tmp / "report"
        proc = run_report(out, [write_json(self.tmp / "losses.json", doc)])
        self.assertEqual(0, proc.returncode, proc.stderr)
        md = (out / "report.md").read_text()
        self.assertIn(f"Time to the training loss every run that learned reached ({net.target_loss:.4f}", md)
        self.assertIn(f"| 2 | 100 Mbit/s |", md)
        self.assertIn("12 steps, ", md)
        # A run that diverged (a stale sharded_ps with momentum) does not set the target, however
        # high its last mean: it is "not reached", and the others keep their steps.
        diverged = copy.deepcopy(doc)
        for run in diverged["runs"]:
            if run["mode"] == "sharded_ps":
                run["quality"]["step_train_loss"] = [2.0 + 3.0 * i for i in range(12)]
        net = self.verdict(diverged)
        self.assertAlmostEqual(plain[-1], net.target_loss)
        for p in net.points:
            got = net.time_to_target[(p.nodes, p.link_bits_per_s)][p.label]
            if p.mode == "sharded_ps":
                self.assertIsNone(got, p.label)
            else:
                self.assertEqual(12, got[0], p.label)
        proc = run_report(out, [write_json(self.tmp / "diverged.json", diverged)])
        self.assertEqual(0, proc.returncode, proc.stderr)
        md = (out / "report.md").read_text()
        self.assertIn("not reached", md)
        self.assertIn("; not reached: sharded_ps", md)  # the sentence under the table names it
        # A run without per-step losses leaves the table out.
        del doc["runs"][0]["quality"]["step_train_loss"]
        self.assertIsNone(self.verdict(doc).target_loss)

    def test_repetitions_aggregate_to_median_with_min_and_max(self):
        doc = copy.deepcopy(self.doc)
        extra = []
        for rep, factor in ((1, 0.8), (2, 1.3)):
            for run in self.doc["runs"]:
                copy_run = copy.deepcopy(run)
                copy_run["repetition"] = rep
                copy_run["throughput_samples_per_s"] *= factor
                copy_run["network"]["projection"]["error"] += 0.5 * rep
                extra.append(copy_run)
        doc["runs"] += extra
        net = self.verdict(doc)
        point = next(p for p in net.points if p.mode == "allreduce" and p.nodes == 4 and p.link == "100mbit")
        base = self.run_of(self.doc, "allreduce", 4, "100mbit")["throughput_samples_per_s"]
        self.assertEqual(3, point.repetitions)
        self.assertAlmostEqual(base, point.throughput)
        self.assertAlmostEqual(0.8 * base, point.throughput_min)
        self.assertAlmostEqual(1.3 * base, point.throughput_max)
        errors = [r["network"]["projection"]["error"] for r in doc["runs"]]
        self.assertEqual((min(errors), max(errors)), net.error_range)
        self.assertEqual(36, net.error_count)
        out = self.tmp / "out"
        proc = run_report(out, [self.tmp / "sweep.json"])
        self.assertEqual(0, proc.returncode, proc.stderr)
        self.assertIn("bars from min to max", (out / "report.md").read_text())

    def test_simulation_figure_draws_the_three_step_times_and_their_errors(self):
        # The fixture predates the simulation: each run gets one, simulated = measured x a factor
        # that differs per run, so the caption's median and largest error must come from the JSON.
        doc = copy.deepcopy(self.doc)
        errors = []
        for i, run in enumerate(doc["runs"]):
            measured = run["network"]["projection"]["measured_step_s"]
            factor = 1 + 0.01 * ((i * 7) % 13 - 6)
            run["network"]["simulation"] = {"simulated_step_s": measured * factor, "error": factor - 1,
                                            "engine": "gloo", "simulator": {}, "platform": {}}
            errors.append(abs(factor - 1))
        errors.sort()
        out = self.tmp / "out"
        proc = run_report(out, [write_json(self.tmp / "simulated.json", doc)])
        self.assertEqual(0, proc.returncode, proc.stderr)
        md = (out / "report.md").read_text()
        path = out / "network_simulation.png"
        self.assertTrue(path.is_file() and path.read_bytes().startswith(PNG_MAGIC))
        self.assertIn("![Step time: measured, simulated, alpha-beta](network_simulation.png)", md)
        after = md.split("](network_simulation.png)")[1]
        caption = re.search(r"^\*(.*)\*$", after, re.M).group(1)
        self.assertIn(f"simulated: median |error| {100 * errors[len(errors) // 2]:.1f}%, largest "
                      f"{100 * errors[-1]:.1f}% over {len(errors)} points", caption)
        alpha_beta = sorted(abs(r["network"]["projection"]["projected_step_s"] /
                                r["network"]["projection"]["measured_step_s"] - 1) for r in doc["runs"])
        self.assertIn(f"alpha-beta: median |error| {100 * alpha_beta[len(alpha_beta) // 2]:.1f}%", caption)
        # Without any simulation in the files, a sentence says what to build.
        plain = self.tmp / "plain"
        proc = run_report(plain, [write_json(self.tmp / "plain.json", self.doc)])
        self.assertEqual(0, proc.returncode, proc.stderr)
        self.assertFalse((plain / "network_simulation.png").exists())
        self.assertIn("> Not drawn: The simulated step needs emulated-cluster runs of a dpbench built with SimGrid",
                      (plain / "report.md").read_text())

    def test_one_link_rate_leaves_the_link_figure_a_sentence(self):
        doc = copy.deepcopy(self.doc)
        doc["runs"] = [r for r in doc["runs"] if r["cluster"]["link"] == "1gbit"]
        out = self.tmp / "out"
        proc = run_report(out, [write_json(self.tmp / "one-link.json", doc)])
        self.assertEqual(0, proc.returncode, proc.stderr)
        md = (out / "report.md").read_text()
        self.assertFalse((out / "network_vs_link.png").exists())
        self.assertTrue((out / "network_vs_nodes.png").is_file())
        self.assertIn("> Not drawn: Throughput against link rate needs two or more link rates", md)

    def test_failed_points_are_listed_with_their_cluster_point(self):
        # As `dpbench sweep --nodes --links` writes a point whose run failed: one entry per mode.
        doc = copy.deepcopy(self.doc)
        for mode in ("ps", "sharded_ps", "allreduce"):
            doc["runs"].append({"status": "failed", "mode": mode, "world_size": 8, "global_batch": 256,
                                "repetition": 0, "cluster": {"nodes": 8, "ranks_per_node": 1, "link": "10mbit"},
                                "error": "fixture: node 5 did not come up"})
        out = self.tmp / "out"
        proc = run_report(out, [write_json(self.tmp / "failed.json", doc)])
        self.assertEqual(0, proc.returncode, proc.stderr)
        failed_md = (out / "report.md").read_text().split("## Failed points")[1].split("\n## ")[0]
        rows = [line for line in failed_md.splitlines() if "fixture: node 5" in line]
        self.assertEqual(3, len(rows), failed_md)
        self.assertTrue(all("| 8 (8 nodes, 10mbit) | 256 |" in row for row in rows), rows)
        self.assertEqual(12, len(self.verdict(doc).points), "failed points are not plotted")


class NoClusterTest(unittest.TestCase):
    """A file without cluster runs (the committed CI sweep) gets no network section or figure,
    and a network figure left in the output directory by an earlier report is removed."""

    def test_no_network_section_or_figures(self):
        with tempfile.TemporaryDirectory() as tmp:
            out = Path(tmp) / "out"
            out.mkdir()
            (out / "network_vs_link.png").write_bytes(b"stale")
            self.assertEqual([], report_data.load_results([BASELINE]).network)
            proc = run_report(out, [BASELINE])
            self.assertEqual(0, proc.returncode, proc.stderr)
            md, page = (out / "report.md").read_text(), (out / "report.html").read_text()
            for key, title in NETWORK_FIGURES.items():
                self.assertFalse((out / f"{key}.png").exists(), key)
                self.assertNotIn(title, md)
                self.assertNotIn(title, page)
            self.assertNotIn("Emulated cluster", md)
            self.assertNotIn("network-verdict", page)


if __name__ == "__main__":
    unittest.main()
