#!/usr/bin/python3
"""A/B regression gate: the same runs of a base build and a head build, judged side by side.

usage: /usr/bin/python3 results/ab_gate.py DIR [--base-label REV] [--head-label REV]
           [--min-effect PCT] [--alpha P] [--accept PREFIX]... [--confirm DIR2]
           [--markdown OUT.md]

DIR holds what scripts/ci_gate.sh ran on one machine, the two builds alternating:
  base-1.json ... base-N.json, head-1.json ... head-N.json   result (or sweep) files, N >= 5;
  base-projection.json, head-projection.json                   optional `dpbench project` files.

Deterministic figures must be equal between the base's first file and the head's first file:
parameter count, step counts, bytes sent and received per rank per step, every memory peak and
category (results/compare.py's deterministic_figures), the loss of every step, the final loss and
the test accuracy; and in the projections, every point's simulated step time (relative tolerance
1e-9, SimGrid's floating point) and its message count. On one machine at one seed they do not
move unless the code did.

Timings are judged A/B, as asv and Bencher judge them: for every run, the throughputs at the
median step (throughput_median_step_samples_per_s: global batch / median step time, robust to the
occasional stalled step that moves a wall-time figure) of the N base and N head runs. The head is slower when a one-sided
Mann-Whitney U test (scipy.stats.mannwhitneyu, head < base) gives p <= --alpha AND the medians
differ by at least --min-effect. The minimum effect is fixed: the runs' own spread never raises
it. With 5 + 5 runs the smallest possible p is 1/252 (0.004): at the default alpha of 0.01 the
head must be slower in at least 24 of the 25 base-head pairs.

A machine whose speed drifts can fail an A/A comparison (one CI run measured -11.3 % at
p = 0.008 with one build on both sides). --confirm DIR2 names a second round of alternated runs
(scripts/ci_gate.sh runs one after a first round with a throughput regression, or with a
suspect: a loss beyond the minimum effect at p <= 0.05, printed as "ab_gate: SUSPECT: ..."; one
CI run measured a planted -24.7 % at p = 0.028): a throughput regression or suspect then
stands only when both rounds' runs pooled (2N a side) fail it too by the same rule; otherwise it
is listed as "not confirmed by the second round" with the pooled effect and p-value. Pooled, a
first round's fluke meets N runs of no change and its median loss falls below the minimum
effect, while a real loss separates at a smaller p than either round alone (judged on the second
round alone, a planted -25 % failed to separate at p = 0.048 with two of its 25 pairs inverted).

A deterministic change that is meant (a new bucketing moves the bytes per step) is named with
--accept PREFIX (a figure name's start, e.g. comm_bytes_per_step): it is listed as accepted.

Exit status: 0 no regression; 1 at least one; 2 unreadable input, fewer than 5 runs a side,
unequal counts, or builds without runs in common: one line on stderr naming the file or what
differs. The verdict lines name the figure, the base, the effect and the p-value.
"""
import argparse
import dataclasses
import json
import math
import pathlib
import re
import statistics
import sys

import compare
import schema_versions

MIN_REPETITIONS = 5
DEFAULT_MIN_EFFECT = 0.10   # asv's default factor (1.1)
DEFAULT_ALPHA = 0.01
SCREEN_ALPHA = 0.05  # a loss beyond the minimum effect at p <= this is a suspect: a second round decides
PROJECTION_REL_TOL = 1e-9
TIMING_FIGURE = "throughput_median_step_samples_per_s"


class InputError(Exception):
    """A gate directory that cannot be judged; its message names the file or what differs."""


@dataclasses.dataclass
class Verdict:
    """One judged figure of one run: its values, its change and its status."""
    run: str
    figure: str
    base: str
    head: str
    change: str
    status: str

    @property
    def is_regression(self):
        """True when this figure fails the gate."""
        return self.status == compare.REGRESSION


