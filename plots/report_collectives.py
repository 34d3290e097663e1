"""Google Benchmark JSON of bench/micro/dpbench_collectives: each collective's time by size and
ranks, and the all-reduce implementations compared.

Part of the report's data layer (report_data.py names the parts); nothing here reads anything
but the JSON files it is given.
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Optional

from report_records import InputError, median, number, read_json

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
