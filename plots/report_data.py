"""Reads the JSON the report is built from and turns it into plain records.

For: dpbench result and sweep files (schema "dpbench-result"), with the PyTorch reference runs
that `dpbench run --reference pytorch` adds to them, Google Benchmark JSON from
bench/micro/dpbench_collectives, `dpbench project` files (schema "dpbench-projection") and
`dpbench memory` files (schema "dpbench-memory": the memory model's bytes per mode, world size
and role, and the largest parameter count that fits a capacity);
aggregating repetitions by median; choosing which slice of a sweep a figure shows; the
ten-second verdict that opens the report, computed once: every number a figure's caption shares
with it (throughput ratios, memory imbalance, exposed communication) is read from the Verdict; the
one order of the strategies (the reference, ps, first, then the others as the files first name
them) that every table, figure and sentence uses; the rule for when communication hidden by
overlap is drawn (hidden_comm); for an emulated-cluster sweep (`dpbench sweep --nodes
--links`, runs with a `cluster` block), the throughput of each strategy per node count and link
rate, its projection, and the ratios and crossovers the network verdict states.

Not for: drawing (figures.py), HTML/Markdown rendering (report.py and templates/), or running
dpbench. Nothing here reads anything but the JSON files it is given.
"""
from __future__ import annotations

import json
import math
import re
import statistics
import sys
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Callable, Iterable, Optional

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "results"))
import schema_versions  # noqa: E402  (the versions read, and version 1's names: upgrade_v1)
import strategy_traits  # noqa: E402  (the traits of a run, legacy files included)

RESULT_SCHEMA = schema_versions.RESULT_SCHEMA
PROJECTION_SCHEMA = schema_versions.PROJECTION_SCHEMA
MEMORY_SCHEMA = schema_versions.MEMORY_SCHEMA

PHASES = ("data_wait", "h2d", "forward", "backward", "comm", "comm_exposed", "optimizer")
MEMORY_CATEGORIES = ("parameters", "gradients", "optimizer_state", "activations",
                     "comm_buffers", "data_staging")

# Run-config keys that are the axes of a sweep; every other config key (with the dataset)
# makes a "variant" (a different experiment that is never aggregated with this one).
AXIS_KEYS = ("mode", "modes", "transport", "world_size", "global_batch", "num_workers")


class InputError(Exception):
    """A file that cannot be read or is not the kind of JSON the report expects."""


# --------------------------------------------------------------------------------------------
# records


@dataclass(frozen=True)
class Point:
    """One measured grid point (mode x transport x variant x ranks x batch x workers), with
    its repetitions aggregated by median (and the spread of throughput and step time kept)."""

    mode: str
    transport: str
    variant: tuple
    world_size: int
    global_batch: int
    num_workers: int
    repetitions: int
    throughput: float
    step_time: dict  # p10, p50, p90, p99 in seconds
    phases: dict  # PHASES -> seconds
    memory_per_rank: tuple  # dicts: rank, peak_bytes and MEMORY_CATEGORIES (and "modelled", when recorded)
    imbalance: float
    root_minus_mean_bytes: float
    test_accuracy: Optional[float]
    final_train_loss: Optional[float]
    warnings: tuple
    virtual_ranks: bool
    series: str = ""  # label shared by every point of one line in a figure
    label: str = ""  # the strategy's label from the file: "ps (collective)", "allreduce (ring)"
    reference: bool = False  # the strategy the others are compared with (ps)
    has_root: bool = False  # rank 0 holds what the others do not (its memory above the mean)
    overlaps_backward: bool = False  # the strategy communicates while backward runs (its trait)
    order: int = 0  # the series' place in the report's one order (series_order)
    throughput_min: Optional[float] = None  # over repetitions; None when built without them
    throughput_max: Optional[float] = None
    step_p50_min: Optional[float] = None  # the smallest and largest repetition's p50 step (s)
    step_p50_max: Optional[float] = None
    # The run's own ratios to its reference, one per repetition (ratio_to_reference.by_repetition
    # of a `dpbench run` entry that holds its repetitions), and that reference's mode; () and ""
    # when the file recorded none.
    rep_ratios: tuple = ()
    ratio_reference: str = ""

    @property
    def axes(self) -> dict:
        """The sweep axes of this point, by name."""
        return {"world_size": self.world_size, "global_batch": self.global_batch,
                "num_workers": self.num_workers}


@dataclass(frozen=True)
class FailedPoint:
    """A sweep point that did not run; it has no measurements."""

    mode: str
    transport: str
    world_size: Optional[int]
    global_batch: Optional[int]
    num_workers: Optional[int]
    repetition: Optional[int]
    error: str
    source: str
    cluster: str = ""  # "4 nodes, 100mbit" for a point of an emulated-cluster sweep
    order: int = 0  # its strategy's place in the report's order (the reference first)


@dataclass(frozen=True)
class NetworkPoint:
    """One strategy at one emulated-cluster point (nodes x link rate, at one batch, workers,
    ranks per node and config variant), its repetitions aggregated: the median throughput with
    its min and max, and the projection's throughput (global_batch / projected_step_s)."""

    mode: str
    label: str  # the strategy's label: "ps (collective)"
    reference: bool
    order: int  # where the strategy first appears in the files (the sweep's --modes order)
    variant: tuple  # run_variant(): the config, without the cluster
    global_batch: int
    num_workers: int
    ranks_per_node: int
    nodes: int
    link: str  # the requested rate as given: "100mbit"
    link_bits_per_s: float  # the requested rate in bit/s
    repetitions: int
    throughput: float  # samples/s, median over repetitions
    throughput_min: float
    throughput_max: float
    projected_throughput: Optional[float]  # median over repetitions; None without a projection
    projection_errors: tuple  # network.projection.error of each repetition that has one
    # Step times (s, medians over repetitions; None where no run recorded one): measured
    # (network.projection.measured_step_s), the alpha-beta formula's (projected_step_s) and
    # SimGrid's simulation of the run's schedule (network.simulation.simulated_step_s), with the
    # simulation's error of each repetition that has one.
    measured_step_s: Optional[float] = None
    projected_step_s: Optional[float] = None
    simulated_step_s: Optional[float] = None
    # Nodes whose link was not the point's rate (run --link-of: a straggler), as (node, bit/s).
    link_of: tuple = ()
    simulation_errors: tuple = ()
    # The first repetition's per-step training losses (quality.step_train_loss, warm-up steps
    # included; None for a non-finite one); () where the run recorded none.
    step_losses: tuple = ()

    @property
    def setting(self) -> tuple:
        """What must match for two points to be on one figure: variant, batch, workers, ranks per
        node."""
        return (self.variant, self.global_batch, self.num_workers, self.ranks_per_node)


@dataclass(frozen=True)
class ReferenceRun:
    """One PyTorch reference run (`dpbench run --reference pytorch`) beside the dpbench run of
    the same file it reproduces: the dpbench run whose mode is its dpbench_mode, at its world
    size. The dpbench_* fields are None when the file holds no such run."""

    source: str  # the result file
    mode: str  # PyTorch's program: plain, dataparallel, ddp, rpc_ps
    dpbench_mode: str
    dpbench_label: str  # "allreduce (ring)"
    processes: int
    threads: int  # per process
    throughput: float  # samples/s
    step_p50: float  # seconds
    step_p90: Optional[float]
    peak_rss_bytes: Optional[float]  # rank 0's process peak RSS
    final_train_loss: Optional[float]
    test_accuracy: Optional[float]
    max_rel_diff: float  # largest relative per-step training loss difference from dpbench's
    within: bool  # max_rel_diff within the tolerance
    steps: int  # steps compared
    tolerance: Optional[float]
    at_step: Optional[int]
    launch: str  # how each side ran ("dpbench: 2 ranks as threads of one process; PyTorch: ...")
    torch_version: str
    dpbench_throughput: Optional[float] = None
    dpbench_step_p50: Optional[float] = None
    dpbench_test_accuracy: Optional[float] = None
    dpbench_peak_bytes: Optional[float] = None  # rank 0's allocator peak
    ratio: Optional[float] = None  # throughput dpbench / PyTorch


