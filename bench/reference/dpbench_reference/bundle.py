"""The start bundle: a directory dpbench writes (start.json and raw little-endian arrays) that
fixes the model, its initial parameters and buffers, the data, the sample order and the
optimizer, so that dpbench and PyTorch train the same steps. Schema dpbench-start 1; the format
is in bench/reference/README.md ("The start bundle"). Everything here raises InputError (one line
naming the bundle) on a bundle it cannot use.
"""

import json
import math
import re
from pathlib import Path

from .common import OPTIMIZER_DEFAULTS, OPTIMIZERS, START_SCHEMA, InputError
from .model import build_model


_BUNDLE_DTYPES = {"float32": "<f4", "int64": "<i8"}


def _bundle_error(start_dir, what):
    """An InputError 'start bundle DIR: what'."""
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
    """Checks that path holds exactly count elements of dtype. Raises InputError."""
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
    if workload not in ("mlp", "cnn", "dlrm"):
        raise _bundle_error(start_dir, f"workload {workload!r}: expected 'mlp', 'cnn' or 'dlrm'")
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
    if workload == "dlrm":
        spec["hidden"], spec["channels"] = None, None
        spec["dlrm"] = _dlrm_spec(start_dir, model.get("dlrm"), spec)
    elif workload == "mlp":
        spec["hidden"] = ints("hidden")
        spec["channels"] = None
    else:
        spec["hidden"] = ints("hidden", 1)
        spec["channels"] = ints("channels", 2)
        if spec["input"][1] < 4 or spec["input"][2] < 4:
            raise _bundle_error(start_dir, f"model.input {spec['input']}: the cnn needs H, W >= 4")
    return spec


def _dlrm_spec(start_dir, d, spec):
    """start.json's model.dlrm (workloads/dlrm.hpp's sizes), checked against the input width and
    the two classes. Returns the dict DLRM takes. Raises InputError."""
    sizes = ("dense_features", "tables", "rows", "dim", "lookups")
    if not isinstance(d, dict) or not set(sizes) | {"bottom", "top", "sparse_grad"} <= d.keys():
        raise _bundle_error(start_dir, "model.dlrm: needs " + ", ".join(sizes)
                                       + ", bottom, top and sparse_grad")
    for k in sizes:
        if not isinstance(d[k], int) or isinstance(d[k], bool) or d[k] < 1:
            raise _bundle_error(start_dir, f"model.dlrm.{k}: {d[k]!r}, expected a positive integer")
    for k in ("bottom", "top"):
        if not isinstance(d[k], list) or not all(isinstance(w, int) and w >= 1 for w in d[k]):
            raise _bundle_error(start_dir, f"model.dlrm.{k}: {d[k]!r}, expected positive integers")
    if not isinstance(d["sparse_grad"], bool):
        raise _bundle_error(start_dir, f"model.dlrm.sparse_grad: {d['sparse_grad']!r}")
    if d.get("embedding_optimizer", "sgd") not in ("sgd", "adagrad"):
        raise _bundle_error(start_dir, f"model.dlrm.embedding_optimizer: {d['embedding_optimizer']!r}, "
                                       "expected 'sgd' or 'adagrad'")
    width = d["dense_features"] + d["tables"] * d["lookups"]
    if math.prod(spec["input"]) != width or spec["classes"] != 2:
        raise _bundle_error(start_dir, f"model.input {spec['input']} and classes {spec['classes']}: "
                                       f"the dlrm takes {width} features and 2 classes")
    return {**{k: d[k] for k in (*sizes, "bottom", "top", "sparse_grad")},
            "embedding_optimizer": d.get("embedding_optimizer", "sgd")}


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
    warmup_steps, steps_per_epoch, lr, momentum, weight_decay, seed, bucket_cap_mb, and the
    optional optimizer, betas, eps, filled with their defaults when absent), dir.
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
    rank = powersgd_rank(bundle["config"]["comm_hook"])
    bundle["powersgd_q"] = None
    if rank:
        bundle["powersgd_q"] = _check_tensor_table(start_dir, "powersgd_q", doc.get("powersgd_q"),
                                                   powersgd_q_shapes(model, rank))
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
    hook = c.get("comm_hook", "allreduce")
    if hook not in COMM_HOOKS and powersgd_rank(hook) == 0:
        raise _bundle_error(start_dir, f"config.comm_hook: {hook!r}, expected "
                                       + ", ".join(repr(h) for h in COMM_HOOKS) + " or 'powersgd:R'")
    out = {**{k: c[k] for k in keys}, **_optimizer_config(start_dir, c), "comm_hook": hook}
    if powersgd_rank(hook):
        start = c.get("start_powersgd_iter")
        if not isinstance(start, int) or isinstance(start, bool) or start < 2:
            raise _bundle_error(start_dir, f"config.start_powersgd_iter: {start!r}, expected an "
                                           "integer >= 2 under powersgd")
        out["start_powersgd_iter"] = start
    return out


# DDP communication hooks by their names in default_hooks (allreduce_hook, fp16_compress_hook,
# bf16_compress_hook), as dpbench's --comm-hook spells them; and powersgd:R (powerSGD_hook).
COMM_HOOKS = ("allreduce", "fp16", "bf16")


def powersgd_rank(hook):
    """R of a hook named 'powersgd:R' (R a positive integer); 0 for any other name."""
    m = re.fullmatch(r"powersgd:([1-9][0-9]{0,5})", hook) if isinstance(hook, str) else None
    return int(m.group(1)) if m else 0


def powersgd_q_shapes(model, rank):
    """{parameter name: [cols, r]} of the parameters PowerSGD compresses, by PyTorch's own rule
    (powerSGD_hook's _should_compress, min_compression_rate 2, on the [shape[0], -1] view)."""
    from torch.distributed.algorithms.ddp_comm_hooks.powerSGD_hook import _should_compress
    shapes = {}
    for name, p in model.named_parameters():
        rows = p.shape[0] if p.dim() > 0 else 1
        cols = p.numel() // rows
        r = min(rows, cols, rank)
        if _should_compress(rows, cols, r, 2)[0]:
            shapes[name] = [cols, r]
    return shapes


def _is_number(v):
    """A finite int or float (not a bool)."""
    return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)


def _optimizer_config(start_dir, c):
    """config's optional optimizer keys, checked: optimizer (one of OPTIMIZERS), betas (two
    numbers in [0, 1)), eps (a number >= 0); an absent key takes OPTIMIZER_DEFAULTS' value.
    Returns {"optimizer", "betas" (list of two floats), "eps" (float)}."""
    out = {k: c.get(k, v) for k, v in OPTIMIZER_DEFAULTS.items()}
    if out["optimizer"] not in OPTIMIZERS:
        raise _bundle_error(start_dir, f"config.optimizer: {out['optimizer']!r}, expected "
                                       + ", ".join(repr(o) for o in OPTIMIZERS[:-1])
                                       + f" or {OPTIMIZERS[-1]!r}")
    betas = out["betas"]
    if (not isinstance(betas, list) or len(betas) != 2
            or not all(_is_number(b) and 0 <= b < 1 for b in betas)):
        raise _bundle_error(start_dir, f"config.betas: {betas!r}, expected a list of two numbers "
                                       "in [0, 1)")
    if not _is_number(out["eps"]) or out["eps"] < 0:
        raise _bundle_error(start_dir, f"config.eps: {out['eps']!r}, expected a number >= 0")
    return {"optimizer": out["optimizer"], "betas": [float(b) for b in betas],
            "eps": float(out["eps"])}