@dataclasses.dataclass
class Gate:
    """What the gate saw: the labels, the rule and every verdict."""
    base_label: str
    head_label: str
    min_effect: float
    alpha: float
    repetitions: int
    accepted: tuple = ()
    verdicts: list = dataclasses.field(default_factory=list)
    deterministic_compared: int = 0
    timings_judged: int = 0
    suspects: list = dataclasses.field(default_factory=list)  # lines: losses a second round should judge

    @property
    def regressions(self):
        """The verdicts that fail the gate."""
        return [v for v in self.verdicts if v.is_regression]

    def add_change(self, run, figure, base, head, change):
        """A deterministic figure that differs: a regression unless --accept names it."""
        prefix = next((p for p in self.accepted if figure.startswith(p)), None)
        status = f"accepted (--accept {prefix})" if prefix else compare.REGRESSION
        self.verdicts.append(Verdict(run, figure, base, head, change, status))

    def verdict_lines(self):
        """One line per regression, naming the figure, the base, the effect and the p-value."""
        return [f"REGRESSION: {v.run}: {v.figure} {v.change} against base {self.base_label} "
                f"({v.base} -> {v.head})" for v in self.regressions]

    def summary(self):
        """The summary line."""
        n = len(self.regressions)
        return (f"{self.deterministic_compared} deterministic figures compared exactly and "
                f"{self.timings_judged} timings judged A/B ({self.repetitions} alternated runs a "
                f"side; one-sided Mann-Whitney U, p <= {self.alpha:g}, and a minimum effect of "
                f"{compare.pct(self.min_effect)}), base {self.base_label}, head "
                f"{self.head_label}: {n} regression{'s' if n != 1 else ''}")

    def markdown(self):
        """The report as Markdown: the summary, the verdict lines and the table."""
        out = [f"## dpbench A/B gate: `{self.base_label}` -> `{self.head_label}`", "",
               f"**{self.summary()}.**", ""]
        out += [f"- {line}" for line in self.verdict_lines()]
        if self.regressions:
            out.append("")
        out += ["| run | figure | base | head | change | status |", "|---|---|---|---|---|---|"]
        for v in self.verdicts:
            cells = (v.run, v.figure, v.base, v.head, v.change, v.status)
            out.append("| " + " | ".join(compare._md_cell(c) for c in cells) + " |")
        return "\n".join(out) + "\n"


# ---- reading a gate directory -------------------------------------------------------------

def side_files(directory, side):
    """The side's result files base-1.json ... in repetition order."""
    found = []
    for path in pathlib.Path(directory).glob(f"{side}-*.json"):
        m = re.fullmatch(rf"{side}-(\d+)\.json", path.name)
        if m:
            found.append((int(m.group(1)), path))
    return [p for _, p in sorted(found)]


def load_sides(directory):
    """(base docs, head docs): N >= MIN_REPETITIONS result files a side, as many on each."""
    base, head = side_files(directory, "base"), side_files(directory, "head")
    if len(base) != len(head):
        raise InputError(f"{directory}: {len(base)} base and {len(head)} head result files "
                         f"(the two builds run alternately, as many times each)")
    if len(base) < MIN_REPETITIONS:
        raise InputError(f"{directory}: {len(base)} runs a side, at least {MIN_REPETITIONS} "
                         f"are needed to judge timings A/B")
    try:
        return [compare.load(p) for p in base], [compare.load(p) for p in head]
    except compare.InputError as e:
        raise InputError(str(e)) from None


def load_projection(path):
    """A `dpbench project` file's points, or None when the file is absent."""
    path = pathlib.Path(path)
    if not path.exists():
        return None
    try:
        doc = schema_versions.upgrade(json.loads(path.read_text()))  # base and head may differ in version
        return {(p["curve"], p["world_size"]): p for p in doc["points"]}
    except (OSError, ValueError, KeyError, TypeError) as e:
        raise InputError(f"{path}: not a dpbench projection file ({e})") from None


# ---- deterministic figures ----------------------------------------------------------------

def quality_figures(run):
    """{figure: value} of the run's losses and accuracy, which a fixed seed fixes on one machine."""
    q = run.get("quality") or {}
    figs = {f"quality.step_train_loss[{i}]": v for i, v in enumerate(q.get("step_train_loss") or [])}
    figs["quality.final_train_loss"] = q.get("final_train_loss")
    figs["quality.test_accuracy"] = q.get("test_accuracy")
    return figs


def run_figures(run):
    """Every deterministic figure of one ok run."""
    return {**compare.deterministic_figures(run), **quality_figures(run)}


def compare_runs(gate, base_doc, head_doc):
    """The deterministic figures of every run of the first base and head files, exactly."""
    notes = []
    base, head = compare.index_runs(base_doc, "base", notes), compare.index_runs(head_doc, "head", notes)
    if not set(base) & set(head):
        raise InputError("the base and head files have no runs in common: nothing to compare")
    for key in list(base) + [k for k in head if k not in base]:
        label = compare.key_label(*key)
        b, h = base.get(key), head.get(key)
        if b is None or h is None or "failed" in (compare.run_status(b), compare.run_status(h)):
            gate.deterministic_compared += 1
            status = lambda r: "-" if r is None else compare.run_status(r)  # noqa: E731
            if status(b) != status(h):
                gate.add_change(label, "run", status(b), status(h), "run status")
            continue
        bf, hf = run_figures(b), run_figures(h)
        for name in list(bf) + [k for k in hf if k not in bf]:
            gate.deterministic_compared += 1
            bv, hv = bf.get(name), hf.get(name)
            if bv != hv:
                change = compare.fmt_delta(bv, hv) if isinstance(bv, (int, float)) and \
                    isinstance(hv, (int, float)) else "differs"
                gate.add_change(label, name, compare.fmt_num(bv), compare.fmt_num(hv), change)


