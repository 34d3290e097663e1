"""The schema versions dpbench's Python readers accept, and the one place that reads older files.

For: results/compare.py (`dpbench compare`, the CI gate) and plots/report_data.py (`dpbench
report`) check a file's schema version here and pass every file they load through upgrade(), so
they see the current names only. Version 2 of dpbench-result and dpbench-memory renamed `ps`'s
rank 0 from "reducer" to "root" (docs/glossary.md, "root, root rank"); upgrade_v1() maps the
version-1 names to those of version 2. Version 3 of dpbench-result and version 2 of
dpbench-projection call the strategy every other one is compared with the baseline ("reference"
means the PyTorch reference alone; docs/glossary.md, "baseline"), and version 2 of
dpbench-projection names its curves curves, not modes; upgrade_v2() and upgrade_projection_v1()
map the older names. Version 4 of dpbench-result names each PyTorch reference run's program
`program`: the PyTorch reference's programs are programs, not modes (docs/glossary.md, "program");
upgrade_v3() maps version 3's `mode` there. Nothing else differs. Committed baselines and
measured files may stay at their older versions.

Not for: validating a file against the JSON Schema (results/validate.py), or the checks each
reader makes of the fields it needs.
"""
import copy

RESULT_SCHEMA = "dpbench-result"
MEMORY_SCHEMA = "dpbench-memory"
PROJECTION_SCHEMA = "dpbench-projection"

# What dpbench writes now.
CURRENT_VERSION = {RESULT_SCHEMA: 4, MEMORY_SCHEMA: 2, PROJECTION_SCHEMA: 2}
# What the readers accept: the current version and those upgrade() maps to it.
READABLE_VERSIONS = {RESULT_SCHEMA: (1, 2, 3, 4), MEMORY_SCHEMA: (1, 2), PROJECTION_SCHEMA: (1, 2)}


def readable(name, version):
    """True when a file of schema `name` at `version` can be read (after upgrade())."""
    return version in READABLE_VERSIONS.get(name, ()) and not isinstance(version, bool)


def versions_text(name):
    """"version 1" or "versions 1 and 2": what a reader of schema `name` accepts, for its error."""
    versions = READABLE_VERSIONS.get(name, ())
    if len(versions) == 1:
        return f"version {versions[0]}"
    return "versions " + ", ".join(str(v) for v in versions[:-1]) + f" and {versions[-1]}"


def upgrade(doc):
    """doc at its schema's current version: a result file through upgrade_v1, upgrade_v2 and
    upgrade_v3 as its version needs, a version-1 memory file through upgrade_v1, a version-1
    projection through upgrade_projection_v1; doc itself otherwise (unknown versions are the
    caller's to refuse)."""
    schema = doc.get("schema") if isinstance(doc, dict) else None
    version = schema.get("version") if isinstance(schema, dict) else None
    if not isinstance(version, int) or isinstance(version, bool):
        return doc
    name = schema.get("name")
    if version == 1 and name in (RESULT_SCHEMA, MEMORY_SCHEMA):
        doc = upgrade_v1(doc)
        version = 2
    if version == 2 and name == RESULT_SCHEMA:
        doc = upgrade_v2(doc)
        version = 3
    if version == 3 and name == RESULT_SCHEMA:
        doc = upgrade_v3(doc)
    if version == 1 and name == PROJECTION_SCHEMA:
        doc = upgrade_projection_v1(doc)
    return doc


def _rename_key(obj, old, new):
    if isinstance(obj, dict) and old in obj and new not in obj:
        obj[new] = obj.pop(old)


def _rename_role(obj):
    if isinstance(obj, dict) and obj.get("role") == "reducer":
        obj["role"] = "root"


def _items(obj, key):
    """obj[key] when it is a list (of anything), else []."""
    value = obj.get(key) if isinstance(obj, dict) else None
    return value if isinstance(value, list) else []


def upgrade_v1(doc):
    """A copy of a version-1 dpbench-result or dpbench-memory document under version 2's names:
      dpbench-result: runs[].strategy.has_reducer -> has_root,
                      runs[].memory.reducer_minus_mean_bytes -> root_minus_mean_bytes,
                      runs[].memory.per_rank[].modelled.role "reducer" -> "root",
                      reference.runs[].memory.reducer_minus_mean_bytes -> root_minus_mean_bytes;
      dpbench-memory: rows[].role "reducer" -> "root";
    and schema.version 1 -> 2. The input is not modified; the figures are the same."""
    out = copy.deepcopy(doc)
    name = out["schema"].get("name")
    if name == RESULT_SCHEMA:
        for run in _items(out, "runs"):
            if not isinstance(run, dict):
                continue
            _rename_key(run.get("strategy"), "has_reducer", "has_root")
            memory = run.get("memory")
            _rename_key(memory, "reducer_minus_mean_bytes", "root_minus_mean_bytes")
            for entry in _items(memory, "per_rank"):
                if isinstance(entry, dict):
                    _rename_role(entry.get("modelled"))
        for rec in _items(out.get("reference"), "runs"):
            if isinstance(rec, dict):
                _rename_key(rec.get("memory"), "reducer_minus_mean_bytes", "root_minus_mean_bytes")
    elif name == MEMORY_SCHEMA:
        for row in _items(out, "rows"):
            _rename_role(row)
    out["schema"]["version"] = 2
    return out


def upgrade_v2(doc):
    """A copy of a version-2 dpbench-result document under version 3's names:
      runs[].strategy.reference -> baseline,
      runs[].ratio_to_reference -> ratio_to_baseline, its "reference" -> "baseline";
    and schema.version 2 -> 3. The input is not modified; the figures are the same."""
    out = copy.deepcopy(doc)
    for run in _items(out, "runs"):
        if not isinstance(run, dict):
            continue
        _rename_key(run.get("strategy"), "reference", "baseline")
        _rename_key(run, "ratio_to_reference", "ratio_to_baseline")
        _rename_key(run.get("ratio_to_baseline"), "reference", "baseline")
    out["schema"]["version"] = 3
    return out


def upgrade_v3(doc):
    """A copy of a version-3 dpbench-result document under version 4's names: the PyTorch
    reference's programs are programs, not modes (docs/glossary.md, "program"):
      reference.runs[].mode -> program (plain, dataparallel, ddp, rpc_ps; dpbench_mode stays);
    and schema.version 3 -> 4. dpbench's runs[].mode is a mode and stays. The input is not
    modified; the figures are the same."""
    out = copy.deepcopy(doc)
    for rec in _items(out.get("reference"), "runs"):
        _rename_key(rec, "mode", "program")
    out["schema"]["version"] = 4
    return out


def upgrade_projection_v1(doc):
    """A copy of a version-1 dpbench-projection document under version 2's names: a curve is
    named a curve, never a mode (the --mode values are strategies') and the strategy the others are
    compared with the baseline:
      modes -> curves, and in curves[], points[], crossovers[], measured[] and findings[]
      "mode" -> "curve"; curves[].reference -> baseline, crossovers[].reference -> baseline;
    and schema.version 1 -> 2. The calibration run's "mode" is its --mode and stays. The input is
    not modified; the figures are the same."""
    out = copy.deepcopy(doc)
    _rename_key(out, "modes", "curves")
    for key in ("curves", "points", "crossovers", "measured", "findings"):
        for entry in _items(out, key):
            _rename_key(entry, "mode", "curve")
    for entry in _items(out, "curves") + _items(out, "crossovers"):
        _rename_key(entry, "reference", "baseline")
    out["schema"]["version"] = 2
    return out
