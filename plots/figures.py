"""The report's figures: one function per figure, each writing one PNG with matplotlib (Agg).

For: drawing the records report_data.py builds. Every function returns a Figure; when its data
is missing (a sweep with one num_workers value, no --collectives file...) it writes nothing and
the Figure carries one sentence saying what to run to get it, so the report never shows an empty
axis. The rules every figure keeps:
- order: strategies in the report's one order (report_data.series_order: the reference, ps,
  first, then the others as the files first name them) in legends, panels and bar groups, and one
  colour per strategy across the figures;
- spread: a throughput that has repetitions is drawn as its median with a bar from the smallest
  to the largest repetition (the step-time marker too);
- overlap: communication hidden by overlap is drawn only where report_data.hidden_comm says it
  can exist (more than one rank, a strategy that overlaps backward, a hidden part above zero);
- limits: the y axis holds every bar and error bar whole, with headroom;
- modelled: the memory model's figure (`dpbench memory`, --memory) says "modelled" in its title,
  axis and caption, and stacks the categories in the measured memory figure's colours and order;
- captions: a number the verdict also states (throughput ratios, memory imbalance, exposed
  communication) is read from the Verdict (report_data.compute_verdict, computed once by
  report.py), never recomputed; the two emulated-cluster figures quote the NetworkVerdict alike.

Not for: reading JSON or choosing verdicts (report_data.py), or HTML/Markdown (report.py).
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Optional

import matplotlib
import matplotlib.patches

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402  (after the backend is chosen)
from matplotlib.lines import Line2D  # noqa: E402
from matplotlib.ticker import FuncFormatter, LogLocator, NullLocator  # noqa: E402

import report_data as rd  # noqa: E402

FIGURE_KEYS = ("throughput_vs_world_size", "memory_per_rank", "memory_model", "step_breakdown",
               "workers", "batch_size", "collectives_busbw", "allreduce_implementations",
               "projection",  # PNG file stems, report order; then the emulated-cluster
               "network_vs_link", "network_vs_nodes", "network_simulation",
               "trends")  # figures, which such a
# report draws first
# A second, third... --memory file draws memory_model_2, memory_model_3...
MIB = 1024.0 ** 2
GIB = 1024.0 ** 3
DPI = 110
PHASE_STYLE = (  # phase, legend label, colour; the order they stack in
    ("data_wait", "data wait", "#9e9e9e"),
    ("h2d", "host-to-device", "#bcbd22"),
    ("forward", "forward", "#1f77b4"),
    ("backward", "backward", "#2ca02c"),
    ("comm_exposed", "comm (exposed)", "#d62728"),
    ("optimizer", "optimizer", "#9467bd"),
    ("other", "other (unattributed)", "#e0e0e0"),
)
MEMORY_STYLE = (
    ("parameters", "parameters", "#1f77b4"),
    ("gradients", "gradients", "#2ca02c"),
    ("optimizer_state", "optimizer state", "#9467bd"),
    ("activations", "activations", "#ff7f0e"),
    ("comm_buffers", "comm buffers", "#d62728"),
    ("data_staging", "data staging", "#8c564b"),
)
# Series colours in the report's order of the series (so ps, sharded_ps and allreduce get blue,
# orange and red).
COLORS = ("#1f77b4", "#ff7f0e", "#d62728", "#2ca02c", "#9467bd", "#8c564b", "#e377c2", "#7f7f7f",
          "#bcbd22", "#17becf")
LINESTYLES = ("-", "--", ":", "-.")
MARKERS = ("o", "s", "^", "D", "v", "P")

plt.rcParams.update({
    "font.size": 9, "axes.titlesize": 10, "axes.grid": True, "grid.alpha": 0.3,
    "legend.fontsize": 8, "figure.dpi": DPI, "savefig.dpi": DPI,
    "svg.hashsalt": "dpbench",
})


@dataclass
class Figure:
    """One figure of the report: a PNG that was written, or the sentence that replaces it."""

    key: str
    title: str
    caption: str = ""
    path: Optional[Path] = None
    missing: str = ""

    @property
    def produced(self) -> bool:
        """True when the PNG exists."""
        return self.path is not None


# --------------------------------------------------------------------------------------------
# shared helpers


def save(fig, out_dir: Path, key: str) -> Path:
    """Writes fig as out_dir/<key>.png without the software/time metadata, and closes it."""
    path = Path(out_dir) / f"{key}.png"
    fig.savefig(path, format="png", metadata={"Software": None}, bbox_inches="tight", pad_inches=0.15)
    plt.close(fig)
    return path


def color_for(label: str, all_labels: list) -> str:
    """A stable colour per series: by the label's position in `all_labels`, the figure set's
    labels in the report's order (rd.series_order of every point; series of config variants,
    e.g. "ps (collective) [hidden=[1024]]", included). A label not among them comes after."""
    labels = list(dict.fromkeys(list(all_labels) + [label]))
    return COLORS[labels.index(label) % len(COLORS)]


def bytes_text(n: float) -> str:
    """1024 -> "1 KiB", 67108864 -> "64 MiB"."""
    for unit, size in (("GiB", 1024 ** 3), ("MiB", 1024 ** 2), ("KiB", 1024)):
        if n >= size:
            value = n / size
            return f"{value:.0f} {unit}" if value == int(value) else f"{value:.1f} {unit}"
    return f"{n:.0f} B"


def log2_axis(ax, values) -> None:
    """Log-2 x axis with a tick at each value, written as plain integers."""
    ax.set_xscale("log", base=2)
    ax.set_xticks(sorted(set(values)))
    ax.xaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:g}"))
    ax.xaxis.set_minor_locator(NullLocator())


def thousands(ax) -> None:
    """y tick labels with thousands separators."""
    ax.yaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:,.0f}"))


def place_legend(ax, handles: Optional[list] = None, **kwargs) -> None:
    """A legend inside the axes when it is short, to the right of them when it would hide data.
    handles: the entries in the order to list them (matplotlib's own order puts plain lines before
    lines with error bars, whatever order they were drawn in)."""
    if handles is None:
        handles, _ = ax.get_legend_handles_labels()
    else:
        kwargs["handles"] = handles
    if len(handles) > 6:
        ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1.0), frameon=False, **kwargs)
    else:
        ax.legend(loc="best", **kwargs)


def repeated(points) -> bool:
    """True when some point was measured more than once (so it has a spread to draw)."""
    return any(p.repetitions > 1 for p in points)


def throughput_spread(p) -> Optional[tuple]:
    """(min, max) throughput over a point's repetitions; None for a single measurement."""
    if p.repetitions < 2 or p.throughput_min is None or p.throughput_max is None:
        return None
    return p.throughput_min, p.throughput_max


