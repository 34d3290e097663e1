"""The strategy traits of a dpbench run entry, as results/compare.py and plots/ read them.

For: every run of a result file names its synchronisation strategy (`mode`) and, since the
traits were recorded, carries them under `strategy`: label, transport, baseline (the strategy
the others are compared with), overlaps_backward, has_root, projection, busbw_factor (see
results/schema/dpbench-result.schema.json). Readers take the traits from here and compare no
mode names, so a new strategy needs no change to the Python side. Files written before the
traits (the committed CI baseline among them) get them derived in legacy_traits(), the one
place that knows the two original modes; likewise legacy_projection_curves() for
`dpbench project` files without their `curves` list.

Not for: reading or checking whole files (compare.py, plots/report_data.py do that).
"""

TRAIT_KEYS = ("name", "label", "transport", "baseline", "overlaps_backward", "has_root",
              "projection", "busbw_factor")


def run_traits(run, doc=None):
    """The traits of one run entry (ok or failed) as a dict with TRAIT_KEYS.

    run: a runs[] entry; doc: its file, whose config fills in what a failed legacy point lacks.
    """
    traits = run.get("strategy")
    if isinstance(traits, dict) and all(k in traits for k in ("name", "label", "transport",
                                                              "baseline")):
        out = {k: traits.get(k) for k in TRAIT_KEYS}
        out["baseline"] = bool(out["baseline"])
        out["overlaps_backward"] = bool(out["overlaps_backward"])
        out["has_root"] = bool(out["has_root"])
        return out
    return legacy_traits(run, doc)


def legacy_traits(run, doc=None):
    """Traits of a run from a file written before dpbench recorded them: derived from its mode
    and transport as that version's ps and allreduce behaved. Any other mode gets neutral traits
    (not the baseline, no root, no overlap) and its own name as label."""
    cfg = run.get("config") if isinstance(run.get("config"), dict) else {}
    top = doc.get("config", {}) if isinstance(doc, dict) and isinstance(doc.get("config"), dict) \
        else {}
    mode = str(run.get("mode", cfg.get("mode", top.get("mode", "?"))))
    transport = run.get("transport")
    if mode == "allreduce":
        transport = transport or "ring"
        p = run.get("world_size", cfg.get("world_size"))
        factor = 2.0 * (p - 1) / p if isinstance(p, (int, float)) and p >= 1 else None
        return {"name": mode, "label": "allreduce (ring)", "transport": transport,
                "baseline": False, "overlaps_backward": True, "has_root": False,
                "projection": "allreduce", "busbw_factor": factor}
    if mode == "ps":
        # A failed point has only its config; ok runs recorded the transport they ran.
        transport = transport or cfg.get("transport") or top.get("transport") or "collective"
        return {"name": mode, "label": f"ps ({transport})", "transport": transport,
                "baseline": True, "overlaps_backward": False, "has_root": True,
                "projection": f"ps_{transport}", "busbw_factor": None}
    transport = str(transport or "")
    return {"name": mode, "label": f"{mode} ({transport})" if transport else mode,
            "transport": transport, "baseline": False, "overlaps_backward": False,
            "has_root": False, "projection": mode, "busbw_factor": None}


def projection_curves(doc):
    """{curve key: {curve, strategy, label, transport, baseline}} of a `dpbench project` file
    (at projection schema version 2's names: results/schema_versions.py)."""
    curves = doc.get("curves")
    if isinstance(curves, list) and curves:
        return {c["curve"]: c for c in curves if isinstance(c, dict) and "curve" in c}
    return legacy_projection_curves(doc)


def legacy_projection_curves(doc):
    """The curves of a projection file written before it listed them: the three that version
    drew; any other key found in its points gets its own name as label."""
    known = {"allreduce": ("allreduce", "allreduce (ring)", "ring", False),
             "ps_collective": ("ps", "ps (collective)", "collective", True),
             "ps_p2p": ("ps", "ps (p2p)", "p2p", True)}
    out = {}
    for p in doc.get("points", []):
        key = p.get("curve")
        if key is None or key in out:
            continue
        strategy, label, transport, baseline = known.get(key, (key, key, "", False))
        out[key] = {"curve": key, "strategy": strategy, "label": label, "transport": transport,
                    "baseline": baseline}
    return out


def projection_crossovers(doc):
    """[{curve, baseline, world_size}] of a projection file: its `crossovers`, or for older
    files the single crossover_world_size of allreduce against ps_collective."""
    crossovers = doc.get("crossovers")
    if isinstance(crossovers, list):
        return [c for c in crossovers if isinstance(c, dict) and "curve" in c]
    if "crossover_world_size" not in doc:
        return []
    return [{"curve": "allreduce", "baseline": "ps_collective",
             "world_size": doc.get("crossover_world_size")}]
