#!/usr/bin/python3
"""Regression gate for dpbench result files: compares a BASE result (or sweep) file with a NEW one.

usage: /usr/bin/python3 results/compare.py BASE.json NEW.json [--noise-floor PCT]
           [--noise-cap PCT] [--accuracy-tol 0.005] [--timing ratio|mwu|none] [--markdown OUT.md]

What it is for: the CI gate of DESIGN.md ("Measurement rules"). Runs are matched by
(mode, transport, comm, device, workload, world_size, global_batch, num_workers, repetition)
and, for the runs of an emulated-cluster sweep (`dpbench sweep --nodes --links`, whose runs carry
a `cluster` block), by their cluster point (nodes, ranks_per_node, link) too: rows name it as
"4x100mbit". Runs without a cluster block are keyed as before.
Deterministic figures (parameter count, bytes sent and received per rank per step, per-rank
memory peaks and every memory category, step counts) must be equal: any difference is a
regression. Test accuracy may not drop by more than --accuracy-tol (absolute). Timings:
  ratio (default) only the throughput ratio of each strategy to the baseline strategy (ps, as
        each run's strategy traits say) measured inside ONE file is compared, so BASE and NEW
        may come from different machines (shared 2-core CI runners included);
  mwu   a one-sided Mann-Whitney U test of each run's step times, for files from the same machine;
  none  timings are skipped.
Each timing figure has a spread, the noise the files show for it: for a ratio, the larger of
its spread across repetitions ((max - min) / median, in either file) and the A/A difference of
the runs behind it (the medians of the even- and odd-indexed step samples of one run); for mwu,
the A/A difference of the run in either file. Its noise floor is the stated --noise-floor
(default 10 %), raised to REP_MULTIPLIER x its spread, and NEVER above --noise-cap (default
10 %). A figure whose spread is above the cap is not judged: it is listed as "too noisy to
judge" with its spread, counted apart, and neither passes nor fails. A judged figure that moves
beyond its floor in the bad direction is a regression. The gate can therefore always fail: a
ratio that falls by more than the cap, with a spread within the cap, is a regression.
A run missing from NEW, or failed in NEW while ok in BASE, is a regression; a run only in NEW is
reported as new. Prints a Markdown table of the figures that changed or could not be judged
(unchanged deterministic figures are counted, not listed) and a summary line. Exit status:
0 no regression, 1 at least one regression, 2 unreadable or non-dpbench input, or two files with
no runs in common (a different workload, say): one line on stderr naming the file or what
differs.

What it is not for: validating a file against the JSON Schema (results/validate.py does that),
judging absolute speed across different machines, or plotting and reporting (plots/, dpbench
report). The statistics come from scipy and the standard library: run it with Debian's
/usr/bin/python3 (python3-scipy); without scipy only --timing mwu is refused.
"""
import argparse
import dataclasses
import json
import math
import pathlib
import statistics
import sys

import schema_versions
from strategy_traits import run_traits


def load_mannwhitneyu():
    """scipy's one-sided Mann-Whitney U, or None without scipy. Imported on first use: only
    --timing mwu needs it, and importing scipy.stats takes most of a gate run's 0.5 s."""
    try:
        from scipy.stats import mannwhitneyu
    except ImportError:      # main() says so in one line
        return None
    return mannwhitneyu


SCHEMA_NAME = schema_versions.RESULT_SCHEMA
SCHEMA_VERSION = schema_versions.CURRENT_VERSION[SCHEMA_NAME]  # version 1 is read too (upgrade_v1)
MEMORY_CATEGORIES = ("parameters", "gradients", "optimizer_state", "activations", "comm_buffers",
                     "data_staging")
KEY_FIELDS = ("mode", "transport", "comm", "device", "workload", "world_size", "global_batch",
              "num_workers", "repetition")
CLUSTER_FIELD = "cluster"  # the last element of a run key: (nodes, ranks_per_node, link) or None
MWU_ALPHA = 0.01
REP_MULTIPLIER = 2.0  # a figure's floor >= 2 x its spread, but never above the cap
DEFAULT_NOISE_FLOOR = 0.10
DEFAULT_NOISE_CAP = 0.10

REGRESSION = "REGRESSION"
TOO_NOISY = "too noisy to judge"


class InputError(Exception):
    """A file that cannot be compared: unreadable, not JSON, not a dpbench result, malformed."""


class NoRunsInCommon(InputError):
    """Two well-formed files of which no run key appears in both (e.g. MLP against CNN)."""


@dataclasses.dataclass
class Options:
    """Comparison settings; the defaults are the command line's (fractions: 0.10 is 10 %)."""
    noise_floor: float = DEFAULT_NOISE_FLOOR
    noise_cap: float = DEFAULT_NOISE_CAP
    accuracy_tol: float = 0.005
    timing: str = "ratio"