def spread_line(ax, pts: list, xs: list, ys: list, spread_of=None, **style):
    """One labelled line through (xs, ys); where spread_of(point) gives (lo, hi), the point gets
    an error bar from lo to hi (the min and max over its repetitions). Returns its legend handle."""
    spreads = [spread_of(p) if spread_of else None for p in pts]
    if not any(spreads):
        return ax.plot(xs, ys, **style)[0]
    lows = [y - (sp[0] if sp else y) for y, sp in zip(ys, spreads)]
    highs = [(sp[1] if sp else y) - y for y, sp in zip(ys, spreads)]
    return ax.errorbar(xs, ys, yerr=[lows, highs], capsize=3, elinewidth=1.0, **style)


def dodge(xs: list, k: int, n: int, log: bool, all_xs: list) -> list:
    """xs shifted sideways for the k-th of n lines, so that their error bars at one x do not hide
    one another: by up to 0.1 octave in all on a log axis, by up to a tenth of the smallest gap
    between the x values (all_xs) on a linear one."""
    if n < 2:
        return list(xs)
    offset = (k - (n - 1) / 2) / (n - 1) * 0.1
    if log:
        return [x * 2 ** offset for x in xs]
    values = sorted(set(all_xs))
    gap = min((b - a for a, b in zip(values, values[1:])), default=1.0)
    return [x + offset * gap for x in xs]


def series_lines(ax, points, x_attr: str, y_of, labels: list, spread_of=None, log_x: bool = False,
                 **style) -> list:
    """One line per series, in the report's order: y_of(point) against the point's x_attr, with
    spread_of(point) -> (min, max) drawn as an error bar where it is given (the lines then
    dodged sideways a little; log_x: the x axis is logarithmic). Returns the legend handles."""
    order = rd.series_order(points)
    spread = spread_of is not None and repeated(points)
    all_xs = [getattr(p, x_attr) for p in points]
    handles = []
    for i, label in enumerate(order):
        pts = sorted((p for p in points if p.series == label), key=lambda p: getattr(p, x_attr))
        xs = [getattr(p, x_attr) for p in pts]
        if spread:
            xs = dodge(xs, i, len(order), log_x, all_xs)
        handles.append(spread_line(ax, pts, xs, [y_of(p) for p in pts], spread_of, marker=MARKERS[i % len(MARKERS)],
                                   color=color_for(label, labels), label=label, **style))
    return handles


def spread_sentence(points) -> str:
    """How a figure's caption says what its markers and bars are."""
    reps = sorted({p.repetitions for p in points})
    if reps[-1] < 2:
        return "Each point was measured once, so no spread is drawn."
    count = f"{reps[0]}" if len(reps) == 1 else f"{reps[0]} to {reps[-1]}"
    return f"Markers are medians over {count} repetitions; bars run from the smallest to the largest."


def ratio_sentence(verdict) -> str:
    """The verdict's throughput ratios, as the verdict words them: "At 2 ranks (batch 256, 0
    workers), sharded_ps is 1.37x faster than ps and allreduce is 1.14x faster than ps (the
    verdict's ratios)." ("" when the verdict states none)."""
    if verdict is None or not verdict.ratios:
        return ""
    clauses = [f"{r.other_name} {r.text}" for r in verdict.ratios]
    where = verdict.where[3:] if verdict.where.startswith("at ") else verdict.where
    return f"At {where}, {'; '.join(clauses)} (the verdict's ratios)."


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
    return Figure(key, title, caption, save(fig, out_dir, key))


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
    """The memory figure's caption: the reference's imbalance as the verdict states it (the same
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
    return Figure(key, title, caption, save(fig, out_dir, key))


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


def size_text(n: float) -> str:
    """Bytes for a sentence: 5360098944 -> "4.99 GiB", 1572864 -> "1.5 MiB", 300 -> "300 B"."""
    for unit, size, spec in (("GiB", GIB, ".2f"), ("MiB", MIB, ".1f"), ("KiB", 1024.0, ".1f")):
        if n >= size:
            return f"{n / size:{spec}} {unit}"
    return f"{n:.0f} B"


# --------------------------------------------------------------------------------------------
# 2b. the memory model (`dpbench memory`): per-rank bytes by category, and the largest model


def memory_unit(largest_bytes: float) -> tuple:
    """("GiB", 2**30) when the largest bar reaches a GiB, else ("MiB", 2**20): the unit the
    memory model's figure draws in."""
    return ("GiB", GIB) if largest_bytes >= GIB else ("MiB", MIB)


def params_text(n: float) -> str:
    """335e6 -> "335M", 3.148e9 -> "3.15B", 535818 -> "536K"."""
    for unit, size in (("T", 1e12), ("B", 1e9), ("M", 1e6), ("K", 1e3)):
        if n >= size:
            return f"{n / size:.3g}{unit}"
    return f"{n:.0f}"


def sci_text(n: float) -> str:
    """8.304e9 -> "8.30e9" (a parameter count in a caption)."""
    mantissa, exponent = f"{n:.2e}".split("e")
    return f"{mantissa}e{int(exponent)}"


def model_text(mem: rd.MemoryModel) -> str:
    """"335M parameters" for a model described by its size; "built-in mlp (hidden 512,256)"."""
    if mem.params is not None:
        return f"{params_text(mem.params)} parameters"
    hidden = mem.model.get("hidden")
    widths = f" (hidden {','.join(str(h) for h in hidden)})" if isinstance(hidden, list) and hidden else ""
    return f"built-in {mem.model.get('workload', 'model')}{widths}"


