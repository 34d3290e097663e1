#!/usr/bin/python3
"""dpbench report: result JSON to DIR/report.md, a self-contained DIR/report.html and the PNGs.

usage: /usr/bin/python3 plots/report.py RESULT.json [RESULT.json ...] -o DIR
                                        [--collectives GBENCH.json] [--projection PROJ.json]
                                        [--memory MEMORY.json ...]

RESULT.json are `dpbench run` or `dpbench sweep` files (several are merged; repetitions of a
point are aggregated by median; failed sweep points are listed, not plotted; the PyTorch runs of
`dpbench run --reference pytorch` are tabled beside the dpbench runs they reproduce). --collectives is
Google Benchmark JSON from bench/micro/dpbench_collectives; --projection is a `dpbench project`
file; --memory is a `dpbench memory` file (the memory model per mode, world size and role; give
it again for another, e.g. --mixed-precision: each draws its own figure). `dpbench report ...`
runs this script with the same arguments.

For: putting the verdict, the run table, PyTorch on the same work, the figures (figures.py), the
warnings, the failed points and the environment into the Jinja2 templates under plots/templates/.
A file from an emulated-cluster sweep (`dpbench sweep --nodes --links`) also gets the network
verdict (ratios to ps per node count and link rate, crossovers, projection error), its table, and
three figures drawn first: throughput against link rate and against node count, and the step
time measured, simulated (SimGrid) and by the alpha-beta formula side by side. A --projection
file from `dpbench project --simulate` gets its findings listed under the projection figure, whose
dashed lines are the simulated step times. The HTML embeds every figure as a base64 data: URI, so
it needs no other file. Both verdicts are computed once, in main(): the opening sentence and every
caption that states one of its numbers read the same record, and strategies appear in one order
everywhere (ps, the baseline, first).
Not for: measuring anything, or reading anything but the JSON files named on the command line.

Exit status: 0 on success, 2 on bad input (one line on stderr naming the file).
"""
from __future__ import annotations

import argparse
import base64
import sys
from pathlib import Path

import jinja2

sys.path.insert(0, str(Path(__file__).resolve().parent))
import figures  # noqa: E402
import report_data as rd  # noqa: E402
import trends  # noqa: E402

TEMPLATES = Path(__file__).resolve().parent / "templates"
MAX_WHERE = 6  # points named per warning before "and N more"


def parse_args(argv) -> argparse.Namespace:
    """The command line."""
    parser = argparse.ArgumentParser(
        prog="report.py", description="dpbench result JSON to report.md and a self-contained report.html.")
    parser.add_argument("results", nargs="+", help="dpbench run or sweep result files")
    parser.add_argument("-o", "--out", required=True, help="output directory (created if missing)")
    parser.add_argument("--collectives", action="append",
                        help="Google Benchmark JSON of dpbench_collectives; give it again to combine runs "
                             "(without mpirun: dpbench's ring; under mpirun: Open MPI's and gloo's all-reduce)")
    parser.add_argument("--projection", help="`dpbench project` JSON")
    parser.add_argument("--memory", action="append",
                        help="`dpbench memory` JSON (the memory model); give it again for another file, "
                             "each drawn as its own figure")
    parser.add_argument("--trends", help="`dpbench history show --json` output: the metric per commit and its "
                                         "change points, drawn as a trend figure")
    return parser.parse_args(argv)


# --------------------------------------------------------------------------------------------
# formatting


def fmt_number(value, spec: str, missing: str = "-") -> str:
    """format(value, spec), or `missing` for None."""
    return missing if value is None else format(value, spec)


def nccl_version_text(code) -> str:
    """NCCL_VERSION_CODE as "2.28.9" (2.9 and later: major*10000 + minor*100 + patch)."""
    if not isinstance(code, int):
        return "not built"
    if code >= 10000:
        return f"{code // 10000}.{code % 10000 // 100}.{code % 100}"
    return f"{code // 1000}.{code % 1000 // 100}.{code % 100}"


def cuda_version_text(code) -> str:
    """cudaRuntimeGetVersion's 13000 as "13.0"."""
    return f"{code // 1000}.{code % 1000 // 10}" if isinstance(code, int) and code > 0 else "none"