@dataclasses.dataclass
class Row:
    """One line of the table: a figure of one run (or run pair) that changed or was checked."""
    run: str
    figure: str
    base: str
    new: str
    change: str
    status: str

    @property
    def is_regression(self):
        """True when this row fails the gate."""
        return self.status == REGRESSION

    @property
    def is_too_noisy(self):
        """True when this timing figure was not judged because its spread is above the cap."""
        return self.status.startswith(TOO_NOISY)


@dataclasses.dataclass
class NoiseFloor:
    """The timing noise rule: the stated floor (already cut to the cap) and the cap."""
    stated: float
    cap: float
    requested: float

    @property
    def value(self):
        """The floor a figure with no measurable spread is judged with."""
        return self.stated

    def for_spread(self, spread):
        """Floor of one figure: the stated floor raised to REP_MULTIPLIER x spread, at most the
        cap; None when spread is above the cap (the figure is too noisy to judge)."""
        if spread is None:
            spread = 0.0
        if spread > self.cap:
            return None
        return min(self.cap, max(self.stated, REP_MULTIPLIER * spread))

    def describe(self):
        """One sentence: the floor, the cap and the too-noisy rule."""
        cut = f" (--noise-floor {pct(self.requested)} cut to the cap)" \
            if self.requested > self.cap else ""
        return (f"noise floor {pct(self.stated)}{cut}, raised to {REP_MULTIPLIER:g} x a figure's "
                f"spread but never above the cap of {pct(self.cap)} (--noise-cap); a figure "
                f"whose spread is above the cap is too noisy to judge")


def too_noisy_status(spread, source, cap):
    """Status of a figure that is not judged: its spread, where it was seen, and the cap."""
    return f"{TOO_NOISY}: spread {pct(spread)} ({source}) > cap {pct(cap)}"


@dataclasses.dataclass
class Report:
    """Result of compare(): the table rows, counts and notes."""
    base_label: str
    new_label: str
    timing: str
    rows: list = dataclasses.field(default_factory=list)
    compared: int = 0
    matched_runs: int = 0
    timing_judged: int = 0
    noise: NoiseFloor | None = None
    notes: list = dataclasses.field(default_factory=list)

    @property
    def regressions(self):
        """Rows that fail the gate."""
        return [r for r in self.rows if r.is_regression]

    @property
    def too_noisy(self):
        """Timing rows that were not judged (spread above the cap)."""
        return [r for r in self.rows if r.is_too_noisy]

    @property
    def exit_code(self):
        """1 if any regression, else 0 (too-noisy figures neither pass nor fail)."""
        return 1 if self.regressions else 0

    def summary(self):
        """The summary line: figures compared, regressions, too-noisy figures, the noise rule."""
        n_reg, n_noisy = len(self.regressions), len(self.too_noisy)
        head = (f"{self.compared} figures compared over {self.matched_runs} matched runs, "
                f"{n_reg} regression{'s' if n_reg != 1 else ''}")
        if n_noisy:
            head += (f"; {n_noisy} timing figure{'s' if n_noisy != 1 else ''} too noisy to "
                     f"judge (spread above the {pct(self.noise.cap)} cap), not counted")
        if self.timing == "none":
            return head + "; timings not compared (--timing none)."
        how = "throughput ratio to the baseline strategy within each file" \
            if self.timing == "ratio" else \
            "one-sided Mann-Whitney U on step times, p < 0.01"
        return f"{head}; timing: {how}; {self.noise.describe()}."

    def markdown(self):
        """The whole report as Markdown: title, summary, notes and the table."""
        out = [f"## dpbench compare: `{self.base_label}` -> `{self.new_label}`", "",
               f"**{self.summary()}**", ""]
        for note in self.notes:
            out.append(f"- {note}")
        if self.notes:
            out.append("")
        if not self.rows:
            out.append("No figure changed.")
        else:
            out.append("| run | figure | base | new | change | status |")
            out.append("|---|---|---|---|---|---|")
            for r in self.rows:
                cells = (r.run, r.figure, r.base, r.new, r.change, r.status)
                out.append("| " + " | ".join(_md_cell(c) for c in cells) + " |")
        return "\n".join(out) + "\n"


def _md_cell(text):
    """Escapes a table cell."""
    return str(text).replace("|", "\\|").replace("\n", " ")


def pct(x):
    """A fraction as a percentage string."""
    if x is None:
        return "n/a"
    if math.isinf(x):
        return "inf %"
    return f"{100.0 * x:.1f} %"


def fmt_num(x):
    """A figure for the table: integers exactly, floats with 4 significant digits."""
    if x is None:
        return "-"
    if isinstance(x, bool) or isinstance(x, int):
        return str(x)
    return f"{x:.4g}"


