"""The figures of measured runs: throughput against world size, per-rank memory, the step-time
breakdown, DataLoader workers and global batch size.

Part of the report's figures (figures.py names the parts and the rules every figure keeps).
"""
from __future__ import annotations

from pathlib import Path
from typing import Optional

import figures_common  # save: called through the module, so a test can catch what it writes
from figures_common import (COLORS, Figure, LINESTYLES, MARKERS, MEMORY_STYLE, MIB, PHASE_STYLE,
                            color_for, dodge, log2_axis, place_legend, ratio_sentence, repeated,
                            series_lines, spread_line, spread_sentence, thousands,
                            throughput_spread, size_text)
import matplotlib.pyplot as plt  # noqa: E402  (after figures_common chose the Agg backend)
from matplotlib.lines import Line2D  # noqa: E402

import report_data as rd  # noqa: E402

# --------------------------------------------------------------------------------------------
# 1. throughput against world size


def workers_slice(points: list) -> tuple:
    """(num_workers, points) with the most world sizes measured, then the most series."""
    best, best_score = None, None
    for w in rd.distinct(points, "num_workers"):
        pts = [p for p in points if p.num_workers == w]
        score = (len(rd.distinct(pts, "world_size")), len(rd.distinct(pts, "series")), -w)
        if best_score is None or score > best_score:
            best, best_score = w, score
    return best, [p for p in points if p.num_workers == best]


def plot_throughput_vs_world_size(points: list, out_dir: Path, verdict=None) -> Figure:
    """Throughput (samples/s) against world size: a line per series and global batch, each in
    the legend, with its min-max spread over repetitions; the caption quotes the verdict's
    throughput ratios."""
    key, title = "throughput_vs_world_size", "Throughput against world size"
    workers, pts = workers_slice(points)
    if len(rd.distinct(pts, "world_size")) < 2:
        return Figure(key, title, missing=(
            "Throughput against world size needs runs at two or more world sizes: run "
            "`dpbench sweep --ranks 1,2,4`."))
    labels = rd.series_order(points)
    batches = rd.distinct(pts, "global_batch")
    fig, ax = plt.subplots(figsize=(7.5, 4.5))
    lines = [(label, j, batch) for label in rd.series_order(pts) for j, batch in enumerate(batches)
             if any(p.series == label and p.global_batch == batch for p in pts)]
    handles = []
    for k, (label, j, batch) in enumerate(lines):
        line = sorted((p for p in pts if p.series == label and p.global_batch == batch),
                      key=lambda p: p.world_size)
        xs = [p.world_size for p in line]
        if repeated(pts):  # side by side, so that bars at one world size do not hide one another
            xs = dodge(xs, k, len(lines), True, xs)
        # Past the palette's length colours repeat: the marker and line style then move on too.
        style = j + labels.index(label) // len(COLORS)
        handles.append(spread_line(ax, line, xs, [p.throughput for p in line], throughput_spread,
                                   color=color_for(label, labels), linestyle=LINESTYLES[style % len(LINESTYLES)],
                                   marker=MARKERS[style % len(MARKERS)],
                                   label=f"{label}, batch {batch}" if len(batches) > 1 else label))
    log2_axis(ax, [p.world_size for p in pts])
    thousands(ax)
    ax.set_ylim(bottom=0)
    ax.set_xlabel("world size (ranks)")
    ax.set_ylabel("throughput (samples/s, median" + ("; bars: min to max)" if repeated(pts) else ")"))
    ax.set_title(f"Throughput against world size ({workers} DataLoader workers)")
    place_legend(ax, handles)
    fig.tight_layout()
    top = max(rd.distinct(pts, "world_size"))
    leader = max((p for p in pts if p.world_size == top), key=lambda p: p.throughput)
    caption = " ".join(part for part in (
        f"Look at which line climbs as ranks are added: at {top} ranks {leader.series} leads "
        f"with {leader.throughput:,.0f} samples/s (batch {leader.global_batch}).",
        ratio_sentence(verdict), spread_sentence(pts)) if part)
    return Figure(key, title, caption, figures_common.save(fig, out_dir, key))


# --------------------------------------------------------------------------------------------
# 2. per-rank memory at the largest world size


def verdict_score(score, verdict, vary: Optional[str] = None):
    """score, preferring the slice that holds the verdict's comparison: its world size and, when
    it compared one setting, that batch and workers (the axis `vary` left out). With
    vary=None the preference comes first, else after the number of values of `vary`."""
    wanted = {k: v for k, v in (verdict.setting if verdict is not None else {}).items() if k != vary}

    def scored(fixed: dict, pts: list):
        base = score(fixed, pts)
        match = bool(wanted) and all(fixed.get(k) == v for k, v in wanted.items())
        return (match,) + tuple(base) if vary is None else (base[0], match) + tuple(base[1:])
    return scored