def point_name(p) -> str:
    """"ps (collective), 4 ranks, batch 256, 2 workers"."""
    return f"{p.series}, {rd.describe_fixed(p.axes)}"


# --------------------------------------------------------------------------------------------
# the sections


def run_rows(points: list) -> list:
    """One table row per aggregated point, as display strings."""
    rows = []
    for p in points:
        rows.append({
            # The label's parenthesis: the transport and what the label names besides (a hook,
            # the node hierarchy): "allreduce (ring, fp16)" -> "ring, fp16".
            "mode": p.mode, "transport": p.label.partition(" (")[2].rstrip(")") or p.transport,
            "variant": p.series.partition(" [")[2].rstrip("]"),
            "ranks": p.world_size, "batch": p.global_batch, "workers": p.num_workers,
            "reps": p.repetitions, "throughput": f"{p.throughput:,.0f}",
            "p50": ms_text(p.step_time.get("p50")), "p90": ms_text(p.step_time.get("p90")),
            "imbalance": f"{p.imbalance:.2f}",
            "accuracy": "-" if p.test_accuracy is None else f"{100 * p.test_accuracy:.2f} %",
        })
    return rows


def ms_text(seconds) -> str:
    """Seconds as "12.34" ms, or "-" when the file did not record it."""
    return fmt_number(None if seconds is None else seconds * 1e3, ".2f")


def mib_text(value) -> str:
    """Bytes as "12.3" MiB, or "-"."""
    return fmt_number(None if value is None else value / 1024 ** 2, ".1f")


def accuracy_text(value) -> str:
    """A test accuracy as "83.00 %", or "-" (no test set, or a diverged run)."""
    return "-" if value is None else f"{100 * value:.2f} %"


def plural(count: int, word: str) -> str:
    """"1 process", "2 processes", "4 threads"."""
    return f"{count} {word}" if count == 1 else f"{count} {word}{'es' if word.endswith('s') else 's'}"


def reference_rows(reference: list) -> list:
    """One table row per PyTorch reference run and the dpbench run it reproduces, as display
    strings: throughput, their ratio, step p50, test accuracy, rank 0's memory (dpbench's
    allocator peak, PyTorch's process peak RSS) and how closely the per-step losses agree."""
    rows = []
    for r in reference:
        tolerance = fmt_number(r.tolerance, ".0e", "its")
        flag = ""
        if not r.within:
            flag = f"exceeds the {tolerance} tolerance" + ("" if r.at_step is None else f" at step {r.at_step}")
        rows.append({
            "source": r.source, "dpbench": r.dpbench_label,
            "pytorch": f"{r.program} ({plural(r.processes, 'process')} × {plural(r.threads, 'thread')})",
            "dpbench_throughput": fmt_number(r.dpbench_throughput, ",.0f"),
            "pytorch_throughput": f"{r.throughput:,.0f}",
            "ratio": fmt_number(r.ratio, ".2f") + ("x" if r.ratio is not None else ""),
            "dpbench_p50": fmt_number(None if r.dpbench_step_p50 is None else r.dpbench_step_p50 * 1e3, ".2f"),
            "pytorch_p50": f"{r.step_p50 * 1e3:.2f}",
            "dpbench_accuracy": accuracy_text(r.dpbench_test_accuracy),
            "pytorch_accuracy": accuracy_text(r.test_accuracy),
            "dpbench_memory": mib_text(r.dpbench_peak_bytes), "pytorch_memory": mib_text(r.peak_rss_bytes),
            "agreement": f"{r.max_rel_diff:.1e} over {r.steps} step{'s' if r.steps != 1 else ''}",
            "within": r.within, "flag": flag, "launch": r.launch,
        })
    return rows


def reference_versions(reference: list) -> str:
    """"PyTorch 1.13.0a0" (or "PyTorch") for the section's opening sentence."""
    versions = sorted({r.torch_version for r in reference if r.torch_version})
    return "PyTorch " + ", ".join(versions) if versions else "PyTorch"