def compare_projections(gate, base_points, head_points):
    """Every projected point's simulated step time (relative 1e-9) and message count."""
    for key in list(base_points) + [k for k in head_points if k not in base_points]:
        label = f"projection {key[0]} at {key[1]} ranks"
        b, h = base_points.get(key), head_points.get(key)
        if b is None or h is None:
            gate.deterministic_compared += 1
            gate.add_change(label, "point", "-" if b is None else "present",
                            "-" if h is None else "present", "only in one build")
            continue
        for figure in ("step_time_s", "simulation.simulated_step_s", "simulation.messages"):
            gate.deterministic_compared += 1
            bv, hv = dig(b, figure), dig(h, figure)
            if not same_number(bv, hv):
                gate.add_change(label, figure, compare.fmt_num(bv), compare.fmt_num(hv),
                                compare.fmt_delta(bv, hv) if bv is not None and hv is not None
                                else "differs")


def dig(obj, dotted):
    """obj[a][b] for 'a.b'; None where a part is missing."""
    for part in dotted.split("."):
        obj = obj.get(part) if isinstance(obj, dict) else None
    return obj


def same_number(a, b):
    """Equal, or floats within PROJECTION_REL_TOL of each other."""
    if a == b:
        return True
    if isinstance(a, float) and isinstance(b, float):
        return math.isclose(a, b, rel_tol=PROJECTION_REL_TOL, abs_tol=0.0)
    return False


# ---- timings ------------------------------------------------------------------------------

def judge_timing(base, head, min_effect, alpha, mannwhitneyu):
    """(status, effect, p) of head's samples against base's (higher is better).

    effect = median(head) / median(base) - 1. A regression: one-sided Mann-Whitney U with head
    below base at p <= alpha and effect <= -min_effect; "faster" symmetrically; else "no change
    beyond the minimum effect" (or "within noise" when the test does not separate them).
    """
    mb, mh = statistics.median(base), statistics.median(head)
    effect = mh / mb - 1.0 if mb > 0 else 0.0
    p_slower = float(mannwhitneyu(head, base, alternative="less").pvalue)
    p_faster = float(mannwhitneyu(head, base, alternative="greater").pvalue)
    if p_slower <= alpha and effect <= -min_effect:
        return compare.REGRESSION, effect, p_slower
    if p_faster <= alpha and effect >= min_effect:
        return "faster", effect, p_faster
    p = p_slower if effect < 0 else p_faster
    if p <= alpha:
        return "below the minimum effect", effect, p
    return "within noise", effect, p


def throughputs(docs):
    """{run key: [throughput of each file]} of the ok runs of a side's files."""
    out = {}
    for doc in docs:
        for key, run in compare.index_runs(doc, "", []).items():
            value = run.get(TIMING_FIGURE)
            if compare.run_status(run) == "ok" and isinstance(value, (int, float)):
                out.setdefault(key, []).append(float(value))
    return out


def confirm_timing(gate, key, first, confirm, mannwhitneyu):
    """(status, note) of a first-round regression of run key (first: its (base, head)
    throughputs) judged again by the same rule on both rounds' runs pooled (confirm: {key: (base,
    head)} of the second round's): it stands only when the pooled runs fail it too."""
    if key not in confirm:
        return "not confirmed (the run is missing from the second round)", ""
    base, head = first[0] + confirm[key][0], first[1] + confirm[key][1]
    status, effect, p = judge_timing(base, head, gate.min_effect, gate.alpha, mannwhitneyu)
    note = f"; with a second round, {len(base)} runs a side: {100 * effect:+.1f} %, p={p:.3g}"
    if status == compare.REGRESSION:
        return status, note + ": confirmed"
    return "not confirmed by the second round", note


def compare_timings(gate, base_docs, head_docs, mannwhitneyu, confirm=None):
    """Each run's throughputs, base against head, by judge_timing. With confirm ({run key:
    (base throughputs, head throughputs)} of a second round of alternated runs), a regression
    must be judged one again on both rounds' runs pooled (confirm_timing)."""
    base, head = throughputs(base_docs), throughputs(head_docs)
    for key in base:
        if key not in head or len(base[key]) != len(head[key]):
            continue  # a run missing or failed in some files: its deterministic verdict says so
        status, effect, p = judge_timing(base[key], head[key], gate.min_effect, gate.alpha,
                                         mannwhitneyu)
        note = ""
        suspect = (status == compare.REGRESSION or
                   (effect <= -gate.min_effect and p <= SCREEN_ALPHA))
        if suspect and confirm is not None:
            status, note = confirm_timing(gate, key, (base[key], head[key]), confirm, mannwhitneyu)
        elif suspect and status != compare.REGRESSION:
            gate.suspects.append(f"SUSPECT: {compare.key_label(*key)}: {TIMING_FIGURE} {100 * effect:+.1f} % "
                                 f"(Mann-Whitney U p={p:.3g}): a second round of runs decides")
        gate.timings_judged += 1
        mb, mh = statistics.median(base[key]), statistics.median(head[key])
        gate.verdicts.append(Verdict(
            compare.key_label(*key), f"{TIMING_FIGURE} (median of {len(base[key])})",
            f"{mb:,.0f}", f"{mh:,.0f}",
            f"{100 * effect:+.1f} % (Mann-Whitney U p={p:.3g}, min effect "
            f"{compare.pct(gate.min_effect)}{note})", status))