def mode_colors(modes: list, points) -> dict:
    """{mode: colour}: the colour the other figures give the mode's (first) series, so that a
    mode keeps its colour across the report; modes no result file ran come after them."""
    labels = rd.series_order(points)
    first = {}
    for label in labels:
        mode = next(p.mode for p in points if p.series == label)
        first.setdefault(mode, label)
    extra = [m for m in modes if m not in first]
    return {m: color_for(first.get(m, m), labels + extra) for m in modes}


def memory_model_bars(mem: rd.MemoryModel, modes: list) -> list:
    """(world size, mode, role, row) of every bar, in drawing order: grouped by world size, then
    the modes in the report's order, then each mode's roles in the file's order."""
    bars = []
    for world in sorted({r["world_size"] for r in mem.rows}):
        for mode in modes:
            for role in rd.memory_roles(mem, mode):
                row = rd.memory_row(mem, mode, world, role)
                if row is not None:
                    bars.append((world, mode, role, row))
    return bars


def excess_sentence(mem: rd.MemoryModel, modes: list) -> str:
    """"The ps root holds 4.99 GiB more than a ps worker at 2, 4 and 8 ranks." (each world
    size's figure when they differ); "" when no mode has a root beside workers."""
    sentences = []
    for mode in modes:
        excess = [(w, b) for m, w, b in rd.root_excess(mem, modes) if m == mode]
        if not excess:
            continue
        texts = [size_text(abs(b)) + (" less" if b < 0 else " more") for _, b in excess]
        if len(set(texts)) == 1:
            worlds = [str(w) for w, _ in excess]
            at = worlds[0] if len(worlds) == 1 else f"{', '.join(worlds[:-1])} and {worlds[-1]}"
            sentences.append(f"The {mode} root holds {texts[0]} than a {mode} worker at {at} ranks.")
        else:
            sentences.append(f"The {mode} root holds, against a {mode} worker, "
                             + ", ".join(f"{t} at {w} ranks" for t, (w, _) in zip(texts, excess)) + ".")
    return " ".join(sentences)


def fitting_sentence(mem: rd.MemoryModel, modes: list) -> str:
    """Which mode fits the most parameters at each world size of largest_fitting, with the
    reference's (the first mode's) figures beside it; "" without largest_fitting."""
    best = rd.most_fitting(mem, modes)
    if not best:
        return ""
    worlds = sorted(best)
    leaders = list(dict.fromkeys(m for m, _ in best.values()))

    def span(mode):
        values = sorted((f["world_size"], float(f["largest_params"])) for f in mem.fitting if f["mode"] == mode)
        if len(values) == 1:
            return f"{sci_text(values[0][1])} at {values[0][0]} ranks"
        return f"{sci_text(values[0][1])} at {values[0][0]} ranks to {sci_text(values[-1][1])} at {values[-1][0]}"
    if len(leaders) == 1:
        text = f"{leaders[0]} fits the most parameters at every world size ({span(leaders[0])})"
    else:
        text = "The most parameters fit under " + "; ".join(f"{best[w][0]} at {w} ranks ({sci_text(best[w][1])})"
                                                              for w in worlds)
    ref = modes[0]
    if ref not in leaders and any(f["mode"] == ref for f in mem.fitting):
        text += f", against {span(ref)} for {ref}"
    return text + "."