def fmt_delta(base, new):
    """Absolute and relative change of two numbers."""
    if base is None or new is None:
        return "-"
    d = new - base
    sign = "+" if d >= 0 else ""
    rel = f" ({sign}{100.0 * d / base:.2f} %)" if base else ""
    return f"{sign}{fmt_num(d)}{rel}"


# ---- loading ----------------------------------------------------------------------------

def load(path):
    """Reads and checks one result file, at SCHEMA_VERSION's names (a version-1 file through
    schema_versions.upgrade_v1); raises InputError naming the file."""
    try:
        text = pathlib.Path(path).read_text()
    except OSError as e:
        raise InputError(f"{path}: cannot read: {e.strerror or e}") from None
    except UnicodeDecodeError:
        raise InputError(f"{path}: not a dpbench result file (not UTF-8 text)") from None
    try:
        doc = json.loads(text)
    except json.JSONDecodeError as e:
        raise InputError(f"{path}: not a dpbench result file (invalid JSON: {e})") from None
    check_doc(doc, str(path))
    return schema_versions.upgrade(doc)


def check_doc(doc, label):
    """Checks the schema name and version (SCHEMA_VERSION, or one schema_versions.upgrade maps to
    it) and the fields the comparison reads."""
    if not isinstance(doc, dict) or not isinstance(doc.get("schema"), dict):
        raise InputError(f"{label}: not a dpbench result file (no schema object)")
    name, version = doc["schema"].get("name"), doc["schema"].get("version")
    if name != SCHEMA_NAME:
        raise InputError(f"{label}: not a dpbench result file (schema.name is {name!r}, "
                         f"expected {SCHEMA_NAME!r})")
    if not schema_versions.readable(name, version):
        raise InputError(f"{label}: schema version {version!r} is not supported "
                         f"(expected {schema_versions.versions_text(name)})")
    runs = doc.get("runs")
    if not isinstance(runs, list) or not runs:
        raise InputError(f"{label}: runs is missing or empty")
    for i, run in enumerate(runs):
        if not isinstance(run, dict):
            raise InputError(f"{label}: runs[{i}] is not an object")
        status = run.get("status", "ok")
        if status not in ("ok", "failed"):
            raise InputError(f"{label}: runs[{i}].status is {status!r} (expected ok or failed)")
        if status == "failed":
            continue
        for path in ("mode", "world_size", "global_batch", "num_params", "steps.total",
                     "steps.timed", "step_time_s.samples", "comm_bytes_per_step.per_rank",
                     "memory.per_rank", "quality"):
            _get(run, path, f"{label}: runs[{i}]")
        for entry in run["memory"]["per_rank"]:
            for cat in ("rank", "peak_bytes") + MEMORY_CATEGORIES:
                _get(entry, cat, f"{label}: runs[{i}].memory.per_rank[]")
        for entry in run["comm_bytes_per_step"]["per_rank"]:
            for f in ("rank", "sent", "received"):
                _get(entry, f, f"{label}: runs[{i}].comm_bytes_per_step.per_rank[]")


def _get(obj, dotted, where):
    """obj[a][b]... for 'a.b'; raises InputError naming where it is missing."""
    cur = obj
    for part in dotted.split("."):
        if not isinstance(cur, dict) or part not in cur:
            raise InputError(f"{where}: missing field {dotted}")
        cur = cur[part]
    return cur


# ---- run keys -----------------------------------------------------------------------------

def run_status(run):
    """'ok' or 'failed'; a run without status is ok."""
    return run.get("status", "ok")


def run_cluster(run):
    """The cluster point of a run of an emulated-cluster sweep, (nodes, ranks_per_node, link)
    from its `cluster` block (failed points carry it too); None for a run without one."""
    block = run.get("cluster")
    if not isinstance(block, dict):
        return None
    return (block.get("nodes"), block.get("ranks_per_node"), block.get("link"))


def cluster_text(cluster):
    """"4x100mbit" (4 nodes on 100mbit links), "4x100mbit 2/node" with 2 ranks per node; ""
    for None (a run that did not run on an emulated cluster)."""
    if cluster is None:
        return ""
    nodes, per_node, link = cluster
    return f"{nodes}x{link}" + (f" {per_node}/node" if per_node not in (None, 1) else "")


