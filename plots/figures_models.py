"""The modelled figures: the memory model (`dpbench memory`) and the projection (`dpbench
project`).

Part of the report's figures (figures.py names the parts and the rules every figure keeps).
"""
from __future__ import annotations

from pathlib import Path
from typing import Optional

import figures_common  # save: called through the module, so a test can catch what it writes
from figures_common import (Figure, GIB, MARKERS, MEMORY_STYLE, MIB, color_for, log2_axis,
                            size_text)
import matplotlib.pyplot as plt  # noqa: E402  (after figures_common chose the Agg backend)
from matplotlib.ticker import FuncFormatter, LogLocator, NullLocator  # noqa: E402

import report_data as rd  # noqa: E402

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
    baseline's (the first mode's) figures beside it; "" without largest_fitting."""
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
    return Figure(key, title, caption, figures_common.save(fig, out_dir, key))


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
    for m in sorted(overlay, key=lambda m: (m["world_size"], m.get("curve", ""))):
        error = point_error(m)
        if error is None:
            continue
        tail = "" if m.get("model_applies", True) else " (hollow: " + (m.get("note") or "model does not apply") + ")"
        parts.append(f"{rd.projection_label(proj, m.get('curve', '?'))} p={m['world_size']}: {error}{tail}")
    text = ("the model's error at each drawn point (projected / measured step time - 1): " + "; ".join(parts)
            if parts else "no drawn point has a model value")
    others = len(proj.get("measured", [])) - len(overlay)
    if others > 0:
        text += (f". {others} more measured point{'s' if others != 1 else ''} (another batch, num_workers or "
                 "link) are in the projection file's `measured` list, each with its error")
    return text


def projection_order(proj: dict) -> list:
    """The projected curves' keys in the report's order: the baseline's (ps) first, then the
    others in the order the file lists them (its `curves`, else its points)."""
    known = rd.projection_curves(proj)
    keys = list(dict.fromkeys(list(known) + [p["curve"] for p in proj.get("points", [])]))
    present = {p["curve"] for p in proj.get("points", [])}
    return sorted((k for k in keys if k in present),
                  key=lambda k: (not known.get(k, {}).get("baseline", False), keys.index(k)))


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
    curves = projection_order(proj)
    labels = [rd.projection_label(proj, c) for c in curves]
    overlay, setting = measured_overlay(proj)
    sizes = sorted({p["world_size"] for p in pts} | {m["world_size"] for m in overlay})
    fig, (left, right) = plt.subplots(1, 2, figsize=(11.0, 4.8))
    for curve, label in zip(curves, labels):
        line = sorted((p for p in pts if p["curve"] == curve), key=lambda p: p["world_size"])
        color = color_for(label, labels)
        left.plot([p["world_size"] for p in line], [p["step_time_s"] * 1e3 for p in line], color=color, label=label)
        draw_simulated(left, line, color)
        if all("speedup" in p for p in line):
            right.plot([p["world_size"] for p in line], [p["speedup"] for p in line], color=color, label=label)
        draw_measured(left, [m for m in overlay if m.get("curve") == curve], color)
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
    return Figure(key, title, projection_caption(proj, overlay, crossovers, simulated), figures_common.save(fig, out_dir, key))


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
    cross = "; ".join(f"{rd.projection_label(proj, c['curve'])} pulls ahead of "
                      f"{rd.projection_label(proj, c['baseline'])} from p={c['world_size']}"
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
    return f"{rd.projection_label(proj, p['curve'])} p={p['world_size']}: {why or 'not simulated'}"


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