def plot_memory_model(mem: Optional[rd.MemoryModel], out_dir: Path, points=(), key: str = "memory_model") -> Figure:
    """The memory model's per-rank bytes (`dpbench memory`), stacked by category in the measured
    figure's colours and order: one bar per (mode, role) at each world size, grouped by world
    size, the modes in the report's order (ps first). With largest_fitting, a second panel: the
    largest parameter count that fits against world size, a line per mode (log y). Everything
    is labelled "modelled"; the caption states the root's excess over a worker and which mode
    fits the most parameters. points: the report's measured points, for the order and colours."""
    points = list(points)
    if mem is None:
        return Figure(key, "Modelled per-rank memory", missing=(
            "The modelled per-rank memory needs a memory-model file: run `dpbench memory --ranks 2,4,8 "
            "-o memory.json` (with `--params N --capacity-gb 80` for a model described by its size) and "
            "pass `--memory memory.json`."))
    title = f"Modelled per-rank memory, {mem.precision}"
    if key != "memory_model":
        title += f", {Path(mem.source).name}"
    if not mem.rows:
        return Figure(key, title, missing=f"The --memory file {mem.source} has no rows: rerun `dpbench memory`.")
    modes = rd.memory_modes(mem, points)
    colors = mode_colors(modes, points)
    bars = memory_model_bars(mem, modes)
    unit, size = memory_unit(max(float(row["total_bytes"]) for *_, row in bars))
    positions, centres, x = [], [], 0.0
    for world in sorted({w for w, *_ in bars}):
        start = x
        for _ in (b for b in bars if b[0] == world):
            positions.append(x)
            x += 1.0
        centres.append(((start + x - 1.0) / 2.0, f"{world} rank{'s' if world != 1 else ''}"))
        x += 0.8
    fitting = [f for f in mem.fitting if f["mode"] in modes]
    width = max(6.5, 0.62 * len(bars) + 2.5)
    if fitting:
        fig, (ax, fit_ax) = plt.subplots(1, 2, figsize=(width + 4.6, 5.0), gridspec_kw={"width_ratios": [width, 4.6]})
    else:
        fig, ax = plt.subplots(figsize=(width, 5.0))
    bottom = [0.0] * len(bars)
    for cat, cat_label, color in MEMORY_STYLE:
        heights = [float(row[cat]) / size for *_, row in bars]
        ax.bar(positions, heights, bottom=bottom, color=color, width=0.75, label=cat_label)
        bottom = [b + h for b, h in zip(bottom, heights)]
    if len(bars) <= 24:
        for xpos, (*_, row) in zip(positions, bars):
            ax.text(xpos, float(row["total_bytes"]) / size, f"{float(row['total_bytes']) / size:.2f}",
                    ha="center", va="bottom", fontsize=6.5)
    ax.set_ylim(0, 1.12 * max(bottom + [float(row["total_bytes"]) / size for *_, row in bars]))
    ax.set_xticks(positions)
    ax.set_xticklabels([f"{mode}\n{role}" for _, mode, role, _ in bars], fontsize=7)
    for tick, (_, mode, _, _) in zip(ax.get_xticklabels(), bars):
        tick.set_color(colors[mode])
    top = ax.secondary_xaxis("top")
    top.set_xticks([c for c, _ in centres])
    top.set_xticklabels([label for _, label in centres])
    top.tick_params(length=0)
    ax.set_ylabel(f"modelled bytes per rank ({unit})")
    ax.set_title("Per rank by category (the largest rank of each role)", pad=20)
    if fitting:
        for i, mode in enumerate(m for m in modes if any(f["mode"] == m for f in fitting)):
            line = sorted((f for f in fitting if f["mode"] == mode), key=lambda f: f["world_size"])
            fit_ax.plot([f["world_size"] for f in line], [float(f["largest_params"]) for f in line],
                        marker=MARKERS[i % len(MARKERS)], color=colors[mode], label=mode)
        log2_axis(fit_ax, [f["world_size"] for f in fitting])
        fit_ax.set_yscale("log")
        values = [float(f["largest_params"]) for f in fitting]
        fit_ax.set_ylim(min(values) / 1.25, max(values) * 1.25)
        fit_ax.yaxis.set_major_locator(LogLocator(base=10, subs=(1.0, 2.0, 3.0, 5.0)))
        fit_ax.yaxis.set_minor_locator(NullLocator())
        fit_ax.yaxis.set_major_formatter(FuncFormatter(lambda v, _: params_text(v)))
        fit_ax.set_xlabel("world size (ranks)")
        fit_ax.set_ylabel("largest parameter count that fits (modelled)")
        fit_ax.set_title("Largest model whose largest rank fits")
        fit_ax.legend(loc="best", fontsize=7)
    batch = f", global batch {mem.global_batch}" if mem.global_batch is not None else ""
    optimizer = f", {mem.optimizer}" if mem.optimizer else ""
    handles, names = ax.get_legend_handles_labels()
    fig.legend(handles, names, loc="lower center", ncol=len(names), frameon=False)
    fig.suptitle(f"Modelled per-rank memory (dpbench memory): {model_text(mem)}, {mem.precision}{optimizer}{batch}")
    fig.tight_layout(rect=(0, 0.06, 1, 1))
    caption = " ".join(part for part in (
        f"Modelled, not measured: the bytes `dpbench memory` gives the largest rank of each role "
        f"({mem.precision}{optimizer}{batch}), stacked by category in the measured figure's colours; "
        f"the number on each bar is its total in {unit}.",
        excess_sentence(mem, modes), fitting_sentence(mem, modes)) if part)
    return Figure(key, title, caption, save(fig, out_dir, key))


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
    return Figure(key, title, caption, save(fig, out_dir, key))


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
    return Figure(key, title, caption, save(fig, out_dir, key))


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
    return Figure(key, title, caption, save(fig, out_dir, key))


# --------------------------------------------------------------------------------------------
# 6. collective bus bandwidth