@dataclass
class ResultSet:
    """Everything read from the result files: aggregated points, failed points, environments,
    and the PyTorch reference runs."""

    points: list
    failed: list
    files: list  # dicts: path, created, runs
    envs: list  # distinct env objects, each with the files that share it
    variant_tags: dict = field(default_factory=dict)  # variant -> short text ("" if only one)
    reference: list = field(default_factory=list)  # ReferenceRun, in file order
    network: list = field(default_factory=list)  # NetworkPoint of emulated-cluster runs


@dataclass(frozen=True)
class BenchPoint:
    """One collective micro-benchmark measurement."""

    collective: str
    ranks: Optional[int]
    bytes: int
    busbw: Optional[float]
    algbw: Optional[float]


@dataclass
class Collectives:
    """Parsed Google Benchmark output: collectives and the memcpy reference."""

    points: list  # BenchPoint
    memcpy: dict  # reference label ("memcpy", "memcpy, 2 threads") -> [(bytes, GB/s)]
    context: dict


# --------------------------------------------------------------------------------------------
# reading files


def read_json(path) -> dict:
    """Parses one JSON file, turning every failure into InputError naming the file."""
    try:
        doc = json.loads(Path(path).read_text())
    except OSError as e:
        raise InputError(f"{path}: cannot read: {e.strerror or e}") from e
    except json.JSONDecodeError as e:
        raise InputError(f"{path}: not JSON: {e}") from e
    if not isinstance(doc, dict):
        raise InputError(f"{path}: expected a JSON object at the top level")
    return doc


def check_schema(path, doc: dict, name: str) -> dict:
    """doc at its schema's current names (schema_versions.upgrade: a version-1 result or memory
    file through upgrade_v1); raises InputError unless doc declares schema `name` at a version
    this report reads."""
    schema = doc.get("schema") if isinstance(doc.get("schema"), dict) else {}
    if schema.get("name") != name:
        raise InputError(f"{path}: not a {name} file (schema.name is {schema.get('name')!r})")
    if not schema_versions.readable(name, schema.get("version")):
        raise InputError(f"{path}: {name} version {schema.get('version')!r} is not supported "
                         f"(this report reads {schema_versions.versions_text(name)})")
    return schema_versions.upgrade(doc)


def run_transport(run: dict) -> str:
    """The run's transport, from its strategy traits (failed sweep points carry them too)."""
    return str(strategy_traits.run_traits(run)["transport"] or "")


# Config keys a strategy's label already names ("allreduce (ring, fp16)"): runs that differ only
# in them are series of one figure (sweep --comm-hooks), not separate experiments.
LABELLED_KEYS = ("comm_hook", "hierarchy", "staleness", "staleness_replay")


def run_variant(run: dict) -> tuple:
    """Hashable description of everything but the sweep axes: the experiment the run belongs to.
    Only these keys count, so that a failed point (which has fewer fields) finds its siblings."""
    config = run.get("config", {})
    items = [(k, json.dumps(v, sort_keys=True)) for k, v in sorted(config.items())
             if k not in AXIS_KEYS and k not in LABELLED_KEYS and k not in ("seed",)]
    return tuple(items)


def run_cluster(run: dict) -> Optional[dict]:
    """The run's `cluster` block (a point of an emulated-cluster sweep: nodes, ranks_per_node,
    link, the probed links), or None for a run that did not run on an emulated cluster."""
    block = run.get("cluster")
    return block if isinstance(block, dict) else None


def cluster_variant(run: dict) -> tuple:
    """The variant items that set an emulated-cluster run apart from its siblings at the same
    ranks: its link rate and ranks per node (the node count follows from the world size).
    () for a run without a cluster block, so such runs group exactly as before."""
    block = run_cluster(run)
    if block is None:
        return ()
    return (("link", json.dumps(block.get("link"))),
            ("ranks_per_node", json.dumps(block.get("ranks_per_node"))))


def load_results(paths: Iterable) -> ResultSet:
    """Reads result/sweep files, aggregates repetitions, labels the series and puts points and
    failed points in the report's order (strategy_rank)."""
    groups: dict = {}
    failed = []
    files = []
    envs: list = []
    reference = []
    cluster_runs = []
    seen: dict = {}  # strategy label -> (not reference, index of its first run in the files)
    for path in paths:
        doc = read_json(path)
        doc = check_schema(path, doc, RESULT_SCHEMA)
        runs = doc.get("runs")
        if not isinstance(runs, list):
            raise InputError(f"{path}: has no runs[] array")
        files.append({"path": str(path), "created": doc.get("created", ""), "runs": len(runs)})
        add_env(envs, doc.get("env", {}), str(path))
        for index, run in enumerate(runs):
            traits = strategy_traits.run_traits(run, doc)
            seen.setdefault(str(traits["label"]), (not traits["reference"], len(seen)))
            if run.get("status", "ok") != "ok":
                failed.append(replace(failed_point(run, str(path)), order=seen[str(traits["label"])][1]))
                continue
            try:
                key = (run["mode"], run_transport(run), run_variant(run) + cluster_variant(run),
                       int(run["world_size"]),
                       int(run["global_batch"]), int(run["config"]["num_workers"]),
                       traits["label"], traits["reference"], traits["has_root"],
                       traits["overlaps_backward"])
            except (KeyError, TypeError, ValueError) as e:
                raise InputError(f"{path}: runs[{index}] lacks {e} (not a dpbench run entry)") from e
            groups.setdefault(key, []).append(run)
            if run_cluster(run) is not None:
                cluster_runs.append((str(path), index, run))
        reference.extend(reference_runs(doc, str(path)))
    points = []
    for key, runs in groups.items():
        try:
            points.append(aggregate(key, runs))
        except (KeyError, TypeError) as e:
            raise InputError(f"a {key[0]} run at {key[3]} ranks lacks the field {e}") from e
    tags = variant_tags({p.variant for p in points})
    points = with_order([with_series(p, tags) for p in points], seen)
    points.sort(key=point_order)
    ranks = strategy_rank(seen)
    failed = [replace(f, order=ranks[f.order]) for f in failed]
    failed.sort(key=lambda f: (f.order, f.world_size or 0, f.global_batch or 0,
                               f.num_workers or 0, f.cluster, f.repetition or 0))
    return ResultSet(points=points, failed=failed, files=files, envs=envs, variant_tags=tags,
                     reference=reference, network=network_points(cluster_runs))


def reference_field(path: str, where: str, record, *keys):
    """record[keys[0]][keys[1]]...; InputError naming the file and the missing key otherwise."""
    value = record
    for depth, key in enumerate(keys):
        if not isinstance(value, dict) or key not in value:
            name = ".".join(keys[: depth + 1])
            raise InputError(f"{path}: {where} lacks '{name}' (not a PyTorch reference run)")
        value = value[key]
    return value


def rank0(per_rank) -> Optional[dict]:
    """The rank-0 entry of a memory.per_rank list (the first when none says rank 0)."""
    if not isinstance(per_rank, list) or not per_rank:
        return None
    entries = [m for m in per_rank if isinstance(m, dict)]
    return next((m for m in entries if m.get("rank") == 0), entries[0] if entries else None)


def paired_run(runs: list, mode: str, world_size: Optional[int]) -> Optional[dict]:
    """The first successful run of `mode` (at `world_size`, when known) in a file's runs[]."""
    for run in runs:
        if not isinstance(run, dict) or run.get("status", "ok") != "ok" or run.get("mode") != mode:
            continue
        if world_size is None or run.get("world_size") == world_size:
            return run
    return None


