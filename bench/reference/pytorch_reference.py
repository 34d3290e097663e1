#!/usr/bin/env python3
"""PyTorch reference for dpbench: the same model, optimizer and global batch trained with PyTorch
in the data-parallel styles dpbench implements, timed the way dpbench times a run (warm-up steps
excluded, medians and percentiles of the per-step samples), written as one JSON file and printed
as a short table.

On CUDA: plain eager on one GPU, nn.DataParallel over the visible GPUs (dpbench's `ps`) and
DistributedDataParallel with one process per GPU over NCCL (dpbench's `allreduce`). On the CPU:
plain eager in one process, DistributedDataParallel over gloo, DataParallel's data flow written
with gloo collectives (rank 0 broadcasts, scatters, gathers, reduces and steps), and the batch-
updating parameter server of PyTorch's RPC tutorial (`rpc_ps`), each with N processes.
With --start DIR it reads a start bundle written by dpbench (model, initial parameters and
buffers, training and test data, the sample order, the optimizer) so both programs train the same
parameters on the same samples in the same order, and the per-step losses can be compared.

It is the yardstick for "dpbench no slower than PyTorch eager", not a part of dpbench, and not a
general training script: no checkpoints, no mixed precision.

Usage: python3 bench/reference/pytorch_reference.py [--device cpu|cuda|auto]
    [--modes plain,dataparallel,ddp,rpc_ps] [--world-size N] [--threads T] [--start DIR]
    [--hidden 4096,4096] [--batch-size 1024] [--steps 200] [--warmup-steps 20] [--out FILE] ...
Exit codes: 0 every requested mode ran or was skipped with a reason, 1 a run failed or none ran,
2 bad arguments, a bad start bundle, no PyTorch, no CUDA device for --device cuda, or unreadable
data.
"""

import argparse
import contextlib
import ctypes
import datetime
import gc
import importlib
import json
import math
import os
import platform
import resource
import socket
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

try:
    import torch
    import torch.distributed as dist
    import torch.multiprocessing as mp
    from torch import nn
    from torch.nn.parallel import DistributedDataParallel

    _TORCH_IMPORT_ERROR = None
except (ImportError, OSError) as e:  # not installed (ModuleNotFoundError), or a broken install
    torch = None
    _TORCH_IMPORT_ERROR = e

PROG = "pytorch_reference"
REPO_ROOT = Path(__file__).resolve().parents[2]
CUDA_MODES = ("plain", "dataparallel", "ddp")
CPU_MODES = ("plain", "dataparallel", "ddp", "rpc_ps")
MODES = CPU_MODES
# The dpbench mode each PyTorch mode stands for (plain: dpbench's 1-rank runs).
DPBENCH_EQUIVALENT = {"plain": None, "dataparallel": "ps", "ddp": "allreduce", "rpc_ps": "ps"}
INPUT_FEATURES = 28 * 28
NUM_CLASSES = 10
FASHION_MNIST_MEAN, FASHION_MNIST_STD = 0.2860, 0.3530
DEFAULT_DATA_DIR = "/usr/share/datasets/fashion-mnist"
START_SCHEMA = {"name": "dpbench-start", "version": 1}
RESULT_SCHEMA = {"name": "dpbench-pytorch-reference", "version": 2}
# Options a start bundle fixes, with the defaults they take without one.
BUNDLE_FIXED_DEFAULTS = {
    "hidden": [4096, 4096], "batch_size": 1024, "steps": 200, "warmup_steps": 20, "lr": 0.1,
    "momentum": 0.9, "weight_decay": 0.0, "seed": 0, "bucket_cap_mb": 25.0, "data": "synthetic",
    "data_dir": None, "synthetic_samples": 60000,
}


class InputError(Exception):
    """Bad input (data files, a start bundle, options that only the device can check): one line,
    exit 2."""


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


def _non_negative_float(text):
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number")
    if not (value >= 0 and math.isfinite(value)):
        raise argparse.ArgumentTypeError(f"{text} must be 0 or a positive number")
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
    """Parses argv. Options a start bundle fixes default to None here, so that main can tell an
    explicit one from a default (an explicit one with --start is an error); resolve_defaults fills
    them in without --start."""
    p = argparse.ArgumentParser(
        prog="pytorch_reference.py",
        description="Train dpbench's model with plain PyTorch, DataParallel, "
                    "DistributedDataParallel and an RPC parameter server, on CUDA or the CPU, and "
                    "time it as dpbench does.")
    p.add_argument("--device", choices=("auto", "cpu", "cuda"), default="auto",
                   help="auto (default): cuda when torch.cuda.is_available(), else cpu")
    p.add_argument("--start", default=None, metavar="DIR",
                   help="start bundle written by dpbench (start.json and raw files): model, "
                        "initial parameters and buffers, data, sample order and optimizer")
    p.add_argument("--hidden", type=_hidden_list, default=None,
                   help="hidden widths of the MLP 784-hidden...-10 (default 4096,4096)")
    p.add_argument("--batch-size", type=_positive_int, default=None,
                   help="global batch per optimizer step (default 1024); dataparallel and rpc_ps "
                        "split it in torch.chunk chunks of ceil(B/world_size), ddp gives each "
                        "rank B/world_size")
    p.add_argument("--steps", type=_positive_int, default=None,
                   help="optimizer steps in total, warm-up included, as dpbench's --max-steps "
                        "(default 200)")
    p.add_argument("--warmup-steps", type=_non_negative_int, default=None,
                   help="first steps kept out of the timing (default 20)")
    p.add_argument("--precision", choices=("fp32", "tf32"), default=None,
                   help="CUDA: tf32 tensor-core matmuls (torch.backends.cuda.matmul.allow_tf32 "
                        "and torch.backends.cudnn.allow_tf32) or fp32, default tf32 as dpbench's "
                        "--precision; the CPU runs fp32 only")
    p.add_argument("--modes", type=_mode_list, default=None,
                   help="comma list of plain, dataparallel, ddp, rpc_ps, run in the order given "
                        "(default: plain,dataparallel,ddp on CUDA, plain,dataparallel,ddp,rpc_ps "
                        "on the CPU)")
    p.add_argument("--world-size", type=_positive_int, default=None,
                   help="processes (CPU) or GPUs (CUDA) of dataparallel, ddp and rpc_ps; plain "
                        "uses 1 (default: 2 on the CPU, every visible GPU on CUDA)")
    p.add_argument("--threads", type=_positive_int, default=None,
                   help="intra-op threads per process, set with torch.set_num_threads and "
                        "openblas_set_num_threads (default on the CPU: cpu_count // processes, "
                        "at least 1; on CUDA: left as it is)")
    p.add_argument("--data", choices=("synthetic", "fashion-mnist"), default=None,
                   help="synthetic: class prototypes plus noise generated on the device, no disk "
                        "(default); fashion-mnist: the .gz IDX files read with gzip and numpy")
    p.add_argument("--data-dir", default=None,
                   help="Fashion-MNIST directory (default: $DPBENCH_DATA_DIR, else "
                        f"{DEFAULT_DATA_DIR})")
    p.add_argument("--synthetic-samples", type=_positive_int, default=None,
                   help="synthetic: training samples (default 60000, as dpbench)")
    p.add_argument("--lr", type=_positive_float, default=None, help="SGD learning rate (0.1)")
    p.add_argument("--momentum", type=float, default=None, help="SGD momentum (0.9)")
    p.add_argument("--weight-decay", type=_non_negative_float, default=None,
                   help="SGD weight decay (0)")
    p.add_argument("--seed", type=_non_negative_int, default=None,
                   help="initial parameters, synthetic data and the DistributedSampler shuffle "
                        "(default 0)")
    p.add_argument("--bucket-cap-mb", type=_positive_float, default=None,
                   help="DDP bucket_cap_mb (default 25)")
    p.add_argument("--timeout", type=_positive_int, default=300,
                   help="seconds a rank waits for its peers: process-group timeout (gloo, NCCL) "
                        "and RPC timeout (default 300)")
    p.add_argument("--out", "-o", default=None,
                   help="result JSON (default results/pytorch-reference-<time>.json)")
    p.add_argument("--quiet", "-q", action="store_true",
                   help="no progress lines and no table; errors and the 'wrote' line only")
    args = p.parse_args(argv)
    if args.start is not None:
        given = [k for k in BUNDLE_FIXED_DEFAULTS if getattr(args, k) is not None]
        if given:
            p.error(f"--{given[0].replace('_', '-')}: the start bundle fixes it; leave it out "
                    "with --start")
    else:
        for k, v in BUNDLE_FIXED_DEFAULTS.items():
            if getattr(args, k) is None:
                setattr(args, k, v)
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


