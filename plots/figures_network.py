"""The network's figures: the collectives' bus bandwidth (Google Benchmark) and the emulated
cluster's throughput against link rate and node count, with its simulation.

Part of the report's figures (figures.py names the parts and the rules every figure keeps).
"""
from __future__ import annotations

from pathlib import Path
from typing import Optional

import matplotlib.patches

import figures_common  # save: called through the module, so a test can catch what it writes
from figures_common import (Figure, LINESTYLES, MARKERS, bytes_text, color_for, log2_axis,
                            thousands)
import matplotlib.pyplot as plt  # noqa: E402  (after figures_common chose the Agg backend)
from matplotlib.lines import Line2D  # noqa: E402
from matplotlib.ticker import FuncFormatter, LogLocator, NullLocator  # noqa: E402

import report_data as rd  # noqa: E402

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
    return Figure(key, title, caption, figures_common.save(fig, out_dir, key))


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
    return Figure(key, title, caption, figures_common.save(fig, out_dir, key))


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
    each strategy's measured points and its projection, the baseline (ps) first."""
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
    return Figure(key, title, network_caption(net, net.link_sentences), figures_common.save(fig, out_dir, key))


def plot_network_vs_nodes(net: rd.NetworkVerdict, out_dir: Path) -> Figure:
    """Throughput against the node count, one panel per link rate: each strategy's measured
    points and its projection, the baseline (ps) first."""
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
    return Figure(key, title, network_caption(net, net.node_sentences), figures_common.save(fig, out_dir, key))


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
    return Figure(key, title, simulation_caption(pts), figures_common.save(fig, out_dir, key))


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