def plot_collectives(coll: Optional[rd.Collectives], out_dir: Path) -> Figure:
    """busbw against message size, a panel per collective and a line per rank count, with the
    memcpy bandwidth as the reference line."""
    key, title = "collectives_busbw", "Collective bus bandwidth against message size"
    if coll is None:
        return Figure(key, title, missing=(
            "The bus-bandwidth figure needs the collective micro-benchmarks: run "
            "`dpbench_collectives --benchmark_format=json --benchmark_out=collectives.json` "
            "(built under bench/micro/) and pass `--collectives collectives.json`."))
    pts = [b for b in coll.points if b.busbw is not None and b.busbw > 0]
    if not pts:
        return Figure(key, title, missing=(
            "The --collectives file has no benchmark with a busbw counter: run "
            "`dpbench_collectives --benchmark_format=json` and pass its output."))
    names = sorted({b.collective for b in pts})
    ncols = min(len(names), 3)
    nrows = (len(names) + ncols - 1) // ncols
    fig, axes = plt.subplots(nrows, ncols, figsize=(4.0 * ncols + 0.5, 3.6 * nrows + 0.4),
                             sharey=True, squeeze=False)
    ranks_all = sorted({b.ranks or 0 for b in pts})
    cmap = plt.get_cmap("viridis")
    for i, name in enumerate(names):
        ax = axes[i // ncols][i % ncols]
        for j, ranks in enumerate(ranks_all):
            line = [b for b in pts if b.collective == name and (b.ranks or 0) == ranks]
            if line:
                ax.plot([b.bytes for b in line], [b.busbw for b in line], marker="o", markersize=3,
                        color=cmap(j / max(len(ranks_all) - 1, 1) * 0.85),
                        label=f"{ranks} ranks" if ranks else "busbw")
        for k, (ref, line) in enumerate(sorted(coll.memcpy.items())):
            ax.plot([m[0] for m in line], [m[1] for m in line], color="#555555",
                    linestyle=LINESTYLES[1 + k % 3], linewidth=1.0, label=f"{ref} (GB/s)")
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
        ax.xaxis.set_major_locator(LogLocator(base=2, numticks=8))
        ax.xaxis.set_major_formatter(FuncFormatter(lambda v, _: bytes_text(v)))
        ax.xaxis.set_minor_locator(NullLocator())
        ax.set_title(name)
        ax.set_xlabel("message size (bytes)")
        ax.legend(loc="lower right", fontsize=7)
    for i in range(len(names), nrows * ncols):
        axes[i // ncols][i % ncols].set_visible(False)
    for row in axes:
        row[0].set_ylabel("busbw (GB/s)")
    fig.suptitle("Collective bus bandwidth against message size (nccl-tests busbw)")
    fig.tight_layout()
    best = max(pts, key=lambda b: b.busbw)
    ref_best = max((m[1] for line in coll.memcpy.values() for m in line), default=None)
    ref = f", against {ref_best:.1f} GB/s for memcpy" if ref_best is not None else ""
    caption = (f"Bandwidth should rise with message size and flatten near the link or memory limit: "
               f"the best is {best.busbw:.1f} GB/s ({best.collective}, {bytes_text(best.bytes)}){ref}.")
    return Figure(key, title, caption, save(fig, out_dir, key))


def plot_allreduce_implementations(coll: Optional[rd.Collectives], out_dir: Path) -> Figure:
    """busbw against message size, a panel per rank count and a line per all-reduce
    implementation (dpbench's ring, Open MPI's, gloo's three)."""
    key, title = "allreduce_implementations", "All-reduce implementations at the same rank count"
    panels = rd.allreduce_implementations(coll) if coll is not None else {}
    if not panels:
        return Figure(key, title, missing=(
            "The all-reduce comparison needs two implementations at one rank count: run "
            "`dpbench_collectives --benchmark_format=json --benchmark_out=threads.json` and "
            "`mpirun --bind-to none -np 4 dpbench_collectives --benchmark_format=json "
            "--benchmark_out=processes.json`, and pass both with `--collectives`."))
    fig, axes = plt.subplots(1, len(panels), figsize=(4.6 * len(panels) + 0.5, 3.8), sharey=True, squeeze=False)
    for ax, (ranks, lines) in zip(axes[0], panels.items()):
        for k, (label, line) in enumerate(lines.items()):
            ax.plot([b.bytes for b in line], [b.busbw for b in line], marker="o", markersize=3,
                    color=plt.get_cmap("tab10")(k), label=label)
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
        ax.xaxis.set_major_locator(LogLocator(base=2, numticks=8))
        ax.xaxis.set_major_formatter(FuncFormatter(lambda v, _: bytes_text(v)))
        ax.xaxis.set_minor_locator(NullLocator())
        ax.set_title(f"{ranks} ranks")
        ax.set_xlabel("message size (bytes)")
        ax.legend(loc="lower right", fontsize=7)
    axes[0][0].set_ylabel("busbw (GB/s)")
    fig.suptitle(title + " (nccl-tests busbw)")
    fig.tight_layout()
    # The caption compares the implementations at the largest size all of them have, at the
    # smallest rank count drawn.
    ranks, lines = next(iter(panels.items()))
    common = set.intersection(*({b.bytes for b in line} for line in lines.values()))
    caption = "Threads share memory, Open MPI's processes copy through shared memory, gloo's go through TCP."
    if common:
        size = max(common)
        at = sorted(((next(b.busbw for b in line if b.bytes == size), label) for label, line in lines.items()),
                    reverse=True)
        caption = (f"At {ranks} ranks and {bytes_text(size)}: "
                   + ", ".join(f"{label} {busbw:.2f} GB/s" for busbw, label in at) + ". " + caption)
    return Figure(key, title, caption, save(fig, out_dir, key))


# --------------------------------------------------------------------------------------------
# 7. projection


def measured_overlay(proj: dict) -> tuple:
    """The measured points to overlay on the projection, and the setting they share. Files that
    mark them (`on_curve`: the curves' batch under their scaling, workers and link) give those;
    older files, the runs with the calibration run's global batch and workers, else all."""
    measured = proj.get("measured", [])
    scaling = (proj.get("scaling") or {}).get("text", "")
    if any("on_curve" in m for m in measured):
        return [m for m in measured if m.get("on_curve")], scaling
    cal = proj.get("calibration", {}).get("calibration_run", {})
    if "global_batch" in cal:
        same = [m for m in measured if m.get("global_batch") == cal["global_batch"]
                and m.get("num_workers", cal.get("num_workers")) == cal.get("num_workers")]
        if same:
            return same, f"batch {cal['global_batch']:g}, {cal.get('num_workers', 0)} workers"
    return measured, ""


def point_error(m: dict) -> Optional[str]:
    """"+12%": a measured point's error (projected / measured step time - 1), or None."""
    error = rd.number(m.get("relative_error"))
    return None if error is None else f"{100 * error:+.0f}%"


def model_error_text(proj: dict, overlay: list) -> str:
    """The error at each drawn point, as measured ("allreduce (ring) p=2: +12%; ..."), those
    where the model does not apply named so, and how many measured points are not drawn."""
    parts = []
    for m in sorted(overlay, key=lambda m: (m["world_size"], m.get("mode", ""))):
        error = point_error(m)
        if error is None:
            continue
        tail = "" if m.get("model_applies", True) else " (hollow: " + (m.get("note") or "model does not apply") + ")"
        parts.append(f"{rd.projection_label(proj, m.get('mode', '?'))} p={m['world_size']}: {error}{tail}")
    text = ("the model's error at each drawn point (projected / measured step time - 1): " + "; ".join(parts)
            if parts else "no drawn point has a model value")
    others = len(proj.get("measured", [])) - len(overlay)
    if others > 0:
        text += (f". {others} more measured point{'s' if others != 1 else ''} (another batch, num_workers or "
                 "link) are in the projection file's `measured` list, each with its error")
    return text


def projection_order(proj: dict) -> list:
    """The projected curves' keys in the report's order: the reference's (ps) first, then the
    others in the order the file lists them (its `modes`, else its points)."""
    known = rd.projection_modes(proj)
    keys = list(dict.fromkeys(list(known) + [p["mode"] for p in proj.get("points", [])]))
    present = {p["mode"] for p in proj.get("points", [])}
    return sorted((k for k in keys if k in present),
                  key=lambda k: (not known.get(k, {}).get("reference", False), keys.index(k)))


def plot_projection(proj: Optional[dict], out_dir: Path) -> Figure:
    """Projected step time and speedup against world size (log2, up to 1024) per mode, with the
    measured points (and the model's value at their setting) overlaid and the crossover marked."""
    key, title = "projection", "Projected scaling"
    if proj is None:
        return Figure(key, title, missing=(
            "The scaling projection needs `dpbench project RESULT.json --out projection.json` (the "
            "alpha-beta model calibrated on measured runs); pass `--projection projection.json`."))
    pts = proj.get("points", [])
    if not pts:
        return Figure(key, title, missing="The --projection file has no points: rerun `dpbench project`.")
    modes = projection_order(proj)
    labels = [rd.projection_label(proj, m) for m in modes]
    overlay, setting = measured_overlay(proj)
    sizes = sorted({p["world_size"] for p in pts} | {m["world_size"] for m in overlay})
    fig, (left, right) = plt.subplots(1, 2, figsize=(11.0, 4.8))
    for mode, label in zip(modes, labels):
        line = sorted((p for p in pts if p["mode"] == mode), key=lambda p: p["world_size"])
        color = color_for(label, labels)
        left.plot([p["world_size"] for p in line], [p["step_time_s"] * 1e3 for p in line], color=color, label=label)
        draw_simulated(left, line, color)
        if all("speedup" in p for p in line):
            right.plot([p["world_size"] for p in line], [p["speedup"] for p in line], color=color, label=label)
        draw_measured(left, [m for m in overlay if m.get("mode") == mode], color)
    simulated = any(simulated_step(p) is not None for p in pts)
    projection_legend(left, overlay, setting, simulated)
    right.plot(sizes, sizes, color="#999999", linestyle=":", label="ideal (speedup = p)")
    crossovers = [c for c in rd.projection_crossovers(proj) if c.get("world_size")]
    for ax in (left, right):
        log2_axis(ax, [s for s in sizes if s & (s - 1) == 0] or sizes)
        ax.set_xlim(min(sizes) / 1.2, max(sizes) * 1.2)
        ax.set_yscale("log")
        ax.set_xlabel("world size (ranks)")
        for crossover in sorted({c["world_size"] for c in crossovers}):
            ax.axvline(crossover, color="black", linestyle="--", linewidth=0.9)
            ax.text(crossover, 0.5, f"crossover p={crossover} ", transform=ax.get_xaxis_transform(),
                    rotation=90, va="center", ha="right")
    left.set_ylabel("step time (ms)")
    left.set_title("Projected and simulated step time" if simulated else "Projected step time")
    right.set_ylabel("speedup over 1 rank")
    right.set_title("Projected speedup")
    left.legend(loc="upper left", fontsize=7)
    right.legend(loc="upper left", fontsize=7)
    scaling = (proj.get("scaling") or {}).get("kind")
    fig.suptitle(f"{'Alpha-beta projection and SimGrid simulation' if simulated else 'Alpha-beta projection'} "
                 f"({link_text(proj.get('link', {}))}{f'; {scaling} scaling' if scaling else ''})")
    fig.tight_layout()
    return Figure(key, title, projection_caption(proj, overlay, crossovers, simulated), save(fig, out_dir, key))


def draw_measured(ax, measured: list, color: str) -> None:
    """One mode's measured points (hollow where the model does not apply), the model's value at
    each (a cross) and the model's error beside it."""
    for m in measured:
        applies = m.get("model_applies", True)
        ax.scatter([m["world_size"]], [m["step_time_s"] * 1e3], s=34, zorder=3, edgecolors=color,
                   facecolors=color if applies else "none")
        if rd.number(m.get("predicted_step_time_s")) is not None:
            ax.scatter([m["world_size"]], [m["predicted_step_time_s"] * 1e3], marker="x", s=30,
                       color=color, zorder=3)
        if point_error(m) is not None:
            ax.annotate(point_error(m), (m["world_size"], m["step_time_s"] * 1e3), textcoords="offset points",
                        xytext=(5, 3), fontsize=7, color=color)


def projection_legend(ax, overlay: list, setting: str, simulated: bool) -> None:
    """The step-time panel's legend entries after the modes: the measured dots, the model's
    crosses where there are any, and the dashed simulated lines where there are any."""
    where = f" ({setting})" if setting else ""
    ax.scatter([], [], color="black", s=34, label=f"measured{where}")
    ax.scatter([], [], facecolors="none", edgecolors="black", s=34, label="measured, model does not apply")
    if any(rd.number(m.get("predicted_step_time_s")) is not None for m in overlay):
        ax.scatter([], [], marker="x", color="black", s=30, label="model at the measured setting")
    if simulated:
        ax.plot([], [], color="black", linestyle="--", marker="o", markersize=2.5, label="simulated (SimGrid), dashed")


def simulated_step(p: dict) -> Optional[float]:
    """A projected point's simulated step time in seconds (`simulation.simulated_step_s` of
    `dpbench project --simulate`), or None where it was not or could not be simulated."""
    sim = p.get("simulation")
    return rd.number(sim.get("simulated_step_s")) if isinstance(sim, dict) else None


def draw_simulated(ax, line: list, color: str) -> None:
    """One mode's simulated step time (ms) as a dashed line with small markers in its colour,
    through the points of `line` (sorted by world size) that have one."""
    sim = [(p["world_size"], simulated_step(p)) for p in line if simulated_step(p) is not None]
    if sim:
        ax.plot([x for x, _ in sim], [1e3 * y for _, y in sim], color=color, linestyle="--", marker="o",
                markersize=2.5, linewidth=1.1)


def projection_caption(proj: dict, overlay: list, crossovers: list, simulated: bool) -> str:
    """The projection's caption: where the curves part, the model's error at the measured points,
    what the dashed lines are (with --simulate) and the file's findings, in its order."""
    cross = "; ".join(f"{rd.projection_label(proj, c['mode'])} pulls ahead of "
                      f"{rd.projection_label(proj, c['reference'])} from p={c['world_size']}"
                      for c in crossovers) or "the modes do not cross in this range"
    caption = (f"Read where the curves part: {cross}. Check the dots against the crosses: "
               f"{model_error_text(proj, overlay)}.")
    if simulated:
        topology = topology_text(proj.get("topology"))
        caption += (" Dashed lines: SimGrid's simulation of each mode's message schedule on the described "
                    f"topology{f' ({topology})' if topology else ''}.")
        missing = [p for p in proj.get("points", []) if simulated_step(p) is None]
        if missing:
            caption += (f" {len(missing)} point{'s' if len(missing) != 1 else ''} could not be simulated "
                        f"({unavailable_text(proj, missing[0])}).")
    texts = [f["text"].strip().rstrip(".") for f in proj.get("findings") or []]
    if texts:
        caption += " What the simulation finds: " + "; ".join(texts) + "."
    return caption


def topology_text(topo) -> str:
    """"preset h100-8gpu-400g, 8 ranks per node, 4 nodes per leaf, uplinks 4x oversubscribed"
    from the projection's `topology` object, or "" without one."""
    if not isinstance(topo, dict):
        return ""
    parts = [f"preset {topo['preset']}"] if topo.get("preset") else []
    for field, unit in (("ranks_per_node", "ranks per node"), ("nodes_per_leaf", "nodes per leaf")):
        if rd.number(topo.get(field)) is not None:
            parts.append(f"{topo[field]:g} {unit}")
    if (rd.number(topo.get("oversubscription")) or 1) > 1:
        parts.append(f"uplinks {topo['oversubscription']:g}x oversubscribed")
    return ", ".join(parts)


def unavailable_text(proj: dict, p: dict) -> str:
    """"allreduce (ring) p=1024: why" for a point without a simulated step."""
    sim = p.get("simulation")
    why = sim.get("unavailable") if isinstance(sim, dict) else None
    return f"{rd.projection_label(proj, p['mode'])} p={p['world_size']}: {why or 'not simulated'}"


def link_text(link: dict) -> str:
    """"link pcie4, 25 GB/s, alpha 5.0 us" from the projection's link object."""
    gbps = rd.number(link.get("bandwidth_GBps"))
    if gbps is None and rd.number(link.get("beta_s_per_byte")):
        gbps = 1e-9 / link["beta_s_per_byte"]
    text = f"link {link.get('name', '?')}"
    if gbps is not None:
        text += f", {gbps:.3g} GB/s"
    if rd.number(link.get("alpha_s")) is not None:
        text += f", alpha {link['alpha_s'] * 1e6:.3g} us"
    if link.get("kind") == "memory":
        text += ", in-process memory copies"
    return text


# --------------------------------------------------------------------------------------------
# 8. emulated cluster: throughput against link rate and against node count


def network_handles(net: rd.NetworkVerdict, labels: list, repeated: bool) -> list:
    """Legend entries of the network figures: one per strategy (its colour and marker), then the
    two styles (measured points, projection line)."""
    handles = [Line2D([], [], color=color_for(label, labels), marker=MARKERS[i % len(MARKERS)],
                      label=label) for i, label in enumerate(net.modes)]
    measured = "measured (median; bars: min to max)" if repeated else "measured"
    handles.append(Line2D([], [], color="black", marker="o", linestyle="none", label=measured))
    handles.append(Line2D([], [], color="black", label="projection (alpha-beta, probed link)"))
    return handles


def draw_network_panel(ax, net: rd.NetworkVerdict, pts: list, x_of, labels: list) -> None:
    """One panel of a network figure: per strategy, its measured throughput as markers (with
    min-max error bars when a point was repeated) and its projected throughput as a line of the
    same colour. x_of(point) gives the x value."""
    for i, label in enumerate(net.modes):
        line = sorted((p for p in pts if p.label == label), key=x_of)
        if not line:
            continue
        color, marker = color_for(label, labels), MARKERS[i % len(MARKERS)]
        xs, ys = [x_of(p) for p in line], [p.throughput for p in line]
        if any(p.repetitions > 1 for p in line):
            ax.errorbar(xs, ys, yerr=[[p.throughput - p.throughput_min for p in line],
                                      [p.throughput_max - p.throughput for p in line]],
                        fmt=marker, color=color, markersize=6, capsize=3, zorder=3)
        else:
            ax.plot(xs, ys, marker=marker, linestyle="none", color=color, markersize=6, zorder=3)
        projected = [(x_of(p), p.projected_throughput) for p in line if p.projected_throughput is not None]
        if projected:
            ax.plot([x for x, _ in projected], [y for _, y in projected], color=color, linewidth=1.4)


def network_figure(net: rd.NetworkVerdict, panels: list, title: str, sharey: bool) -> tuple:
    """(fig, axes list) with one axes per panel value, at most three to a row, unused ones
    hidden."""
    ncols = min(len(panels), 3)
    nrows = (len(panels) + ncols - 1) // ncols
    fig, axes = plt.subplots(nrows, ncols, figsize=(4.2 * ncols + 0.6, 3.6 * nrows + 1.0),
                             sharey=sharey, squeeze=False)
    flat = [ax for row in axes for ax in row]
    for ax in flat[len(panels):]:
        ax.set_visible(False)
    for row in axes:
        row[0].set_ylabel("throughput (samples/s)")
    fig.suptitle(f"{title} ({net.setting})")
    return fig, flat[:len(panels)]


def finish_network_figure(fig, net: rd.NetworkVerdict, labels: list) -> None:
    """The shared legend under the panels, and the layout."""
    repeated = any(p.repetitions > 1 for p in net.points)
    handles = network_handles(net, labels, repeated)
    fig.legend(handles=handles, loc="lower center", ncol=min(len(handles), 5), frameon=False)
    fig.tight_layout(rect=(0, 0.1, 1, 1))


def network_caption(net: rd.NetworkVerdict, sentences: dict) -> str:
    """The caption of a network figure: how to read it, the verdict's ratio sentences for its
    axis, its crossover sentence and the projection's error range."""
    repeated = any(p.repetitions > 1 for p in net.points)
    how = ("Markers: measured throughput (median over repetitions, bars from min to max)"
           if repeated else "Markers: measured throughput")
    how += "; lines: the projection (global batch / projected step time) on the probed link."
    return " ".join([how] + list(sentences.values()) + [net.crossover_text, net.error_text])


def plot_network_vs_link(net: rd.NetworkVerdict, out_dir: Path) -> Figure:
    """Throughput against the requested link rate (bit/s, log scale), one panel per node count:
    each strategy's measured points and its projection, the reference (ps) first."""
    key, title = "network_vs_link", "Throughput against link rate"
    if len(net.rates) < 2:
        return Figure(key, title, missing=(
            "Throughput against link rate needs two or more link rates: run "
            "`dpbench sweep --nodes 2,4 --links 100mbit,1gbit`."))
    labels = list(net.modes)
    fig, axes = network_figure(net, net.nodes, title, sharey=True)
    for ax, nodes in zip(axes, net.nodes):
        draw_network_panel(ax, net, [p for p in net.points if p.nodes == nodes],
                           lambda p: p.link_bits_per_s, labels)
        ax.set_xscale("log")
        ax.set_xticks(net.rates)
        ax.xaxis.set_major_formatter(FuncFormatter(lambda v, _: rd.rate_text(v)))
        ax.xaxis.set_minor_locator(NullLocator())
        ax.set_xlim(min(net.rates) / 1.6, max(net.rates) * 1.6)
        ax.set_yscale("log")
        ax.yaxis.set_major_locator(LogLocator(base=10, subs=(1.0, 2.0, 5.0)))
        ax.yaxis.set_minor_locator(NullLocator())
        thousands(ax)
        ax.set_xlabel("link rate (requested, bit/s)")
        ax.set_title(rd.nodes_text(nodes))
    finish_network_figure(fig, net, labels)
    return Figure(key, title, network_caption(net, net.link_sentences), save(fig, out_dir, key))


def plot_network_vs_nodes(net: rd.NetworkVerdict, out_dir: Path) -> Figure:
    """Throughput against the node count, one panel per link rate: each strategy's measured
    points and its projection, the reference (ps) first."""
    key, title = "network_vs_nodes", "Throughput against node count"
    if len(net.nodes) < 2:
        return Figure(key, title, missing=(
            "Throughput against node count needs two or more node counts: run "
            "`dpbench sweep --nodes 2,4 --links 100mbit,1gbit`."))
    labels = list(net.modes)
    per_node = net.points[0].ranks_per_node  # one setting: every point has the same
    fig, axes = network_figure(net, net.rates, title, sharey=False)
    for ax, rate in zip(axes, net.rates):
        draw_network_panel(ax, net, [p for p in net.points if p.link_bits_per_s == rate],
                           lambda p: p.nodes, labels)
        log2_axis(ax, net.nodes)
        ax.set_xlim(min(net.nodes) / 1.3, max(net.nodes) * 1.3)
        ax.set_ylim(bottom=0)
        thousands(ax)
        ax.set_xlabel(f"nodes ({per_node} rank{'s' if per_node != 1 else ''} each)")
        ax.set_title(rd.rate_text(rate))
    finish_network_figure(fig, net, labels)
    return Figure(key, title, network_caption(net, net.node_sentences), save(fig, out_dir, key))


def plot_network_simulation(net: rd.NetworkVerdict, out_dir: Path) -> Figure:
    """The step time of every emulated-cluster point, one panel per strategy: measured, SimGrid's
    simulation of the run's message schedule (the engine calibrated by its probe) and the
    alpha-beta formula, side by side; the caption gives each model's median and largest error
    over the runs drawn."""
    key, title = "network_simulation", "Step time: measured, simulated, alpha-beta"
    pts = [p for p in net.points if p.measured_step_s is not None]
    if not any(p.simulated_step_s is not None for p in pts):
        return Figure(key, title, missing=(
            "The simulated step needs emulated-cluster runs of a dpbench built with SimGrid "
            "(libsimgrid-dev): each run then records network.simulation."))
    labels = list(net.modes)
    places = sorted({(p.nodes, p.link_bits_per_s) for p in pts})
    fig, axes = plt.subplots(1, len(labels), figsize=(max(4.2, 0.9 * len(places) + 1.6) * len(labels) / 1.4, 4.0),
                             squeeze=False)
    width = 0.27
    for ax, label in zip(axes[0], labels):
        color = color_for(label, labels)
        line = {(p.nodes, p.link_bits_per_s): p for p in pts if p.label == label}
        xs = list(range(len(places)))
        for offset, attr, style in ((-width, "measured_step_s", {"color": color}),
                                    (0.0, "simulated_step_s", {"color": color, "alpha": 0.45, "hatch": "//"}),
                                    (width, "projected_step_s", {"color": "white", "edgecolor": "#555555"})):
            ys = [getattr(line[k], attr) if k in line and getattr(line[k], attr) is not None else 0.0 for k in places]
            ax.bar([x + offset for x in xs], [1e3 * y for y in ys], width, **style)
        ax.set_xticks(xs)
        ax.set_xticklabels([f"{n}\n{rd.rate_text(r)}" for n, r in places])
        ax.set_xlabel("nodes, link rate")
        ax.set_ylabel("step time (ms)")
        ax.set_ylim(bottom=0)
        ax.set_title(label)
    handles = [matplotlib.patches.Patch(color="#777777", label="measured (median)"),
               matplotlib.patches.Patch(facecolor="#777777", alpha=0.45, hatch="//", label="simulated (SimGrid)"),
               matplotlib.patches.Patch(facecolor="white", edgecolor="#555555", label="alpha-beta formula")]
    fig.legend(handles=handles, loc="lower center", ncol=3, frameon=False)
    fig.suptitle(f"{title} ({net.setting})")
    fig.tight_layout(rect=(0, 0.08, 1, 1))
    return Figure(key, title, simulation_caption(pts), save(fig, out_dir, key))


def simulation_caption(pts: list) -> str:
    """How to read the simulation figure, and each model's median and largest |error| over the
    points drawn (error: model / measured - 1, on the medians)."""
    parts = ["Bars per point and strategy: the measured step time (median over repetitions), SimGrid's "
             "simulation of the run's message schedule on the probed links with the engine calibrated by its "
             "probe, and the alpha-beta formula."]
    for name, attr in (("simulated", "simulated_step_s"), ("alpha-beta", "projected_step_s")):
        errors = sorted(abs(getattr(p, attr) / p.measured_step_s - 1) for p in pts if getattr(p, attr) is not None)
        if errors:
            parts.append(f"{name}: median |error| {100 * errors[len(errors) // 2]:.1f}%, largest "
                         f"{100 * errors[-1]:.1f}% over {len(errors)} point{'s' if len(errors) != 1 else ''}.")
    return " ".join(parts)