def reference_runs(doc: dict, path: str) -> list:
    """The ReferenceRun records of one result file's `reference` block ([] when it has none),
    each with the dpbench run it reproduces."""
    block = doc.get("reference")
    if block is None:
        return []
    runs = reference_field(path, "the reference block", block, "runs")
    if not isinstance(runs, list):
        raise InputError(f"{path}: reference.runs is not an array")
    records = []
    for index, rec in enumerate(runs):
        where = f"reference.runs[{index}]"

        def get(*keys):
            return reference_field(path, where, rec, *keys)

        try:
            mode, dpbench_mode = str(get("mode")), str(get("dpbench_mode"))
            processes, threads = int(get("processes")), int(get("threads_per_process"))
            throughput = float(get("throughput_samples_per_s"))
            step_p50 = float(get("step_time_s", "p50"))
            step_p90 = number(get("step_time_s").get("p90"))
            quality = get("quality")
            if not isinstance(quality, dict):
                raise InputError(f"{path}: {where}: quality is not an object")
            max_rel_diff = float(get("loss_agreement", "max_rel_diff"))
            within = get("loss_agreement", "within")
            steps = int(get("loss_agreement", "steps"))
            agreement = get("loss_agreement")
        except (TypeError, ValueError) as e:
            raise InputError(f"{path}: {where}: a field has the wrong type ({e})") from e
        if not isinstance(within, bool):
            raise InputError(f"{path}: {where}: loss_agreement.within is not true or false")
        world_size = rec.get("world_size")
        world_size = int(world_size) if isinstance(world_size, int) else None
        run = paired_run(doc.get("runs") or [], dpbench_mode, world_size)
        memory = rec.get("memory") if isinstance(rec.get("memory"), dict) else {}
        rss = rank0(memory.get("per_rank"))
        label = rec.get("dpbench_label")
        if not label:
            label = strategy_traits.run_traits(run)["label"] if run is not None else dpbench_mode
        record = ReferenceRun(
            source=path, mode=mode, dpbench_mode=dpbench_mode, dpbench_label=str(label),
            processes=processes, threads=threads, throughput=throughput, step_p50=step_p50,
            step_p90=step_p90, peak_rss_bytes=number((rss or {}).get("peak_rss_bytes")),
            final_train_loss=number(quality.get("final_train_loss")),
            test_accuracy=number(quality.get("test_accuracy")),
            max_rel_diff=max_rel_diff, within=within, steps=steps,
            tolerance=number(agreement.get("tolerance")),
            at_step=agreement.get("at_step") if isinstance(agreement.get("at_step"), int) else None,
            launch=str(rec.get("launch", "")), torch_version=str(rec.get("torch_version", "")))
        if run is not None:
            dp_throughput = number(run.get("throughput_samples_per_s"))
            peak = rank0((run.get("memory") or {}).get("per_rank"))
            record = replace(
                record, dpbench_throughput=dp_throughput,
                dpbench_step_p50=number((run.get("step_time_s") or {}).get("p50")),
                dpbench_test_accuracy=number((run.get("quality") or {}).get("test_accuracy")),
                dpbench_peak_bytes=number((peak or {}).get("peak_bytes")),
                ratio=dp_throughput / throughput if dp_throughput is not None and throughput > 0 else None)
        records.append(record)
    return records


def add_env(envs: list, env: dict, path: str) -> None:
    """Adds env to the list of distinct environments, remembering which files share it."""
    for known in envs:
        if known["env"] == env:
            known["files"].append(path)
            return
    envs.append({"env": env, "files": [path]})


def failed_point(run: dict, source: str) -> FailedPoint:
    """The record of one failed sweep point."""
    config = run.get("config", {})

    def axis(name):
        value = run.get(name, config.get(name))
        return int(value) if isinstance(value, (int, float)) else None

    block = run_cluster(run)
    cluster = f"{block.get('nodes')} nodes, {block.get('link')}" if block is not None else ""
    return FailedPoint(mode=str(run.get("mode", config.get("mode", "?"))),
                       transport=run_transport(run), world_size=axis("world_size"),
                       global_batch=axis("global_batch"), num_workers=axis("num_workers"),
                       repetition=run.get("repetition"), error=str(run.get("error", "(no error text)")),
                       source=source, cluster=cluster)


def median(values) -> Optional[float]:
    """Median of the values that are not None; None when there are none."""
    values = [v for v in values if v is not None]
    return statistics.median(values) if values else None


def aggregate(key: tuple, runs: list) -> Point:
    """Aggregates the repetitions of one grid point by median (memory per rank and category),
    keeping the smallest and largest throughput and p50 step of the repetitions."""
    mode, transport, variant, world_size, batch, workers, label, reference, has_root, overlaps = key
    throughputs = [r["throughput_samples_per_s"] for r in runs]
    count, rep_ratios, ratio_reference = len(runs), (), ""
    if len(runs) == 1:
        # `dpbench run --repetitions N` keeps its repetitions in one entry: their throughputs and
        # the run's own ratios to its reference.
        reps = runs[0].get("repetitions") or {}
        if isinstance(reps.get("throughput_samples_per_s"), list) and len(reps["throughput_samples_per_s"]) > 1:
            count, throughputs = len(reps["throughput_samples_per_s"]), list(reps["throughput_samples_per_s"])
        ratio = runs[0].get("ratio_to_reference") or {}
        if isinstance(ratio.get("by_repetition"), list) and ratio["by_repetition"]:
            rep_ratios, ratio_reference = tuple(ratio["by_repetition"]), str(ratio.get("reference", ""))
    p50s = [r["step_time_s"]["p50"] for r in runs]
    ranks = sorted({m["rank"] for r in runs for m in r["memory"]["per_rank"]})
    memory = []
    for rank in ranks:
        rows = [m for r in runs for m in r["memory"]["per_rank"] if m["rank"] == rank]
        entry = {"rank": rank, "peak_bytes": median(m["peak_bytes"] for m in rows)}
        for category in MEMORY_CATEGORIES:
            entry[category] = median(m.get(category, 0) for m in rows)
        modelled = [m.get("modelled") for m in rows]
        if all(isinstance(m, dict) and number(m.get("total_bytes")) is not None for m in modelled):
            # The memory model's figures for this rank (memory.per_rank[].modelled), where it applies.
            entry["modelled"] = {key: median(number(m.get(key)) for m in modelled)
                                 for key in MEMORY_CATEGORIES + ("total_bytes",)}
            entry["modelled"]["role"] = str(modelled[0].get("role", ""))
        memory.append(entry)
    warnings = []
    for r in runs:
        for w in r.get("warnings", []):
            if w not in warnings:
                warnings.append(w)
    return Point(
        mode=mode, transport=transport, variant=variant, world_size=world_size,
        global_batch=batch, num_workers=workers, repetitions=count,
        throughput=median(r["throughput_samples_per_s"] for r in runs), throughput_min=min(throughputs),
        throughput_max=max(throughputs), rep_ratios=rep_ratios, ratio_reference=ratio_reference,
        step_time={q: median(r["step_time_s"].get(q) for r in runs) for q in ("p10", "p50", "p90", "p99")},
        step_p50_min=min(p50s), step_p50_max=max(p50s),
        phases={ph: median(r["phases_s"].get(ph, 0.0) for r in runs) for ph in PHASES},
        memory_per_rank=tuple(memory),
        imbalance=median(r["memory"]["imbalance_max_over_mean"] for r in runs),
        root_minus_mean_bytes=median(r["memory"]["root_minus_mean_bytes"] for r in runs),
        test_accuracy=median(r.get("quality", {}).get("test_accuracy") for r in runs),
        final_train_loss=median(r.get("quality", {}).get("final_train_loss") for r in runs),
        warnings=tuple(warnings),
        virtual_ranks=any(r.get("virtual_ranks", False) for r in runs),
        label=label, reference=reference, has_root=has_root, overlaps_backward=bool(overlaps),
    )