def warning_rows(points: list) -> list:
    """Distinct warnings with the points they came from; virtual ranks are always named."""
    by_text: dict = {}
    for p in points:
        texts = list(p.warnings)
        if p.virtual_ranks and not any("virtual" in t for t in texts):
            texts.append("virtual ranks: several ranks shared one device, so their communication ran "
                         "at device-memory speed, not link speed")
        for t in texts:
            by_text.setdefault(t, []).append(point_name(p))
    rows = []
    for text, where in by_text.items():
        shown = "; ".join(where[:MAX_WHERE])
        if len(where) > MAX_WHERE:
            shown += f"; and {len(where) - MAX_WHERE} more"
        rows.append({"text": text, "count": len(where), "where": shown})
    return rows


def failed_rows(failed: list) -> list:
    """One row per failed sweep point; repetitions that failed the same way share a row."""
    rows: dict = {}
    for f in failed:
        key = (f.mode, f.transport, f.world_size, f.global_batch, f.num_workers, f.cluster, f.error)
        ranks = fmt_number(f.world_size, "d") + (f" ({f.cluster})" if f.cluster else "")
        row = rows.setdefault(key, {
            "mode": f.mode, "transport": f.transport or "-", "ranks": ranks,
            "batch": fmt_number(f.global_batch, "d"), "workers": fmt_number(f.num_workers, "d"),
            "reps": [], "error": f.error})
        if f.repetition is not None:
            row["reps"].append(str(f.repetition))
    for row in rows.values():
        row["repetition"] = ", ".join(row.pop("reps")) or "-"
    return list(rows.values())


def env_sections(envs: list) -> list:
    """Each distinct environment as (label, value) rows, with the files that ran there."""
    sections = []
    for entry in envs:
        env = entry["env"]
        cuda = env.get("cuda") or {}
        if cuda.get("usable"):
            cuda_text = f"runtime {cuda_version_text(cuda.get('runtime_version'))}, driver {cuda_version_text(cuda.get('driver_version'))}"
        elif cuda.get("built_with_cuda"):
            cuda_text = f"built with {cuda_version_text(cuda.get('runtime_version'))}, not usable: {cuda.get('reason', '')}"
        else:
            cuda_text = "not built"
        gpus = "; ".join(f"{g.get('index')}: {g.get('name')} ({g.get('memory_bytes', 0) / 1024 ** 3:.0f} GiB, "
                         f"{g.get('pci_bus_id')})" for g in env.get("gpus") or []) or "none"
        rows = [("host", env.get("host")), ("OS", env.get("os")), ("CPU", env.get("cpu_model")),
                ("cores", env.get("cpu_cores")), ("git commit", env.get("git_commit")),
                ("build", f"{env.get('build_type', '?')}, {env.get('compiler', '?')}, flags `{(env.get('cxx_flags') or '').strip()}`"),
                ("BLAS", env.get("blas")), ("CUDA", cuda_text), ("GPUs", gpus),
                ("NCCL", nccl_version_text(env.get("nccl_version"))), ("MPI", env.get("mpi") or "not built"),
                ("dpbench", env.get("dpbench_version"))]
        sections.append({"files": entry["files"],
                         "rows": [(k, "-" if v is None else str(v)) for k, v in rows]})
    return sections


def network_rows(net: rd.NetworkVerdict) -> list:
    """One table row per (nodes, link) of the network verdict, as display strings: each
    strategy's median throughput with its ratio to the baseline, and the range of the
    projection's error over the runs there."""
    rows = []
    for nodes in net.nodes:
        for rate in net.rates:
            tps = net.throughput.get((nodes, rate))
            if tps is None:
                continue
            cells = []
            for label in net.modes:
                ratio = net.ratios.get((nodes, rate), {}).get(label)
                text = fmt_number(tps.get(label), ",.0f")
                cells.append(text + (f" ({ratio:.2f}x)" if ratio is not None else ""))
            errors = [e for p in net.points if p.nodes == nodes and p.link_bits_per_s == rate
                      for e in p.projection_errors]
            error = "-" if not errors else (
                rd.percent_text(errors[0]) if len(errors) == 1
                else f"{rd.percent_text(min(errors))} to {rd.percent_text(max(errors))}")
            rows.append({"nodes": nodes, "link": rd.rate_text(rate), "cells": cells, "error": error})
    return rows