def run_key(run, doc=None):
    """The matching key of a run: a tuple of the KEY_FIELDS in order, then its cluster point
    (run_cluster: None for a run without a cluster block).

    Each field is read from the run, else from the run's config (failed runs carry only their
    config), else from the file's config. A run without a transport (a failed point) is keyed
    by its strategy's transport (its traits), which is what its ok runs report. A hook other
    than `allreduce`, the node hierarchy and a staleness bound join the transport ("ring, fp16,
    node hierarchy", "collective, staleness 2");
    files without them key as before.
    """
    cfg = run.get("config") if isinstance(run.get("config"), dict) else {}
    top = doc.get("config", {}) if isinstance(doc, dict) and isinstance(doc.get("config"), dict) \
        else {}

    def field(name, default=None):
        for src in (run, cfg, top):
            if name in src:
                return src[name]
        return default

    mode = field("mode")
    transport = run.get("transport")
    if transport is None:
        transport = run_traits(run, doc)["transport"]
    # Runs that differ only in allreduce's communication hook or in the node hierarchy (sweep
    # --comm-hooks, --hierarchies) are told apart as their labels tell them: "ring, fp16".
    variant = [] if field("comm_hook", "allreduce") == "allreduce" else [str(field("comm_hook"))]
    if field("hierarchy", "none") == "node":
        variant.append("node hierarchy")
    if (field("staleness", 0) or 0) > 0:
        variant.append(f"staleness {field('staleness')}")
    if variant:
        transport = ", ".join([str(transport)] + variant)
    num_workers = cfg.get("num_workers", run.get("num_workers", top.get("num_workers")))
    repetition = run.get("repetition", cfg.get("repetition", 0))
    return (mode, transport, field("comm"), field("device"), field("workload"),
            field("world_size"), field("global_batch"), num_workers, repetition, run_cluster(run))


def key_label(key, occurrence=0):
    """Short human name of a run key; a cluster point is named after the workers
    ("... w=0 4x100mbit rep=0")."""
    mode, transport, comm, device, workload, ws, gb, nw, rep, cluster = key
    where = f" {cluster_text(cluster)}" if cluster is not None else ""
    label = f"{mode}/{transport} {comm}/{device} {workload} p={ws} B={gb} w={nw}{where} rep={rep}"
    return label + (f" #{occurrence + 1}" if occurrence else "")


def index_runs(doc, label, notes):
    """Maps (key, occurrence) -> run; runs sharing a key are matched in file order."""
    out, seen = {}, {}
    for run in doc["runs"]:
        key = run_key(run, doc)
        occ = seen.get(key, 0)
        seen[key] = occ + 1
        out[(key, occ)] = run
    dups = [k for k, n in seen.items() if n > 1]
    if dups:
        notes.append(f"{label} has {len(dups)} run key(s) shared by several runs "
                     f"(e.g. {key_label(dups[0])}); they are matched in file order.")
    return out


# ---- deterministic figures ----------------------------------------------------------------

def deterministic_figures(run):
    """Ordered {figure name: value} of everything that must not change at a fixed seed."""
    figs = {"num_params": run["num_params"],
            "steps.total": run["steps"]["total"],
            "steps.timed": run["steps"]["timed"]}
    for e in sorted(run["comm_bytes_per_step"]["per_rank"], key=lambda e: e["rank"]):
        r = e["rank"]
        figs[f"comm_bytes_per_step.per_rank[{r}].sent"] = e["sent"]
        figs[f"comm_bytes_per_step.per_rank[{r}].received"] = e["received"]
    for e in sorted(run["memory"]["per_rank"], key=lambda e: e["rank"]):
        r = e["rank"]
        figs[f"memory.per_rank[{r}].peak_bytes"] = e["peak_bytes"]
        for cat in MEMORY_CATEGORIES:
            figs[f"memory.per_rank[{r}].{cat}"] = e[cat]
    return figs


def compare_deterministic(label, base_run, new_run, report):
    """Exact comparison; a figure present on one side only also counts as a change."""
    b, n = deterministic_figures(base_run), deterministic_figures(new_run)
    for name in list(b) + [k for k in n if k not in b]:
        report.compared += 1
        bv, nv = b.get(name), n.get(name)
        if bv == nv:
            continue
        change = fmt_delta(bv, nv) if bv is not None and nv is not None else \
            ("only in BASE" if nv is None else "only in NEW")
        report.rows.append(Row(label, name, fmt_num(bv), fmt_num(nv), change, REGRESSION))


def compare_accuracy(label, base_run, new_run, tol, report):
    """Test accuracy: a drop beyond tol is a regression, a rise is reported as improved."""
    bv = base_run["quality"].get("test_accuracy")
    nv = new_run["quality"].get("test_accuracy")
    report.compared += 1
    if bv == nv:
        return
    figure = "quality.test_accuracy"
    if bv is None or nv is None:
        status = REGRESSION if nv is None else "new figure"
        report.rows.append(Row(label, figure, fmt_num(bv), fmt_num(nv), "-", status))
        return
    delta = nv - bv
    if delta < -tol - 1e-12:
        status = REGRESSION
    elif delta > 0:
        status = "improved"
    else:
        status = f"within tolerance ({tol:g})"
    report.rows.append(Row(label, figure, f"{bv:.4f}", f"{nv:.4f}", f"{delta:+.4f}", status))