def variant_tags(variants: set) -> dict:
    """Short text per variant naming only the config keys whose values differ between them."""
    variants = {v for v in variants if v}
    if len(variants) <= 1:
        return {v: "" for v in variants}
    dicts = {v: dict(v) for v in variants}
    keys = sorted({k for d in dicts.values() for k in d})
    differing = [k for k in keys if len({d.get(k) for d in dicts.values()}) > 1]
    return {v: ", ".join(f"{k}={json.loads(d[k]) if k in d else '-'}" for k in differing)
            for v, d in dicts.items()}


def series_label(label: str, tag: str = "") -> str:
    """How a series is named in legends: the strategy's label ("ps (collective)", "allreduce
    (ring)"), with the config variant's tag when there are several."""
    return f"{label} [{tag}]" if tag else label


def with_series(point: Point, tags: dict) -> Point:
    """The point with its series label filled in."""
    return replace(point, series=series_label(point.label, tags.get(point.variant, "")))


def strategy_rank(seen: dict) -> dict:
    """{index of first appearance: place in the report's order} for the strategies `seen`
    ({label: (not reference, index of its first run)}): the reference strategies (ps) first,
    then the others in the order the files first name them (the sweep's --modes order, which is
    dpbench's registry order: sharded_ps, then allreduce)."""
    return {index: rank for rank, (_, index) in enumerate(sorted(seen.values()))}


def with_order(points: list, seen: dict) -> list:
    """The points with `order` filled in: the place of their series in the report's one order,
    by strategy (strategy_rank), then by config variant (alphabetical tag)."""
    ranks = strategy_rank(seen)

    def key(p):
        return (ranks[seen[p.label][1]], p.series)

    series = sorted({key(p) for p in points})
    place = {k: i for i, k in enumerate(series)}
    return [replace(p, order=place[key(p)]) for p in points]


def point_order(p: Point) -> tuple:
    """Table order: strategy in the report's order (the reference first), variant, ranks, batch,
    workers."""
    return (p.order, p.world_size, p.global_batch, p.num_workers)


def series_order(points: Iterable) -> list:
    """Distinct series labels in the report's one order: the reference strategy (ps) first, then
    the others in the order the files first name them; every figure, table and sentence uses it."""
    first: dict = {}
    for p in points:
        first.setdefault(p.series, p.order)
    return sorted(first, key=lambda s: (first[s], s))


def hidden_comm(p: Point) -> float:
    """Seconds of communication hidden by overlap that the figures draw for a point: the measured
    comm - comm_exposed, only where overlap can exist (more than one rank, and a strategy whose
    trait overlaps_backward is true) and when that part is above zero; 0 elsewhere."""
    if p.world_size <= 1 or not p.overlaps_backward:
        return 0.0
    hidden = (p.phases.get("comm") or 0.0) - (p.phases.get("comm_exposed") or 0.0)
    return hidden if hidden > 0 else 0.0


# How captions state hidden_comm's rule ("... it is " + OVERLAP_RULE).
OVERLAP_RULE = ("drawn only where overlap can exist: more than one rank, a strategy that overlaps "
                "backward (strategy.overlaps_backward), and a measured hidden part (comm - "
                "comm_exposed) above zero")


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
    """One throughput ratio the verdict states: a strategy against a reference strategy at the
    verdict's world size, the median over their matched settings."""

    other: str  # the strategy's label: "allreduce (ring)"
    other_name: str  # as the verdict names it: "allreduce"
    reference: str  # the reference's label: "ps (collective)"
    value: float  # throughput other / reference
    text: str  # as the verdict words it: "is 1.37x faster than ps", "does not differ beyond noise ..."


@dataclass(frozen=True)
class Imbalance:
    """The memory imbalance the verdict states for one reference strategy: the median over its
    matched points of their max/mean per-rank peak memory."""

    reference: str  # label
    name: str  # as sentences name it: "ps", or "ps (p2p)" beside "ps (collective)"
    value: float
    text: str  # "1.87x"
    root: bool  # rank 0 is its root (has_root), not just its largest rank


@dataclass(frozen=True)
class Exposed:
    """The share of the median step that communication is exposed, for one side of the verdict's
    comparison (the reference strategies together, or one other strategy)."""

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
    imbalance: list = field(default_factory=list)  # Imbalance, one per reference label, in order
    memory: str = ""  # "the ps root holds 1.87x the mean per-rank memory"
    exposed: list = field(default_factory=list)  # Exposed: the reference side first, then the others
    best: str = ""  # with one strategy: "best 5,000 samples/s at 4 ranks"
    settings: int = 0  # how many matched batch/worker settings the ratios are medians over


def ratio_predicate(pairs: list, ref_name: str) -> tuple:
    """(value, words) for a strategy against a reference over matched pairs (other, reference),
    by the run's own rule (bench/app/run_command.cpp, verdict_clause) where the file holds one
    `dpbench run` point with its repetitions' ratios to that reference: "does not differ beyond
    noise from ps (0.87-1.45x over 3 repetitions)" when the range holds 1, else "is 1.38x faster
    than ps (1.28-1.45x over 3 repetitions)". Otherwise the median ratio over the pairs, "is
    1.21x faster than ps"."""
    if len(pairs) == 1:
        other, ref = pairs[0]
        ratios = other.rep_ratios
        if len(ratios) > 1 and other.ratio_reference == ref.mode:
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


def matched_pairs(points: list, world_size: int, reference_label: str) -> list:
    """(other, reference) pairs at one world size with the same variant, batch and workers: every
    point of a non-reference strategy against the reference point labelled reference_label."""
    refs = {(p.variant, p.global_batch, p.num_workers): p for p in points
            if p.reference and p.label == reference_label and p.world_size == world_size}
    pairs = []
    for a in points:
        if not a.reference and a.world_size == world_size:
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
    """The points without repeats, in first-seen order (a reference point pairs with several)."""
    out, ids = [], set()
    for p in points:
        if id(p) not in ids:
            ids.add(id(p))
            out.append(p)
    return out


def compute_verdict(points: list) -> Verdict:
    """Compares every strategy with the reference strategy (ps, as the runs' traits say) at the
    largest world size where both ran with the same batch, workers and config: throughput ratio
    (median over matched settings) and each reference's memory imbalance (its root's, when it
    has one). Strategies are named in the report's order (series_order)."""
    if not points:
        return Verdict("No run succeeded, so there is nothing to compare: see the failed points below.", [])
    refs = [p for p in points if p.reference]
    others = [p for p in points if not p.reference]
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
    imbalance = reference_imbalance(unique(p for _, p in all_pairs), ref_labels, ref_names)
    memory = memory_clause(imbalance)
    headline = f"{', and '.join(sentences)} {where}; {memory}."
    exposed = exposed_shares(all_pairs)
    return Verdict(headline, verdict_notes(points, world, all_pairs, exposed), world=world, setting=setting,
                   where=where, ratios=ratios, imbalance=imbalance, memory=memory, exposed=exposed,
                   settings=len(settings))


def reference_imbalance(refs: list, labels: list, ref_names: dict) -> list:
    """One Imbalance per reference label (in `labels` order): the median max/mean per-rank memory
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
    """"the ps root holds 1.87x the mean per-rank memory", or with several references "the ps
    (collective) root holds 1.90x and the ps (p2p) root holds 2.00x the mean ..."."""
    parts = [(f"the {m.name} root holds {m.text}" if m.root else f"the largest {m.name} rank holds {m.text}")
             for m in imbalance]
    return f"{' and '.join(parts)} the mean per-rank memory"


def exposed_shares(pairs: list) -> list:
    """Exposed communication as a share of the median step at the verdict's world size: the
    reference side (its matched points together) first, then each other strategy in order."""
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


# --------------------------------------------------------------------------------------------
# emulated cluster: throughput per node count and link rate


# tc's rate units, as dpbench's --link and --links read them (cluster/link.cpp): bits per second,
# or bytes per second for the *bps forms.
RATE_UNITS = {"bit": 1.0, "kbit": 1e3, "mbit": 1e6, "gbit": 1e9, "tbit": 1e12,
              "bps": 8.0, "kbps": 8e3, "mbps": 8e6, "gbps": 8e9, "tbps": 8e12}
