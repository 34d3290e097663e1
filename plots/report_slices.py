"""Which slice of a sweep a figure shows, and the ten-second verdict that opens the report.

Part of the report's data layer (report_data.py names the parts); nothing here reads anything
but the JSON files it is given.
"""
from __future__ import annotations

import statistics
from dataclasses import dataclass, field
from typing import Callable, Iterable, Optional

from report_records import median

# --------------------------------------------------------------------------------------------
# slices: which part of a sweep a figure shows


AXES = ("world_size", "global_batch", "num_workers")


def pick_slice(points: list, vary: Optional[str], score: Callable) -> tuple:
    """Groups points by every axis but `vary` and returns (fixed axis values, points) of the
    group with the highest score(fixed, points)."""
    groups: dict = {}
    for p in points:
        fixed = tuple((a, p.axes[a]) for a in AXES if a != vary)
        groups.setdefault(fixed, []).append(p)
    if not groups:
        return {}, []
    best = max(groups, key=lambda f: score(dict(f), groups[f]))
    return dict(best), groups[best]


def distinct(points: Iterable, attr: str) -> list:
    """Sorted distinct values of one attribute."""
    return sorted({getattr(p, attr) for p in points})


def coverage_score(vary: str) -> Callable:
    """Prefers the slice with the most values of `vary`, then the most series, then the
    largest world size and batch and the fewest workers."""
    def score(fixed: dict, pts: list):
        return (len(distinct(pts, vary)), len(distinct(pts, "series")), fixed.get("world_size", 0),
                fixed.get("global_batch", 0), -fixed.get("num_workers", 0))
    return score


def largest_world_score(fixed: dict, pts: list):
    """Prefers the largest world size, then the most series, largest batch, fewest workers."""
    return (fixed["world_size"], len(distinct(pts, "series")), fixed["global_batch"],
            -fixed["num_workers"])


def describe_fixed(fixed: dict) -> str:
    """"4 ranks, batch 256, 0 workers" for the fixed axes of a slice."""
    parts = []
    if "world_size" in fixed:
        parts.append(f"{fixed['world_size']} rank{'s' if fixed['world_size'] != 1 else ''}")
    if "global_batch" in fixed:
        parts.append(f"batch {fixed['global_batch']}")
    if "num_workers" in fixed:
        parts.append(f"{fixed['num_workers']} worker{'s' if fixed['num_workers'] != 1 else ''}")
    return ", ".join(parts)


# --------------------------------------------------------------------------------------------
# the verdict


@dataclass(frozen=True)
class Ratio:
    """One throughput ratio the verdict states: a strategy against a baseline strategy at the
    verdict's world size, the median over their matched settings."""

    other: str  # the strategy's label: "allreduce (ring)"
    other_name: str  # as the verdict names it: "allreduce"
    baseline: str  # the baseline's label: "ps (collective)"
    value: float  # throughput other / baseline
    text: str  # as the verdict words it: "is 1.37x faster than ps", "does not differ beyond noise ..."


@dataclass(frozen=True)
class Imbalance:
    """The memory imbalance the verdict states for one baseline strategy: the median over its
    matched points of their max/mean per-rank peak memory."""

    baseline: str  # label
    name: str  # as sentences name it: "ps", or "ps (p2p)" beside "ps (collective)"
    value: float
    text: str  # "1.87x"
    root: bool  # rank 0 is its root (has_root), not just its largest rank


@dataclass(frozen=True)
class Exposed:
    """The share of the median step that communication is exposed, for one side of the verdict's
    comparison (the baseline strategies together, or one other strategy)."""

    name: str  # "ps", "allreduce"
    value: float  # comm_exposed / step p50, median over the side's points
    text: str  # "22%"


@dataclass
class Verdict:
    """The opening sentence and the notes that qualify it, with the numbers they state, computed
    once: the figures' captions quote these fields, never recompute them."""

    headline: str
    notes: list
    world: Optional[int] = None  # the world size compared; None when nothing was
    setting: dict = field(default_factory=dict)  # the matched axes when one setting was compared
    where: str = ""  # "at 4 ranks (batch 256, 0 workers)"
    ratios: list = field(default_factory=list)  # Ratio, in the report's order
    imbalance: list = field(default_factory=list)  # Imbalance, one per baseline label, in order
    memory: str = ""  # "the ps root holds 1.87x the mean per-rank memory"
    exposed: list = field(default_factory=list)  # Exposed: the baseline side first, then the others
    best: str = ""  # with one strategy: "best 5,000 samples/s at 4 ranks"
    settings: int = 0  # how many matched batch/worker settings the ratios are medians over


