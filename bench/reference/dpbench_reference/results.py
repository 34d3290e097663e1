"""The run record (runs[] of the result file: step-time percentiles, throughput, memory, losses),
the atomic JSON write and the table printed at the end. The result file's format is in
bench/reference/README.md ("The result file").
"""

import json
import math
import os
import tempfile
from pathlib import Path

from .common import DPBENCH_EQUIVALENT


def quantile(samples, q):
    """q-th quantile, linear interpolation between closest ranks (numpy's default, dpbench's
    core/stats.cpp). 0 for no samples."""
    if not samples:
        return 0.0
    s = sorted(samples)
    pos = q * (len(s) - 1)
    lo = int(math.floor(pos))
    hi = min(lo + 1, len(s) - 1)
    return s[lo] + (s[hi] - s[lo]) * (pos - lo)


def epoch_losses(step_losses, spe):
    """Per-step losses -> mean loss per epoch (step t in epoch t // spe; the last epoch may be
    partial), None for an epoch with a non-finite loss."""
    out = []
    for start in range(0, len(step_losses), spe):
        vs = step_losses[start:start + spe]
        out.append(sum(vs) / len(vs) if all(v is not None and math.isfinite(v) for v in vs)
                   else None)
    return out


def memory_record(cfg, per_rank):
    """memory of a run record. CUDA: peak_bytes (torch.cuda.max_memory_allocated, reset after the
    data set is built), dataset_bytes, peak_bytes_excluding_dataset per GPU. CPU: peak_rss_bytes
    (ru_maxrss) and dataset_bytes per process."""
    if cfg["device"] == "cuda":
        peaks = [r["peak_bytes"] for r in per_rank]
        no_data = [r["peak_bytes"] - r["dataset_bytes"] for r in per_rank]
        mean_peak, mean_no_data = sum(peaks) / len(peaks), sum(no_data) / len(no_data)
        return {
            "measure": "torch.cuda.max_memory_allocated",
            "per_rank": [{"rank": r["rank"], "peak_bytes": r["peak_bytes"],
                          "dataset_bytes": r["dataset_bytes"],
                          "peak_bytes_excluding_dataset": nd}
                         for r, nd in zip(per_rank, no_data)],
            "imbalance_max_over_mean": max(peaks) / mean_peak if mean_peak > 0 else 1.0,
            "imbalance_excluding_dataset": max(no_data) / mean_no_data if mean_no_data > 0 else 1.0,
            "root_minus_mean_bytes": peaks[0] - mean_peak,
        }
    peaks = [r["peak_rss_bytes"] for r in per_rank]
    mean_peak = sum(peaks) / len(peaks)
    return {
        "measure": "ru_maxrss",
        "per_rank": [{"rank": r["rank"], "peak_rss_bytes": r["peak_rss_bytes"],
                      "dataset_bytes": r["dataset_bytes"]} for r in per_rank],
        "imbalance_max_over_mean": max(peaks) / mean_peak if mean_peak > 0 else 1.0,
        "root_minus_mean_bytes": peaks[0] - mean_peak,
    }


def run_record(cfg, program, world_size, processes, ranks, step_losses, spe, comm, warnings=()):
    """One runs[] entry, of the PyTorch program `program`. ranks: one dict per rank (rank, times,
    timed_wall_s, local_batch, num_params, peak_bytes or peak_rss_bytes, dataset_bytes, threads,
    and on rank 0 test_accuracy); rank 0's timed step samples and wall time are the run's.
    step_losses: the run's loss of every step. Throughput both ways dpbench reports it: at the
    median step (throughput_median_step_samples_per_s, and throughput_samples_per_s, its older
    name here) and over the wall time of the timed steps (throughput_wall_samples_per_s,
    dpbench's throughput_samples_per_s)."""
    batch = cfg["global_batch"]
    times = ranks[0]["times"]
    throughput = quantile([batch / t for t in times if t > 0], 0.5)
    wall = ranks[0].get("timed_wall_s", 0.0)
    wall_throughput = len(times) * batch / wall if wall > 0 else 0.0
    epoch_loss = epoch_losses(step_losses, spe)
    finite = [v for v in epoch_loss if v is not None]
    final_loss = epoch_loss[-1] if epoch_loss else None
    warnings = list(warnings)
    if final_loss is None or len(finite) != len(epoch_loss):
        warnings.append("training loss not finite in some epoch (diverged?)")
    threads = ranks[0]["threads"]
    return {
        "program": program,
        "dpbench_equivalent": DPBENCH_EQUIVALENT[program],
        "comm": comm,
        "device": cfg["device"],
        "workload": cfg["workload"],
        "precision": cfg["precision"],
        "world_size": world_size,
        "processes": processes,
        "threads_per_process": threads["torch"],
        "threads": threads,
        "global_batch": batch,
        "num_params": ranks[0]["num_params"],
        "sparse_gradients": ranks[0].get("sparse_gradients", []),
        "virtual_ranks": False,
        "steps": {"total": cfg["steps"], "timed": len(times), "warmup": cfg["warmup_steps"],
                  "per_epoch": spe},
        "throughput_samples_per_s": throughput,
        "throughput_median_step_samples_per_s": throughput,
        "throughput_wall_samples_per_s": wall_throughput,
        "timed_wall_s": wall,
        "step_time_s": {"p10": quantile(times, 0.10), "p50": quantile(times, 0.50),
                        "p90": quantile(times, 0.90), "p99": quantile(times, 0.99),
                        "samples": times},
        "memory": memory_record(cfg, ranks),
        "per_rank": [{"rank": r["rank"], "local_batch": r["local_batch"],
                      "step_time_p50_s": quantile(r["times"], 0.5)} for r in ranks],
        "quality": {"final_train_loss": final_loss, "epoch_train_loss": epoch_loss,
                    "step_train_loss": step_losses,
                    "test_accuracy": ranks[0].get("test_accuracy")},
        "warnings": warnings,
    }