RATIO_TIE = 0.005  # a throughput ratio this close to 1 is "as fast as", not a lead


def parse_rate(text) -> Optional[float]:
    """"100mbit" -> 1e8 bit/s, "1gbit" -> 1e9, "100mbps" (bytes) -> 8e8; None if not a rate."""
    match = re.fullmatch(r"([0-9]+(?:\.[0-9]+)?)(bit|kbit|mbit|gbit|tbit|bps|kbps|mbps|gbps|tbps)",
                         str(text).strip())
    return float(match.group(1)) * RATE_UNITS[match.group(2)] if match else None


def link_bits_per_s(block: dict) -> Optional[float]:
    """The requested link rate of a cluster block in bit/s: its `link` string parsed, else the
    most common requested_bits_per_s of its probed links; None when neither is there."""
    rate = parse_rate(block.get("link", ""))
    if rate is not None:
        return rate
    rates = [number(link.get("requested_bits_per_s")) for link in block.get("links") or []
             if isinstance(link, dict)]
    rates = [r for r in rates if r is not None and r > 0]
    return max(set(rates), key=rates.count) if rates else None


def rate_text(bits: float) -> str:
    """1e8 -> "100 Mbit/s", 1e9 -> "1 Gbit/s", 2.5e9 -> "2.5 Gbit/s"."""
    for unit, size in (("Tbit/s", 1e12), ("Gbit/s", 1e9), ("Mbit/s", 1e6), ("kbit/s", 1e3)):
        if bits >= size:
            return f"{bits / size:g} {unit}"
    return f"{bits:g} bit/s"


def network_points(cluster_runs: list) -> list:
    """NetworkPoint records of the ok runs of emulated-cluster sweeps.

    cluster_runs: (file, index in its runs[], run) of each ok run with a cluster block.
    Repetitions of one strategy at one (nodes, link, batch, workers, ranks per node, config)
    are aggregated; raises InputError naming the run when its cluster block is unusable.
    """
    groups: dict = {}
    order: dict = {}
    for path, index, run in cluster_runs:
        block = run["cluster"]
        rate = link_bits_per_s(block)
        if rate is None:
            raise InputError(f"{path}: runs[{index}].cluster.link {block.get('link')!r} is not a "
                             "link rate (e.g. 100mbit, 1gbit)")
        try:
            traits = strategy_traits.run_traits(run)
            key = (str(run["mode"]), str(traits["label"]), bool(traits["reference"]), run_variant(run),
                   int(run["global_batch"]), int(run["config"]["num_workers"]),
                   int(block["ranks_per_node"]), int(block["nodes"]), str(block["link"]), rate)
        except (KeyError, TypeError, ValueError) as e:
            raise InputError(f"{path}: runs[{index}] lacks {e} (not an emulated-cluster run entry)") from e
        order.setdefault(key[1], len(order))
        groups.setdefault(key, []).append(run)
    points = []
    for key, runs in groups.items():
        try:
            points.append(aggregate_network(key, runs, order[key[1]]))
        except (KeyError, TypeError, ValueError) as e:
            raise InputError(f"a {key[0]} run at {key[7]} nodes, {key[8]} lacks the field {e}") from e
    points.sort(key=lambda p: (not p.reference, p.order, p.global_batch, p.num_workers,
                               p.ranks_per_node, p.nodes, p.link_bits_per_s))
    return points


def aggregate_network(key: tuple, runs: list, order: int) -> NetworkPoint:
    """One NetworkPoint from the repetitions `runs` of the point `key` (see network_points)."""
    mode, label, reference, variant, batch, workers, per_node, nodes, link, rate = key
    throughputs = [float(r["throughput_samples_per_s"]) for r in runs]
    projected, errors = [], []
    steps: dict = {"measured": [], "projected": [], "simulated": []}
    sim_errors = []
    losses = ((runs[0].get("quality") or {}).get("step_train_loss")) or []
    step_losses = tuple(float(v) if number(v) is not None else None for v in losses)
    for r in runs:
        projection = ((r.get("network") or {}).get("projection")) or {}
        simulation = ((r.get("network") or {}).get("simulation")) or {}
        step = number(projection.get("projected_step_s"))
        if step is not None and step > 0:
            projected.append(batch / step)
        if number(projection.get("error")) is not None:
            errors.append(float(projection["error"]))
        for name, value in (("measured", projection.get("measured_step_s")), ("projected", step),
                            ("simulated", simulation.get("simulated_step_s"))):
            if number(value) is not None and float(value) > 0:
                steps[name].append(float(value))
        if number(simulation.get("error")) is not None:
            sim_errors.append(float(simulation["error"]))
    return NetworkPoint(mode=mode, label=label, reference=reference, order=order, variant=variant,
                        global_batch=batch, num_workers=workers, ranks_per_node=per_node, nodes=nodes,
                        link=link, link_bits_per_s=rate, repetitions=len(runs),
                        throughput=statistics.median(throughputs), throughput_min=min(throughputs),
                        throughput_max=max(throughputs), projected_throughput=median(projected),
                        projection_errors=tuple(errors), measured_step_s=median(steps["measured"]),
                        projected_step_s=median(steps["projected"]),
                        simulated_step_s=median(steps["simulated"]), simulation_errors=tuple(sim_errors),
                        step_losses=step_losses, link_of=link_overrides(runs[0], rate))


def link_overrides(run: dict, rate: float) -> tuple:
    """The nodes of the run's cluster block whose requested rate is not `rate`, as (node, bit/s)."""
    out = []
    for link in ((run.get("cluster") or {}).get("links")) or []:
        bits = number(link.get("requested_bits_per_s")) if isinstance(link, dict) else None
        if bits is not None and bits != rate and number(link.get("node")) is not None:
            out.append((int(link["node"]), float(bits)))
    return tuple(sorted(out))


def network_modes(points: Iterable) -> list:
    """The strategies' labels in figure and sentence order: the reference first (ps, the
    baseline), then the others in the order they first appear in the files (the sweep's --modes
    order: sharded_ps, allreduce)."""
    first: dict = {}
    for p in points:
        first.setdefault(p.label, (not p.reference, p.order))
    return sorted(first, key=first.get)


def network_slice(points: list) -> tuple:
    """(setting, points) of the one batch / workers / ranks-per-node / config the network figures
    and verdict show: the one with the most (nodes, link) points, then the most strategies, the
    largest batch, the fewest workers and the most ranks per node (where the node hierarchy
    differs from the flat collectives). ((), []) without points."""
    groups: dict = {}
    for p in points:
        groups.setdefault(p.setting, []).append(p)
    if not groups:
        return (), []

    def score(setting):
        pts = groups[setting]
        return (len({(p.nodes, p.link_bits_per_s) for p in pts}), len({p.label for p in pts}),
                setting[1], -setting[2], setting[3])
    best = max(groups, key=score)
    return best, groups[best]


@dataclass
class NetworkVerdict:
    """What an emulated-cluster sweep measured, computed once and quoted by the report's network
    paragraph, its table and the captions of both network figures."""

    points: list  # NetworkPoint of the slice shown
    modes: list  # their labels, reference first (network_modes)
    names: dict  # label -> how sentences name it ("ps", or "ps (p2p)" beside "ps (collective)")
    reference: str  # label of the strategy the ratios are to
    setting: str  # "batch 256, 0 workers, 1 rank per node"
    nodes: list  # node counts measured, ascending
    rates: list  # link rates measured (bit/s), ascending
    throughput: dict  # {(nodes, bit/s): {label: median samples/s}}
    ratios: dict  # {(nodes, bit/s): {label: throughput / the reference's}}, reference left out
    link_sentences: dict  # {nodes: the ratios at each link rate, one sentence}
    node_sentences: dict  # {bit/s: the ratios at each node count, one sentence}
    link_crossovers: list  # sentences: two strategies change places between adjacent link rates
    node_crossovers: list  # sentences: ... between adjacent node counts
    crossover_text: str  # the crossovers, or the sentence saying none was measured
    error_range: Optional[tuple]  # (min, max) of network.projection.error over the slice's runs
    error_count: int  # runs with a projection error
    error_text: str
    paragraph: str  # the verdict: ratios, crossovers, projection error
    # Time to a target loss (time_to_target): the training loss (trailing mean) every point of
    # the slice reached, and per (nodes, bit/s) and label the steps to it and their time (s);
    # None / {} when a point recorded no per-step losses or no measured step.
    target_loss: Optional[float] = None
    time_to_target: dict = field(default_factory=dict)


