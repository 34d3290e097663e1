"""`dpbench project` files (schema "dpbench-projection"): their curves, labels and crossovers;
and `dpbench memory` files (schema "dpbench-memory"): the memory model's bytes per mode, world
size and role, and the largest parameter count that fits a capacity.

Part of the report's data layer (report_data.py names the parts); nothing here reads anything
but the JSON files it is given.
"""
from __future__ import annotations

import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Iterable, Optional

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "results"))
import strategy_traits  # noqa: E402  (the traits of a run, legacy files included)
from report_records import (InputError, MEMORY_CATEGORIES, MEMORY_SCHEMA, PROJECTION_SCHEMA,
                            check_schema, number, read_json)
from report_slices import in_order

# --------------------------------------------------------------------------------------------
# projection


def projection_curves(proj: dict) -> dict:
    """{curve key: {curve, strategy, label, transport, baseline}} of a projection file."""
    return strategy_traits.projection_curves(proj)


def projection_label(proj: dict, curve: str) -> str:
    """Legend name of a projected curve, matching the measured series labels."""
    return projection_curves(proj).get(curve, {}).get("label", curve)


def projection_crossovers(proj: dict) -> list:
    """[{curve, baseline, world_size}]: where each curve overtakes the baseline's (by 5%)."""
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
        if not isinstance(p, dict) or not all(k in p for k in ("world_size", "curve", "step_time_s")):
            raise InputError(f"{path}: points[{i}] needs world_size, curve and step_time_s")
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
    """The modes of a memory file in the report's one order: the baseline (ps) first, then the
    others in the order the result files name them (series_order), then those only the memory
    file names, in its order. Whether a mode is the baseline comes from the result files'
    traits where they ran it, else from strategy_traits (the one place that knows mode names)."""
    points = list(points)
    in_file = list(dict.fromkeys([r["mode"] for r in mem.rows] + [f["mode"] for f in mem.fitting]))
    measured = in_order(points, "mode") if points else []
    baseline = {p.mode: p.baseline for p in points}

    def key(mode):
        ref = baseline.get(mode)
        if ref is None:
            ref = bool(strategy_traits.legacy_traits({"mode": mode})["baseline"])
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
