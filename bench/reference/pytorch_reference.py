#!/usr/bin/env python3
"""PyTorch reference for dpbench: the same MLP, optimizer and global batch trained with plain
PyTorch eager on one GPU, nn.DataParallel over the visible GPUs (dpbench's `ps`) and
DistributedDataParallel with one process per GPU over NCCL (dpbench's `allreduce`), timed the
way dpbench times a run (warm-up steps excluded, a CUDA synchronise after every step, medians and
percentiles of the per-step samples), written as one JSON file and printed as a short table.

It is the yardstick for "dpbench no slower than PyTorch eager" (784-4096-4096-10, batch 1024,
tf32), not a part of dpbench: it needs PyTorch with CUDA and is not built or tested by ctest.
It is not a general training script: no evaluation, no checkpoints, no mixed precision.

Usage: python3 bench/reference/pytorch_reference.py [--hidden 4096,4096] [--batch-size 1024]
    [--steps 200] [--warmup-steps 20] [--precision fp32|tf32] [--modes plain,dataparallel,ddp]
    [--data synthetic|fashion-mnist] [--data-dir DIR] [--out FILE]
Exit codes: 0 every requested mode ran or was skipped with a reason, 1 a run failed or none ran,
2 bad arguments, no PyTorch, no CUDA device, or unreadable data.
"""

import argparse
import datetime
import gc
import importlib
import json
import math
import os
import platform
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

try:
    import torch
    import torch.distributed as dist
    import torch.multiprocessing as mp
    from torch import nn
    from torch.nn.parallel import DistributedDataParallel
    from torch.utils.data import TensorDataset
    from torch.utils.data.distributed import DistributedSampler

    _TORCH_IMPORT_ERROR = None
except (ImportError, OSError) as e:  # not installed (ModuleNotFoundError), or a broken install
    torch = None
    _TORCH_IMPORT_ERROR = e

PROG = "pytorch_reference"
REPO_ROOT = Path(__file__).resolve().parents[2]
MODES = ("plain", "dataparallel", "ddp")
# The dpbench mode each PyTorch mode stands for (plain: dpbench's 1-rank runs).
DPBENCH_EQUIVALENT = {"plain": None, "dataparallel": "ps", "ddp": "allreduce"}
INPUT_FEATURES = 28 * 28
NUM_CLASSES = 10
FASHION_MNIST_MEAN, FASHION_MNIST_STD = 0.2860, 0.3530
DEFAULT_DATA_DIR = "/usr/share/datasets/fashion-mnist"


class InputError(Exception):
    """Bad input (data files, options that only the device can check): one line, exit 2."""


# ---------------------------------------------------------------------------------------------
# Arguments
# ---------------------------------------------------------------------------------------------

def _positive_int(text):
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not an integer")
    if value < 1:
        raise argparse.ArgumentTypeError(f"{value} must be at least 1")
    return value


def _non_negative_int(text):
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not an integer")
    if value < 0:
        raise argparse.ArgumentTypeError(f"{value} must be 0 or more")
    return value


def _positive_float(text):
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number")
    if not (value > 0 and math.isfinite(value)):
        raise argparse.ArgumentTypeError(f"{text} must be a positive number")
    return value


def _hidden_list(text):
    """'4096,4096' -> [4096, 4096]: the hidden widths of the MLP, each at least 1."""
    widths = []
    for part in text.split(","):
        part = part.strip()
        if not part.isdigit() or int(part) < 1:
            raise argparse.ArgumentTypeError(
                f"{text!r}: give positive layer widths separated by commas, e.g. 4096,4096")
        widths.append(int(part))
    return widths


def _mode_list(text):
    """'plain,ddp' -> ['plain', 'ddp'] in the order given, duplicates dropped."""
    modes = []
    for part in text.split(","):
        part = part.strip()
        if part not in MODES:
            raise argparse.ArgumentTypeError(
                f"{part!r} is not a mode (available: {', '.join(MODES)})")
        if part not in modes:
            modes.append(part)
    return modes


