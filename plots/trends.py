"""The results history's trends in the report: `dpbench history show --json` (a "dpbench-trends"
file: each configuration's metric per commit, with the change points dpbench's E-Divisive found)
read and drawn as one figure, metric against commit, one line per configuration and machine,
each change point marked where its commit is.

Not for: finding change points (history/change_points.cpp does, once) or reading SQLite.
"""
from __future__ import annotations

import json
from pathlib import Path

import figures
import report_data as rd
from figures import Figure, plt, save

KEY = "trends"
MAX_LINES = 8  # series drawn; the report says how many more there were


def load_trends(path: str) -> dict:
    """The trends file, checked: its schema name and each series' commits and values of one length.
    Raises rd.InputError naming the file."""
    try:
        with open(path, encoding="utf-8") as f:
            doc = json.load(f)
    except OSError as e:
        raise rd.InputError(f"{path}: cannot read: {e.strerror}") from e
    except json.JSONDecodeError as e:
        raise rd.InputError(f"{path}: not valid JSON ({e})") from e
    if not isinstance(doc, dict) or doc.get("schema", {}).get("name") != "dpbench-trends":
        raise rd.InputError(f"{path}: not a `dpbench history show --json` file (schema dpbench-trends)")
    for i, s in enumerate(doc.get("series", [])):
        if len(s.get("commits", [])) != len(s.get("values", [])):
            raise rd.InputError(f"{path}: series {i} has {len(s.get('commits', []))} commits and "
                                f"{len(s.get('values', []))} values")
    return doc


def short_config(config: str) -> str:
    """The configuration's distinguishing keys, compact: 'allreduce, 4 ranks, batch 256'."""
    try:
        c = json.loads(config)
    except json.JSONDecodeError:
        return config
    if not isinstance(c, dict):
        return config
    parts = [str(c.get("mode") or c.get("projection") or c.get("benchmark") or "")]
    if "world_size" in c:
        parts.append(f"{c['world_size']} ranks")
    if "global_batch" in c:
        parts.append(f"batch {c['global_batch']}")
    return ", ".join(p for p in parts if p)


def plot_trends(doc: dict, out_dir: Path) -> Figure:
    """The metric against commit, one line per configuration and machine (the first MAX_LINES),
    each change point a red marker with its change in percent."""
    title = "Trends across commits"
    series = [s for s in doc.get("series", []) if s.get("values")]
    if not series:
        return Figure(KEY, title, missing="The trends file holds no series: add result files of several commits "
                                          "with `dpbench history add`, then `dpbench history show --json`.")
    shown = series[:MAX_LINES]
    commits = list(dict.fromkeys(c for s in shown for c in s["commits"]))  # first-seen order
    fig, ax = plt.subplots(figsize=(8.0, 4.2))
    marked = []
    for i, s in enumerate(shown):
        xs = [commits.index(c) for c in s["commits"]]
        label = f"{short_config(s['config'])} ({s['machine']})"
        ax.plot(xs, s["values"], marker="o", markersize=3, label=label, color=f"C{i % 10}")
        for c in s.get("change_points", []):
            x, y = xs[c["index"]], s["values"][c["index"]]
            ax.plot([x], [y], marker="v", markersize=9, color="#d62728", zorder=5)
            ax.annotate(f"{100 * c['change']:+.0f} %", (x, y), textcoords="offset points", xytext=(4, 6),
                        fontsize=8, color="#d62728")
            marked.append(f"{short_config(s['config'])} at {c['commit'][:12]} ({100 * c['change']:+.1f} %, "
                          f"p = {c['p_value']:.3f})")
    ax.set_xticks(range(len(commits)))
    ax.set_xticklabels([c[:8] for c in commits], rotation=60, ha="right", fontsize=7)
    metric = shown[0]["metric"] if len({s["metric"] for s in shown}) == 1 else "value"
    ax.set_xlabel("commit (in the order of each commit's first file)")
    ax.set_ylabel(metric)
    ax.legend(fontsize=7, loc="best")
    ax.grid(alpha=0.3)
    path = save(fig, out_dir, KEY)
    method = doc.get("change_point_method", {})
    found = ("Change points (red): " + "; ".join(marked) + "." if marked
             else "No change point: no split of any line was significant and large enough.")
    more = f" {len(series) - len(shown)} more series are in the file and not drawn." if len(series) > len(shown) else ""
    caption = (f"Look for the red markers: {found} Found by {method.get('name', 'E-Divisive means')} "
               f"(permutation test at p <= {method.get('max_p_value', 0.05)}, a change of at least "
               f"{100 * method.get('min_effect', 0.05):.0f} %), one value per commit (the median of its runs).{more}")
    return Figure(KEY, title, caption, path)