def write_json_atomic(path, doc):
    """Writes doc to path through a temporary file in the same directory and os.replace."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "w") as f:
            json.dump(doc, f, indent=2)
            f.write("\n")
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise


def _peak(m):
    """A memory.per_rank entry's peak: GPU bytes on CUDA, RSS on the CPU."""
    return m["peak_bytes"] if "peak_bytes" in m else m["peak_rss_bytes"]


def print_table(runs):
    """Prints the run records side by side on stdout (throughput, step-time percentiles in ms,
    peak memory in MiB, losses), and with dataparallel and ddp both there their ratio."""
    if not runs:
        return
    mib = 1024.0 * 1024.0
    label_w, col_w = 38, 20
    print()
    print(f"{'':<{label_w}}" + "".join(f"{r['program'] + ' (' + str(r['world_size']) + ')':>{col_w}}"
                                       for r in runs))

    def row(label, cell):
        print(f"{label:<{label_w}}" + "".join(f"{cell(r):>{col_w}}" for r in runs))

    cpu = runs[0]["device"] == "cpu"
    row("processes x threads", lambda r: f"{r['processes']} x {r['threads_per_process']}")
    row("throughput (samples/s, wall time)", lambda r: f"{r.get('throughput_wall_samples_per_s', 0):.0f}")
    row("throughput (samples/s, median)", lambda r: f"{r['throughput_samples_per_s']:.0f}")
    row("step time p50 / p90 (ms)", lambda r: f"{1e3 * r['step_time_s']['p50']:.2f} / "
                                              f"{1e3 * r['step_time_s']['p90']:.2f}")
    row("step time p99 (ms)", lambda r: f"{1e3 * r['step_time_s']['p99']:.2f}")
    what = "peak RSS" if cpu else "peak memory"
    row(f"{what} rank 0 (MiB)", lambda r: f"{_peak(r['memory']['per_rank'][0]) / mib:.1f}")
    row(f"{what} other ranks (MiB, max)",
        lambda r: f"{max(_peak(m) for m in r['memory']['per_rank'][1:]) / mib:.1f}"
        if len(r["memory"]["per_rank"]) > 1 else "-")
    row("  of which the data set, rank 0 (MiB)",
        lambda r: f"{r['memory']['per_rank'][0]['dataset_bytes'] / mib:.1f}")
    row("memory imbalance (max / mean)", lambda r: f"{r['memory']['imbalance_max_over_mean']:.3f}")
    if not cpu:
        row("  excluding the data set",
            lambda r: f"{r['memory']['imbalance_excluding_dataset']:.3f}")
    row("final train loss", lambda r: "-" if r["quality"]["final_train_loss"] is None
        else f"{r['quality']['final_train_loss']:.4f}")
    row("test accuracy", lambda r: "-" if r["quality"]["test_accuracy"] is None
        else f"{r['quality']['test_accuracy']:.4f}")
    by_program = {r["program"]: r for r in runs}
    if "dataparallel" in by_program and "ddp" in by_program:
        dp, ddp = by_program["dataparallel"], by_program["ddp"]
        ratio = ddp["throughput_samples_per_s"] / max(dp["throughput_samples_per_s"], 1e-12)
        unit = "processes" if cpu else "GPUs"
        print(f"\nAt {ddp['world_size']} {unit}, ddp runs at {ratio:.2f}x the throughput of "
              f"dataparallel; the dataparallel root (rank 0) holds "
              f"{dp['memory']['imbalance_max_over_mean']:.2f}x the mean per-rank memory.")