def parse_args(argv):
    p = argparse.ArgumentParser(
        prog="pytorch_reference.py",
        description="Train dpbench's MLP with plain PyTorch, nn.DataParallel and "
                    "DistributedDataParallel on CUDA and time it as dpbench does.")
    p.add_argument("--hidden", type=_hidden_list, default=[4096, 4096],
                   help="hidden widths of the MLP 784-hidden...-10 (default 4096,4096)")
    p.add_argument("--batch-size", type=_positive_int, default=1024,
                   help="global batch per optimizer step (default 1024); DataParallel scatters "
                        "it in chunks of ceil(B/world_size), DDP gives each rank B/world_size")
    p.add_argument("--steps", type=_positive_int, default=200,
                   help="optimizer steps in total, warm-up included, as dpbench's --max-steps "
                        "(default 200)")
    p.add_argument("--warmup-steps", type=_non_negative_int, default=20,
                   help="first steps kept out of the timing (default 20)")
    p.add_argument("--precision", choices=("fp32", "tf32"), default="tf32",
                   help="tf32 tensor-core matmuls (torch.backends.cuda.matmul.allow_tf32 and "
                        "torch.backends.cudnn.allow_tf32), or fp32; the default is tf32, as "
                        "dpbench's --precision (default tf32)")
    p.add_argument("--modes", type=_mode_list, default=list(MODES),
                   help="comma list of plain, dataparallel, ddp (default all three); "
                        "dataparallel and ddp need 2 or more GPUs and are skipped otherwise")
    p.add_argument("--world-size", type=_positive_int, default=None,
                   help="GPUs used by dataparallel and ddp (default: every visible GPU)")
    p.add_argument("--data", choices=("synthetic", "fashion-mnist"), default="synthetic",
                   help="synthetic: class prototypes plus noise generated on the GPU, no disk "
                        "(default); fashion-mnist: the .gz IDX files read with gzip and numpy")
    p.add_argument("--data-dir", default=None,
                   help="Fashion-MNIST directory (default: $DPBENCH_DATA_DIR, else "
                        f"{DEFAULT_DATA_DIR})")
    p.add_argument("--synthetic-samples", type=_positive_int, default=60000,
                   help="synthetic: training samples (default 60000, as dpbench)")
    p.add_argument("--lr", type=_positive_float, default=0.1, help="SGD learning rate (0.1)")
    p.add_argument("--momentum", type=float, default=0.9, help="SGD momentum (0.9)")
    p.add_argument("--seed", type=_non_negative_int, default=0,
                   help="initial parameters, synthetic data and the DistributedSampler shuffle")
    p.add_argument("--bucket-cap-mb", type=_positive_float, default=25.0,
                   help="DDP bucket_cap_mb (default 25)")
    p.add_argument("--timeout", type=_positive_int, default=300,
                   help="seconds a DDP rank waits for its peers (process group timeout)")
    p.add_argument("--out", "-o", default=None,
                   help="result JSON (default results/pytorch-reference-<time>.json)")
    args = p.parse_args(argv)
    if args.warmup_steps >= args.steps:
        p.error(f"--warmup-steps {args.warmup_steps}: must be less than --steps {args.steps}")
    if not (0.0 <= args.momentum < 1.0):
        p.error(f"--momentum {args.momentum}: must be in [0, 1)")
    if args.data_dir is None:
        args.data_dir = os.environ.get("DPBENCH_DATA_DIR") or DEFAULT_DATA_DIR
    return args


# ---------------------------------------------------------------------------------------------
# Data
# ---------------------------------------------------------------------------------------------

def _read_idx(path, magic, dims):
    """Reads one gzip-compressed IDX file. Returns a uint8 numpy array of shape (count, *dims).
    Raises InputError naming the file on a missing file, bad gzip, wrong magic or size."""
    import gzip
    import zlib

    import numpy as np
    try:
        with gzip.open(path, "rb") as f:
            raw = f.read()
    except FileNotFoundError:
        raise InputError(f"{path}: no such file (is dataset-fashion-mnist installed? "
                         "--data-dir and DPBENCH_DATA_DIR pick another directory)")
    except (OSError, EOFError, zlib.error) as e:
        raise InputError(f"{path}: not a readable gzip file ({e})")
    header = 4 + 4 * (1 + len(dims))
    if len(raw) < header:
        raise InputError(f"{path}: {len(raw)} bytes, shorter than the IDX header ({header})")
    got_magic = int.from_bytes(raw[0:4], "big")
    if got_magic != magic:
        raise InputError(f"{path}: IDX magic {got_magic:#010x}, expected {magic:#010x}")
    count = int.from_bytes(raw[4:8], "big")
    got_dims = tuple(int.from_bytes(raw[8 + 4 * i:12 + 4 * i], "big") for i in range(len(dims)))
    if got_dims != tuple(dims):
        raise InputError(f"{path}: sample dimensions {got_dims}, expected {tuple(dims)}")
    expected = header + count * math.prod(dims)
    if len(raw) != expected:
        raise InputError(f"{path}: {len(raw)} bytes, the header says {expected}")
    return np.frombuffer(raw, dtype=np.uint8, offset=header).reshape((count, *dims))