def memory_caption(pts: list, fixed: dict, verdict) -> str:
    """The memory figure's caption: the baseline's imbalance as the verdict states it (the same
    number), or, when the verdict states none, the largest root's in the figure."""
    level = rd.names(p for p in pts if not p.has_root)
    tail = f"; {level} ranks should be level." if level else "."
    stated = [m for m in (verdict.imbalance if verdict is not None else []) if m.root]
    if stated and verdict.world == fixed.get("world_size"):
        held = " and ".join(f"the {m.name} root {'peaks at ' if i == 0 else 'at '}{m.text}"
                            for i, m in enumerate(stated))
        source = "the verdict's figure"
        if verdict.settings > 1:
            source += (f", the median over its {verdict.settings} matched settings; the panels show "
                       f"{rd.describe_fixed(fixed)}")
        return (f"Compare rank 0 with the others: {held} the mean rank ({source}; master parameters, "
                f"gradients, momentum, full-batch staging){tail}")
    roots = [p for p in pts if p.has_root]
    if roots:
        worst = max(roots, key=lambda p: p.imbalance)
        return (f"Compare rank 0 with the others: the {worst.mode} root peaks at {worst.imbalance:.2f}x "
                f"the mean rank (master parameters, gradients, momentum, full-batch staging){tail}")
    return f"{level} ranks should be level: every rank holds the same replica and optimizer state."