# ---- timing -------------------------------------------------------------------------------

def step_samples(run):
    """The timed step samples of an ok run (seconds), possibly empty."""
    if run_status(run) != "ok":
        return []
    return list(run.get("step_time_s", {}).get("samples", []))


def aa_difference(samples):
    """A/A noise of one run: relative difference of the medians of its interleaved halves.

    The samples at even and odd indices are two measurements of the same thing; the result is
    |median(even) - median(odd)| / min of the two. None with fewer than two samples.
    """
    if len(samples) < 2:
        return None
    a, b = statistics.median(samples[0::2]), statistics.median(samples[1::2])
    if a == b:
        return 0.0
    lo = min(a, b)
    return abs(a - b) / lo if lo > 0 else math.inf


def noise_rule(stated, cap):
    """The NoiseFloor of the given --noise-floor and --noise-cap (fractions): the stated floor is
    cut to the cap, so no floor ever exceeds it."""
    return NoiseFloor(stated=min(stated, cap), cap=cap, requested=stated)


def largest_spread(candidates):
    """(spread, where) of the largest of (spread or None, where) candidates; (0.0, None) when
    none is known."""
    known = [(s, w) for s, w in candidates if s is not None]
    return max(known, key=lambda c: c[0]) if known else (0.0, None)


def throughput(run):
    """Samples/s recomputed as global_batch / median(step samples); None without samples.

    This is how dpbench computes throughput_median_step_samples_per_s (and computed
    throughput_samples_per_s before that became the wall-time figure), so the two agree.
    """
    samples = step_samples(run)
    if not samples:
        return None
    med = statistics.median(samples)
    return run["global_batch"] / med if med > 0 else None


def mode_ratios(doc):
    """{(group, pair): [throughput ratio of each repetition]}: every other strategy's run
    over the baseline strategy's run (ps, by the runs' traits) in groups that have both.

    A group is (comm, device, workload, world_size, global_batch, num_workers, cluster point
    (None off an emulated cluster) and occurrence);
    repetitions of a group are collected together, so their spread can be measured; a pair names
    the two runs by mode and transport ("allreduce/ring / ps/p2p"), so each transport of either
    side gets a ratio of its own.
    """
    return {k: [r for r, _, _ in entries] for k, entries in ratio_runs(doc).items()}


def ratio_runs(doc):
    """{(group, pair): [(ratio, other run, baseline run) of each repetition]}: mode_ratios with
    the two runs behind each ratio, whose A/A noise is part of the ratio's spread."""
    groups = {}
    seen = {}
    for run in doc["runs"]:
        if run_status(run) != "ok":
            continue
        key = run_key(run, doc)
        occ = seen.get(key, 0)
        seen[key] = occ + 1
        mode, transport, comm, device, workload, ws, gb, nw, rep, cluster = key
        side = "baseline" if run_traits(run, doc)["baseline"] else "other"
        g = groups.setdefault((comm, device, workload, ws, gb, nw, cluster, occ), {})
        g.setdefault(rep, {}).setdefault(side, []).append((f"{mode}/{transport}", run))
    out = {}
    for g, reps in groups.items():
        for rep in sorted(reps):
            sides = reps[rep]
            for name, other in sides.get("other", []):
                for ref_name, ref in sides.get("baseline", []):
                    tp_other, tp_ref = throughput(other), throughput(ref)
                    if tp_other is None or tp_ref is None:
                        continue
                    out.setdefault((g, f"{name} / {ref_name}"), []).append(
                        (tp_other / tp_ref, other, ref))
    return out


def repetition_spread(ratios):
    """(max - min) / median of a group's per-repetition ratios: 0 for a single repetition.

    The second A/A term: load that changes between runs moves the ratio between repetitions,
    which the interleaved halves of a single run cannot see.
    """
    if len(ratios) < 2:
        return 0.0
    med = statistics.median(ratios)
    return (max(ratios) - min(ratios)) / med if med > 0 else math.inf


def group_label(group):
    """Short human name of a ratio group ("gloo/cpu mlp p=4 B=256 w=0 4x100mbit")."""
    comm, device, workload, ws, gb, nw, cluster, occ = group
    where = f" {cluster_text(cluster)}" if cluster is not None else ""
    label = f"{comm}/{device} {workload} p={ws} B={gb} w={nw}{where}"
    return label + (f" #{occ + 1}" if occ else "")


