"""dpbench result and sweep files (schema "dpbench-result") as plain records: their runs, the
PyTorch reference runs that `dpbench run --reference pytorch` adds to them, the points of a
sweep with their repetitions aggregated by median, the failed points, the one order of the
strategies (the baseline, ps, first, then the others as the files first name them) that every
table, figure and sentence uses, and the rule for when communication hidden by overlap is drawn
(hidden_comm). The family every other part of the report's data layer builds on
(report_data.py names the parts).

Not for: drawing (figures.py), HTML/Markdown rendering (report.py and templates/), or running
dpbench. Nothing here reads anything but the JSON files it is given.
"""
from __future__ import annotations

import json
import statistics
import sys
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Iterable, Optional

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
    baseline: bool = False  # the strategy the others are compared with (ps)
    has_root: bool = False  # rank 0 holds what the others do not (its memory above the mean)
    overlaps_backward: bool = False  # the strategy communicates while backward runs (its trait)
    order: int = 0  # the series' place in the report's one order (series_order)
    throughput_min: Optional[float] = None  # over repetitions; None when built without them
    throughput_max: Optional[float] = None
    step_p50_min: Optional[float] = None  # the smallest and largest repetition's p50 step (s)
    step_p50_max: Optional[float] = None
    # The run's own ratios to its baseline, one per repetition (ratio_to_baseline.by_repetition
    # of a `dpbench run` entry that holds its repetitions), and that baseline's mode; () and ""
    # when the file recorded none.
    rep_ratios: tuple = ()
    ratio_baseline: str = ""

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
    order: int = 0  # its strategy's place in the report's order (the baseline first)


@dataclass(frozen=True)
class ReferenceRun:
    """One PyTorch reference run (`dpbench run --reference pytorch`) beside the dpbench run of
    the same file it reproduces: the dpbench run whose mode is its dpbench_mode, at its world
    size. The dpbench_* fields are None when the file holds no such run."""

    source: str  # the result file
    program: str  # the PyTorch program: plain, dataparallel, ddp, rpc_ps (docs/glossary.md, program)
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
    from report_network import network_points  # the cluster's family builds on these records
    groups: dict = {}
    failed = []
    files = []
    envs: list = []
    reference = []
    cluster_runs = []
    seen: dict = {}  # strategy label -> (not baseline, index of its first run in the files)
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
            seen.setdefault(str(traits["label"]), (not traits["baseline"], len(seen)))
            if run.get("status", "ok") != "ok":
                failed.append(replace(failed_point(run, str(path)), order=seen[str(traits["label"])][1]))
                continue
            try:
                key = (run["mode"], run_transport(run), run_variant(run) + cluster_variant(run),
                       int(run["world_size"]),
                       int(run["global_batch"]), int(run["config"]["num_workers"]),
                       traits["label"], traits["baseline"], traits["has_root"],
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
            program, dpbench_mode = str(get("program")), str(get("dpbench_mode"))
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
            source=path, program=program, dpbench_mode=dpbench_mode, dpbench_label=str(label),
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


def number(value) -> Optional[float]:
    """A float from a JSON number, else None."""
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None


def median(values) -> Optional[float]:
    """Median of the values that are not None; None when there are none."""
    values = [v for v in values if v is not None]
    return statistics.median(values) if values else None


def aggregate(key: tuple, runs: list) -> Point:
    """Aggregates the repetitions of one grid point by median (memory per rank and category),
    keeping the smallest and largest throughput and p50 step of the repetitions."""
    mode, transport, variant, world_size, batch, workers, label, baseline, has_root, overlaps = key
    throughputs = [r["throughput_samples_per_s"] for r in runs]
    count, rep_ratios, ratio_baseline = len(runs), (), ""
    if len(runs) == 1:
        # `dpbench run --repetitions N` keeps its repetitions in one entry: their throughputs and
        # the run's own ratios to its baseline.
        reps = runs[0].get("repetitions") or {}
        if isinstance(reps.get("throughput_samples_per_s"), list) and len(reps["throughput_samples_per_s"]) > 1:
            count, throughputs = len(reps["throughput_samples_per_s"]), list(reps["throughput_samples_per_s"])
        ratio = runs[0].get("ratio_to_baseline") or {}
        if isinstance(ratio.get("by_repetition"), list) and ratio["by_repetition"]:
            rep_ratios, ratio_baseline = tuple(ratio["by_repetition"]), str(ratio.get("baseline", ""))
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
        throughput_max=max(throughputs), rep_ratios=rep_ratios, ratio_baseline=ratio_baseline,
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
        label=label, baseline=baseline, has_root=has_root, overlaps_backward=bool(overlaps),
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
    ({label: (not baseline, index of its first run)}): the baseline strategies (ps) first,
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
    """Table order: strategy in the report's order (the baseline first), variant, ranks, batch,
    workers."""
    return (p.order, p.world_size, p.global_batch, p.num_workers)


def series_order(points: Iterable) -> list:
    """Distinct series labels in the report's one order: the baseline strategy (ps) first, then
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