def plot_memory_per_rank(points: list, out_dir: Path, verdict=None) -> Figure:
    """Per-rank peak memory, stacked by category, one panel per series at the verdict's world
    size and setting (else the largest world size), with the max/mean imbalance written on each
    panel; the caption quotes the verdict's imbalance."""
    key, title = "memory_per_rank", "Per-rank peak memory"
    fixed, pts = rd.pick_slice(points, None, verdict_score(rd.largest_world_score, verdict))
    if not pts:
        return Figure(key, title, missing="No successful run recorded memory: run `dpbench run`.")
    order = rd.series_order(pts)
    ncols = min(len(order), 4)
    nrows = (len(order) + ncols - 1) // ncols
    fig, axes = plt.subplots(nrows, ncols, figsize=(max(4.0, 3.4 * ncols), 3.9 * nrows + 0.7),
                             sharey=True, squeeze=False)
    for i in range(len(order), nrows * ncols):
        axes[i // ncols][i % ncols].set_visible(False)
    for i, label in enumerate(order):
        ax = axes[i // ncols][i % ncols]
        p = next(q for q in pts if q.series == label)
        ranks = [m["rank"] for m in p.memory_per_rank]
        bottom = [0.0] * len(ranks)
        for cat, cat_label, color in MEMORY_STYLE:
            heights = [(m.get(cat) or 0) / MIB for m in p.memory_per_rank]
            ax.bar(ranks, heights, bottom=bottom, color=color, width=0.7, label=cat_label)
            bottom = [b + h for b, h in zip(bottom, heights)]
        peaks = [m["peak_bytes"] / MIB for m in p.memory_per_rank]
        ax.scatter(ranks, peaks, marker="_", s=600, color="black", zorder=3, label="peak (allocator)")
        modelled = [(m["rank"], m["modelled"]["total_bytes"] / MIB) for m in p.memory_per_rank if "modelled" in m]
        if modelled:  # a short tick just right of each bar, at the model's total
            ax.hlines([y for _, y in modelled], [r + 0.38 for r, _ in modelled], [r + 0.62 for r, _ in modelled],
                      colors="black", linewidth=2.2, zorder=4, label=MODEL_TICK_LABEL)
        mean = sum(peaks) / len(peaks)
        ax.axhline(mean, color="black", linestyle="--", linewidth=0.8, label="mean peak")
        note = f"max/mean = {p.imbalance:.2f}"
        if p.has_root:
            note += f"\nroot +{p.root_minus_mean_bytes / MIB:.1f} MiB over mean"
        ax.text(0.98, 0.97, note, transform=ax.transAxes, ha="right", va="top",
                bbox={"facecolor": "white", "alpha": 0.85, "edgecolor": "#999999"})
        ax.set_xticks(ranks)
        ax.set_title(label)
        ax.set_xlabel("rank")
    for row in axes:
        row[0].set_ylabel("peak memory (MiB)")
    ymax = max(max(sum((m.get(c) or 0) for c, _, _ in MEMORY_STYLE), m["peak_bytes"],
                   (m.get("modelled") or {}).get("total_bytes") or 0)
               for p in pts for m in p.memory_per_rank) / MIB
    axes[0][0].set_ylim(0, ymax * 1.3)
    legend: dict = {}  # every panel's entries, once each (the model's tick may be on some panels only)
    for ax in (a for row in axes for a in row if a.get_visible()):
        for handle, name in zip(*ax.get_legend_handles_labels()):
            legend.setdefault(name, handle)
    fig.legend(list(legend.values()), list(legend), loc="lower center", ncol=4, frameon=False)
    fig.suptitle(f"Per-rank peak memory by category ({rd.describe_fixed(fixed)})")
    fig.tight_layout(rect=(0, 0.12 / nrows, 1, 1))
    caption = " ".join(part for part in (memory_caption(pts, fixed, verdict), model_agreement(pts)) if part)
    return Figure(key, title, caption, figures_common.save(fig, out_dir, key))


MODEL_TICK_LABEL = "model's total (dpbench memory)"


def same_bytes(a, b) -> bool:
    """True when two byte counts are equal to the byte (both known)."""
    return a is not None and b is not None and abs(float(a) - float(b)) < 0.5


def model_agreement(pts: list) -> str:
    """The memory figure's sentence on the model: whether the measured bytes equal the modelled
    ones (memory.per_rank[].modelled: every category, and the allocator's peak against the
    model's total) on every rank drawn, else on how many they differ and where the totals differ
    most; "" when no drawn rank carries the model's figures."""
    ranks = [(p, m) for p in pts for m in p.memory_per_rank]
    with_model = [(p, m) for p, m in ranks if "modelled" in m]
    if not with_model:
        return ""
    differ = [(p, m) for p, m in with_model
              if not same_bytes(m["peak_bytes"], m["modelled"]["total_bytes"])
              or not all(same_bytes(m.get(c) or 0, m["modelled"].get(c)) for c in rd.MEMORY_CATEGORIES)]
    lacking = len(ranks) - len(with_model)
    tail = (f" ({lacking} drawn rank{'s have' if lacking != 1 else ' has'} no model figures: the model covers "
            "CPU ranks over --comm local)") if lacking else ""
    if not differ:
        every = "every rank drawn" if not lacking else f"each of the {len(with_model)} ranks that carry it"
        return (f"Measured equals modelled on {every}: each category and the allocator's peak against the "
                f"model's total (the tick right of each bar), to the byte{tail}.")
    head = (f"Measured differs from modelled on {len(differ)} of {len(with_model)} ranks (the tick right of each "
            "bar is the model's total)")
    worst_p, worst = max(differ, key=lambda pm: abs(pm[1]["peak_bytes"] - pm[1]["modelled"]["total_bytes"]))
    gap = worst["peak_bytes"] - worst["modelled"]["total_bytes"]
    if same_bytes(gap, 0):
        return f"{head}; the totals agree, but a category does not{tail}."
    return (f"{head}; the largest gap is {worst_p.series} rank {worst['rank']}: peak "
            f"{size_text(worst['peak_bytes'])} against the model's {size_text(worst['modelled']['total_bytes'])} "
            f"({'+' if gap >= 0 else '-'}{size_text(abs(gap))}){tail}.")


# --------------------------------------------------------------------------------------------
# 3. step-time breakdown


def phase_segments(p) -> dict:
    """Stacked segments of one point's median step in seconds: the phases, the unattributed
    rest of the p50 step, and the communication hidden by overlap (not part of the step; only
    where rd.hidden_comm says overlap can exist)."""
    seg = {name: max(p.phases.get(name, 0.0) or 0.0, 0.0) for name, _, _ in PHASE_STYLE if name != "other"}
    seg["other"] = max(p.step_time["p50"] - sum(seg.values()), 0.0)
    seg["hidden"] = rd.hidden_comm(p)
    return seg


def bar_top(p, segments: dict) -> float:
    """The highest y (seconds) a point's bar reaches: its stacked phases with the hidden part
    above them, or its p50 step marker and the top of that marker's min-max bar."""
    stacked = sum(v for k, v in segments.items() if k != "hidden") + segments["hidden"]
    return max(stacked, p.step_time["p50"] or 0.0, p.step_p50_max or 0.0)


def exposed_caption(bars: list, verdict) -> str:
    """The step breakdown's first sentence: the exposed shares the verdict states (the same
    numbers), or, when it states none, the largest share among the bars."""
    if verdict is not None and verdict.exposed:
        shares = ", ".join(f"{e.text} of the {e.name} step" for e in verdict.exposed)
        return (f"Watch the red exposed-comm segment: at {verdict.world} ranks it is {shares} (the "
                "verdict's medians).")
    worst = max(bars, key=lambda p: p.phases["comm_exposed"] / p.step_time["p50"] if p.step_time["p50"] else 0)
    share = worst.phases["comm_exposed"] / worst.step_time["p50"] if worst.step_time["p50"] else 0
    return (f"Watch the red exposed-comm segment: it is {100 * share:.0f}% of the step for {worst.series} "
            f"at {worst.world_size} ranks.")


def plot_step_breakdown(points: list, out_dir: Path, verdict=None) -> Figure:
    """Median step time split into phases, a bar per series x world size; communication that
    overlapped backward is drawn hatched above the bar where overlap can exist
    (rd.hidden_comm). The y axis holds every bar and the p50 marker's min-max bar whole."""
    key, title = "step_breakdown", "Step-time breakdown"
    fixed, pts = rd.pick_slice(points, "world_size",
                               verdict_score(rd.coverage_score("world_size"), verdict, "world_size"))
    if not pts:
        return Figure(key, title, missing="No successful run recorded a step breakdown: run `dpbench run`.")
    order = rd.series_order(pts)
    bars, x, positions, group_centres = [], 0.0, [], []
    for label in order:
        group = sorted((p for p in pts if p.series == label), key=lambda p: p.world_size)
        start = x
        for p in group:
            bars.append(p)
            positions.append(x)
            x += 1.0
        group_centres.append(((start + x - 1.0) / 2.0, label))
        x += 0.8
    # Wide enough for the bars and for the group labels side by side above them.
    label_width = 0.11 * sum(len(label) for _, label in group_centres) + 4.0
    fig, ax = plt.subplots(figsize=(max(6.5, 0.75 * len(bars) + 2.5, label_width), 4.8))
    segments = [phase_segments(p) for p in bars]
    bottom = [0.0] * len(bars)
    for name, label, color in PHASE_STYLE:
        heights = [s[name] * 1e3 for s in segments]
        if not any(heights):
            continue  # e.g. host-to-device on a CPU run: no empty legend entry
        ax.bar(positions, heights, bottom=bottom, color=color, width=0.75, label=label)
        bottom = [b + h for b, h in zip(bottom, heights)]
    hidden = [(x, b, s["hidden"] * 1e3) for x, b, s in zip(positions, bottom, segments) if s["hidden"] > 0]
    if hidden:
        ax.bar([x for x, _, _ in hidden], [h for _, _, h in hidden], bottom=[b for _, b, _ in hidden],
               width=0.75, facecolor="none", edgecolor="#d62728", hatch="///", linewidth=0.8,
               label="comm hidden by overlap (not in the step)")
    p50 = [p.step_time["p50"] * 1e3 for p in bars]
    ax.scatter(positions, p50, marker="_", s=500, color="black", zorder=3, label="step time p50")
    spread = [(x, y, p) for x, y, p in zip(positions, p50, bars)
              if p.repetitions > 1 and p.step_p50_min is not None and p.step_p50_max is not None]
    if spread:
        ax.errorbar([x for x, _, _ in spread], [y for _, y, _ in spread],
                    yerr=[[y - p.step_p50_min * 1e3 for _, y, p in spread],
                          [p.step_p50_max * 1e3 - y for _, y, p in spread]],
                    fmt="none", ecolor="black", elinewidth=1.0, capsize=4, zorder=4,
                    label="step time p50, min to max over repetitions")
    ax.set_ylim(0, 1.08 * (max(bar_top(p, seg) for p, seg in zip(bars, segments)) * 1e3 or 1.0))
    ax.set_xticks(positions)
    ax.set_xticklabels([f"{p.world_size}" for p in bars])
    top = ax.secondary_xaxis("top")
    top.set_xticks([c for c, _ in group_centres])
    top.set_xticklabels([label for _, label in group_centres])
    top.tick_params(length=0)
    ax.set_xlabel("world size (ranks)")
    ax.set_ylabel("time per step (ms, medians)")
    ax.set_title(f"Step-time breakdown ({rd.describe_fixed(fixed)})", pad=22)
    ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1.0), frameon=False)
    fig.tight_layout()
    caption = (f"{exposed_caption(bars, verdict)} Hatched: communication hidden by overlap, which ran "
               f"while backward did and cost no step time; it is {rd.OVERLAP_RULE}"
               + ("" if hidden else " (no bar here meets that)") + ".")
    return Figure(key, title, caption, figures_common.save(fig, out_dir, key))


