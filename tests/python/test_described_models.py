"""Tests of described models end to end: the built-in descriptions against their schema, DDP's
buckets of every built-in model against PyTorch's own assignment, the describer on a user's module
replayed by `dpbench run --model FILE`, and bad input.

Run from the repository root:  /usr/bin/python3 -m unittest -v tests/python/test_described_models.py

For:
- every models/*.json validates against results/schema/dpbench-model.schema.json;
- the buckets `dpbench project --model NAME` reports (dpbench's assign_buckets over the replay's
  tensors, bucket_cap_mb 25, first bucket 1 MiB, in gradient-ready order) equal
  torch.distributed._compute_bucket_assignment_by_size on the same tensors in the same order, as
  DDP's Reducer rebuilds them after the first step (torch/csrc/distributed/c10d/reducer.cpp);
- models/describe.py FILE.py:Class on a module defined here gives its parameter count, shapes
  and an observed gradient-ready order, and `dpbench run --model FILE` replays it in every mode
  with the bytes its gradient implies;
- bad input: an unknown model, a description with a negative time, --time-scale 0 and a
  describer given no --input are one line and a non-zero exit.
Not for: the replay's waits, layout and the modes' agreement (tests/test_described_model.cpp).
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import unittest
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
DPBENCH = Path(os.environ.get("DPBENCH_BINARY", ROOT / "build" / "release" / "dpbench"))
DESCRIBE = ROOT / "models" / "describe.py"
MODELS = sorted((ROOT / "models").glob("*.json"))

try:
    import torch
    import torch.distributed as dist

    HAVE_TORCH = hasattr(dist, "_compute_bucket_assignment_by_size")
except ImportError:
    HAVE_TORCH = False

USER_MODULE = '''
import torch.nn as nn


class TinyNet(nn.Module):
    """conv -> BN -> ReLU -> pool -> linear, with an unusual parameter order: the head is
    registered first, so backward's order is not reverse registration order."""

    def __init__(self):
        super().__init__()
        self.head = nn.Linear(8 * 4 * 4, 5)
        self.conv = nn.Conv2d(3, 8, 3, padding=1)
        self.bn = nn.BatchNorm2d(8)

    def forward(self, x):
        x = nn.functional.max_pool2d(nn.functional.relu(self.bn(self.conv(x))), 2)
        return self.head(x.flatten(1))