def second_round(directory):
    """{run key: (base throughputs, head throughputs)} of a confirming round's directory."""
    base_docs, head_docs = load_sides(directory)
    base, head = throughputs(base_docs), throughputs(head_docs)
    return {k: (base[k], head[k]) for k in base if k in head and len(base[k]) == len(head[k])}


def judge(directory, gate, mannwhitneyu, confirm_directory=None):
    """Fills gate from a gate directory (and a second round's, which only confirms or clears
    timing regressions); raises InputError on what cannot be judged."""
    confirm = second_round(confirm_directory) if confirm_directory else None
    base_docs, head_docs = load_sides(directory)
    gate.repetitions = len(base_docs)
    compare_runs(gate, base_docs[0], head_docs[0])
    points = (load_projection(pathlib.Path(directory) / "base-projection.json"),
              load_projection(pathlib.Path(directory) / "head-projection.json"))
    if (points[0] is None) != (points[1] is None):
        raise InputError(f"{directory}: a projection from one build only")
    if points[0] is not None:
        compare_projections(gate, *points)
    compare_timings(gate, base_docs, head_docs, mannwhitneyu, confirm)


# ---- command line -------------------------------------------------------------------------

def probability(text):
    """An argparse type: a p-value threshold in (0, 1)."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None
    if not 0 < value < 1:
        raise argparse.ArgumentTypeError(f"{text!r}: a probability between 0 and 1 is needed")
    return value


def parse_args(argv):
    """The command line (argparse exits 2 on bad usage)."""
    p = argparse.ArgumentParser(prog="ab_gate.py", description="Judge a base and a head build's "
                                "alternated runs; exit 1 on a regression, 2 on bad input.")
    p.add_argument("directory", metavar="DIR", help="base-N.json and head-N.json (N >= 5)")
    p.add_argument("--base-label", default="base", help="the base's name in the verdict (a commit)")
    p.add_argument("--head-label", default="head", help="the head's name in the verdict")
    p.add_argument("--min-effect", type=compare.percent, default=DEFAULT_MIN_EFFECT, metavar="PCT",
                   help=f"smallest throughput change judged a regression, in percent (default "
                        f"{100 * DEFAULT_MIN_EFFECT:g}); never raised by the runs' spread")
    p.add_argument("--alpha", type=probability, default=DEFAULT_ALPHA, metavar="P",
                   help=f"one-sided Mann-Whitney U threshold (default {DEFAULT_ALPHA:g})")
    p.add_argument("--accept", action="append", default=[], metavar="PREFIX",
                   help="a deterministic figure whose change is meant (a figure name's start)")
    p.add_argument("--confirm", metavar="DIR2", help="a second round of alternated runs: a "
                   "throughput regression must be judged one again on both rounds' runs pooled")
    p.add_argument("--markdown", metavar="OUT.md", help="also write the report to this file")
    return p.parse_args(argv)


def main(argv=None):
    """Runs the gate; returns the exit status."""
    args = parse_args(sys.argv[1:] if argv is None else argv)
    mannwhitneyu = compare.load_mannwhitneyu()
    if mannwhitneyu is None:
        print("ab_gate.py: needs scipy (Debian python3-scipy): run it with /usr/bin/python3",
              file=sys.stderr)
        return 2
    gate = Gate(args.base_label, args.head_label, args.min_effect, args.alpha, 0,
                tuple(args.accept))
    try:
        judge(args.directory, gate, mannwhitneyu, args.confirm)
    except InputError as e:
        print(f"ab_gate.py: {e}", file=sys.stderr)
        return 2
    text = gate.markdown()
    sys.stdout.write(text)
    for line in gate.verdict_lines() + gate.suspects:
        print(f"ab_gate: {line}", file=sys.stderr)
    if args.markdown:
        try:
            pathlib.Path(args.markdown).write_text(text)
        except OSError as e:
            print(f"ab_gate.py: {args.markdown}: cannot write: {e.strerror or e}", file=sys.stderr)
            return 2
    return 1 if gate.regressions else 0


if __name__ == "__main__":
    sys.exit(main())