# --------------------------------------------------------------------------------------------
# 4. DataLoader workers


def plot_workers(points: list, out_dir: Path) -> Figure:
    """Throughput and data-wait time against num_workers, one line per series (two panels)."""
    key, title = "workers", "Throughput and data wait against DataLoader workers"
    fixed, pts = rd.pick_slice(points, "num_workers", rd.coverage_score("num_workers"))
    if len(rd.distinct(pts, "num_workers")) < 2:
        return Figure(key, title, missing=(
            "The DataLoader-workers figure needs two or more num_workers values at the same ranks "
            "and batch: run `dpbench sweep --num-workers 0,2,4`."))
    labels = rd.series_order(points)
    fig, (top, bottom) = plt.subplots(2, 1, figsize=(7.0, 5.6), sharex=True)
    handles = series_lines(top, pts, "num_workers", lambda p: p.throughput, labels, throughput_spread)
    series_lines(bottom, pts, "num_workers", lambda p: p.phases["data_wait"] * 1e3, labels)
    top.set_ylabel("throughput (samples/s)")
    thousands(top)
    top.set_ylim(bottom=0)
    bottom.set_ylabel("data wait per step (ms, median)")
    bottom.set_ylim(bottom=0)
    bottom.set_xlabel("DataLoader num_workers (worker threads per loading rank)")
    bottom.set_xticks(rd.distinct(pts, "num_workers"))
    top.set_title(f"Throughput and data wait against DataLoader workers ({rd.describe_fixed(fixed)})")
    place_legend(top, handles)
    fig.tight_layout()
    caption = ("Look for the worker count where data wait drops to near zero: beyond it more workers "
               "cannot raise throughput, because loading is no longer on the critical path. "
               + spread_sentence(pts))
    return Figure(key, title, caption, figures_common.save(fig, out_dir, key))