def ratio_spread(base_entries, new_entries):
    """(spread, where) of one ratio figure: the largest of its spread across repetitions in
    BASE and in NEW and the A/A difference of every run behind it in either file.

    base_entries, new_entries: ratio_runs() lists of the figure in each file.
    """
    candidates = []
    for side, entries in (("BASE", base_entries), ("NEW", new_entries)):
        if len(entries) > 1:
            candidates.append((repetition_spread([r for r, _, _ in entries]),
                               f"across {len(entries)} repetitions in {side}"))
        for _, other, ref in entries:
            for run in (other, ref):
                rep = run.get("repetition", (run.get("config") or {}).get("repetition", 0))
                candidates.append((aa_difference(step_samples(run)),
                                   f"A/A of {run['mode']} rep={rep} in {side}"))
    return largest_spread(candidates)


def compare_ratios(base_doc, new_doc, noise, report):
    """Timing gate of --timing ratio: each in-file ratio to the baseline strategy (median over
    repetitions) may not fall beyond its floor (noise.for_spread of its spread, at most the
    cap); a ratio whose spread is above the cap is listed as too noisy to judge instead."""
    base, new = ratio_runs(base_doc), ratio_runs(new_doc)
    if not base and not new:
        report.notes.append("No file has a run of the baseline strategy and one of another "
                            "strategy with step samples in the same group: no timing ratio to "
                            "compare.")
    for k in list(base) + [k for k in new if k not in base]:
        group, pair = k
        label, figure = group_label(group), f"throughput ratio {pair}"
        bl, nl = base.get(k), new.get(k)
        bv = statistics.median([r for r, _, _ in bl]) if bl else None
        nv = statistics.median([r for r, _, _ in nl]) if nl else None
        if nv is None:
            report.rows.append(Row(label, figure, f"{bv:.3f}", "-", "-", "not in NEW"))
            continue
        if bv is None:
            report.rows.append(Row(label, figure, "-", f"{nv:.3f}", "-", "new"))
            continue
        rel = nv / bv - 1.0
        spread, where = ratio_spread(bl, nl)
        floor = noise.for_spread(spread)
        if floor is None:
            report.rows.append(Row(label, figure, f"{bv:.3f}", f"{nv:.3f}", f"{100 * rel:+.1f} %",
                                   too_noisy_status(spread, where, noise.cap)))
            continue
        report.compared += 1
        report.timing_judged += 1
        if nv == bv:
            continue
        if nv < bv * (1.0 - floor):
            status = REGRESSION
        elif rel > floor:
            status = "improved"
        else:
            status = "within noise"
        report.rows.append(Row(label, figure, f"{bv:.3f}", f"{nv:.3f}",
                               f"{100 * rel:+.1f} % (floor {pct(floor)}, spread {pct(spread)})",
                               status))


def mwu_check(base_samples, new_samples, floor):
    """One-sided Mann-Whitney U (NEW slower than BASE) and the median change.

    Returns (p_value, relative median change, is_regression); regression when p < 0.01 and the
    median grew by more than floor.
    """
    p = float(load_mannwhitneyu()(new_samples, base_samples, alternative="greater").pvalue)
    mb, mn = statistics.median(base_samples), statistics.median(new_samples)
    rel = mn / mb - 1.0 if mb > 0 else (0.0 if mn == mb else math.inf)
    return p, rel, (p < MWU_ALPHA and rel > floor)


def compare_mwu(label, base_run, new_run, noise, report):
    """Timing gate of --timing mwu for one matched run: its floor comes from the A/A difference
    of the run in either file (noise.for_spread); above the cap it is too noisy to judge."""
    bs, ns = step_samples(base_run), step_samples(new_run)
    figure = "step_time_s median (ms)"
    if not bs or not ns:
        report.rows.append(Row(label, figure, "-", "-", "-", "no step samples: not compared"))
        return
    spread, where = largest_spread([(aa_difference(bs), "A/A in BASE"),
                                    (aa_difference(ns), "A/A in NEW")])
    floor = noise.for_spread(spread)
    if floor is None:
        report.rows.append(Row(label, figure, f"{1e3 * statistics.median(bs):.4g}",
                               f"{1e3 * statistics.median(ns):.4g}", "-",
                               too_noisy_status(spread, where, noise.cap)))
        return
    report.compared += 1
    report.timing_judged += 1
    p, rel, bad = mwu_check(bs, ns, floor)
    if bad:
        status = REGRESSION
    elif p < MWU_ALPHA:
        status = "slower, within noise floor" if rel > 0 else "within noise"
    elif rel < -floor:
        status = "faster"
    else:
        status = "within noise"
    report.rows.append(Row(label, figure, f"{1e3 * statistics.median(bs):.4g}",
                           f"{1e3 * statistics.median(ns):.4g}",
                           f"{100 * rel:+.1f} % (p={p:.2g}, floor {pct(floor)})", status))