'''


def run(*args, timeout=600):
    return subprocess.run([str(a) for a in args], capture_output=True, text=True, timeout=timeout, cwd=ROOT)


class Schema(unittest.TestCase):
    def test_builtin_descriptions_are_valid(self):
        import jsonschema

        schema = json.loads((ROOT / "results" / "schema" / "dpbench-model.schema.json").read_text())
        self.assertEqual({m.stem for m in MODELS}, {"mlp", "cnn", "resnet50", "vit_b_16", "bert-large", "gpt2"})
        for path in MODELS:
            doc = json.loads(path.read_text())
            jsonschema.validate(doc, schema)
            ready = [p for step in doc["backward"] for p in step["grads_ready"]]
            self.assertEqual(sorted(ready), list(range(len(doc["params"]))), path.name)


@unittest.skipUnless(DPBENCH.exists(), f"{DPBENCH} is not built")
@unittest.skipUnless(HAVE_TORCH, "PyTorch (python3-torch) with torch.distributed is not importable")
class BucketsEqualPyTorchs(unittest.TestCase):
    def test_every_builtin_model(self):
        with tempfile.TemporaryDirectory() as tmp:
            for path in MODELS:
                with self.subTest(model=path.stem):
                    out = Path(tmp) / f"{path.stem}.json"
                    r = run(DPBENCH, "project", "--model", path.stem, "--link-model", "nvlink4", "--max-ranks", "1", "-q",
                            "-o", out)
                    self.assertEqual(r.returncode, 0, r.stderr)
                    ours = json.loads(out.read_text())["calibration"]["described_model"]["ddp_buckets"]
                    desc = json.loads(path.read_text())
                    order = [p for step in desc["backward"] for p in step["grads_ready"]]
                    tensors = [torch.empty(desc["params"][i]["shape"], device="meta") for i in order]
                    theirs, limits = dist._compute_bucket_assignment_by_size(
                        tensors, [1024 * 1024, 25 * 1024 * 1024], [False] * len(tensors), order)
                    self.assertEqual(ours, [list(b) for b in theirs])
                    if desc["num_params"] > 10 ** 7:  # resnet50 and up: several 25 MiB buckets
                        self.assertGreater(len(ours), 4)


@unittest.skipUnless(DPBENCH.exists(), f"{DPBENCH} is not built")
@unittest.skipUnless(HAVE_TORCH, "PyTorch (python3-torch) is not importable")
class UserModule(unittest.TestCase):
    def test_described_then_replayed_in_every_mode(self):
        with tempfile.TemporaryDirectory() as tmp:
            module = Path(tmp) / "tiny.py"
            module.write_text(USER_MODULE)
            desc_path = Path(tmp) / "tiny.json"
            r = run("/usr/bin/python3", DESCRIBE, f"{module}:TinyNet", "--input", "3x8x8", "--batch", "4",
                    "--repetitions", "2", "--threads", "1", "-o", desc_path)
            self.assertEqual(r.returncode, 0, r.stderr)
            desc = json.loads(desc_path.read_text())
            # head.weight [5, 128], head.bias, conv.weight [8, 3, 3, 3], conv.bias, bn.weight, bn.bias
            self.assertEqual(desc["num_params"], 5 * 128 + 5 + 8 * 27 + 8 + 8 + 8)
            self.assertEqual([p["name"] for p in desc["params"]],
                             ["head.weight", "head.bias", "conv.weight", "conv.bias", "bn.weight", "bn.bias"])
            ready = [p for step in desc["backward"] for p in step["grads_ready"]]
            self.assertEqual(set(ready[:2]), {0, 1})  # the head's gradients first: forward's last layer
            self.assertEqual(set(ready[-2:]), {2, 3})  # the conv's last
            self.assertEqual(desc["input"]["shape"], [3, 8, 8])
            self.assertEqual(desc["output"]["shape"], [5])
            conv = next(layer for layer in desc["layers"] if layer["type"] == "Conv2d")
            self.assertEqual(conv["forward_flops_per_sample"], 2 * 8 * 8 * 8 * 27)
            self.assertGreater(desc["activation_bytes_per_sample"], 0)

            out = Path(tmp) / "run.json"
            r = run(DPBENCH, "run", "--model", desc_path, "--ranks", "2", "--batch-size", "8", "--max-steps", "4",
                    "--warmup-steps", "1", "--time-scale", "0.5", "-q", "-o", out)
            self.assertEqual(r.returncode, 0, r.stderr)
            self.assertIn("- (replay)", r.stdout)
            doc = json.loads(out.read_text())
            self.assertEqual([x["mode"] for x in doc["runs"]], ["ps", "sharded_ps", "allreduce"])
            for x in doc["runs"]:
                self.assertEqual(x["num_params"], desc["num_params"])
                self.assertEqual(x["replay"]["model"], "TinyNet")
                self.assertIsNone(x["quality"]["final_train_loss"])
            allreduce = doc["runs"][2]
            # a 2-rank ring sends 2(p-1)/p n = n floats per step
            self.assertEqual(allreduce["comm_bytes_per_step"]["per_rank"][0]["sent"], desc["num_params"] * 4)


@unittest.skipUnless(DPBENCH.exists(), f"{DPBENCH} is not built")
class BadInput(unittest.TestCase):
    def assert_one_line_error(self, r, *words):
        self.assertEqual(r.returncode, 2, r.stderr)
        self.assertEqual(len(r.stderr.strip().splitlines()), 1, r.stderr)
        for w in words:
            self.assertIn(w, r.stderr)

    def test_unknown_model_lists_the_builtins(self):
        self.assert_one_line_error(run(DPBENCH, "run", "--model", "resnet-50"), "--model resnet-50",
                                   "bert-large, cnn, gpt2, mlp, resnet50, vit_b_16")

    def test_a_negative_time(self):
        doc = json.loads((ROOT / "models" / "mlp.json").read_text())
        doc["layers"][1]["backward_us_per_sample"] = -3
        with tempfile.TemporaryDirectory() as tmp:
            bad = Path(tmp) / "bad.json"
            bad.write_text(json.dumps(doc))
            out = Path(tmp) / "never.json"
            for command in (["run"], ["memory"], ["project", "--link-model", "nvlink4"]):
                r = run(DPBENCH, *command, "--model", bad, "-o", out)
                self.assert_one_line_error(r, "layers[1].backward_us_per_sample: -3")
            self.assertFalse(out.exists())

    def test_time_scale_must_be_positive(self):
        self.assert_one_line_error(run(DPBENCH, "run", "--model", "mlp", "--time-scale", "0"), "--time-scale 0")

    def test_describer_needs_an_input_shape(self):
        r = run("/usr/bin/python3", DESCRIBE, "nosuch.py:Net")
        self.assertNotEqual(r.returncode, 0)
        self.assertIn("needs --input", r.stderr)


if __name__ == "__main__":
    unittest.main()