def ratio_predicate(pairs: list, ref_name: str) -> tuple:
    """(value, words) for a strategy against a baseline over matched pairs (other, baseline),
    by the run's own rule (bench/app/run_command.cpp, verdict_clause) where the file holds one
    `dpbench run` point with its repetitions' ratios to that baseline: "does not differ beyond
    noise from ps (0.87-1.45x over 3 repetitions)" when the range holds 1, else "is 1.38x faster
    than ps (1.28-1.45x over 3 repetitions)". Otherwise the median ratio over the pairs, "is
    1.21x faster than ps"."""
    if len(pairs) == 1:
        other, ref = pairs[0]
        ratios = other.rep_ratios
        if len(ratios) > 1 and other.ratio_baseline == ref.mode:
            lo, hi, value = min(ratios), max(ratios), statistics.median(ratios)
            spread = f"({lo:.2f}-{hi:.2f}x over {len(ratios)} repetitions)"
            if lo <= 1.0 <= hi:
                return value, f"does not differ beyond noise from {ref_name} {spread}"
            return value, f"is {ratio_phrase(value)} {ref_name} {spread}"
    value = statistics.median(a.throughput / p.throughput for a, p in pairs)
    return value, f"is {ratio_phrase(value)} {ref_name}"


def ratio_phrase(ratio: float) -> str:
    """"2.00x faster", "1.25x slower" or "as fast as" for allreduce/ps throughput."""
    if abs(ratio - 1.0) < 0.005:
        return "as fast as"
    return f"{ratio:.2f}x faster than" if ratio > 1 else f"{1.0 / ratio:.2f}x slower than"


def matched_pairs(points: list, world_size: int, baseline_label: str) -> list:
    """(other, baseline) pairs at one world size with the same variant, batch and workers: every
    point of a other strategy against the baseline point labelled baseline_label."""
    refs = {(p.variant, p.global_batch, p.num_workers): p for p in points
            if p.baseline and p.label == baseline_label and p.world_size == world_size}
    pairs = []
    for a in points:
        if not a.baseline and a.world_size == world_size:
            other = refs.get((a.variant, a.global_batch, a.num_workers))
            if other is not None:
                pairs.append((a, other))
    return pairs


def in_order(points: Iterable, attr: str) -> list:
    """The distinct values of one attribute ("mode", "label") in the report's order: by the
    smallest `order` of the points that have it."""
    first: dict = {}
    for p in points:
        value = getattr(p, attr)
        first[value] = min(first.get(value, p.order), p.order)
    return sorted(first, key=lambda v: (first[v], v))


def names(points: Iterable) -> str:
    """"ps" or "sharded_ps, allreduce": the distinct modes of some points, in the report's order."""
    return ", ".join(in_order(points, "mode"))


def short_names(points: Iterable) -> dict:
    """label -> how the verdict names it: the mode when the mode ran one label, else the label
    ("ps" alone, or "ps (collective)" and "ps (p2p)")."""
    by_mode: dict = {}
    for p in points:
        by_mode.setdefault(p.mode, set()).add(p.label)
    return {label: (mode if len(labels) == 1 else label)
            for mode, labels in by_mode.items() for label in labels}


def unique(points: Iterable) -> list:
    """The points without repeats, in first-seen order (a baseline point pairs with several)."""
    out, ids = [], set()
    for p in points:
        if id(p) not in ids:
            ids.add(id(p))
            out.append(p)
    return out