# ---- the comparison -----------------------------------------------------------------------

def compare(base_doc, new_doc, options=None, base_label="BASE", new_label="NEW"):
    """Compares two checked result documents and returns a Report; raises NoRunsInCommon when no
    run key appears in both (nothing to compare: the command line exits 2)."""
    options = options or Options()
    if options.timing not in ("ratio", "mwu", "none"):
        raise ValueError(f"timing must be ratio, mwu or none, not {options.timing!r}")
    report = Report(base_label=base_label, new_label=new_label, timing=options.timing)
    check_runs_in_common(base_doc, new_doc, base_label, new_label)
    base = index_runs(base_doc, "BASE", report.notes)
    new = index_runs(new_doc, "NEW", report.notes)
    report.noise = noise_rule(options.noise_floor, options.noise_cap)
    if options.noise_floor > options.noise_cap and options.timing != "none":
        report.notes.append(f"--noise-floor {pct(options.noise_floor)} is above --noise-cap "
                            f"{pct(options.noise_cap)}: the cap is used as the floor.")
    if options.timing == "mwu":
        hb = (base_doc.get("env") or {}).get("host"), (base_doc.get("env") or {}).get("cpu_model")
        hn = (new_doc.get("env") or {}).get("host"), (new_doc.get("env") or {}).get("cpu_model")
        if hb != hn:
            report.notes.append(f"--timing mwu compares step times across files, but BASE and NEW "
                                f"come from different machines ({hb[0]}, {hn[0]}); "
                                f"--timing ratio is meant for that.")

    for (key, occ), brun in base.items():
        label = key_label(key, occ)
        nrun = new.get((key, occ))
        bstat = run_status(brun)
        if nrun is None:
            report.compared += 1
            report.rows.append(Row(label, "run", bstat, "-", "missing in NEW", REGRESSION))
            continue
        nstat = run_status(nrun)
        if nstat == "failed" or bstat == "failed":
            report.compared += 1
            err = str(nrun.get("error", "")) if nstat == "failed" else ""
            if bstat == "ok":
                report.rows.append(Row(label, "run", "ok", "failed", err or "-", REGRESSION))
            elif nstat == "ok":
                report.rows.append(Row(label, "run", "failed", "ok", "-", "fixed"))
            else:
                report.rows.append(Row(label, "run", "failed", "failed", err or "-",
                                       "failed in both"))
            continue
        report.matched_runs += 1
        compare_deterministic(label, brun, nrun, report)
        compare_accuracy(label, brun, nrun, options.accuracy_tol, report)
        if options.timing == "mwu":
            compare_mwu(label, brun, nrun, report.noise, report)
        diff = config_differences(brun, nrun)
        if diff:
            report.notes.append(f"{label}: config differs ({diff}).")
    for (key, occ), nrun in new.items():
        if (key, occ) not in base:
            report.rows.append(Row(key_label(key, occ), "run", "-", run_status(nrun), "new run",
                                   "new"))
    if options.timing == "ratio":
        compare_ratios(base_doc, new_doc, report.noise, report)
    if report.too_noisy:
        none_judged = " No timing figure was judged." if not report.timing_judged else ""
        report.notes.append(
            f"{len(report.too_noisy)} timing figure(s) too noisy to judge: the spread the files "
            f"show for them is above the --noise-cap of {pct(report.noise.cap)}, so they are "
            f"neither passed nor failed (their rows give the spread). Rerun on a quieter "
            f"machine, with more steps or repetitions, or raise --noise-cap.{none_judged}")
    return report


def check_runs_in_common(base_doc, new_doc, base_label="BASE", new_label="NEW"):
    """Raises NoRunsInCommon when no run key appears in both documents, naming the key fields
    whose values do not overlap at all (e.g. workload: mlp in BASE, cnn in NEW)."""
    bkeys = {run_key(r, base_doc) for r in base_doc["runs"]}
    nkeys = {run_key(r, new_doc) for r in new_doc["runs"]}
    if bkeys & nkeys:
        return
    fields = KEY_FIELDS
    if any(k[-1] is not None for k in bkeys | nkeys):  # runs of an emulated cluster
        fields = KEY_FIELDS + (CLUSTER_FIELD,)
    differs = []
    for i, name in enumerate(fields):
        bv, nv = {k[i] for k in bkeys}, {k[i] for k in nkeys}
        if not bv & nv:
            if name == CLUSTER_FIELD:
                bv, nv = {cluster_text(v) or "-" for v in bv}, {cluster_text(v) or "-" for v in nv}
            differs.append(f"{name}: {_values(bv)} in {base_label}, {_values(nv)} in {new_label}")
    what = "; ".join(differs) if differs else \
        "no combination of " + ", ".join(fields) + " appears in both"
    raise NoRunsInCommon(f"{base_label} and {new_label} have no runs in common ({what}): "
                         f"nothing to compare")