LOSS_WINDOW = 5  # steps of the trailing mean time_to_target compares: one batch's loss is noisy


def trailing_mean(losses: tuple, window: int = LOSS_WINDOW) -> list:
    """The mean of each step's loss and the window - 1 before it (fewer at the start)."""
    return [statistics.fmean(losses[max(0, i - window + 1):i + 1]) for i in range(len(losses))]


def learned(means: list) -> bool:
    """Whether a run's trailing-mean loss ended below where it started (finite throughout): a run
    that diverged (stale updates with momentum, a too-large --lr) does not set the target."""
    return all(math.isfinite(m) for m in means) and means[-1] < means[0]


def time_to_target(pts: list) -> tuple:
    """(target, {(nodes, bit/s): {label: (steps, seconds) or None}}) over the points of one slice,
    on the trailing mean of LOSS_WINDOW per-step training losses: the target is the highest of the
    last means of the points that learned (learned(): so that every one of them reached it); a
    point's steps are those until its mean first fell to the target, warm-up included, and its
    seconds those steps at its median measured step time (stale or compressed gradients converge
    differently, so throughput alone does not order them). A point that did not learn and never
    fell to the target maps to None. (None, {}) when a point has no per-step losses or no measured
    step time, or no point learned."""
    if not pts or any(not p.step_losses or p.measured_step_s is None for p in pts):
        return None, {}
    means = {id(p): trailing_mean(tuple(math.nan if x is None else x for x in p.step_losses)) for p in pts}
    finals = [m[-1] for m in means.values() if learned(m)]
    if not finals:
        return None, {}
    target = max(finals)
    out: dict = {}
    for p in pts:
        steps = next((i + 1 for i, loss in enumerate(means[id(p)]) if loss <= target), None)
        out.setdefault((p.nodes, p.link_bits_per_s), {})[p.label] = \
            None if steps is None else (steps, steps * p.measured_step_s)
    return target, out


def target_sentences(net) -> list:
    """Per (nodes, link) with a time to the target: the runs in the order they got there, then
    those that did not ("At 3 nodes and 1 Gbit/s, allreduce (ring) reached it first (6.41 s),
    then sharded_ps (collective) (7.99 s, 1.25x as long); not reached: ...")."""
    out = []
    for nodes in net.nodes:
        for rate in net.rates:
            at = net.time_to_target.get((nodes, rate))
            if not at:
                continue
            reached = sorted(((v[1], net.names.get(label, label)) for label, v in at.items() if v is not None))
            missed = [net.names.get(label, label) for label, v in at.items() if v is None]
            if not reached:
                continue
            first_s, first = reached[0]
            parts = [f"At {nodes} nodes and {rate_text(rate)}, {first} reached it first ({first_s:.2f} s)"]
            if len(reached) > 1:
                parts[0] += ", then " + ", ".join(f"{name} ({sec:.2f} s, {sec / first_s:.2f}x as long)"
                                                  for sec, name in reached[1:])
            if missed:
                parts.append("not reached: " + ", ".join(missed))
            out.append("; ".join(parts) + ".")
    return out


def percent_text(fraction: float) -> str:
    """0.055 -> "+5.5%", -0.209 -> "-20.9%" (a signed projection error)."""
    return f"{100 * fraction:+.1f}%"


def ratio_clause(name: str, reference: str, values: list) -> str:
    """"allreduce beats ps by 3.01x at 100 Mbit/s and by 2.46x at 1 Gbit/s", or, when it does not
    lead everywhere, "ps_x reaches 0.85x ps's throughput at 1 Gbit/s and 1.10x at 10 Gbit/s".
    values: (ratio, where) pairs in order."""
    if all(r >= 1 + RATIO_TIE for r, _ in values):
        return f"{name} beats {reference} by " + " and by ".join(f"{r:.2f}x at {w}" for r, w in values)
    return (f"{name} reaches " + " and ".join(f"{r:.2f}x" + (f" {reference}'s throughput" if i == 0 else "")
                                              + f" at {w}" for i, (r, w) in enumerate(values)))


def ratio_sentence(where: str, clauses: list) -> str:
    """"At 4 nodes, <clause>; <clause>." (empty without clauses)."""
    return f"At {where}, {'; '.join(clauses)}." if clauses else ""


def crossovers_along(throughput: dict, modes: list, names: dict, fixed: Iterable, steps: list,
                     at, where_fixed, where_step) -> list:
    """Sentences naming each pair of strategies whose order flips between two adjacent values of
    one axis (link rate or node count) with the other held at each `fixed` value.

    throughput: {(nodes, bit/s): {label: samples/s}}; at(fixed, step) -> that key;
    where_fixed(fixed), where_step(step): how the sentence names each value.
    """
    out = []
    for f in fixed:
        for i, first in enumerate(modes):
            for second in modes[i + 1:]:
                measured = [(s, throughput[at(f, s)][second] / throughput[at(f, s)][first])
                            for s in steps if at(f, s) in throughput
                            and first in throughput[at(f, s)] and second in throughput[at(f, s)]]
                for (s1, q1), (s2, q2) in zip(measured, measured[1:]):
                    if (q1 - 1) * (q2 - 1) < 0 and abs(q1 - 1) >= RATIO_TIE and abs(q2 - 1) >= RATIO_TIE:
                        out.append(f"at {where_fixed(f)}, {names[second]}/{names[first]} goes from "
                                   f"{q1:.2f}x at {where_step(s1)} to {q2:.2f}x at {where_step(s2)}: "
                                   f"a crossover between {where_step(s1)} and {where_step(s2)}")
    return out


def nodes_text(n: int) -> str:
    """"4 nodes"."""
    return f"{n} node{'s' if n != 1 else ''}"


def one_order(throughput: dict, modes: list) -> Optional[list]:
    """The labels fastest first when every point that measured all of them ranks them the same
    way; None when the order differs somewhere or no point measured them all."""
    orders = {tuple(sorted(modes, key=lambda m: -tps[m])) for tps in throughput.values()
              if all(m in tps for m in modes)}
    return list(next(iter(orders))) if len(orders) == 1 else None