def load_fashion_mnist(data_dir):
    """Fashion-MNIST training split. Returns (x, y): x float32 numpy [60000, 784] normalised as
    (x/255 - 0.2860)/0.3530, y int64 numpy [60000] in 0..9. Raises InputError."""
    try:
        import numpy as np
    except ImportError:
        raise InputError("--data fashion-mnist needs numpy, which is not installed")
    d = Path(data_dir)
    if not d.is_dir():
        raise InputError(f"--data-dir {data_dir}: no such directory")
    images = _read_idx(d / "train-images-idx3-ubyte.gz", 0x00000803, (28, 28))
    labels = _read_idx(d / "train-labels-idx1-ubyte.gz", 0x00000801, ())
    if images.shape[0] != labels.shape[0]:
        raise InputError(f"{d}: {images.shape[0]} training images but {labels.shape[0]} labels")
    if labels.size and int(labels.max()) >= NUM_CLASSES:
        raise InputError(f"{d / 'train-labels-idx1-ubyte.gz'}: label {int(labels.max())} "
                         f"outside 0..{NUM_CLASSES - 1}")
    x = images.reshape(images.shape[0], INPUT_FEATURES).astype(np.float32)
    x = (x / np.float32(255.0) - np.float32(FASHION_MNIST_MEAN)) / np.float32(FASHION_MNIST_STD)
    return x, labels.astype(np.int64)


def make_dataset(cfg, device, host_data=None):
    """The training set as device tensors (x [N, 784] float32, y [N] int64) on `device`.
    synthetic: each class has a prototype in [-1, 1)^784 and a sample is its class's prototype
    plus N(0, 0.5^2) noise (the statistics of dpbench's synthetic data, not its exact bytes),
    generated on the device from `seed`, so every rank builds the same set.
    fashion-mnist: host_data (from load_fashion_mnist), or read here when None."""
    if cfg["data"] == "synthetic":
        g = torch.Generator(device=device)
        g.manual_seed(cfg["seed"])
        n = cfg["synthetic_samples"]
        y = torch.randint(0, NUM_CLASSES, (n,), generator=g, device=device)
        prototypes = torch.rand(NUM_CLASSES, INPUT_FEATURES, generator=g, device=device) * 2 - 1
        x = torch.randn(n, INPUT_FEATURES, generator=g, device=device)
        x.mul_(0.5).add_(prototypes[y])
        return x, y
    if host_data is None:
        host_data = load_fashion_mnist(cfg["data_dir"])
    hx, hy = host_data
    return torch.from_numpy(hx).to(device), torch.from_numpy(hy).to(device)


def tensor_bytes(tensors):
    """Bytes held by the given device tensors."""
    return sum(t.element_size() * t.numel() for t in tensors)


def epoch_batches(sampler, epoch, local_batch, device):
    """The index batches of one epoch: DistributedSampler semantics (shuffle with seed + epoch,
    pad to a multiple of num_replicas, take idx[rank::num_replicas]), cut into local_batch-sized
    slices; an incomplete last slice is dropped. Returns a list of int64 device tensors."""
    sampler.set_epoch(epoch)
    idx = torch.as_tensor(list(iter(sampler)), dtype=torch.long, device=device)
    return [idx[i:i + local_batch] for i in range(0, idx.numel() - local_batch + 1, local_batch)]


# ---------------------------------------------------------------------------------------------
# Model and one training step
# ---------------------------------------------------------------------------------------------

def build_mlp(hidden):
    """dpbench's MLP: Linear(784, h1), ReLU, ..., Linear(h_last, 10); nn.Linear's default
    initialisation (weights and biases uniform in +-1/sqrt(fan_in), as dpbench's init_params)."""
    dims = [INPUT_FEATURES, *hidden, NUM_CLASSES]
    layers = []
    for i in range(len(dims) - 1):
        layers.append(nn.Linear(dims[i], dims[i + 1]))
        if i + 2 < len(dims):
            layers.append(nn.ReLU())
    return nn.Sequential(*layers)