def _values(values):
    """A set of key values as a short sorted list string."""
    return ",".join(sorted(str(v) for v in values))


def config_differences(base_run, new_run, limit=4):
    """Per-run config options that differ between two matched runs, as a short string."""
    bc, nc = base_run.get("config") or {}, new_run.get("config") or {}
    names = [k for k in sorted(set(bc) | set(nc)) if bc.get(k) != nc.get(k)]
    parts = [f"{k}: {bc.get(k, '-')} -> {nc.get(k, '-')}" for k in names[:limit]]
    if len(names) > limit:
        parts.append(f"{len(names) - limit} more")
    return "; ".join(parts)


# ---- command line -------------------------------------------------------------------------

def percent(text):
    """An argparse type: '10' or '10%' -> 0.10. A bare number below 1 is refused, because the
    options took fractions before (0.25 meant 25 %); '0.5%' states half a percent."""
    raw = text.strip()
    explicit = raw.endswith("%")
    try:
        value = float(raw[:-1] if explicit else raw)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a percentage (e.g. 10 or 10%)")
    if not math.isfinite(value) or value < 0:
        raise argparse.ArgumentTypeError(f"{text!r}: a percentage >= 0 is needed")
    if 0 < value < 1 and not explicit:
        raise argparse.ArgumentTypeError(
            f"{text!r} looks like a fraction: give a percentage (10 for 10 %), or write "
            f"{raw}% for {raw} %")
    return value / 100.0


def parse_args(argv):
    """The command line (argparse exits 2 on bad usage)."""
    p = argparse.ArgumentParser(
        prog="compare.py",
        description="Compare two dpbench result files; exit 1 on a regression, 2 on bad input "
                    "or files with no runs in common.")
    p.add_argument("base", metavar="BASE.json", help="baseline result or sweep file")
    p.add_argument("new", metavar="NEW.json", help="result or sweep file to check")
    p.add_argument("--noise-floor", type=percent, default=DEFAULT_NOISE_FLOOR, metavar="PCT",
                   help="smallest timing change treated as real, in percent (default "
                        f"{100 * DEFAULT_NOISE_FLOOR:g}); a figure's floor is raised to "
                        f"{REP_MULTIPLIER:g} x its spread, but never above --noise-cap")
    p.add_argument("--noise-cap", type=percent, default=DEFAULT_NOISE_CAP, metavar="PCT",
                   help="largest noise floor, in percent (default "
                        f"{100 * DEFAULT_NOISE_CAP:g}): a timing figure whose spread (across "
                        "repetitions, or between the interleaved halves of a run's step "
                        "samples, in either file) is above it is listed as too noisy to judge "
                        "and neither passes nor fails")
    p.add_argument("--accuracy-tol", type=float, default=0.005, metavar="ABS",
                   help="allowed absolute drop of test accuracy (default 0.005)")
    p.add_argument("--timing", choices=("ratio", "mwu", "none"), default="ratio",
                   help="ratio: throughput ratio of each strategy to the baseline (ps) inside "
                        "each file (default); mwu: "
                        "Mann-Whitney U on step times (same machine only); none: skip timings")
    p.add_argument("--markdown", metavar="OUT.md", help="also write the report to this file")
    args = p.parse_args(argv)
    if args.accuracy_tol < 0:
        p.error("--accuracy-tol must be >= 0")
    return args


def main(argv=None):
    """Runs the comparison; returns the exit status."""
    args = parse_args(sys.argv[1:] if argv is None else argv)
    try:
        base_doc, new_doc = load(args.base), load(args.new)
    except InputError as e:
        print(f"compare.py: {e}", file=sys.stderr)
        return 2
    if args.timing == "mwu" and load_mannwhitneyu() is None:
        print("compare.py: --timing mwu needs scipy (Debian python3-scipy): run it with "
              "/usr/bin/python3", file=sys.stderr)
        return 2
    opts = Options(noise_floor=args.noise_floor, noise_cap=args.noise_cap,
                   accuracy_tol=args.accuracy_tol, timing=args.timing)
    try:
        report = compare(base_doc, new_doc, opts, base_label=args.base, new_label=args.new)
    except NoRunsInCommon as e:
        print(f"compare.py: {e}", file=sys.stderr)
        return 2
    text = report.markdown()
    sys.stdout.write(text)
    if args.markdown:
        try:
            pathlib.Path(args.markdown).write_text(text)
        except OSError as e:
            print(f"compare.py: {args.markdown}: cannot write: {e.strerror or e}",
                  file=sys.stderr)
            return 2
    return report.exit_code


if __name__ == "__main__":
    sys.exit(main())