# ---------------------------------------------------------------------------------------------
# The start bundle
# ---------------------------------------------------------------------------------------------

_BUNDLE_DTYPES = {"float32": "<f4", "int64": "<i8"}


def _bundle_error(start_dir, what):
    return InputError(f"start bundle {start_dir}: {what}")


def _check_array_entry(start_dir, key, entry, dtype, ndim=None):
    """entry: {"file", "dtype", "shape"} of start.json. Checks the dtype, the shape's rank and
    that the file holds exactly prod(shape) elements. Returns (path, shape). Raises InputError."""
    if not isinstance(entry, dict) or not {"file", "dtype", "shape"} <= entry.keys():
        raise _bundle_error(start_dir, f"{key}: needs file, dtype and shape")
    if entry["dtype"] != dtype:
        raise _bundle_error(start_dir, f"{key}: dtype {entry['dtype']!r}, expected {dtype!r}")
    shape = entry["shape"]
    if (not isinstance(shape, list) or not all(isinstance(d, int) and d >= 0 for d in shape)
            or (ndim is not None and len(shape) != ndim) or not shape):
        raise _bundle_error(start_dir, f"{key}: bad shape {shape!r}")
    path = Path(start_dir) / entry["file"]
    _check_file_size(start_dir, key, path, math.prod(shape), dtype)
    return path, shape


def _check_file_size(start_dir, key, path, count, dtype):
    itemsize = 8 if dtype == "int64" else 4
    try:
        size = path.stat().st_size
    except OSError:
        raise _bundle_error(start_dir, f"{key}: {path.name}: no such file")
    if size != count * itemsize:
        raise _bundle_error(start_dir, f"{key}: {path.name} has {size} bytes, expected "
                                       f"{count * itemsize} ({count} x {dtype})")


def read_array(path, dtype, shape):
    """Raw little-endian file -> numpy array of `shape` (sizes already checked)."""
    import numpy as np
    return np.fromfile(path, dtype=_BUNDLE_DTYPES[dtype]).reshape(shape)


def _model_spec(start_dir, doc):
    """start.json's workload and model -> the spec build_model takes. Raises InputError."""
    workload, model = doc.get("workload"), doc.get("model")
    if workload not in ("mlp", "cnn"):
        raise _bundle_error(start_dir, f"workload {workload!r}: expected 'mlp' or 'cnn'")
    if not isinstance(model, dict):
        raise _bundle_error(start_dir, "model: missing")

    def ints(key, n=None):
        v = model.get(key)
        if (not isinstance(v, list) or not all(isinstance(d, int) and d >= 1 for d in v)
                or (n is not None and len(v) != n)):
            want = f"{n} positive integers" if n is not None else "positive integers"
            raise _bundle_error(start_dir, f"model.{key}: {v!r}, expected a list of {want}")
        return v

    classes = model.get("classes")
    if not isinstance(classes, int) or classes < 1:
        raise _bundle_error(start_dir, f"model.classes: {classes!r}")
    spec = {"workload": workload, "input": ints("input", 3), "classes": classes}
    if workload == "mlp":
        spec["hidden"] = ints("hidden")
        spec["channels"] = None
    else:
        spec["hidden"] = ints("hidden", 1)
        spec["channels"] = ints("channels", 2)
        if spec["input"][1] < 4 or spec["input"][2] < 4:
            raise _bundle_error(start_dir, f"model.input {spec['input']}: the cnn needs H, W >= 4")
    return spec


def _check_tensor_table(start_dir, key, section, expected, dtype="float32"):
    """section: start.json's params or buffers ({"file", "dtype", "count", "tensors"}).
    expected: {name: shape} of the model. Checks names (missing, extra), shapes, offsets and the
    file's size. Returns (path, [(name, shape, offset)])."""
    if not isinstance(section, dict) or not {"file", "dtype", "count", "tensors"} <= section.keys():
        raise _bundle_error(start_dir, f"{key}: needs file, dtype, count and tensors")
    if section["dtype"] != dtype:
        raise _bundle_error(start_dir, f"{key}: dtype {section['dtype']!r}, expected {dtype!r}")
    count = section["count"]
    if not isinstance(count, int) or count < 0:
        raise _bundle_error(start_dir, f"{key}: bad count {count!r}")
    table = []
    if not isinstance(section["tensors"], list) or \
            not all(isinstance(t, dict) for t in section["tensors"]):
        raise _bundle_error(start_dir, f"{key}: tensors must be a list of objects")
    for t in section["tensors"]:
        name, shape, offset = t.get("name"), t.get("shape"), t.get("offset")
        if name in {n for n, _, _ in table}:
            raise _bundle_error(start_dir, f"{key}: tensor {name!r} appears twice")
        if name not in expected:
            raise _bundle_error(start_dir, f"{key}: tensor {name!r} is not in the "
                                           f"{'model' if expected else 'model (it has none)'}")
        if list(shape or []) != list(expected[name]):
            raise _bundle_error(start_dir, f"{key}: {name} has shape {shape}, the model "
                                           f"{list(expected[name])}")
        n = math.prod(shape)
        if not isinstance(offset, int) or offset < 0 or offset + n > count:
            raise _bundle_error(start_dir, f"{key}: {name} at offset {offset!r} does not fit in "
                                           f"{count} elements")
        table.append((name, shape, offset))
    missing = [n for n in expected if n not in {name for name, _, _ in table}]
    if missing:
        raise _bundle_error(start_dir, f"{key}: tensor {missing[0]!r} of the model is missing")
    path = Path(start_dir) / section["file"]
    _check_file_size(start_dir, key, path, count, dtype)
    return path, table


def read_start_bundle(start_dir):
    """_read_start_bundle, with a malformed start.json (a value of the wrong type) turned into
    an InputError too."""
    try:
        return _read_start_bundle(start_dir)
    except (KeyError, TypeError, ValueError, AttributeError) as e:
        raise _bundle_error(start_dir, f"malformed start.json ({type(e).__name__}: {e})")


def _read_start_bundle(start_dir):
    """Reads and checks start_dir/start.json and the sizes of its files (schema dpbench-start 1;
    the format is in bench/reference/README.md). Returns a dict: spec (for build_model), params
    and buffers ((path, [(name, shape, offset)]) or None), train and test ({"x": (path, shape),
    "y": (path, shape)}; test may be None), order ((path, shape)), config (global_batch, steps,
    warmup_steps, steps_per_epoch, lr, momentum, weight_decay, seed, bucket_cap_mb), dir.
    The label range and the order's rows (each a permutation) are checked too.
    Raises InputError with one line naming the bundle and what is wrong."""
    import numpy as np
    d = Path(start_dir)
    try:
        with open(d / "start.json") as f:
            doc = json.load(f)
    except FileNotFoundError:
        raise _bundle_error(start_dir, "no start.json")
    except (OSError, ValueError) as e:
        raise _bundle_error(start_dir, f"start.json is not readable JSON ({e})")
    if not isinstance(doc, dict) or doc.get("schema") != START_SCHEMA:
        raise _bundle_error(start_dir, f"schema {doc.get('schema') if isinstance(doc, dict) else None!r}, "
                                       f"expected {START_SCHEMA}")
    spec = _model_spec(start_dir, doc)
    model = build_model(spec)
    expected_params = {n: list(p.shape) for n, p in model.named_parameters()}
    expected_buffers = {n: list(b.shape) for n, b in model.named_buffers()
                        if b.is_floating_point()}
    bundle = {"dir": str(d), "spec": spec}
    bundle["params"] = _check_tensor_table(start_dir, "params", doc.get("params"),
                                           expected_params)
    if expected_buffers or doc.get("buffers") is not None:
        bundle["buffers"] = _check_tensor_table(start_dir, "buffers", doc.get("buffers"),
                                                expected_buffers)
    else:
        bundle["buffers"] = None
    features = math.prod(spec["input"])
    for split in ("train", "test"):
        sec = doc.get(split)
        if sec is None and split == "test":
            bundle["test"] = None
            continue
        if not isinstance(sec, dict):
            raise _bundle_error(start_dir, f"{split}: missing")
        x = _check_array_entry(start_dir, f"{split}.x", sec.get("x"), "float32")
        y = _check_array_entry(start_dir, f"{split}.y", sec.get("y"), "int64", ndim=1)
        if x[1][0] != y[1][0] or math.prod(x[1][1:]) != features:
            raise _bundle_error(start_dir, f"{split}.x shape {x[1]} does not hold {y[1][0]} "
                                           f"samples of {spec['input']}")
        labels = read_array(y[0], "int64", y[1])
        if labels.size and (labels.min() < 0 or labels.max() >= spec["classes"]):
            raise _bundle_error(start_dir, f"{split}.y: labels outside 0..{spec['classes'] - 1}")
        bundle[split] = {"x": x, "y": y}
    n = bundle["train"]["y"][1][0]
    order = _check_array_entry(start_dir, "order", doc.get("order"), "int64", ndim=2)
    if order[1][1] != n or order[1][0] < 1:
        raise _bundle_error(start_dir, f"order shape {order[1]}, expected [epochs, {n}]")
    rows = read_array(order[0], "int64", order[1])
    identity = np.arange(n, dtype=np.int64)
    for e in range(rows.shape[0]):
        if not np.array_equal(np.sort(rows[e]), identity):
            raise _bundle_error(start_dir, f"order row {e} is not a permutation of [0, {n})")
    bundle["order"] = order
    bundle["config"] = _bundle_config(start_dir, doc.get("config"), n, order[1][0])
    return bundle


