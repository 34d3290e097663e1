#!/usr/bin/env python3
"""Writes a small dpbench start bundle (schema dpbench-start 1) with numpy alone: start.json plus
raw little-endian files, in the format bench/reference/README.md describes and dpbench writes.
It stands in for dpbench's writer in tests/python/test_pytorch_reference.py; it is not dpbench's
writer and draws its own values (parameters uniform in +-1/sqrt(fan_in), BatchNorm values away from
their defaults, class-prototype data, numpy permutations as the sample order).

Usage: make_start_bundle.py DIR [--workload mlp|cnn] [--input 1x8x8] [--hidden 32]
    [--channels 4,8] [--train 512] [--test 128] [--batch 32] [--steps 30] [--warmup 5]
    [--optimizer sgd|adam|adamw] [--betas 0.9,0.999] [--eps 1e-8]
"""
import argparse
import json
import math
from pathlib import Path

import numpy as np


def model_tensors(workload, input_shape, classes, hidden, channels):
    """(params, buffers): lists of (name, shape) in PyTorch state_dict order and naming."""
    c, h, w = input_shape
    if workload == "mlp":
        dims = [c * h * w, *hidden, classes]
        params = []
        for i in range(len(dims) - 1):
            params += [(f"fc{i + 1}.weight", [dims[i + 1], dims[i]]),
                       (f"fc{i + 1}.bias", [dims[i + 1]])]
        return params, []
    c1, c2 = channels
    flat = c2 * (h // 4) * (w // 4)
    params = [("conv1.weight", [c1, c, 3, 3]), ("bn1.weight", [c1]), ("bn1.bias", [c1]),
              ("conv2.weight", [c2, c1, 3, 3]), ("bn2.weight", [c2]), ("bn2.bias", [c2]),
              ("fc1.weight", [hidden[0], flat]), ("fc1.bias", [hidden[0]]),
              ("fc2.weight", [classes, hidden[0]]), ("fc2.bias", [classes])]
    buffers = [("bn1.running_mean", [c1]), ("bn1.running_var", [c1]),
               ("bn2.running_mean", [c2]), ("bn2.running_var", [c2])]
    return params, buffers


def _initial_value(rng, name, shape, fan_in):
    """Conv and Linear weights and biases uniform in +-1/sqrt(fan_in) of their layer. BatchNorm
    values are drawn away from PyTorch's defaults (weight 1, bias 0, running_mean 0,
    running_var 1), so that a reader that skipped them would be caught: weight and running_var
    uniform in [0.5, 2), bias and running_mean uniform in [-0.5, 0.5)."""
    if name.startswith("bn"):
        if name.endswith("weight") or name.endswith("running_var"):
            return rng.uniform(0.5, 2.0, size=shape).astype(np.float32)
        return rng.uniform(-0.5, 0.5, size=shape).astype(np.float32)
    bound = 1.0 / math.sqrt(fan_in)
    return rng.uniform(-bound, bound, size=shape).astype(np.float32)


def _write_table(directory, filename, tensors, rng):
    """Writes the tensors back to back as float32; returns start.json's section."""
    entries, chunks, offset = [], [], 0
    fan_in = 1
    for name, shape in tensors:
        if name.endswith("weight") and len(shape) >= 2:
            fan_in = math.prod(shape[1:])
        values = _initial_value(rng, name, shape, fan_in)
        entries.append({"name": name, "shape": shape, "offset": offset})
        chunks.append(values.reshape(-1))
        offset += values.size
    np.concatenate(chunks).astype("<f4").tofile(directory / filename)
    return {"file": filename, "dtype": "float32", "count": offset, "tensors": entries}


def _write_split(directory, prefix, x, y):
    x.astype("<f4").tofile(directory / f"{prefix}_x.f32")
    y.astype("<i8").tofile(directory / f"{prefix}_y.i64")
    return {"x": {"file": f"{prefix}_x.f32", "dtype": "float32", "shape": list(x.shape)},
            "y": {"file": f"{prefix}_y.i64", "dtype": "int64", "shape": list(y.shape)}}


def make_start_bundle(directory, workload="mlp", input_shape=(1, 8, 8), classes=10,
                      hidden=(32,), channels=(4, 8), train=512, test=128, batch=32, steps=30,
                      warmup=5, lr=0.1, momentum=0.9, weight_decay=0.0, seed=0,
                      bucket_cap_mb=25.0, optimizer=None, betas=None, eps=None):
    """Writes the bundle into directory (created). Data: each class has a prototype in
    [-1, 1)^features and a sample is its prototype plus N(0, 0.5^2) noise. optimizer, betas and
    eps go into config only when given (absent, a reader takes sgd, [0.9, 0.999] and 1e-8).
    Returns the path of start.json."""
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(seed)
    params, buffers = model_tensors(workload, list(input_shape), classes, list(hidden),
                                    list(channels))
    features = math.prod(input_shape)
    prototypes = rng.uniform(-1, 1, size=(classes, features)).astype(np.float32)

    def samples(n):
        y = rng.integers(0, classes, size=n).astype(np.int64)
        x = prototypes[y] + rng.normal(0, 0.5, size=(n, features)).astype(np.float32)
        return x.astype(np.float32), y

    spe = train // batch
    epochs = -(-steps // spe)
    order = np.stack([rng.permutation(train) for _ in range(epochs)]).astype("<i8")
    order.tofile(directory / "order.i64")
    doc = {
        "schema": {"name": "dpbench-start", "version": 1},
        "workload": workload,
        "model": {"input": list(input_shape), "classes": classes, "hidden": list(hidden),
                  "channels": list(channels)},
        "params": _write_table(directory, "params.f32", params, rng),
        "buffers": _write_table(directory, "buffers.f32", buffers, rng) if buffers else None,
        "train": _write_split(directory, "train", *samples(train)),
        "test": _write_split(directory, "test", *samples(test)) if test else None,
        "order": {"file": "order.i64", "dtype": "int64", "shape": [epochs, train]},
        "config": {"global_batch": batch, "steps": steps, "warmup_steps": warmup,
                   "steps_per_epoch": spe, "lr": lr, "momentum": momentum,
                   "weight_decay": weight_decay, "seed": seed, "bucket_cap_mb": bucket_cap_mb},
    }
    optional = {"optimizer": optimizer, "betas": list(betas) if betas is not None else None,
                "eps": eps}
    doc["config"].update({k: v for k, v in optional.items() if v is not None})
    path = directory / "start.json"
    with open(path, "w") as f:
        json.dump(doc, f, indent=2)
    return path


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("dir")
    p.add_argument("--workload", choices=("mlp", "cnn"), default="mlp")
    p.add_argument("--input", default="1x8x8")
    p.add_argument("--hidden", default="32")
    p.add_argument("--channels", default="4,8")
    p.add_argument("--train", type=int, default=512)
    p.add_argument("--test", type=int, default=128)
    p.add_argument("--batch", type=int, default=32)
    p.add_argument("--steps", type=int, default=30)
    p.add_argument("--warmup", type=int, default=5)
    p.add_argument("--optimizer", choices=("sgd", "adam", "adamw"), default=None)
    p.add_argument("--betas", default=None, help="B1,B2")
    p.add_argument("--eps", type=float, default=None)
    a = p.parse_args()
    print(make_start_bundle(a.dir, a.workload, [int(v) for v in a.input.split("x")],
                            hidden=[int(v) for v in a.hidden.split(",")],
                            channels=[int(v) for v in a.channels.split(",")], train=a.train,
                            test=a.test, batch=a.batch, steps=a.steps, warmup=a.warmup,
                            optimizer=a.optimizer, eps=a.eps,
                            betas=[float(v) for v in a.betas.split(",")] if a.betas else None))


if __name__ == "__main__":
    main()