def compute_network_verdict(points: list) -> Optional[NetworkVerdict]:
    """The network verdict of the emulated-cluster points (ResultSet.network), on the slice
    network_slice() picks; None without points.

    For each (nodes, link) it divides every strategy's median throughput by the reference's
    (the first reference label, ps), states those ratios per node count (across link rates) and
    per link rate (across node counts), names every crossover (two strategies changing places
    between adjacent link rates or node counts) or says none was measured, and gives the range
    of the projection's error over the slice's runs.
    """
    setting, pts = network_slice(points)
    if not pts:
        return None
    modes = network_modes(pts)
    names = short_names(pts)
    reference = modes[0]
    ref_name = names[reference]
    variant, batch, workers, per_node = setting
    setting_text = (f"batch {batch}, {workers} worker{'s' if workers != 1 else ''}, "
                    f"{per_node} rank{'s' if per_node != 1 else ''} per node")
    overrides = sorted({o for p in pts for o in p.link_of})
    if overrides:
        setting_text += ", " + ", ".join(f"node {n}'s link at {rate_text(b)}" for n, b in overrides)
    node_counts = sorted({p.nodes for p in pts})
    rates = sorted({p.link_bits_per_s for p in pts})
    throughput: dict = {}
    for p in pts:
        throughput.setdefault((p.nodes, p.link_bits_per_s), {})[p.label] = p.throughput
    ratios = {at: {label: tp / tps[reference] for label, tp in tps.items() if label != reference}
              for at, tps in throughput.items() if tps.get(reference)}
    others = [m for m in modes if m != reference]

    def sentences(fixed_values, steps, at, where_fixed, where_step):
        out = {}
        for f in fixed_values:
            clauses = []
            for m in others:
                values = [(ratios[at(f, s)][m], where_step(s)) for s in steps
                          if at(f, s) in ratios and m in ratios[at(f, s)]]
                if values:
                    clauses.append(ratio_clause(names[m], ref_name, values))
            if clauses:
                out[f] = ratio_sentence(where_fixed(f), clauses)
        return out

    def by_nodes(n, r):
        return (n, r)

    def by_rate(r, n):
        return (n, r)

    link_sentences = sentences(node_counts, rates, by_nodes, nodes_text, rate_text)
    node_sentences = sentences(rates, node_counts, by_rate, rate_text, nodes_text)
    link_cross = crossovers_along(throughput, modes, names, node_counts, rates, by_nodes, nodes_text, rate_text)
    node_cross = crossovers_along(throughput, modes, names, rates, node_counts, by_rate, rate_text, nodes_text)
    measured = (f"{', '.join(str(n) for n in node_counts)} nodes; "
                f"{', '.join(rate_text(r) for r in rates)}")
    if link_cross or node_cross:
        crossover_text = "Crossovers measured: " + "; ".join(link_cross + node_cross) + "."
    else:
        order = one_order(throughput, modes)
        held = (f"the order {' > '.join(names[m] for m in order)} holds at every point measured"
                if order else "no two strategies change places between adjacent link rates or node counts")
        crossover_text = f"No crossover measured: {held} ({measured})."
    errors = [e for p in pts for e in p.projection_errors]
    if errors:
        error_range = (min(errors), max(errors))
        error_text = (f"The projection's error (projected / measured step time - 1) ranges from "
                      f"{percent_text(error_range[0])} to {percent_text(error_range[1])} over the "
                      f"{len(errors)} runs.")
    else:
        error_range = None
        error_text = "No run recorded a projection (network.projection), so no projected line is drawn."
    paragraph = " ".join([f"Throughput on the emulated cluster ({setting_text}) as a ratio to {ref_name}'s."]
                         + list(link_sentences.values()) + [crossover_text, error_text])
    target, to_target = time_to_target(pts)
    return NetworkVerdict(points=pts, modes=modes, names=names, reference=reference, setting=setting_text,
                          nodes=node_counts, rates=rates, throughput=throughput, ratios=ratios,
                          link_sentences=link_sentences, node_sentences=node_sentences,
                          link_crossovers=link_cross, node_crossovers=node_cross,
                          crossover_text=crossover_text, error_range=error_range,
                          error_count=len(errors), error_text=error_text, paragraph=paragraph,
                          target_loss=target, time_to_target=to_target)


# --------------------------------------------------------------------------------------------
# Google Benchmark collectives


SIZE_SUFFIX = {"": 1, "k": 1024, "K": 1024, "m": 1024 ** 2, "M": 1024 ** 2, "g": 1024 ** 3, "G": 1024 ** 3}


def parse_size(text: str) -> Optional[int]:
    """"67108864", "64M" or "8k" as an integer; None if it is not a size."""
    match = re.fullmatch(r"(\d+)([kKmMgG]?)", text.strip())
    return int(match.group(1)) * SIZE_SUFFIX[match.group(2)] if match else None


def parse_benchmark_name(name: str) -> tuple:
    """"BM_AllReduce/ranks:2/bytes:1024/manual_time" -> ("AllReduce", {"ranks": "2", ...}).
    Parts without a colon (manual_time, real_time) are flags and are dropped."""
    parts = name.split("/")
    base = parts[0][3:] if parts[0].startswith("BM_") else parts[0]
    params = {}
    for part in parts[1:]:
        if ":" in part:
            k, _, v = part.partition(":")
            params[k.strip()] = v.strip()
    return base, params


def benchmark_run_name(entry: dict) -> str:
    """The name without an aggregate suffix (_median, _mean...)."""
    if entry.get("run_name"):
        return entry["run_name"]
    name = entry.get("name", "")
    agg = entry.get("aggregate_name")
    if agg and name.endswith("_" + agg):
        return name[: -len(agg) - 1]
    return name


def number(value) -> Optional[float]:
    """A float from a JSON number, else None."""
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None


def load_collectives(path) -> Collectives:
    """Reads Google Benchmark JSON: the median aggregate of each benchmark when repetitions
    were run, else the median of its iteration entries."""
    doc = read_json(path)
    entries = doc.get("benchmarks")
    if not isinstance(entries, list):
        raise InputError(f"{path}: not Google Benchmark JSON (no benchmarks[] array; "
                         "run with --benchmark_format=json)")
    by_name: dict = {}
    for e in entries:
        if not isinstance(e, dict) or e.get("error_occurred"):
            continue
        name = benchmark_run_name(e)
        slot = by_name.setdefault(name, {"median": [], "iteration": []})
        if e.get("run_type") == "aggregate":
            if e.get("aggregate_name") == "median":
                slot["median"].append(e)
        else:
            slot["iteration"].append(e)
    points, memcpy = [], {}
    for name, slot in by_name.items():
        chosen = slot["median"] or slot["iteration"]
        if not chosen:
            continue
        base, params = parse_benchmark_name(name)
        size = parse_size(params.get("bytes", params.get("size", "")))
        if size is None:
            continue
        if base.lower().startswith("memcpy"):
            gbps = median(number(e.get("GBps")) for e in chosen)
            if gbps is not None:
                threads = params.get("threads")
                label = f"memcpy, {threads} threads" if threads else "memcpy"
                memcpy.setdefault(label, []).append((size, gbps))
            continue
        ranks = params.get("ranks")
        points.append(BenchPoint(collective=base, ranks=int(ranks) if ranks and ranks.isdigit() else None,
                                 bytes=size, busbw=median(number(e.get("busbw")) for e in chosen),
                                 algbw=median(number(e.get("algbw")) for e in chosen)))
    points.sort(key=lambda b: (b.collective, b.ranks or 0, b.bytes))
    for line in memcpy.values():
        line.sort()
    return Collectives(points=points, memcpy=memcpy, context=doc.get("context", {}))


def merge_collectives(parts: list) -> Collectives:
    """One Collectives from several files (a thread-level and a process-level run of
    dpbench_collectives, say). A point measured in more than one file keeps the last file's."""
    by_key = {}
    memcpy: dict = {}
    for part in parts:
        for b in part.points:
            by_key[(b.collective, b.ranks, b.bytes)] = b
        for label, line in part.memcpy.items():
            memcpy[label] = sorted(dict(memcpy.get(label, []) + line).items())
    points = sorted(by_key.values(), key=lambda b: (b.collective, b.ranks or 0, b.bytes))
    return Collectives(points=points, memcpy=memcpy, context=parts[0].context if parts else {})


# The all-reduce benchmarks of dpbench_collectives and their legend names, in legend order.
ALLREDUCE_IMPLEMENTATIONS = (
    ("AllReduce", "dpbench ring (threads)"),
    ("AllReduceMpi", "MPI_Allreduce"),
    ("AllReduceGlooRing", "gloo ring"),
    ("AllReduceGlooRingChunked", "gloo ring-chunked"),
    ("AllReduceGlooHalvingDoubling", "gloo halving-doubling"),
)