def compute_verdict(points: list) -> Verdict:
    """Compares every strategy with the baseline strategy (ps, as the runs' traits say) at the
    largest world size where both ran with the same batch, workers and config: throughput ratio
    (median over matched settings) and each baseline's memory imbalance (its root's, when it
    has one). Strategies are named in the report's order (series_order)."""
    if not points:
        return Verdict("No run succeeded, so there is nothing to compare: see the failed points below.", [])
    refs = [p for p in points if p.baseline]
    others = [p for p in points if not p.baseline]
    if not refs or not others:
        top = max(points, key=lambda p: p.throughput)
        best = f"best {top.throughput:,.0f} samples/s at {top.world_size} ranks"
        return Verdict(f"Only {names(points)} was measured ({best}): run every mode side by side (what "
                       "`dpbench run` does by default) to compare them.", [], best=best)
    ref_labels = in_order(refs, "label")
    common = sorted({p.world_size for p in others} & {p.world_size for p in refs})
    world = next((w for w in reversed(common) if any(matched_pairs(points, w, t) for t in ref_labels)), None)
    if world is None:
        return Verdict(f"{names(refs)} and {names(others)} never ran with the same ranks, batch and "
                       "workers, so they cannot be compared: run them in one `dpbench run` or sweep.", [])
    all_pairs = [pair for t in ref_labels for pair in matched_pairs(points, world, t)]
    ref_names = short_names(p for _, p in all_pairs)
    other_names = short_names(a for a, _ in all_pairs)
    ratios, sentences = [], []
    for other_label in in_order((a for a, _ in all_pairs), "label"):
        clauses = []
        for ref_label in ref_labels:
            pairs = [(a, p) for a, p in all_pairs if a.label == other_label and p.label == ref_label]
            if pairs:
                value, words = ratio_predicate(pairs, ref_names[ref_label])
                ratio = Ratio(other_label, other_names[other_label], ref_label, value, words)
                ratios.append(ratio)
                clauses.append(ratio.text)
        # "is 2.00x faster than ps (collective) and 2.71x faster than ps (p2p)": one "is".
        tidy = clauses[:1] + [c[3:] if c.startswith("is ") and clauses[0].startswith("is ") else c
                              for c in clauses[1:]]
        sentences.append(f"{other_names[other_label]} {' and '.join(tidy)}")
    settings = sorted({(a.global_batch, a.num_workers, a.variant) for a, _ in all_pairs})
    if len(settings) == 1:
        where = f"at {world} ranks (batch {settings[0][0]}, {settings[0][1]} workers)"
        setting = {"world_size": world, "global_batch": settings[0][0], "num_workers": settings[0][1]}
    else:
        kinds = "batch/worker/link" if any(dict(v).get("link") for _, _, v in settings) else "batch/worker"
        where = f"at {world} ranks (throughput, median over {len(settings)} matched {kinds} settings)"
        setting = {"world_size": world}
    imbalance = baseline_imbalance(unique(p for _, p in all_pairs), ref_labels, ref_names)
    memory = memory_clause(imbalance)
    headline = f"{', and '.join(sentences)} {where}; {memory}."
    exposed = exposed_shares(all_pairs)
    return Verdict(headline, verdict_notes(points, world, all_pairs, exposed), world=world, setting=setting,
                   where=where, ratios=ratios, imbalance=imbalance, memory=memory, exposed=exposed,
                   settings=len(settings))


def baseline_imbalance(refs: list, labels: list, ref_names: dict) -> list:
    """One Imbalance per baseline label (in `labels` order): the median max/mean per-rank memory
    of its matched points `refs`."""
    out = []
    for label in labels:
        pts = [p for p in refs if p.label == label]
        if pts:
            value = statistics.median(p.imbalance for p in pts)
            out.append(Imbalance(label, ref_names[label], value, f"{value:.2f}x",
                                 all(p.has_root for p in pts)))
    return out


def memory_clause(imbalance: list) -> str:
    """"the ps root holds 1.87x the mean per-rank memory", or with several baselines "the ps
    (collective) root holds 1.90x and the ps (p2p) root holds 2.00x the mean ..."."""
    parts = [(f"the {m.name} root holds {m.text}" if m.root else f"the largest {m.name} rank holds {m.text}")
             for m in imbalance]
    return f"{' and '.join(parts)} the mean per-rank memory"


def exposed_shares(pairs: list) -> list:
    """Exposed communication as a share of the median step at the verdict's world size: the
    baseline side (its matched points together) first, then each other strategy in order."""
    def share(side):
        return median(p.phases["comm_exposed"] / p.step_time["p50"] for p in side if p.step_time["p50"])

    refs = unique(p for _, p in pairs)
    others = unique(a for a, _ in pairs)
    sides = [refs] + [[a for a in others if a.mode == m] for m in in_order(others, "mode")]
    out = []
    for side in sides:
        value = share(side)
        if value is not None:
            out.append(Exposed(names(side), value, f"{100 * value:.0f}%"))
    return out


def verdict_notes(points: list, world: int, pairs: list, exposed: list) -> list:
    """Caveats for the verdict: time-sliced or virtual ranks, single measurements, comm share."""
    notes = []
    involved = [p for pair in pairs for p in pair]
    if any("time-sliced" in w for p in involved for w in p.warnings):
        notes.append(f"The {world} ranks shared fewer CPU cores than ranks (time-sliced), so step "
                     "times include waiting for a core; bytes and memory are exact.")
    if any(p.virtual_ranks for p in involved):
        notes.append("Some ranks were virtual (several ranks on one device): their communication "
                     "ran at device-memory speed, not link speed.")
    if len(exposed) > 1:
        shares = [f"{e.text} of the {e.name} step" for e in exposed]
        notes.append(f"Exposed communication is {' and '.join(shares)} at {world} ranks.")
    if all(p.repetitions == 1 for p in involved):
        notes.append("Each point was measured once; repeat the sweep (`--repetitions 3`) to see the spread.")
    return notes