def set_precision(precision):
    """tf32 tensor-core matmuls on or off; set in every process (spawned ranks too)."""
    torch.backends.cuda.matmul.allow_tf32 = precision == "tf32"
    torch.backends.cudnn.allow_tf32 = precision == "tf32"


def train_step(model, optimizer, loss_fn, x, y):
    """Forward, mean softmax cross-entropy, backward, SGD step. Returns the loss as a 0-d device
    tensor (not .item(): no host synchronisation inside the step beyond the caller's)."""
    optimizer.zero_grad(set_to_none=True)
    loss = loss_fn(model(x), y)
    loss.backward()
    optimizer.step()
    return loss.detach()


def train_loop(cfg, model, optimizer, data, sampler, local_batch, data_device, sync_devices):
    """Runs cfg['steps'] optimizer steps over as many epochs as that takes. Each step's
    wall-clock time runs from fetching its batch (a gather from the device-resident set) to a
    torch.cuda.synchronize of every device in sync_devices. Shuffling at an epoch boundary is
    kept out of the step (a DataLoader with workers would have it ready).
    Returns (step_times_s over the timed steps, [(epoch, loss tensor)] for every step)."""
    data_x, data_y = data
    loss_fn = nn.CrossEntropyLoss()
    times, losses = [], []
    epoch, batches = 0, []
    for d in sync_devices:
        torch.cuda.synchronize(d)
    for step in range(cfg["steps"]):
        if not batches:
            batches = epoch_batches(sampler, epoch, local_batch, data_device)
            batches.reverse()  # pop() from the end takes them in order
            epoch += 1
            if not batches:
                raise InputError(f"{len(sampler)} samples per rank give no batch of {local_batch}")
            for d in sync_devices:
                torch.cuda.synchronize(d)
        t0 = time.perf_counter()
        idx = batches.pop()
        loss = train_step(model, optimizer, loss_fn, data_x[idx], data_y[idx])
        for d in sync_devices:
            torch.cuda.synchronize(d)
        elapsed = time.perf_counter() - t0
        if step >= cfg["warmup_steps"]:
            times.append(elapsed)
        losses.append((epoch - 1, loss))
    return times, losses


def epoch_losses(losses):
    """[(epoch, loss tensor)] -> mean loss per epoch (the last may be partial), None where a
    loss is not finite."""
    values = torch.stack([l for _, l in losses]).double().cpu().tolist()
    by_epoch = {}
    for (e, _), v in zip(losses, values):
        by_epoch.setdefault(e, []).append(v)
    out = []
    for e in sorted(by_epoch):
        vs = by_epoch[e]
        out.append(sum(vs) / len(vs) if all(math.isfinite(v) for v in vs) else None)
    return out


def make_optimizer(cfg, model):
    return torch.optim.SGD(model.parameters(), lr=cfg["lr"], momentum=cfg["momentum"])


# ---------------------------------------------------------------------------------------------
# Statistics and the run record
# ---------------------------------------------------------------------------------------------

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


def run_record(cfg, mode, world_size, num_params, times, per_rank_times, local_batches,
               peaks, dataset_bytes, epoch_loss, warnings, comm):
    """One runs[] entry with dpbench's run keys that apply to PyTorch. times: rank 0's timed
    step samples (s); peaks/dataset_bytes: bytes per rank (device)."""
    batch = cfg["batch_size"]
    throughput = quantile([batch / t for t in times if t > 0], 0.5)
    mean_peak = sum(peaks) / len(peaks)
    no_data = [p - d for p, d in zip(peaks, dataset_bytes)]
    mean_no_data = sum(no_data) / len(no_data)
    finite = [v for v in epoch_loss if v is not None]
    final_loss = epoch_loss[-1] if epoch_loss else None
    if final_loss is None or len(finite) != len(epoch_loss):
        warnings = warnings + ["training loss not finite in some epoch (diverged?)"]
    return {
        "mode": mode,
        "dpbench_equivalent": DPBENCH_EQUIVALENT[mode],
        "comm": comm,
        "device": "cuda",
        "workload": "mlp",
        "precision": cfg["precision"],
        "world_size": world_size,
        "global_batch": batch,
        "num_params": num_params,
        "virtual_ranks": False,
        "steps": {"total": cfg["steps"], "timed": len(times), "warmup": cfg["warmup_steps"]},
        "throughput_samples_per_s": throughput,
        "step_time_s": {"p10": quantile(times, 0.10), "p50": quantile(times, 0.50),
                        "p90": quantile(times, 0.90), "p99": quantile(times, 0.99),
                        "samples": times},
        "memory": {
            "per_rank": [{"rank": r, "peak_bytes": peaks[r], "dataset_bytes": dataset_bytes[r],
                          "peak_bytes_excluding_dataset": no_data[r]}
                         for r in range(len(peaks))],
            "imbalance_max_over_mean": max(peaks) / mean_peak if mean_peak > 0 else 1.0,
            "imbalance_excluding_dataset": max(no_data) / mean_no_data if mean_no_data > 0 else 1.0,
            "reducer_minus_mean_bytes": peaks[0] - mean_peak,
        },
        "per_rank": [{"rank": r, "local_batch": local_batches[r],
                      "step_time_p50_s": quantile(per_rank_times[r], 0.5)}
                     for r in range(world_size)],
        "quality": {"final_train_loss": final_loss, "epoch_train_loss": epoch_loss},
        "warnings": warnings,
    }