def allreduce_implementations(coll: Collectives) -> dict:
    """{ranks: {legend name: [BenchPoint by size]}} for the rank counts at which two or more
    all-reduce implementations were measured (busbw known)."""
    names = dict(ALLREDUCE_IMPLEMENTATIONS)
    by_ranks: dict = {}
    for b in coll.points:
        if b.collective in names and b.ranks and b.busbw is not None and b.busbw > 0:
            by_ranks.setdefault(b.ranks, {}).setdefault(names[b.collective], []).append(b)
    order = [label for _, label in ALLREDUCE_IMPLEMENTATIONS]
    return {ranks: {label: sorted(lines[label], key=lambda b: b.bytes) for label in order if label in lines}
            for ranks, lines in sorted(by_ranks.items()) if len(lines) >= 2}


# --------------------------------------------------------------------------------------------
# projection


def projection_modes(proj: dict) -> dict:
    """{curve key: {mode, strategy, label, transport, reference}} of a projection file."""
    return strategy_traits.projection_modes(proj)


def projection_label(proj: dict, mode: str) -> str:
    """Legend name of a projected curve, matching the measured series labels."""
    return projection_modes(proj).get(mode, {}).get("label", mode)


def projection_crossovers(proj: dict) -> list:
    """[{mode, reference, world_size}]: where each curve overtakes the reference's (by 5%)."""
    return strategy_traits.projection_crossovers(proj)


def load_projection(path) -> dict:
    """Reads a `dpbench project` file; checks its schema, that it has points and, where
    `--simulate` wrote them, that each point's simulation and the topology are objects (or null)
    and the findings a list of objects with a text (InputError naming the file otherwise)."""
    doc = read_json(path)
    doc = check_schema(path, doc, PROJECTION_SCHEMA)
    if not isinstance(doc.get("points"), list):
        raise InputError(f"{path}: has no points[] array")
    for i, p in enumerate(doc["points"]):
        if not isinstance(p, dict) or not all(k in p for k in ("world_size", "mode", "step_time_s")):
            raise InputError(f"{path}: points[{i}] needs world_size, mode and step_time_s")
        if not isinstance(p.get("simulation", {}), (dict, type(None))):
            raise InputError(f"{path}: points[{i}].simulation is not an object")
    if not isinstance(doc.get("topology", {}), (dict, type(None))):
        raise InputError(f"{path}: topology is not an object")
    check_findings(path, doc.get("findings", []))
    doc.setdefault("measured", [])
    return doc


def check_findings(path, findings) -> None:
    """Raises InputError unless a projection's `findings` is a list of objects, each with its
    sentence as a string `text`."""
    if not isinstance(findings, list):
        raise InputError(f"{path}: findings is not a list")
    for i, f in enumerate(findings):
        if not isinstance(f, dict) or not isinstance(f.get("text"), str):
            raise InputError(f"{path}: findings[{i}] needs a text string")


# --------------------------------------------------------------------------------------------
# memory model (`dpbench memory`)


@dataclass(frozen=True)
class MemoryModel:
    """One `dpbench memory` file: the model's bytes per rank by category for each mode, world
    size and role (the largest rank of each role), and, when it was given a capacity, the largest
    parameter count each mode fits at each world size. Modelled, never measured."""

    source: str  # the file
    precision: str  # "fp32" or "mixed (projection)"
    optimizer: str
    global_batch: Optional[int]
    model: dict  # {params, activation_bytes_per_sample, ...} or {workload, hidden}
    rows: tuple  # dicts: mode, world_size, role, MEMORY_CATEGORIES and total_bytes, as in the file
    fitting: tuple  # dicts: mode, world_size, largest_params

    @property
    def params(self) -> Optional[float]:
        """The parameter count of a model described by its size (None for a built-in model)."""
        return number(self.model.get("params"))


def load_memory(path) -> MemoryModel:
    """Reads a `dpbench memory` file: checks its schema and that every row has its mode, world
    size, role and bytes (InputError naming the file otherwise)."""
    doc = read_json(path)
    doc = check_schema(path, doc, MEMORY_SCHEMA)
    rows = doc.get("rows")
    if not isinstance(rows, list):
        raise InputError(f"{path}: has no rows[] array")
    for i, row in enumerate(rows):
        if not isinstance(row, dict) or not isinstance(row.get("mode"), str) or not isinstance(row.get("role"), str) \
                or not isinstance(row.get("world_size"), int) \
                or any(number(row.get(k)) is None for k in MEMORY_CATEGORIES + ("total_bytes",)):
            raise InputError(f"{path}: rows[{i}] needs mode, world_size, role, total_bytes and "
                             f"the bytes of {', '.join(MEMORY_CATEGORIES)}")
    fitting = doc.get("largest_fitting", [])
    if not isinstance(fitting, list):
        raise InputError(f"{path}: largest_fitting is not an array")
    for i, f in enumerate(fitting):
        if not isinstance(f, dict) or not isinstance(f.get("mode"), str) or not isinstance(f.get("world_size"), int) \
                or number(f.get("largest_params")) is None:
            raise InputError(f"{path}: largest_fitting[{i}] needs mode, world_size and largest_params")
    model = doc.get("model") if isinstance(doc.get("model"), dict) else {}
    batch = doc.get("global_batch")
    return MemoryModel(source=str(path), precision=str(doc.get("precision", "fp32")),
                       optimizer=str(doc.get("optimizer", "")),
                       global_batch=batch if isinstance(batch, int) else None, model=model,
                       rows=tuple(rows), fitting=tuple(fitting))


def memory_modes(mem: MemoryModel, points: Iterable = ()) -> list:
    """The modes of a memory file in the report's one order: the reference (ps) first, then the
    others in the order the result files name them (series_order), then those only the memory
    file names, in its order. Whether a mode is the reference comes from the result files'
    traits where they ran it, else from strategy_traits (the one place that knows mode names)."""
    points = list(points)
    in_file = list(dict.fromkeys([r["mode"] for r in mem.rows] + [f["mode"] for f in mem.fitting]))
    measured = in_order(points, "mode") if points else []
    reference = {p.mode: p.reference for p in points}

    def key(mode):
        ref = reference.get(mode)
        if ref is None:
            ref = bool(strategy_traits.legacy_traits({"mode": mode})["reference"])
        return (not ref, measured.index(mode) if mode in measured else len(measured), in_file.index(mode))
    return sorted(in_file, key=key)


def memory_roles(mem: MemoryModel, mode: str) -> list:
    """The roles of one mode in the order the file lists them ("root", "worker")."""
    return list(dict.fromkeys(r["role"] for r in mem.rows if r["mode"] == mode))


def memory_row(mem: MemoryModel, mode: str, world_size: int, role: str) -> Optional[dict]:
    """The row of one (mode, world size, role); None when the file has none."""
    return next((r for r in mem.rows if r["mode"] == mode and r["world_size"] == world_size
                 and r["role"] == role), None)


def root_excess(mem: MemoryModel, modes: list) -> list:
    """(mode, world size, bytes): how much more a mode's root holds than its largest worker,
    for every mode and world size with both roles, in mode order and by world size."""
    out = []
    for mode in modes:
        for world in sorted({r["world_size"] for r in mem.rows if r["mode"] == mode}):
            root = memory_row(mem, mode, world, "root")
            worker = memory_row(mem, mode, world, "worker")
            if root is not None and worker is not None:
                out.append((mode, world, float(root["total_bytes"]) - float(worker["total_bytes"])))
    return out


def most_fitting(mem: MemoryModel, modes: list) -> dict:
    """{world size: (mode, largest parameter count)}: the mode that fits the most parameters at
    each world size of largest_fitting (the first in `modes` order on a tie)."""
    out = {}
    for world in sorted({f["world_size"] for f in mem.fitting}):
        entries = {f["mode"]: float(f["largest_params"]) for f in mem.fitting if f["world_size"] == world}
        best = max((m for m in modes if m in entries), key=lambda m: entries[m], default=None)
        if best is not None:
            out[world] = (best, entries[best])
    return out