def target_rows(net: rd.NetworkVerdict) -> list:
    """One row per (nodes, link) of the time to the target loss: each strategy's steps to it and
    their time in seconds ("12 steps, 3.41 s"), "not reached" for a run whose loss never fell to
    it; the fastest in bold."""
    rows = []
    for nodes in net.nodes:
        for rate in net.rates:
            at = net.time_to_target.get((nodes, rate))
            if not at or all(v is None for v in at.values()):
                continue
            fastest = min(v[1] for v in at.values() if v is not None)
            cells = []
            for label in net.modes:
                if label not in at:
                    cells.append("-")
                    continue
                if at[label] is None:
                    cells.append("not reached")
                    continue
                steps, seconds = at[label]
                text = f"{plural(steps, 'step')}, {seconds:.2f} s"
                cells.append(f"**{text}**" if seconds == fastest else text)
            rows.append({"nodes": nodes, "link": rd.rate_text(rate), "cells": cells})
    return rows


def network_context(net) -> dict | None:
    """The network section's template record (None without emulated-cluster runs)."""
    if net is None:
        return None
    return {"paragraph": net.paragraph, "modes": [net.names[m] for m in net.modes],
            "baseline": net.names[net.baseline], "rows": network_rows(net),
            "target_loss": None if net.target_loss is None else f"{net.target_loss:.4f}",
            "target_rows": target_rows(net), "target_text": " ".join(rd.target_sentences(net)),
            "loss_window": rd.LOSS_WINDOW}


def findings_context(proj) -> dict | None:
    """The projection's findings (`dpbench project --simulate`: where the root's NIC saturates,
    where oversubscription reorders the modes, what one straggler costs each mode) as the
    template's record: the topology they were simulated on and each sentence, in the file's
    order. None without a projection or without findings."""
    findings = (proj or {}).get("findings") or []
    if not findings:
        return None
    return {"topology": figures.topology_text(proj.get("topology")),
            "items": [f["text"].strip().rstrip(".") + "." for f in findings]}


def memory_figures(memory: list, pts: list, out_dir: Path) -> list:
    """The memory model's figures: one per --memory file (memory_model, then memory_model_2...),
    or the one note saying how to produce it when none was given."""
    if not memory:
        return [figures.plot_memory_model(None, out_dir, pts)]
    return [figures.plot_memory_model(mem, out_dir, pts, "memory_model" if i == 0 else f"memory_model_{i + 1}")
            for i, mem in enumerate(memory)]


def build_figures(results: rd.ResultSet, coll, proj, out_dir: Path, net=None, verdict=None,
                  memory=None) -> list:
    """Every figure of the report, in order; missing ones carry their sentence instead. net: the
    NetworkVerdict of an emulated-cluster sweep, whose two figures come first (None: neither is
    drawn nor mentioned); verdict: the report's Verdict, whose numbers the captions quote
    (computed here when not given); memory: the MemoryModel of each --memory file."""
    pts = results.points
    verdict = rd.compute_verdict(pts) if verdict is None else verdict
    network = [] if net is None else [figures.plot_network_vs_link(net, out_dir),
                                      figures.plot_network_vs_nodes(net, out_dir),
                                      figures.plot_network_simulation(net, out_dir)]
    return network + [
        figures.plot_throughput_vs_world_size(pts, out_dir, verdict),
        figures.plot_memory_per_rank(pts, out_dir, verdict),
        *memory_figures(memory or [], pts, out_dir),
        figures.plot_step_breakdown(pts, out_dir, verdict),
        figures.plot_workers(pts, out_dir),
        figures.plot_batch_size(pts, out_dir),
        figures.plot_collectives(coll, out_dir),
        figures.plot_allreduce_implementations(coll, out_dir),
        figures.plot_projection(proj, out_dir),
    ]


def figure_entries(figs: list) -> list:
    """Template records: title, caption, file name, data URI or the missing sentence."""
    entries = []
    for f in figs:
        entry = {"key": f.key, "title": f.title, "caption": f.caption, "missing": f.missing,
                 "file": None, "data_uri": None}
        if f.produced:
            entry["file"] = f.path.name
            entry["data_uri"] = "data:image/png;base64," + base64.b64encode(f.path.read_bytes()).decode("ascii")
        entries.append(entry)
    return entries


