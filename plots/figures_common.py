"""What the report's figures share: matplotlib's Agg backend and style, the figure keys in report
order, the phase, memory and series styles, the Figure record and the helpers that draw and
describe (colours, spread bars, legends, log2 axes, sizes in words, saving a PNG).

Part of the report's figures (figures.py names the parts and the rules every figure keeps).
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Optional

import matplotlib
import matplotlib.patches

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402  (after the backend is chosen)
from matplotlib.ticker import FuncFormatter, NullLocator  # noqa: E402

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


def size_text(n: float) -> str:
    """Bytes for a sentence: 5360098944 -> "4.99 GiB", 1572864 -> "1.5 MiB", 300 -> "300 B"."""
    for unit, size, spec in (("GiB", GIB, ".2f"), ("MiB", MIB, ".1f"), ("KiB", 1024.0, ".1f")):
        if n >= size:
            return f"{n / size:{spec}} {unit}"
    return f"{n:.0f} B"