def _release_cuda():
    gc.collect()
    torch.cuda.empty_cache()


# ---------------------------------------------------------------------------------------------
# The three modes
# ---------------------------------------------------------------------------------------------

def run_plain(cfg, host_data):
    """Plain PyTorch eager on cuda:0."""
    dev = torch.device("cuda", 0)
    torch.cuda.set_device(dev)
    data = make_dataset(cfg, dev, host_data)
    data_bytes = tensor_bytes(data)
    torch.cuda.reset_peak_memory_stats(dev)
    torch.manual_seed(cfg["seed"])
    model = build_mlp(cfg["hidden"]).to(dev)
    optimizer = make_optimizer(cfg, model)
    sampler = DistributedSampler(TensorDataset(data[1]), num_replicas=1, rank=0, shuffle=True,
                                 seed=cfg["seed"])
    times, losses = train_loop(cfg, model, optimizer, data, sampler, cfg["batch_size"], dev, [dev])
    peak = torch.cuda.max_memory_allocated(dev)
    num_params = sum(p.numel() for p in model.parameters())
    record = run_record(cfg, "plain", 1, num_params, times, [times], [cfg["batch_size"]], [peak],
                        [data_bytes], epoch_losses(losses), [], "none")
    del model, optimizer, data, losses
    _release_cuda()
    return record