# --------------------------------------------------------------------------------------------
# rendering


def md_cell(value) -> str:
    """Text safe inside a Markdown table cell: pipes escaped, newlines flattened."""
    return str(value).replace("\\", "\\\\").replace("|", "\\|").replace("\n", " ")


def environment() -> jinja2.Environment:
    """Jinja2 over plots/templates; HTML templates autoescape, Markdown ones do not."""
    env = jinja2.Environment(loader=jinja2.FileSystemLoader(str(TEMPLATES)),
                             autoescape=jinja2.select_autoescape(enabled_extensions=("html.j2",),
                                                                 default_for_string=False),
                             trim_blocks=True, lstrip_blocks=True, keep_trailing_newline=True,
                             undefined=jinja2.StrictUndefined)
    env.filters["md"] = md_cell
    return env


def build_context(results: rd.ResultSet, figs: list, coll, proj, args, net=None, verdict=None) -> dict:
    """Everything the templates show; net and verdict: the NetworkVerdict and Verdict the figures
    quoted (verdict is computed here when not given)."""
    verdict = rd.compute_verdict(results.points) if verdict is None else verdict
    show_variant = any(results.variant_tags.values())
    return {
        "verdict": verdict.headline, "notes": verdict.notes, "network": network_context(net),
        "runs": run_rows(results.points), "show_reps": any(p.repetitions > 1 for p in results.points),
        "show_variant": show_variant,
        "reference": reference_rows(results.reference), "reference_versions": reference_versions(results.reference),
        "show_reference_source": len({r.source for r in results.reference}) > 1,
        "figures": figure_entries(figs), "warnings": warning_rows(results.points),
        "failed": failed_rows(results.failed), "environments": env_sections(results.envs),
        "inputs": results.files,
        "collectives_file": ", ".join(args.collectives or []), "projection_file": args.projection,
        "findings": findings_context(proj),
        "memory_files": list(getattr(args, "memory", None) or []),
    }


def render(context: dict, out_dir: Path) -> tuple:
    """Writes report.md and report.html; returns their paths."""
    env = environment()
    md = out_dir / "report.md"
    html = out_dir / "report.html"
    md.write_text(env.get_template("report.md.j2").render(**context))
    html.write_text(env.get_template("report.html.j2").render(**context))
    return md, html


def main(argv=None) -> int:
    """Reads the inputs, draws the figures, writes the report. Returns the exit status."""
    args = parse_args(sys.argv[1:] if argv is None else argv)
    out_dir = Path(args.out)
    try:
        results = rd.load_results(args.results)
        coll = rd.merge_collectives([rd.load_collectives(c) for c in args.collectives]) if args.collectives else None
        proj = rd.load_projection(args.projection) if args.projection else None
        memory = [rd.load_memory(m) for m in args.memory or []]
        history = trends.load_trends(args.trends) if args.trends else None
        out_dir.mkdir(parents=True, exist_ok=True)
    except rd.InputError as e:
        print(f"report.py: error: {e}", file=sys.stderr)
        return 2
    except OSError as e:
        print(f"report.py: error: {args.out}: cannot create the output directory: {e.strerror}", file=sys.stderr)
        return 2
    for key in figures.FIGURE_KEYS:  # a figure not drawn this time must not linger from the last
        (out_dir / f"{key}.png").unlink(missing_ok=True)
    for path in out_dir.glob("memory_model_*.png"):  # a further --memory file's figure
        if path.stem[len("memory_model_"):].isdigit():
            path.unlink()
    net = rd.compute_network_verdict(results.network)  # once: the paragraph and captions quote it
    verdict = rd.compute_verdict(results.points)  # once: the headline, notes and captions quote it
    figs = build_figures(results, coll, proj, out_dir, net, verdict, memory)
    if history is not None:  # drawn only when given, after the run's own figures
        figs.append(trends.plot_trends(history, out_dir))
    md, html = render(build_context(results, figs, coll, proj, args, net, verdict), out_dir)
    produced = sum(1 for f in figs if f.produced)
    print(f"report: {md} and {html} ({produced} figures, {len(figs) - produced} replaced by a note)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
