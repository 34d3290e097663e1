#!/usr/bin/python3
"""Validates dpbench result files against results/schema/dpbench-result.schema.json.

usage: /usr/bin/python3 results/validate.py RESULT.json [RESULT.json ...]
Prints one line per file; exits 1 if any file is invalid (the first error is named), 2 on
missing arguments or an unreadable file. An older file (the committed CI baselines) is validated
as compare and report read it: under the current version's names (results/schema_versions.py).
Needs Debian's python3-jsonschema.
"""
import json
import pathlib
import sys

import jsonschema

import schema_versions

SCHEMA = pathlib.Path(__file__).resolve().parent / "schema" / "dpbench-result.schema.json"


def main(paths):
    if not paths:
        print(__doc__.strip().splitlines()[2], file=sys.stderr)
        return 2
    schema = json.loads(SCHEMA.read_text())
    validator = jsonschema.Draft202012Validator(schema)
    status = 0
    for path in paths:
        try:
            doc = json.loads(pathlib.Path(path).read_text())
        except (OSError, json.JSONDecodeError) as e:
            print(f"{path}: cannot read: {e}", file=sys.stderr)
            return 2
        upgraded = schema_versions.upgrade(doc)
        note = f" as version {upgraded['schema']['version']}" if upgraded is not doc else ""
        errors = sorted(validator.iter_errors(upgraded), key=lambda e: list(e.path))
        if errors:
            where = "/".join(str(p) for p in errors[0].path) or "(root)"
            print(f"{path}: INVALID{note} at {where}: {errors[0].message} ({len(errors)} errors)")
            status = 1
        else:
            print(f"{path}: valid{note} ({len(doc['runs'])} runs)")
    return status


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