def run_dataparallel(cfg, host_data, world_size):
    """nn.DataParallel over cuda:0..world_size-1: the full batch on cuda:0, scattered in
    ceil(B/n) chunks, parameters broadcast every step, outputs gathered and the loss taken on
    cuda:0, gradients reduce-added onto cuda:0, which alone steps the optimizer."""
    devices = [torch.device("cuda", i) for i in range(world_size)]
    torch.cuda.set_device(devices[0])
    data = make_dataset(cfg, devices[0], host_data)
    data_bytes = [tensor_bytes(data)] + [0] * (world_size - 1)
    for d in devices:
        torch.cuda.reset_peak_memory_stats(d)
    torch.manual_seed(cfg["seed"])
    model = build_mlp(cfg["hidden"]).to(devices[0])
    dp_model = nn.DataParallel(model, device_ids=list(range(world_size)), output_device=0)
    optimizer = make_optimizer(cfg, model)
    sampler = DistributedSampler(TensorDataset(data[1]), num_replicas=1, rank=0, shuffle=True,
                                 seed=cfg["seed"])
    times, losses = train_loop(cfg, dp_model, optimizer, data, sampler, cfg["batch_size"],
                               devices[0], devices)
    peaks = [torch.cuda.max_memory_allocated(d) for d in devices]
    num_params = sum(p.numel() for p in model.parameters())
    chunk = -(-cfg["batch_size"] // world_size)  # torch.chunk: ceil(B/n), the last ones smaller
    local = [max(0, min(chunk, cfg["batch_size"] - r * chunk)) for r in range(world_size)]
    warnings = []
    idle = sum(1 for b in local if b == 0)
    if idle:
        warnings.append(f"batch {cfg['batch_size']} in chunks of {chunk}: {idle} of "
                        f"{world_size} GPUs get no samples")
    # One thread times the step for every replica, so every rank carries rank 0's samples.
    record = run_record(cfg, "dataparallel", world_size, num_params, times,
                        [times] * world_size, local, peaks, data_bytes, epoch_losses(losses),
                        warnings, "torch.nn.parallel (broadcast_coalesced / reduce_add_coalesced)")
    del dp_model, model, optimizer, data, losses
    _release_cuda()
    return record


def _ddp_worker(rank, world_size, cfg, init_method, result_dir):
    """One DDP rank (torch.multiprocessing.spawn target): cuda:rank, NCCL process group, the
    rank's DistributedSampler shard of every global batch, bucket_cap_mb buckets. Writes its
    timings, peak memory and losses to result_dir/rank<r>.json."""
    set_precision(cfg["precision"])
    dev = torch.device("cuda", rank)
    torch.cuda.set_device(dev)
    dist.init_process_group("nccl", init_method=init_method, world_size=world_size, rank=rank,
                            timeout=datetime.timedelta(seconds=cfg["timeout"]))
    try:
        data = make_dataset(cfg, dev)
        data_bytes = tensor_bytes(data)
        torch.cuda.reset_peak_memory_stats(dev)
        torch.manual_seed(cfg["seed"])  # DDP also broadcasts rank 0's parameters at wrap time
        model = build_mlp(cfg["hidden"]).to(dev)
        ddp_model = DistributedDataParallel(model, device_ids=[rank], output_device=rank,
                                            bucket_cap_mb=cfg["bucket_cap_mb"])
        optimizer = make_optimizer(cfg, ddp_model)
        sampler = DistributedSampler(TensorDataset(data[1]), num_replicas=world_size, rank=rank,
                                     shuffle=True, seed=cfg["seed"])
        local_batch = cfg["batch_size"] // world_size
        times, losses = train_loop(cfg, ddp_model, optimizer, data, sampler, local_batch, dev,
                                   [dev])
        result = {
            "rank": rank,
            "times": times,
            "peak_bytes": torch.cuda.max_memory_allocated(dev),
            "dataset_bytes": data_bytes,
            "local_batch": local_batch,
            "num_params": sum(p.numel() for p in model.parameters()),
            "epoch_loss": epoch_losses(losses),
        }
        dist.barrier(device_ids=[rank])
    finally:
        dist.destroy_process_group()
    with open(os.path.join(result_dir, f"rank{rank}.json"), "w") as f:
        json.dump(result, f)


def _free_port():
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def run_ddp(cfg, world_size):
    """DistributedDataParallel, one spawned process per GPU; rank 0's step times are the run's
    step times, as in dpbench."""
    _release_cuda()
    init_method = f"tcp://127.0.0.1:{_free_port()}"
    with tempfile.TemporaryDirectory(prefix="pytorch-reference-ddp-") as result_dir:
        mp.spawn(_ddp_worker, args=(world_size, cfg, init_method, result_dir),
                 nprocs=world_size, join=True)
        ranks = []
        for r in range(world_size):
            with open(os.path.join(result_dir, f"rank{r}.json")) as f:
                ranks.append(json.load(f))
    # The loss of the global batch is the mean of the ranks' local means (equal local batches).
    n_epochs = min(len(r["epoch_loss"]) for r in ranks)
    epoch_loss = []
    for e in range(n_epochs):
        vs = [r["epoch_loss"][e] for r in ranks]
        epoch_loss.append(None if any(v is None for v in vs) else sum(vs) / len(vs))
    return run_record(cfg, "ddp", world_size, ranks[0]["num_params"], ranks[0]["times"],
                      [r["times"] for r in ranks], [r["local_batch"] for r in ranks],
                      [r["peak_bytes"] for r in ranks], [r["dataset_bytes"] for r in ranks],
                      epoch_loss, [], f"nccl (bucket_cap_mb {cfg['bucket_cap_mb']:g})")


# ---------------------------------------------------------------------------------------------
# Environment, output, table
# ---------------------------------------------------------------------------------------------

def _command_output(cmd):
    try:
        out = subprocess.run(cmd, capture_output=True, text=True, timeout=10, check=True)
        return out.stdout.strip() or None
    except (OSError, subprocess.SubprocessError):
        return None


def collect_env():
    gpus = []
    for i in range(torch.cuda.device_count()):
        props = torch.cuda.get_device_properties(i)
        bus = [getattr(props, a, None) for a in ("pci_domain_id", "pci_bus_id", "pci_device_id")]
        gpus.append({
            "index": i,
            "name": props.name,
            "memory_bytes": props.total_memory,
            "compute_capability": f"{props.major}.{props.minor}",
            "multiprocessors": props.multi_processor_count,
            "pci_bus_id": (f"{bus[0]:04x}:{bus[1]:02x}:{bus[2]:02x}.0"
                           if all(isinstance(b, int) for b in bus) else None),
        })
    try:
        nccl = importlib.import_module("torch.cuda.nccl").version()
        nccl = ".".join(str(v) for v in nccl) if isinstance(nccl, tuple) else str(nccl)
    except Exception:  # built without NCCL, or an API change: record that it is unknown
        nccl = None
    driver = _command_output(["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"])
    return {
        "git_commit": _command_output(["git", "-C", str(REPO_ROOT), "rev-parse", "HEAD"]),
        "host": socket.gethostname(),
        "os": platform.platform(),
        "cpu_cores": os.cpu_count(),
        "python": platform.python_version(),
        "torch": torch.__version__,
        "cuda": {"runtime_version": torch.version.cuda,
                 "driver_version": driver.splitlines()[0] if driver else None},
        "cudnn": torch.backends.cudnn.version() if torch.backends.cudnn.is_available() else None,
        "nccl_version": nccl,
        "gpus": gpus,
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


def print_table(runs):
    if not runs:
        return
    mib = 1024.0 * 1024.0
    label_w, col_w = 38, 20
    print()
    print(f"{'':<{label_w}}" + "".join(f"{r['mode'] + ' (' + str(r['world_size']) + ')':>{col_w}}"
                                       for r in runs))

    def row(label, cell):
        print(f"{label:<{label_w}}" + "".join(f"{cell(r):>{col_w}}" for r in runs))

    row("throughput (samples/s, median)", lambda r: f"{r['throughput_samples_per_s']:.0f}")
    row("step time p50 / p90 (ms)", lambda r: f"{1e3 * r['step_time_s']['p50']:.2f} / "
                                              f"{1e3 * r['step_time_s']['p90']:.2f}")
    row("step time p99 (ms)", lambda r: f"{1e3 * r['step_time_s']['p99']:.2f}")
    row("peak memory rank 0 (MiB)",
        lambda r: f"{r['memory']['per_rank'][0]['peak_bytes'] / mib:.1f}")
    row("peak memory other ranks (MiB, max)",
        lambda r: f"{max(m['peak_bytes'] for m in r['memory']['per_rank'][1:]) / mib:.1f}"
        if len(r["memory"]["per_rank"]) > 1 else "-")
    row("  of which the data set, rank 0 (MiB)",
        lambda r: f"{r['memory']['per_rank'][0]['dataset_bytes'] / mib:.1f}")
    row("memory imbalance (max / mean)", lambda r: f"{r['memory']['imbalance_max_over_mean']:.3f}")
    row("  excluding the data set", lambda r: f"{r['memory']['imbalance_excluding_dataset']:.3f}")
    row("final train loss", lambda r: "-" if r["quality"]["final_train_loss"] is None
        else f"{r['quality']['final_train_loss']:.4f}")
    by_mode = {r["mode"]: r for r in runs}
    if "dataparallel" in by_mode and "ddp" in by_mode:
        dp, ddp = by_mode["dataparallel"], by_mode["ddp"]
        ratio = ddp["throughput_samples_per_s"] / max(dp["throughput_samples_per_s"], 1e-12)
        print(f"\nAt {ddp['world_size']} GPUs, ddp runs at {ratio:.2f}x the throughput of "
              f"dataparallel; the dataparallel reducer (cuda:0) holds "
              f"{dp['memory']['imbalance_max_over_mean']:.2f}x the mean per-GPU memory "
              f"({dp['memory']['imbalance_excluding_dataset']:.2f}x without the data set).")


# ---------------------------------------------------------------------------------------------
# main
# ---------------------------------------------------------------------------------------------

def main(argv=None):
    args = parse_args(sys.argv[1:] if argv is None else argv)
    if torch is None:
        if isinstance(_TORCH_IMPORT_ERROR, ModuleNotFoundError) and \
                _TORCH_IMPORT_ERROR.name in ("torch", None):
            print(f"{PROG}: PyTorch is not installed", file=sys.stderr)
        else:
            print(f"{PROG}: PyTorch could not be imported ({_TORCH_IMPORT_ERROR})", file=sys.stderr)
        return 2
    if not torch.cuda.is_available():
        print(f"{PROG}: no CUDA device (torch.cuda.is_available() is False)", file=sys.stderr)
        return 2
    gpu_count = torch.cuda.device_count()
    if args.world_size is not None and args.world_size > gpu_count:
        print(f"{PROG}: --world-size {args.world_size}: only {gpu_count} GPU(s) visible",
              file=sys.stderr)
        return 2
    world_size = args.world_size or gpu_count

    host_data = None
    if args.data == "fashion-mnist":
        try:
            host_data = load_fashion_mnist(args.data_dir)
        except InputError as e:
            print(f"{PROG}: {e}", file=sys.stderr)
            return 2
    n_samples = args.synthetic_samples if args.data == "synthetic" else host_data[0].shape[0]
    if args.batch_size > n_samples:
        print(f"{PROG}: --batch-size {args.batch_size}: larger than the {n_samples} training "
              "samples", file=sys.stderr)
        return 2

    set_precision(args.precision)
    cfg = {
        "workload": "mlp",
        "layers": [INPUT_FEATURES, *args.hidden, NUM_CLASSES],
        "hidden": args.hidden,
        "batch_size": args.batch_size,
        "global_batch": args.batch_size,
        "steps": args.steps,
        "warmup_steps": args.warmup_steps,
        "precision": args.precision,
        "allow_tf32": {"cuda_matmul": torch.backends.cuda.matmul.allow_tf32,
                       "cudnn": torch.backends.cudnn.allow_tf32},
        "modes": args.modes,
        "world_size": world_size,
        "data": args.data,
        "data_dir": args.data_dir if args.data == "fashion-mnist" else None,
        "synthetic_samples": args.synthetic_samples,
        "dataset_samples": n_samples,
        "data_placement": "device-resident training set, one gather per step",
        "lr": args.lr,
        "momentum": args.momentum,
        "optimizer": "SGD",
        "loss": "CrossEntropyLoss (mean)",
        "seed": args.seed,
        "bucket_cap_mb": args.bucket_cap_mb,
        "timeout": args.timeout,
    }
    created = datetime.datetime.now(datetime.timezone.utc)
    out = Path(args.out) if args.out else (
        REPO_ROOT / "results" / f"pytorch-reference-{created.strftime('%Y%m%d-%H%M%S')}.json")

    warnings, runs, failed = [], [], False
    for mode in args.modes:
        if mode != "plain" and world_size < 2:
            warnings.append(f"{mode} skipped: it needs 2 or more GPUs, {world_size} "
                            f"{'is' if world_size == 1 else 'are'} in use "
                            f"({gpu_count} visible)")
            print(f"{PROG}: {warnings[-1]}", file=sys.stderr)
            continue
        if mode == "ddp" and args.batch_size % world_size != 0:
            warnings.append(f"ddp skipped: --batch-size {args.batch_size} does not split evenly "
                            f"over {world_size} ranks")
            print(f"{PROG}: {warnings[-1]}", file=sys.stderr)
            continue
        print(f"{PROG}: {mode}, {world_size if mode != 'plain' else 1} GPU(s), "
              f"{args.steps} steps ...", file=sys.stderr)
        try:
            if mode == "plain":
                runs.append(run_plain(cfg, host_data))
            elif mode == "dataparallel":
                runs.append(run_dataparallel(cfg, host_data, world_size))
            else:
                runs.append(run_ddp(cfg, world_size))
        except InputError as e:
            print(f"{PROG}: {e}", file=sys.stderr)
            return 2
        except Exception as e:  # a failed run is recorded; the other modes still run
            failed = True
            message = str(e).strip().splitlines()[-1] if str(e).strip() else type(e).__name__
            warnings.append(f"{mode} failed: {message}")
            print(f"{PROG}: {mode} failed: {message}", file=sys.stderr)
            _release_cuda()

    doc = {
        "schema": {"name": "dpbench-pytorch-reference", "version": 1},
        "created": created.strftime("%Y-%m-%dT%H:%M:%SZ"),
        "env": collect_env(),
        "config": cfg,
        "runs": runs,
        "warnings": warnings,
    }
    write_json_atomic(out, doc)
    print_table(runs)
    for w in warnings:
        print(f"warning: {w}")
    print(f"\nwrote {out}")
    return 1 if failed or not runs else 0


if __name__ == "__main__":
    sys.exit(main())