def _bundle_config(start_dir, c, n, epochs):
    """start.json's config, checked against the data (n samples, `epochs` order rows)."""
    keys = ("global_batch", "steps", "warmup_steps", "steps_per_epoch", "lr", "momentum",
            "weight_decay", "seed", "bucket_cap_mb")
    if not isinstance(c, dict) or not set(keys) <= c.keys():
        raise _bundle_error(start_dir, f"config: needs {', '.join(keys)}")
    for k in ("global_batch", "steps", "steps_per_epoch"):
        if not isinstance(c[k], int) or c[k] < 1:
            raise _bundle_error(start_dir, f"config.{k}: {c[k]!r}, expected a positive integer")
    if not isinstance(c["warmup_steps"], int) or not 0 <= c["warmup_steps"] < c["steps"]:
        raise _bundle_error(start_dir, f"config.warmup_steps {c['warmup_steps']!r}: must be in "
                                       f"[0, steps {c['steps']})")
    for k in ("lr", "momentum", "weight_decay", "bucket_cap_mb"):
        if not isinstance(c[k], (int, float)) or not math.isfinite(c[k]):
            raise _bundle_error(start_dir, f"config.{k}: {c[k]!r} is not a number")
    if not (c["lr"] > 0 and 0 <= c["momentum"] < 1 and c["weight_decay"] >= 0
            and c["bucket_cap_mb"] > 0):
        raise _bundle_error(start_dir, "config: needs lr > 0, momentum in [0, 1), "
                                       "weight_decay >= 0, bucket_cap_mb > 0")
    if c["steps_per_epoch"] * c["global_batch"] > n:
        raise _bundle_error(start_dir, f"config: {c['steps_per_epoch']} steps per epoch of "
                                       f"{c['global_batch']} need more than the {n} samples")
    needed = -(-c["steps"] // c["steps_per_epoch"])
    if needed > epochs:
        raise _bundle_error(start_dir, f"order has {epochs} epoch rows, {c['steps']} steps of "
                                       f"{c['steps_per_epoch']} per epoch need {needed}")
    return {k: c[k] for k in keys}


def load_start_state(bundle, model):
    """Copies the bundle's parameters and floating-point buffers into model (on the CPU, before
    any .to(device)), by state_dict key."""
    import numpy as np
    state = model.state_dict()
    for key in ("params", "buffers"):
        if bundle[key] is None:
            continue
        path, table = bundle[key]
        flat = np.fromfile(path, dtype="<f4")
        with torch.no_grad():
            for name, shape, offset in table:
                values = flat[offset:offset + math.prod(shape)].reshape(shape)
                state[name].copy_(torch.from_numpy(values.copy()))


# ---------------------------------------------------------------------------------------------
# Model
# ---------------------------------------------------------------------------------------------

class MLP(nn.Module if torch is not None else object):
    """dpbench's MLP: fc1..fcL (nn.Linear), ReLU between them, none after the last. Input
    [batch, *] is flattened. nn.Linear's default initialisation (weights and biases uniform in
    +-1/sqrt(fan_in), as dpbench's init_params), drawn in layer order."""

    def __init__(self, in_features, hidden, classes):
        super().__init__()
        dims = [in_features, *hidden, classes]
        self.depth = len(dims) - 1
        for i in range(self.depth):
            setattr(self, f"fc{i + 1}", nn.Linear(dims[i], dims[i + 1]))

    def forward(self, x):
        x = x.flatten(1)
        for i in range(1, self.depth + 1):
            x = getattr(self, f"fc{i}")(x)
            if i < self.depth:
                x = torch.relu(x)
        return x


class CNN(nn.Module if torch is not None else object):
    """dpbench's CNN: [conv3x3 (pad 1, no bias) -> BatchNorm2d -> ReLU -> MaxPool2d(2)] x 2,
    flatten (NCHW), fc1 -> ReLU -> fc2. Input [batch, C*H*W] or [batch, C, H, W]."""

    def __init__(self, input_shape, channels, hidden, classes):
        super().__init__()
        c, h, w = input_shape
        self.input_shape = tuple(input_shape)
        self.conv1 = nn.Conv2d(c, channels[0], 3, padding=1, bias=False)
        self.bn1 = nn.BatchNorm2d(channels[0], eps=1e-5, momentum=0.1)
        self.conv2 = nn.Conv2d(channels[0], channels[1], 3, padding=1, bias=False)
        self.bn2 = nn.BatchNorm2d(channels[1], eps=1e-5, momentum=0.1)
        self.fc1 = nn.Linear(channels[1] * (h // 2 // 2) * (w // 2 // 2), hidden[0])
        self.fc2 = nn.Linear(hidden[0], classes)

    def forward(self, x):
        x = x.reshape(x.shape[0], *self.input_shape)
        x = torch.max_pool2d(torch.relu(self.bn1(self.conv1(x))), 2)
        x = torch.max_pool2d(torch.relu(self.bn2(self.conv2(x))), 2)
        return self.fc2(torch.relu(self.fc1(x.flatten(1))))


def build_model(spec):
    """spec: {"workload": "mlp"|"cnn", "input": [C, H, W], "classes", "hidden", "channels"}
    -> an nn.Module on the CPU, initialised from the current torch seed."""
    if spec["workload"] == "mlp":
        return MLP(math.prod(spec["input"]), spec["hidden"], spec["classes"])
    return CNN(spec["input"], spec["channels"], spec["hidden"], spec["classes"])


def set_precision(precision):
    """tf32 tensor-core matmuls on or off; set in every process (spawned ranks too)."""
    torch.backends.cuda.matmul.allow_tf32 = precision == "tf32"
    torch.backends.cudnn.allow_tf32 = precision == "tf32"


def make_optimizer(cfg, model):
    return torch.optim.SGD(model.parameters(), lr=cfg["lr"], momentum=cfg["momentum"],
                           weight_decay=cfg["weight_decay"])


# ---------------------------------------------------------------------------------------------
# Threads
# ---------------------------------------------------------------------------------------------

def _loaded_openblas():
    """Path of the libopenblas already mapped into this process (Debian's torch calls it for
    GEMMs), or None."""
    try:
        with open("/proc/self/maps") as f:
            for line in f:
                path = line.split()[-1]
                if "libopenblas" in os.path.basename(path):
                    return path
    except OSError:
        pass
    return None


def set_threads(threads):
    """Sets this process's intra-op threads: torch.set_num_threads (OpenMP) and, since
    torch.set_num_threads does not size OpenBLAS's own pool, openblas_set_num_threads on the
    loaded libopenblas. Returns {"torch": n, "openblas": {"library", "set", "num_threads"} or
    None when no OpenBLAS is loaded}."""
    torch.set_num_threads(threads)
    info = {"torch": torch.get_num_threads(), "openblas": None}
    lib = _loaded_openblas()
    if lib is not None:
        entry = {"library": lib, "set": False, "num_threads": None}
        try:
            blas = ctypes.CDLL(lib)
            blas.openblas_set_num_threads(ctypes.c_int(threads))
            entry["num_threads"] = int(blas.openblas_get_num_threads())
            entry["set"] = entry["num_threads"] == threads
        except (OSError, AttributeError):
            pass
        info["openblas"] = entry
    return info


def current_threads():
    """This process's thread settings, untouched: {"torch": n, "openblas": None}."""
    return {"torch": torch.get_num_threads(), "openblas": None}


@contextlib.contextmanager
def child_thread_env(threads):
    """OPENBLAS_NUM_THREADS and OMP_NUM_THREADS = threads in the environment the spawned ranks
    inherit (read when their libraries load; threads None: unchanged), and GLOG_minloglevel 1
    unless set; restored afterwards."""
    keys = ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "GLOG_minloglevel")
    saved = {k: os.environ.get(k) for k in keys}
    if threads is not None:
        for k in keys[:2]:
            os.environ[k] = str(threads)
    if saved["GLOG_minloglevel"] is None:
        os.environ["GLOG_minloglevel"] = "1"  # no INFO lines from the RPC agent (glog)
    try:
        yield
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


def peak_rss_bytes():
    """This process's peak resident set size (ru_maxrss is in KiB on Linux)."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


# ---------------------------------------------------------------------------------------------
# Data and sample order
# ---------------------------------------------------------------------------------------------

class SampleOrder:
    """Which samples each step takes. Epoch e uses a permutation of [0, n): the bundle's row e,
    or without a bundle DistributedSampler's shuffle (torch.randperm with seed + e). Global step
    t is in epoch t // steps_per_epoch at index i = t % steps_per_epoch.
    - global_batch(t): perm[i*B:(i+1)*B] (plain, dataparallel, rpc_ps);
    - ddp_batch(t, rank, world_size): DistributedSampler without drop_last: perm padded by
      repeating its head to a multiple of world_size, shard = padded[rank::world_size], and the
      rank's batch is shard[i*b:(i+1)*b] with b = B / world_size.
    Index tensors are int64 on `device`. prepare(t) computes epoch t's permutation and is called
    outside the timed step (a DataLoader would have it ready)."""

    def __init__(self, n, global_batch, steps_per_epoch, device, seed=0, rows=None):
        self.n, self.global_batch, self.spe = n, global_batch, steps_per_epoch
        self.device, self.seed, self.rows = device, seed, rows
        self.epoch, self.perm, self.shards = None, None, {}

    def prepare(self, t):
        e = t // self.spe
        if e == self.epoch:
            return
        if self.rows is not None:
            perm = torch.from_numpy(self.rows[e].copy())
        else:
            g = torch.Generator()
            g.manual_seed(self.seed + e)
            perm = torch.randperm(self.n, generator=g)
        self.epoch, self.perm, self.shards = e, perm.to(self.device), {}

    def global_batch_indices(self, t):
        self.prepare(t)
        i = t % self.spe
        return self.perm[i * self.global_batch:(i + 1) * self.global_batch]

    def ddp_batch_indices(self, t, rank, world_size):
        self.prepare(t)
        shard = self.shards.get((rank, world_size))
        if shard is None:
            total = -(-self.n // world_size) * world_size
            reps = -(-total // self.n)
            padded = self.perm.repeat(reps)[:total]
            shard = self.shards[(rank, world_size)] = padded[rank::world_size]
        b = self.global_batch // world_size
        i = t % self.spe
        return shard[i * b:(i + 1) * b]


def initial_model(cfg):
    """The model every mode starts from, on the CPU: the bundle's parameters and buffers, or
    without a bundle the default initialisation after torch.manual_seed(seed)."""
    bundle = cfg["start"]
    if bundle is not None:
        model = build_model(bundle["spec"])
        load_start_state(bundle, model)
        return model
    torch.manual_seed(cfg["seed"])
    return build_model(cfg["model"])


class Problem:
    """One process's model, data and sample order, built from the start bundle or, without one,
    from the options (seeded init, synthetic or Fashion-MNIST data).
    model: initial_model on `device`; x [n, features] float32 and y [n] int64 on `device` (None
    unless need_data); test_x, test_y (None without a test set or need_test); order:
    SampleOrder; dataset_bytes (of x and y)."""

    def __init__(self, cfg, device, host_data=None, need_data=True, need_test=True,
                 steps_per_epoch=None):
        bundle = cfg["start"]
        self.test_x = self.test_y = None
        self.x = self.y = None
        model = initial_model(cfg)
        if bundle is not None:
            n = bundle["train"]["y"][1][0]
            if need_data:
                self.x, self.y = self._read_split(bundle["train"], device)
            if need_test and bundle["test"] is not None:
                self.test_x, self.test_y = self._read_split(bundle["test"], device)
            rows = read_array(bundle["order"][0], "int64", bundle["order"][1])
            self.order = SampleOrder(n, cfg["global_batch"], cfg["steps_per_epoch"], device,
                                     rows=rows)
        else:
            n = cfg["dataset_samples"]
            if need_data:
                self.x, self.y = make_dataset(cfg, device, host_data)
            self.order = SampleOrder(n, cfg["global_batch"], steps_per_epoch, device,
                                     seed=cfg["seed"])
        self.model = model.to(device)
        self.n = n
        self.dataset_bytes = tensor_bytes([self.x, self.y]) if need_data else 0

    @staticmethod
    def _read_split(split, device):
        (xp, xs), (yp, ys) = split["x"], split["y"]
        x = torch.from_numpy(read_array(xp, "float32", xs).reshape(xs[0], -1))
        y = torch.from_numpy(read_array(yp, "int64", ys))
        return x.to(device), y.to(device)

    def num_params(self):
        return sum(p.numel() for p in self.model.parameters())


def steps_per_epoch(cfg, mode, world_size):
    """Steps per epoch: the bundle's, else full batches of one rank's DistributedSampler share
    (the last incomplete batch dropped): n // B for one sampler replica, ceil(n/N) // (B/N) for
    ddp. Raises InputError when not one batch fits."""
    if cfg["start"] is not None:
        return cfg["steps_per_epoch"]
    n, batch = cfg["dataset_samples"], cfg["global_batch"]
    if mode == "ddp":
        spe = -(-n // world_size) // (batch // world_size)
    else:
        spe = n // batch
    if spe < 1:
        raise InputError(f"{n} samples give no batch of {batch}")
    return spe


def evaluate(model, x, y, batch=1024):
    """Fraction of correctly classified samples of (x, y) with the model in eval mode (BatchNorm
    uses its running statistics); the model is put back in train mode. None without a set."""
    if x is None:
        return None
    model.eval()
    correct = 0
    with torch.no_grad():
        for i in range(0, x.shape[0], batch):
            correct += int((model(x[i:i + batch]).argmax(1) == y[i:i + batch]).sum())
    model.train()
    return correct / max(1, x.shape[0])


def chunk_sizes(batch, world_size):
    """torch.chunk's split of `batch` rows over world_size: ceil(B/N) each, the last ones smaller
    or 0 (B=10, N=4 -> [3,3,3,1]; B=6, N=4 -> [2,2,2,0])."""
    c = -(-batch // world_size)
    return [max(0, min(c, batch - r * c)) for r in range(world_size)]


# ---------------------------------------------------------------------------------------------
# One training step and the timed loop
# ---------------------------------------------------------------------------------------------

def train_step(model, optimizer, loss_fn, x, y):
    """Forward, mean softmax cross-entropy, backward, SGD step. Returns the loss as a 0-d device
    tensor (not .item(): no host synchronisation inside the step beyond the caller's)."""
    optimizer.zero_grad(set_to_none=True)
    loss = loss_fn(model(x), y)
    loss.backward()
    optimizer.step()
    return loss.detach()


def _no_sync():
    pass


def timed_steps(cfg, order, step, sync=_no_sync):
    """Runs cfg['steps'] steps: step(t) does global step t from fetching its batch to the end of
    the optimizer step and returns its loss (float, 0-d tensor or None). Each step's wall-clock
    time (time.perf_counter) ends after sync() (CUDA: a synchronize of every device involved).
    The epoch's shuffle is done before the timer starts.
    Returns (step_times_s of the steps after the warm-up, [loss as float or None] for every
    step)."""
    times, losses = [], []
    sync()
    for t in range(cfg["steps"]):
        order.prepare(t)
        t0 = time.perf_counter()
        loss = step(t)
        sync()
        elapsed = time.perf_counter() - t0
        if t >= cfg["warmup_steps"]:
            times.append(elapsed)
        losses.append(loss)
    return times, [None if v is None else float(v) for v in losses]


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
            "reducer_minus_mean_bytes": peaks[0] - mean_peak,
        }
    peaks = [r["peak_rss_bytes"] for r in per_rank]
    mean_peak = sum(peaks) / len(peaks)
    return {
        "measure": "ru_maxrss",
        "per_rank": [{"rank": r["rank"], "peak_rss_bytes": r["peak_rss_bytes"],
                      "dataset_bytes": r["dataset_bytes"]} for r in per_rank],
        "imbalance_max_over_mean": max(peaks) / mean_peak if mean_peak > 0 else 1.0,
        "reducer_minus_mean_bytes": peaks[0] - mean_peak,
    }


def run_record(cfg, mode, world_size, processes, ranks, step_losses, spe, comm, warnings=()):
    """One runs[] entry. ranks: one dict per rank (rank, times, local_batch, num_params,
    peak_bytes or peak_rss_bytes, dataset_bytes, threads, and on rank 0 test_accuracy); rank 0's
    timed step samples are the run's. step_losses: the run's loss of every step."""
    batch = cfg["global_batch"]
    times = ranks[0]["times"]
    throughput = quantile([batch / t for t in times if t > 0], 0.5)
    epoch_loss = epoch_losses(step_losses, spe)
    finite = [v for v in epoch_loss if v is not None]
    final_loss = epoch_loss[-1] if epoch_loss else None
    warnings = list(warnings)
    if final_loss is None or len(finite) != len(epoch_loss):
        warnings.append("training loss not finite in some epoch (diverged?)")
    threads = ranks[0]["threads"]
    return {
        "mode": mode,
        "dpbench_equivalent": DPBENCH_EQUIVALENT[mode],
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
        "virtual_ranks": False,
        "steps": {"total": cfg["steps"], "timed": len(times), "warmup": cfg["warmup_steps"],
                  "per_epoch": spe},
        "throughput_samples_per_s": throughput,
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


def _release_cuda():
    gc.collect()
    if torch.cuda.is_available():
        torch.cuda.empty_cache()


def _free_port():
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def spawn_ranks(cfg, mode, world_size, threads):
    """Runs _rank_main in world_size spawned processes (torch.multiprocessing.spawn, which
    terminates the others and raises when one fails) with OPENBLAS_NUM_THREADS/OMP_NUM_THREADS
    = threads in their environment. Returns the ranks' result dicts in rank order."""
    init_method = f"tcp://127.0.0.1:{_free_port()}"
    with tempfile.TemporaryDirectory(prefix=f"pytorch-reference-{mode}-") as result_dir:
        with child_thread_env(threads):
            mp.spawn(_rank_main, args=(mode, world_size, cfg, threads, init_method, result_dir),
                     nprocs=world_size, join=True)
        ranks = []
        for r in range(world_size):
            with open(os.path.join(result_dir, f"rank{r}.json")) as f:
                ranks.append(json.load(f))
    return ranks


def _rank_main(rank, mode, world_size, cfg, threads, init_method, result_dir):
    """Entry of one spawned process: sets its threads (and precision), runs the mode's rank
    function, which returns its result dict(s), and writes them to result_dir/rank<r>.json."""
    thread_info = set_threads(threads) if threads is not None else current_threads()
    if cfg["device"] == "cuda":
        set_precision(cfg["precision"])
    fn = {"plain": _plain_rank, "ddp": _ddp_rank, "dataparallel": _dataparallel_rank,
          "rpc_ps": _rpc_ps_rank}[mode]
    results = fn(rank, world_size, cfg, init_method)
    for result in results:
        result.setdefault("threads", thread_info)
        with open(os.path.join(result_dir, f"rank{result['rank']}.json"), "w") as f:
            json.dump(result, f)


def _rank_result(rank, times, local_batch, problem, step_losses, test_accuracy=None):
    """A CPU rank's result dict (peak RSS taken now)."""
    return {"rank": rank, "times": times, "local_batch": local_batch,
            "num_params": problem.num_params(), "peak_rss_bytes": peak_rss_bytes(),
            "dataset_bytes": problem.dataset_bytes, "step_losses": step_losses,
            "test_accuracy": test_accuracy}


# ---------------------------------------------------------------------------------------------
# CUDA modes: plain and nn.DataParallel in this process; ddp through spawn_ranks
# ---------------------------------------------------------------------------------------------

def _cuda_sync(devices):
    def sync():
        for d in devices:
            torch.cuda.synchronize(d)
    return sync


def run_cuda_plain(cfg, host_data, threads):
    """Plain PyTorch eager on cuda:0. threads: this process's thread settings (record)."""
    dev = torch.device("cuda", 0)
    torch.cuda.set_device(dev)
    spe = steps_per_epoch(cfg, "plain", 1)
    problem = Problem(cfg, dev, host_data, steps_per_epoch=spe)
    torch.cuda.reset_peak_memory_stats(dev)
    model, loss_fn = problem.model, nn.CrossEntropyLoss()
    optimizer = make_optimizer(cfg, model)

    def step(t):
        idx = problem.order.global_batch_indices(t)
        return train_step(model, optimizer, loss_fn, problem.x[idx], problem.y[idx])

    times, losses = timed_steps(cfg, problem.order, step, _cuda_sync([dev]))
    rank = {"rank": 0, "times": times, "local_batch": cfg["global_batch"],
            "num_params": problem.num_params(), "peak_bytes": torch.cuda.max_memory_allocated(dev),
            "dataset_bytes": problem.dataset_bytes, "threads": threads,
            "test_accuracy": evaluate(model, problem.test_x, problem.test_y)}
    return run_record(cfg, "plain", 1, 1, [rank], losses, spe, "none")


def run_cuda_dataparallel(cfg, host_data, world_size, threads):
    """nn.DataParallel over cuda:0..world_size-1: the full batch on cuda:0, scattered in
    ceil(B/n) chunks, parameters broadcast every step, outputs gathered and the loss taken on
    cuda:0, gradients reduce-added onto cuda:0, which alone steps the optimizer."""
    devices = [torch.device("cuda", i) for i in range(world_size)]
    torch.cuda.set_device(devices[0])
    spe = steps_per_epoch(cfg, "dataparallel", world_size)
    problem = Problem(cfg, devices[0], host_data, steps_per_epoch=spe)
    for d in devices:
        torch.cuda.reset_peak_memory_stats(d)
    model, loss_fn = problem.model, nn.CrossEntropyLoss()
    dp_model = nn.DataParallel(model, device_ids=list(range(world_size)), output_device=0)
    optimizer = make_optimizer(cfg, model)

    def step(t):
        idx = problem.order.global_batch_indices(t)
        return train_step(dp_model, optimizer, loss_fn, problem.x[idx], problem.y[idx])

    times, losses = timed_steps(cfg, problem.order, step, _cuda_sync(devices))
    local = chunk_sizes(cfg["global_batch"], world_size)
    warnings = []
    idle = sum(1 for b in local if b == 0)
    if idle:
        warnings.append(f"batch {cfg['global_batch']} in chunks of {local[0]}: {idle} of "
                        f"{world_size} GPUs get no samples")
    peaks = [torch.cuda.max_memory_allocated(d) for d in devices]  # before the evaluation
    accuracy = evaluate(model, problem.test_x, problem.test_y)
    # One thread times the step for every replica, so every rank carries rank 0's samples.
    ranks = [{"rank": r, "times": times, "local_batch": local[r],
              "num_params": problem.num_params(), "peak_bytes": peaks[r],
              "dataset_bytes": problem.dataset_bytes if r == 0 else 0,
              "threads": threads, "test_accuracy": accuracy}
             for r in range(world_size)]
    return run_record(cfg, "dataparallel", world_size, 1, ranks, losses, spe,
                      "torch.nn.parallel (broadcast_coalesced / reduce_add_coalesced)", warnings)


# ---------------------------------------------------------------------------------------------
# Per-rank functions, run in spawned processes (CPU: every mode; CUDA: ddp)
# ---------------------------------------------------------------------------------------------

def _plain_rank(rank, world_size, cfg, init_method):
    """Plain eager training in one CPU process."""
    spe = steps_per_epoch(cfg, "plain", 1)
    problem = Problem(cfg, torch.device("cpu"), steps_per_epoch=spe)
    model, loss_fn = problem.model, nn.CrossEntropyLoss()
    optimizer = make_optimizer(cfg, model)

    def step(t):
        idx = problem.order.global_batch_indices(t)
        return train_step(model, optimizer, loss_fn, problem.x[idx], problem.y[idx])

    times, losses = timed_steps(cfg, problem.order, step)
    accuracy = evaluate(model, problem.test_x, problem.test_y)
    return [_rank_result(0, times, cfg["global_batch"], problem, losses, accuracy)]


def _init_process_group(cfg, rank, world_size, init_method):
    backend = "nccl" if cfg["device"] == "cuda" else "gloo"
    dist.init_process_group(backend, init_method=init_method, world_size=world_size, rank=rank,
                            timeout=datetime.timedelta(seconds=cfg["timeout"]))


def _ddp_rank(rank, world_size, cfg, init_method):
    """One DistributedDataParallel rank: gloo on the CPU, NCCL on cuda:rank; the rank's
    DistributedSampler shard of every global batch (B / world_size samples), bucket_cap_mb
    buckets, broadcast_buffers (the default: rank 0's BatchNorm buffers before every forward)."""
    cuda = cfg["device"] == "cuda"
    dev = torch.device("cuda", rank) if cuda else torch.device("cpu")
    if cuda:
        torch.cuda.set_device(dev)
    _init_process_group(cfg, rank, world_size, init_method)
    try:
        spe = steps_per_epoch(cfg, "ddp", world_size)
        problem = Problem(cfg, dev, need_test=rank == 0, steps_per_epoch=spe)
        if cuda:
            torch.cuda.reset_peak_memory_stats(dev)
        # DDP also broadcasts rank 0's parameters and buffers when it wraps the module.
        ddp_model = DistributedDataParallel(
            problem.model, device_ids=[rank] if cuda else None,
            output_device=rank if cuda else None, bucket_cap_mb=cfg["bucket_cap_mb"],
            broadcast_buffers=True)
        optimizer = make_optimizer(cfg, ddp_model)
        loss_fn = nn.CrossEntropyLoss()
        local_batch = cfg["global_batch"] // world_size

        def step(t):
            idx = problem.order.ddp_batch_indices(t, rank, world_size)
            return train_step(ddp_model, optimizer, loss_fn, problem.x[idx], problem.y[idx])

        times, losses = timed_steps(cfg, problem.order, step,
                                    _cuda_sync([dev]) if cuda else _no_sync)
        peak = torch.cuda.max_memory_allocated(dev) if cuda else None  # before the evaluation
        accuracy = evaluate(problem.model, problem.test_x, problem.test_y) if rank == 0 else None
        result = _rank_result(rank, times, local_batch, problem, losses, accuracy)
        if cuda:
            result["peak_bytes"] = peak
        dist.barrier(device_ids=[rank] if cuda else None)
    finally:
        dist.destroy_process_group()
    return [result]


def _flatten_into(flat, tensors):
    """Copies tensors (any shapes) into the 1-d buffer flat, back to back (coalescing)."""
    offset = 0
    for t in tensors:
        n = t.numel()
        flat[offset:offset + n].copy_(t.reshape(-1))
        offset += n


def _unflatten_from(flat, tensors):
    """The inverse of _flatten_into: copies slices of flat back into tensors (in place)."""
    offset = 0
    with torch.no_grad():
        for t in tensors:
            n = t.numel()
            t.copy_(flat[offset:offset + n].view_as(t))
            offset += n


def _pad_rows(t, rows):
    """t [k, ...] -> contiguous [rows, ...], zero rows appended (gloo's scatter and gather take
    equal sizes; torch.chunk's last chunks are smaller)."""
    if t.shape[0] == rows:
        return t.contiguous()
    return torch.cat([t, t.new_zeros((rows - t.shape[0], *t.shape[1:]))])


def _dataparallel_rank(rank, world_size, cfg, init_method):
    """nn.DataParallel's data flow over gloo collectives, rank 0 the reducer. Each step:
    1. replicate: rank 0 broadcasts its parameters and floating-point buffers (BatchNorm running
       statistics), coalesced into one flat buffer;
    2. scatter: rank 0 fetches the global batch and scatters it in torch.chunk chunks
       (ceil(B/N) rows, the last ones smaller, padded for dist.scatter);
    3. parallel_apply: each rank runs forward on its chunk (BatchNorm uses the chunk's own
       statistics; only rank 0's running-statistic updates survive the next broadcast);
    4. gather: the logits go to rank 0, which takes the mean cross-entropy over the global batch
       and scatters d(loss)/d(logits) back in the same chunks;
    5. each rank backpropagates its chunk's logits with that gradient; the gradients are summed
       onto rank 0 with one dist.reduce over a flat buffer, after every rank's backward;
    6. rank 0 alone runs optimizer.step().
    Rank 0 also holds the only copy of the training data. Returns rank 0's global loss per step
    (the other ranks' are None)."""
    dev = torch.device("cpu")
    _init_process_group(cfg, rank, world_size, init_method)
    try:
        spe = steps_per_epoch(cfg, "dataparallel", world_size)
        problem = Problem(cfg, dev, need_data=rank == 0, need_test=rank == 0,
                          steps_per_epoch=spe)
        model = problem.model
        params = list(model.parameters())
        state = params + [b for b in model.buffers() if b.is_floating_point()]
        flat_state = torch.zeros(sum(t.numel() for t in state))
        flat_grad = torch.zeros(sum(p.numel() for p in params))
        sizes = chunk_sizes(cfg["global_batch"], world_size)
        rows, b = sizes[0], sizes[rank]
        features = math.prod(cfg["model"]["input"])
        classes = cfg["model"]["classes"]
        x_chunk, grad_chunk = torch.zeros(rows, features), torch.zeros(rows, classes)
        logits_out = torch.zeros(rows, classes)
        optimizer = make_optimizer(cfg, model) if rank == 0 else None
        loss_fn = nn.CrossEntropyLoss()

        def step(t):
            # 1. replicate
            if rank == 0:
                _flatten_into(flat_state, [s.detach() for s in state])
            dist.broadcast(flat_state, src=0)
            if rank != 0:
                _unflatten_from(flat_state, state)
            # 2. scatter the global batch
            if rank == 0:
                idx = problem.order.global_batch_indices(t)
                x, y = problem.x[idx], problem.y[idx]
                chunks = [_pad_rows(c, rows) for c in x.split(sizes)]
                dist.scatter(x_chunk, chunks, src=0)
            else:
                dist.scatter(x_chunk, None, src=0)
            # 3. parallel_apply
            model.zero_grad(set_to_none=False)
            logits = model(x_chunk[:b]) if b > 0 else None
            if logits is not None:
                logits_out[:b].copy_(logits.detach())
            # 4. gather outputs, loss on the reducer, scatter d(loss)/d(logits)
            gathered = [torch.empty(rows, classes) for _ in range(world_size)] if rank == 0 \
                else None
            dist.gather(logits_out, gathered, dst=0)
            loss = None
            if rank == 0:
                out = torch.cat([g[:s] for g, s in zip(gathered, sizes)]).requires_grad_()
                loss = loss_fn(out, y)
                loss.backward()
                grads = [_pad_rows(g, rows) for g in out.grad.split(sizes)]
                dist.scatter(grad_chunk, grads, src=0)
            else:
                dist.scatter(grad_chunk, None, src=0)
            # 5. backward, then the gradients summed onto the reducer
            if logits is not None:
                logits.backward(grad_chunk[:b])
            _flatten_into(flat_grad, [p.grad if p.grad is not None else torch.zeros_like(p)
                                      for p in params])
            dist.reduce(flat_grad, dst=0, op=dist.ReduceOp.SUM)
            # 6. the reducer steps
            if rank == 0:
                for p in params:
                    if p.grad is None:
                        p.grad = torch.zeros_like(p)
                _unflatten_from(flat_grad, [p.grad for p in params])
                optimizer.step()
                return loss.detach()
            return None

        times, losses = timed_steps(cfg, problem.order, step)
        accuracy = evaluate(model, problem.test_x, problem.test_y) if rank == 0 else None
        result = _rank_result(rank, times, b, problem, losses, accuracy)
        dist.barrier()
    finally:
        dist.destroy_process_group()
    return [result]


class BatchUpdateParameterServer:
    """The batch-updating parameter server of PyTorch's RPC tutorial ("Implementing Batch RPC
    Processing Using Asynchronous Executions"): it holds the model and the optimizer; each
    trainer sends its gradients, and when all world_size trainers have reported for the step the
    server steps once and resolves every trainer's future with the new parameters.
    Trainer r's gradient is that of its chunk's mean loss, so the server combines
    sum_r (b_r / B) grad_r (b_r: trainer r's chunk of the global batch B), summed in rank order,
    which is the gradient of the global batch's mean loss; the step's loss is
    sum_r (b_r / B) loss_r."""

    def __init__(self, cfg, model, world_size):
        self.model = model
        self.params = list(model.parameters())
        for p in self.params:
            p.grad = torch.zeros_like(p)
        self.optimizer = make_optimizer(cfg, model)
        sizes = chunk_sizes(cfg["global_batch"], world_size)
        self.weights = [b / cfg["global_batch"] for b in sizes]
        self.world_size = world_size
        self.lock = threading.Lock()
        self.pending = {}
        self.future_model = torch.futures.Future()

    def update_and_fetch_model(self, rank, grads, loss):
        """Records trainer rank's gradients (list in parameter order) and loss; returns a future
        of (new parameters, step loss) resolved when the step's last trainer has reported."""
        with self.lock:
            self.pending[rank] = (grads, loss)
            fut = self.future_model
            if len(self.pending) == self.world_size:
                step_loss = 0.0
                with torch.no_grad():
                    for r in range(self.world_size):
                        grads_r, loss_r = self.pending[r]
                        w = self.weights[r]
                        for p, g in zip(self.params, grads_r):
                            p.grad.add_(g, alpha=w)
                        step_loss += w * loss_r
                self.optimizer.step()
                for p in self.params:
                    p.grad.zero_()
                self.pending = {}
                fut.set_result(([p.detach().clone() for p in self.params], step_loss))
                self.future_model = torch.futures.Future()
        return fut


_PS = None  # process 0's BatchUpdateParameterServer (rpc_ps)


def _ps_update_and_fetch_model(rank, grads, loss):
    """The server's entry for trainers 1..N-1 (called by RPC on process 0, which holds _PS).
    Marked @rpc.functions.async_execution below: it returns the server's future, and the RPC
    reply is sent when that future completes."""
    return _PS.update_and_fetch_model(rank, grads, loss)


if torch is not None:
    try:
        from torch.distributed import rpc as _rpc
        _ps_update_and_fetch_model = _rpc.functions.async_execution(_ps_update_and_fetch_model)
    except (ImportError, AttributeError):  # a torch without RPC: rpc_ps fails when it runs
        pass


def _rpc_ps_rank(rank, world_size, cfg, init_method):
    """One rpc_ps process: trainer `rank`, and on process 0 also the server (co-located with
    trainer 0, which calls it directly; the others through rpc_async over TensorPipe). Trainer r
    takes chunk r (torch.chunk) of each global batch, computes its mean loss and gradient, sends
    them, waits for the server's new parameters and loads them. Each step is timed from fetching
    the batch to loading the new parameters. Process 0 returns the step losses of the server
    (the weighted sum); the other processes' are their local chunk losses."""
    global _PS
    from torch.distributed import rpc
    dev = torch.device("cpu")
    spe = steps_per_epoch(cfg, "rpc_ps", world_size)
    problem = Problem(cfg, dev, need_test=rank == 0, steps_per_epoch=spe)
    if rank == 0:
        _PS = BatchUpdateParameterServer(cfg, initial_model(cfg), world_size)
    options = rpc.TensorPipeRpcBackendOptions(init_method=init_method,
                                              rpc_timeout=cfg["timeout"])
    rpc.init_rpc(f"trainer{rank}", rank=rank, world_size=world_size, rpc_backend_options=options)
    graceful = False
    try:
        model, loss_fn = problem.model, nn.CrossEntropyLoss()
        params = list(model.parameters())
        sizes = chunk_sizes(cfg["global_batch"], world_size)
        b, start = sizes[rank], sum(sizes[:rank])

        def step(t):
            idx = problem.order.global_batch_indices(t)[start:start + b]
            model.zero_grad(set_to_none=True)
            if b > 0:
                loss = loss_fn(model(problem.x[idx]), problem.y[idx])
                loss.backward()
                grads, loss_value = [p.grad for p in params], loss.item()
            else:
                grads, loss_value = [torch.zeros_like(p) for p in params], 0.0
            if rank == 0:
                fut = _PS.update_and_fetch_model(rank, grads, loss_value)
            else:
                fut = rpc.rpc_async("trainer0", _ps_update_and_fetch_model,
                                    args=(rank, grads, loss_value))
            new_params, step_loss = fut.wait()
            with torch.no_grad():
                for p, v in zip(params, new_params):
                    p.copy_(v)
            return step_loss if rank == 0 else loss_value

        times, losses = timed_steps(cfg, problem.order, step)
        # Trainer 0's model: the server's final parameters, trainer 0's BatchNorm statistics.
        accuracy = evaluate(model, problem.test_x, problem.test_y) if rank == 0 else None
        result = _rank_result(rank, times, b, problem, losses, accuracy)
        graceful = True
    finally:
        # Graceful: wait for the other trainers' outstanding calls; after an error, do not wait.
        rpc.shutdown(graceful=graceful)
        _PS = None
    return [result]


def run_spawned(cfg, mode, world_size, threads):
    """Runs `mode` in world_size spawned processes and builds its run record."""
    ranks = spawn_ranks(cfg, mode, world_size, threads)
    if mode == "ddp":
        # The global batch's loss is the mean of the ranks' local means (equal local batches).
        step_losses = [sum(vs) / len(vs) for vs in zip(*(r["step_losses"] for r in ranks))]
        comm = f"nccl (bucket_cap_mb {cfg['bucket_cap_mb']:g})" if cfg["device"] == "cuda" \
            else "gloo"
    else:
        step_losses = ranks[0]["step_losses"]
        comm = {"plain": "none",
                "dataparallel": "gloo (DataParallel flow: broadcast/scatter/gather/reduce)",
                "rpc_ps": "rpc (TensorPipe)"}[mode]
    spe = steps_per_epoch(cfg, mode, world_size)
    return run_record(cfg, mode, world_size, world_size, ranks, step_losses, spe, comm)


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
        "openblas": _loaded_openblas(),
        "omp_wait_policy": os.environ.get("OMP_WAIT_POLICY"),
        "torch_parallel_backend": next((line.split(":", 1)[1].strip() for line in
                                        torch.__config__.parallel_info().splitlines()
                                        if line.startswith("ATen parallel backend")), None),
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
    if not runs:
        return
    mib = 1024.0 * 1024.0
    label_w, col_w = 38, 20
    print()
    print(f"{'':<{label_w}}" + "".join(f"{r['mode'] + ' (' + str(r['world_size']) + ')':>{col_w}}"
                                       for r in runs))

    def row(label, cell):
        print(f"{label:<{label_w}}" + "".join(f"{cell(r):>{col_w}}" for r in runs))

    cpu = runs[0]["device"] == "cpu"
    row("processes x threads", lambda r: f"{r['processes']} x {r['threads_per_process']}")
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
    by_mode = {r["mode"]: r for r in runs}
    if "dataparallel" in by_mode and "ddp" in by_mode:
        dp, ddp = by_mode["dataparallel"], by_mode["ddp"]
        ratio = ddp["throughput_samples_per_s"] / max(dp["throughput_samples_per_s"], 1e-12)
        unit = "processes" if cpu else "GPUs"
        print(f"\nAt {ddp['world_size']} {unit}, ddp runs at {ratio:.2f}x the throughput of "
              f"dataparallel; the dataparallel reducer (rank 0) holds "
              f"{dp['memory']['imbalance_max_over_mean']:.2f}x the mean per-rank memory.")


# ---------------------------------------------------------------------------------------------
# main
# ---------------------------------------------------------------------------------------------

def _resolve_device(args):
    """--device auto|cpu|cuda -> "cpu" or "cuda". Raises InputError for cuda without a GPU."""
    if args.device == "auto":
        return "cuda" if torch.cuda.is_available() else "cpu"
    if args.device == "cuda" and not torch.cuda.is_available():
        raise InputError("--device cuda: no CUDA device (torch.cuda.is_available() is False)")
    return args.device


def build_config(args, device, bundle, host_data):
    """The run configuration every mode and process reads (picklable; `start` holds the checked
    bundle or None). Raises InputError when the options do not fit the device or the data."""
    if device == "cpu" and args.precision == "tf32":
        raise InputError("--precision tf32: the CPU runs fp32 only")
    precision = args.precision or ("tf32" if device == "cuda" else "fp32")
    if bundle is not None:
        c = bundle["config"]
        spec = bundle["spec"]
        train = dict(global_batch=c["global_batch"], steps=c["steps"],
                     warmup_steps=c["warmup_steps"], steps_per_epoch=c["steps_per_epoch"],
                     lr=c["lr"], momentum=c["momentum"], weight_decay=c["weight_decay"],
                     seed=c["seed"], bucket_cap_mb=c["bucket_cap_mb"])
        data = {"data": "start bundle", "data_dir": None, "synthetic_samples": None,
                "dataset_samples": bundle["train"]["y"][1][0],
                "test_samples": bundle["test"]["y"][1][0] if bundle["test"] else None}
    else:
        spec = {"workload": "mlp", "input": [1, 28, 28], "classes": NUM_CLASSES,
                "hidden": args.hidden, "channels": None}
        train = dict(global_batch=args.batch_size, steps=args.steps,
                     warmup_steps=args.warmup_steps, steps_per_epoch=None, lr=args.lr,
                     momentum=args.momentum, weight_decay=args.weight_decay, seed=args.seed,
                     bucket_cap_mb=args.bucket_cap_mb)
        n = args.synthetic_samples if args.data == "synthetic" else host_data[0].shape[0]
        if args.batch_size > n:
            raise InputError(f"--batch-size {args.batch_size}: larger than the {n} training "
                             "samples")
        data = {"data": args.data,
                "data_dir": args.data_dir if args.data == "fashion-mnist" else None,
                "synthetic_samples": args.synthetic_samples, "dataset_samples": n,
                "test_samples": None}
    layers = ([math.prod(spec["input"]), *spec["hidden"], spec["classes"]]
              if spec["workload"] == "mlp" else None)
    return {
        "device": device,
        "workload": spec["workload"],
        "model": spec,
        "layers": layers,
        "hidden": spec["hidden"],
        "batch_size": train["global_batch"],
        **train,
        "precision": precision,
        "allow_tf32": ({"cuda_matmul": precision == "tf32", "cudnn": precision == "tf32"}
                       if device == "cuda" else None),
        **data,
        "data_placement": ("device-resident training set, one gather per step" if device == "cuda"
                           else "training set in each process's memory, one gather per step"),
        "optimizer": "SGD",
        "loss": "CrossEntropyLoss (mean)",
        "timeout": args.timeout,
        "start": bundle,
    }


def _mode_plan(args, cfg, mode, gpu_count):
    """(world_size, threads per process) for mode, or (None, reason) when it is skipped."""
    cpu = cfg["device"] == "cpu"
    if mode == "plain":
        world_size = 1
    elif cpu:
        world_size = args.world_size or 2
    else:
        world_size = args.world_size or gpu_count
    if mode != "plain":
        if world_size < 2:
            unit = "processes" if cpu else "GPUs"
            return None, (f"{mode} skipped: it needs 2 or more {unit}, --world-size "
                          f"{world_size}" + ("" if cpu else f" ({gpu_count} visible)"))
        if mode == "rpc_ps" and not cpu:
            return None, "rpc_ps skipped: it runs on the CPU only (--device cpu)"
        if mode == "ddp" and cfg["global_batch"] % world_size != 0:
            return None, (f"ddp skipped: batch {cfg['global_batch']} does not split evenly over "
                          f"{world_size} ranks")
        if cpu and mode in ("dataparallel", "rpc_ps"):
            idle = chunk_sizes(cfg["global_batch"], world_size).count(0)
            if idle:
                return None, (f"{mode} skipped: batch {cfg['global_batch']} in torch.chunk "
                              f"chunks leaves {idle} of {world_size} processes without samples")
    if args.threads is not None:
        threads = args.threads
    elif cpu:
        threads = max(1, (os.cpu_count() or 1) // world_size)
    else:
        threads = None
    return world_size, threads


def main(argv=None):
    args = parse_args(sys.argv[1:] if argv is None else argv)
    log = (lambda *a: None) if args.quiet else (lambda msg: print(f"{PROG}: {msg}",
                                                                  file=sys.stderr))
    if torch is None:
        if isinstance(_TORCH_IMPORT_ERROR, ModuleNotFoundError) and \
                _TORCH_IMPORT_ERROR.name in ("torch", None):
            print(f"{PROG}: PyTorch is not installed", file=sys.stderr)
        else:
            print(f"{PROG}: PyTorch could not be imported ({_TORCH_IMPORT_ERROR})", file=sys.stderr)
        return 2
    try:
        device = _resolve_device(args)
        gpu_count = torch.cuda.device_count() if device == "cuda" else 0
        if device == "cuda" and args.world_size is not None and args.world_size > gpu_count:
            raise InputError(f"--world-size {args.world_size}: only {gpu_count} GPU(s) visible")
        bundle = read_start_bundle(args.start) if args.start is not None else None
        host_data = None
        if bundle is None and args.data == "fashion-mnist":
            host_data = load_fashion_mnist(args.data_dir)
        cfg = build_config(args, device, bundle, host_data)
        modes = args.modes or list(CUDA_MODES if device == "cuda" else CPU_MODES)
        plans = {m: _mode_plan(args, cfg, m, gpu_count) for m in modes}
        for m in modes:
            if plans[m][0] is not None:
                steps_per_epoch(cfg, m, plans[m][0])  # not one batch: an input error, now
    except InputError as e:
        print(f"{PROG}: {e}", file=sys.stderr)
        return 2
    if device == "cuda":
        set_precision(cfg["precision"])
    cfg["modes"] = modes
    cfg["world_size"] = {m: p[0] for m, p in plans.items() if p[0] is not None}
    cfg["threads_per_process"] = {m: p[1] for m, p in plans.items() if p[0] is not None}

    created = datetime.datetime.now(datetime.timezone.utc)
    out = Path(args.out) if args.out else (
        REPO_ROOT / "results" / f"pytorch-reference-{created.strftime('%Y%m%d-%H%M%S')}.json")

    warnings, runs, failed = [], [], False
    for mode in modes:
        world_size, threads = plans[mode]
        if world_size is None:
            warnings.append(threads)
            print(f"{PROG}: {threads}", file=sys.stderr)
            continue
        unit = "GPU(s)" if device == "cuda" and mode != "plain" else "process(es)"
        log(f"{mode}, {device}, {world_size} {unit}, {cfg['steps']} steps ...")
        try:
            if device == "cuda" and mode in ("plain", "dataparallel"):
                info = set_threads(threads) if threads is not None else current_threads()
                runs.append(run_cuda_plain(cfg, host_data, info) if mode == "plain" else
                            run_cuda_dataparallel(cfg, host_data, world_size, info))
            else:
                runs.append(run_spawned(cfg, mode, world_size, threads))
            _release_cuda()  # the in-process CUDA modes' tensors are gone with their frames
        except InputError as e:
            print(f"{PROG}: {e}", file=sys.stderr)
            return 2
        except Exception as e:  # a failed run is recorded; the other modes still run
            failed = True
            message = str(e).strip().splitlines()[-1] if str(e).strip() else type(e).__name__
            warnings.append(f"{mode} failed: {message}")
            print(f"{PROG}: {mode} failed: {message}", file=sys.stderr)
            _release_cuda()

    config = {k: v for k, v in cfg.items() if k != "start"}
    config["start"] = bundle["dir"] if bundle is not None else None
    doc = {
        "schema": RESULT_SCHEMA,
        "created": created.strftime("%Y-%m-%dT%H:%M:%SZ"),
        "env": collect_env(),
        "config": config,
        "runs": runs,
        "warnings": warnings,
    }
    write_json_atomic(out, doc)
    if not args.quiet:
        print_table(runs)
        for w in warnings:
            print(f"warning: {w}")
    print(f"\nwrote {out}" if not args.quiet else f"wrote {out}")
    return 1 if failed or not runs else 0


if __name__ == "__main__":
    sys.exit(main())
