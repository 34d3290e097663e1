"""The schema versions dpbench's Python readers accept, and the one place that reads older files.

For: results/compare.py (`dpbench compare`, the CI gate) and plots/report_data.py (`dpbench
report`) check a file's schema version here and pass every file they load through upgrade(), so
they see the current names only. Version 2 of dpbench-result and dpbench-memory renamed `ps`'s
rank 0 from "reducer" to "root" (docs/glossary.md, "root, root rank"); upgrade_v1() maps the
version-1 names to those of version 2, nothing else differs. Committed baselines and measured
files may stay at version 1.

Not for: validating a file against the JSON Schema (results/validate.py), or the checks each
reader makes of the fields it needs.
"""
import copy

RESULT_SCHEMA = "dpbench-result"
MEMORY_SCHEMA = "dpbench-memory"
PROJECTION_SCHEMA = "dpbench-projection"

# What dpbench writes now.
CURRENT_VERSION = {RESULT_SCHEMA: 2, MEMORY_SCHEMA: 2, PROJECTION_SCHEMA: 1}
# What the readers accept: the current version and those upgrade() maps to it.
READABLE_VERSIONS = {RESULT_SCHEMA: (1, 2), MEMORY_SCHEMA: (1, 2), PROJECTION_SCHEMA: (1,)}


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
    """doc at its schema's current version: upgrade_v1(doc) for a version-1 file of a schema that
    changed names in version 2, doc itself otherwise (unknown versions are the caller's to refuse)."""
    schema = doc.get("schema") if isinstance(doc, dict) else None
    if not isinstance(schema, dict) or schema.get("version") != 1 or isinstance(schema.get("version"), bool):
        return doc
    if schema.get("name") in (RESULT_SCHEMA, MEMORY_SCHEMA):
        return upgrade_v1(doc)
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
