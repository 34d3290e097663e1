"""An emulated-cluster sweep (`dpbench sweep --nodes --links`): each strategy's throughput per
node count and link rate, the ratios, crossovers and time to a target loss the network verdict
states.

Part of the report's data layer (report_data.py names the parts); nothing here reads anything
but the JSON files it is given.
"""
from __future__ import annotations

import json
import math
import re
import statistics
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterable, Optional

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "results"))
import strategy_traits  # noqa: E402  (the traits of a run, legacy files included)
from report_records import InputError, median, number, run_variant
from report_slices import short_names

@dataclass(frozen=True)
class NetworkPoint:
    """One strategy at one emulated-cluster point (nodes x link rate, at one batch, workers,
    ranks per node and config variant), its repetitions aggregated: the median throughput with
    its min and max, and the projection's throughput (global_batch / projected_step_s)."""

    mode: str
    label: str  # the strategy's label: "ps (collective)"
    baseline: bool
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
            key = (str(run["mode"]), str(traits["label"]), bool(traits["baseline"]), run_variant(run),
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
    points.sort(key=lambda p: (not p.baseline, p.order, p.global_batch, p.num_workers,
                               p.ranks_per_node, p.nodes, p.link_bits_per_s))
    return points


def aggregate_network(key: tuple, runs: list, order: int) -> NetworkPoint:
    """One NetworkPoint from the repetitions `runs` of the point `key` (see network_points)."""
    mode, label, baseline, variant, batch, workers, per_node, nodes, link, rate = key
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
    return NetworkPoint(mode=mode, label=label, baseline=baseline, order=order, variant=variant,
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
    """The strategies' labels in figure and sentence order: the baseline first (ps, the
    baseline), then the others in the order they first appear in the files (the sweep's --modes
    order: sharded_ps, allreduce)."""
    first: dict = {}
    for p in points:
        first.setdefault(p.label, (not p.baseline, p.order))
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
    modes: list  # their labels, baseline first (network_modes)
    names: dict  # label -> how sentences name it ("ps", or "ps (p2p)" beside "ps (collective)")
    baseline: str  # label of the strategy the ratios are to
    setting: str  # "batch 256, 0 workers, 1 rank per node"
    nodes: list  # node counts measured, ascending
    rates: list  # link rates measured (bit/s), ascending
    throughput: dict  # {(nodes, bit/s): {label: median samples/s}}
    ratios: dict  # {(nodes, bit/s): {label: throughput / the baseline's}}, baseline left out
    link_sentences: dict  # {nodes: the ratios at each link rate, one sentence}
    node_sentences: dict  # {bit/s: the ratios at each node count, one sentence}
    link_crossovers: list  # sentences: two strategies change places between adjacent link rates
    node_crossovers: list  # sentences: ... between adjacent node counts
    crossover_text: str  # the crossovers, or the sentence saying none was measured
    error_range: Optional[tuple]  # (min, max) of network.projection.error over the slice's runs
    error_count: int  # runs with a projection error
    error_text: str
    paragraph: str  # the verdict: ratios, crossovers, projection error
    # The sweep's other settings that differ from the slice's only in their config (another Zipf
    # alpha, say), each with two or more (nodes, link) points: "with X: its crossover sentence".
    other_settings: list = field(default_factory=list)
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


def ratio_clause(name: str, baseline: str, values: list) -> str:
    """"allreduce beats ps by 3.01x at 100 Mbit/s and by 2.46x at 1 Gbit/s", or, when it does not
    lead everywhere, "ps_x reaches 0.85x ps's throughput at 1 Gbit/s and 1.10x at 10 Gbit/s".
    values: (ratio, where) pairs in order."""
    if all(r >= 1 + RATIO_TIE for r, _ in values):
        return f"{name} beats {baseline} by " + " and by ".join(f"{r:.2f}x at {w}" for r, w in values)
    return (f"{name} reaches " + " and ".join(f"{r:.2f}x" + (f" {baseline}'s throughput" if i == 0 else "")
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


def slice_crossover_text(pts: list) -> str:
    """The crossover sentence of one slice's points (as the verdict's crossover_text)."""
    modes, names = network_modes(pts), short_names(pts)
    throughput: dict = {}
    for p in pts:
        throughput.setdefault((p.nodes, p.link_bits_per_s), {})[p.label] = p.throughput
    node_counts = sorted({p.nodes for p in pts})
    rates = sorted({p.link_bits_per_s for p in pts})
    cross = (crossovers_along(throughput, modes, names, node_counts, rates, lambda n, r: (n, r), nodes_text,
                              rate_text)
             + crossovers_along(throughput, modes, names, rates, node_counts, lambda r, n: (n, r), rate_text,
                                nodes_text))
    if cross:
        return "Crossovers measured: " + "; ".join(cross) + "."
    order = one_order(throughput, modes)
    held = (f"the order {' > '.join(names[m] for m in order)} holds at every point measured"
            if order else "no two strategies change places between adjacent link rates or node counts")
    return f"No crossover measured: {held}."


def variant_difference(variant: tuple, base: tuple) -> str:
    """How a run_variant() differs from `base`: "dlrm.zipf_alpha 1.3" for each differing key (one
    level into objects), comma-separated."""
    a, b = dict(variant), dict(base)
    out = []
    for key in sorted(set(a) | set(b)):
        if a.get(key) == b.get(key):
            continue
        va = json.loads(a[key]) if key in a else None
        vb = json.loads(b[key]) if key in b else None
        if isinstance(va, dict) and isinstance(vb, dict):
            out += [f"{key}.{k} {json.dumps(va.get(k))}" for k in sorted(set(va) | set(vb)) if va.get(k) != vb.get(k)]
        else:
            out.append(f"{key} {json.dumps(va)}")
    return ", ".join(out)


def other_settings(points: list, setting: tuple) -> tuple:
    """For every other slice of `points` with the same batch, workers and ranks per node as
    `setting` but another config, and two or more (nodes, link) points: "with <difference>:
    <its crossover sentence>", in the order of the differences; and those slices' settings."""
    groups: dict = {}
    for p in points:
        if p.setting != setting and p.setting[1:] == setting[1:]:
            groups.setdefault(p.setting, []).append(p)
    out = [(variant_difference(key[0], setting[0]), key, pts) for key, pts in groups.items()
           if len({(p.nodes, p.link_bits_per_s) for p in pts}) >= 2]
    out.sort(key=lambda x: x[0])
    return [f"with {diff}: {slice_crossover_text(pts)}" for diff, _, pts in out], [key for _, key, _ in out]


def compute_network_verdict(points: list) -> Optional[NetworkVerdict]:
    """The network verdict of the emulated-cluster points (ResultSet.network), on the slice
    network_slice() picks; None without points.

    For each (nodes, link) it divides every strategy's median throughput by the baseline's
    (the first baseline label, ps), states those ratios per node count (across link rates) and
    per link rate (across node counts), names every crossover (two strategies changing places
    between adjacent link rates or node counts) or says none was measured, and gives the range
    of the projection's error over the slice's runs.
    """
    setting, pts = network_slice(points)
    if not pts:
        return None
    modes = network_modes(pts)
    names = short_names(pts)
    baseline = modes[0]
    ref_name = names[baseline]
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
    ratios = {at: {label: tp / tps[baseline] for label, tp in tps.items() if label != baseline}
              for at, tps in throughput.items() if tps.get(baseline)}
    others = [m for m in modes if m != baseline]

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
    others, other_keys = other_settings(points, setting)
    if others:
        crossover_text += (f" (These are with {variant_difference(variant, other_keys[0][0])}; the sweep's other "
                           "settings: " + " ".join(others) + ")")
    paragraph = " ".join([f"Throughput on the emulated cluster ({setting_text}) as a ratio to {ref_name}'s."]
                         + list(link_sentences.values()) + [crossover_text, error_text])
    target, to_target = time_to_target(pts)
    return NetworkVerdict(points=pts, modes=modes, names=names, baseline=baseline, setting=setting_text,
                          nodes=node_counts, rates=rates, throughput=throughput, ratios=ratios,
                          link_sentences=link_sentences, node_sentences=node_sentences,
                          link_crossovers=link_cross, node_crossovers=node_cross,
                          crossover_text=crossover_text, error_range=error_range,
                          error_count=len(errors), error_text=error_text, paragraph=paragraph,
                          other_settings=others, target_loss=target, time_to_target=to_target)