# --------------------------------------------------------------------------------------------
# 5. global batch size


def plot_batch_size(points: list, out_dir: Path) -> Figure:
    """Throughput and peak memory (largest and mean rank) against global batch size."""
    key, title = "batch_size", "Throughput and peak memory against global batch size"
    fixed, pts = rd.pick_slice(points, "global_batch", rd.coverage_score("global_batch"))
    if len(rd.distinct(pts, "global_batch")) < 2:
        return Figure(key, title, missing=(
            "The batch-size figure needs two or more global batch sizes at the same ranks and "
            "workers: run `dpbench sweep --batch-sizes 64,256,1024`."))
    labels = rd.series_order(points)
    fig, (top, bottom) = plt.subplots(2, 1, figsize=(7.0, 5.6), sharex=True)
    handles = series_lines(top, pts, "global_batch", lambda p: p.throughput, labels, throughput_spread, log_x=True)
    series_lines(bottom, pts, "global_batch",
                 lambda p: max(m["peak_bytes"] for m in p.memory_per_rank) / MIB, labels)
    series_lines(bottom, pts, "global_batch",
                 lambda p: sum(m["peak_bytes"] for m in p.memory_per_rank) / len(p.memory_per_rank) / MIB,
                 labels, linestyle="--", alpha=0.6)
    top.set_ylabel("throughput (samples/s)")
    thousands(top)
    top.set_ylim(bottom=0)
    bottom.set_ylabel("peak memory (MiB)")
    bottom.set_ylim(bottom=0)
    bottom.legend(handles=[Line2D([], [], color="black", label="largest rank"),
                           Line2D([], [], color="black", linestyle="--", alpha=0.6, label="mean rank")],
                  loc="upper left")
    log2_axis(bottom, [p.global_batch for p in pts])
    bottom.set_xlabel("global batch size (samples per step, all ranks)")
    top.set_title(f"Throughput and peak memory against global batch ({rd.describe_fixed(fixed)})")
    place_legend(top, handles)
    fig.tight_layout()
    roots = rd.names(p for p in pts if p.has_root)
    caption = ("Look at how throughput grows as larger batches amortise the per-step communication, and "
               "at the gap between each mode's solid (largest rank) and dashed (mean rank) memory line"
               + (f": the {roots} root stages the full batch." if roots else ".")
               + " " + spread_sentence(pts))
    return Figure(key, title, caption, figures_common.save(fig, out_dir, key))
