"""Tests of bench/reference/pytorch_reference.py on the CPU: its start-bundle reader and its four
CPU programs (plain, ddp over gloo, DataParallel's flow over gloo, the RPC parameter server) against
a straightforward PyTorch loop written here, on tiny bundles from make_start_bundle.py.

Run from the repository root with Debian's interpreter (it has PyTorch 1.13, CPU):
    /usr/bin/python3 -m unittest -v tests/python/test_pytorch_reference.py
Skipped when torch cannot be imported. The script runs as a subprocess with --threads 1; each
class runs it once with every program (2 processes each) and shares the result file; one more run
uses 3 processes for unequal chunks; the optimizer classes add three small runs. About a
minute and a half on 2 cores.

The loop here is functional (F.linear, F.conv2d, F.batch_norm) and reads the bundle with numpy,
so it shares no code with the script. For the CNN it also reproduces what each multi-process
program does to BatchNorm: each rank's chunk is normalised with its own statistics and only rank
0's running-statistic update is kept.

The optimizer: bundles with optimizer adam and adamw (and their betas, eps) run plain, ddp,
dataparallel and rpc_ps with torch.optim.Adam / AdamW, checked against the loop here with the same
optimizer; bad optimizer keys are rejected.

The options: --max-steps (dpbench's spelling) and its alias --steps give the same run, on the
script's own synthetic data (one tiny plain run each); --optimizer, --betas and --eps reach the
result's config.

Not covered: the CUDA programs (no GPU here) and the script's own data (--data synthetic,
fashion-mnist) beyond that, which no bundle fixes.
"""
import json
import math
import pathlib
import subprocess
import sys
import tempfile
import unittest

ROOT = pathlib.Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "bench" / "reference" / "pytorch_reference.py"
sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
from make_start_bundle import make_start_bundle  # noqa: E402  (path set above)

try:
    import numpy as np
    import torch
    import torch.nn.functional as F
    HAVE_TORCH = True
except (ImportError, OSError):
    HAVE_TORCH = False

WORLD = 2
STEPS = 30


def run_script(*args, timeout=300):
    """Runs the script with Debian's interpreter; returns the CompletedProcess."""
    return subprocess.run([sys.executable, str(SCRIPT), *map(str, args)], capture_output=True,
                          text=True, timeout=timeout, cwd=ROOT)


def read_bundle(d):
    """start.json and its arrays as numpy (independent of the script's reader)."""
    d = pathlib.Path(d)
    doc = json.loads((d / "start.json").read_text())

    def arr(entry, dtype):
        return np.fromfile(d / entry["file"], dtype=dtype).reshape(entry["shape"])

    def table(section):
        if section is None:
            return {}
        flat = np.fromfile(d / section["file"], dtype="<f4")
        return {t["name"]: flat[t["offset"]:t["offset"] + math.prod(t["shape"])]
                .reshape(t["shape"]).copy() for t in section["tensors"]}

    return {"doc": doc, "params": table(doc["params"]), "buffers": table(doc["buffers"]),
            "x": arr(doc["train"]["x"], "<f4"), "y": arr(doc["train"]["y"], "<i8"),
            "test_x": arr(doc["test"]["x"], "<f4"), "test_y": arr(doc["test"]["y"], "<i8"),
            "order": arr(doc["order"], "<i8")}


def global_chunks(b, world):
    """Step t -> [global batch] (world 1) or its torch.chunk chunks (DataParallel, rpc_ps)."""
    c = b["doc"]["config"]
    batch, spe = c["global_batch"], c["steps_per_epoch"]

    def chunks(t):
        e, i = divmod(t, spe)
        idx = torch.from_numpy(b["order"][e][i * batch:(i + 1) * batch].copy())
        return list(torch.chunk(idx, world))
    return chunks


def ddp_chunks(b, world):
    """Step t -> each DDP rank's local batch: DistributedSampler's padded perm[r::world]."""
    c = b["doc"]["config"]
    local, spe = c["global_batch"] // world, c["steps_per_epoch"]

    def chunks(t):
        e, i = divmod(t, spe)
        perm = b["order"][e]
        total = -(-len(perm) // world) * world
        padded = np.concatenate([perm, perm[:total - len(perm)]])
        return [torch.from_numpy(padded[r::world][i * local:(i + 1) * local].copy())
                for r in range(world)]
    return chunks


def reference_optimizer(params, c):
    """The optimizer start.json's config c names (absent: sgd), built here over params:
    torch.optim.SGD, Adam or AdamW with the config's values (betas and eps defaulting as the
    bundle's format says)."""
    name = c.get("optimizer", "sgd")
    if name == "sgd":
        return torch.optim.SGD(params, lr=c["lr"], momentum=c["momentum"],
                               weight_decay=c["weight_decay"])
    cls = {"adam": torch.optim.Adam, "adamw": torch.optim.AdamW}[name]
    return cls(params, lr=c["lr"], betas=tuple(c.get("betas", (0.9, 0.999))),
               eps=c.get("eps", 1e-8), weight_decay=c["weight_decay"])


def reference_run(b, chunks_for_step, default_buffers=False):
    """Trains the bundle's model for config.steps steps with the bundle's optimizer
    (reference_optimizer: torch.optim.SGD, Adam or AdamW) and mean cross-entropy over each
    step's global batch. chunks_for_step(t) -> index tensors, one per
    rank; each chunk is forwarded separately (BatchNorm with that chunk's statistics, running
    statistics updated by chunk 0 only). default_buffers: start from running_mean 0 and
    running_var 1 instead of the bundle's buffers.
    Returns (loss per step, test accuracy in eval mode)."""
    doc, c = b["doc"], b["doc"]["config"]
    p = {k: torch.tensor(v, requires_grad=True) for k, v in b["params"].items()}
    buf = {k: torch.tensor(v) for k, v in b["buffers"].items()}
    if default_buffers:
        buf = {k: torch.ones_like(v) if k.endswith("var") else torch.zeros_like(v)
               for k, v in buf.items()}
    x_all, y_all = torch.from_numpy(b["x"].reshape(b["x"].shape[0], -1)), torch.from_numpy(b["y"])
    input_shape = doc["model"]["input"]

    def forward(x, training, keep_stats):
        if doc["workload"] == "mlp":
            n = len(doc["model"]["hidden"]) + 1
            h = x
            for i in range(1, n + 1):
                h = F.linear(h, p[f"fc{i}.weight"], p[f"fc{i}.bias"])
                h = F.relu(h) if i < n else h
            return h
        h = x.reshape(x.shape[0], *input_shape)
        for k in (1, 2):
            h = F.conv2d(h, p[f"conv{k}.weight"], padding=1)
            rm, rv = buf[f"bn{k}.running_mean"], buf[f"bn{k}.running_var"]
            if training and not keep_stats:
                rm = rv = None
            h = F.batch_norm(h, rm, rv, p[f"bn{k}.weight"], p[f"bn{k}.bias"], training=training,
                             momentum=0.1, eps=1e-5)
            h = F.max_pool2d(F.relu(h), 2)
        h = F.relu(F.linear(h.flatten(1), p["fc1.weight"], p["fc1.bias"]))
        return F.linear(h, p["fc2.weight"], p["fc2.bias"])

    opt = reference_optimizer(list(p.values()), c)
    losses = []
    for t in range(c["steps"]):
        chunks = chunks_for_step(t)
        opt.zero_grad()
        logits = torch.cat([forward(x_all[idx], True, r == 0) for r, idx in enumerate(chunks)])
        loss = F.cross_entropy(logits, y_all[torch.cat(chunks)])
        loss.backward()
        opt.step()
        losses.append(loss.item())
    with torch.no_grad():
        tx = torch.from_numpy(b["test_x"].reshape(b["test_x"].shape[0], -1))
        pred = forward(tx, False, False).argmax(1)
        accuracy = float((pred == torch.from_numpy(b["test_y"])).double().mean())
    return losses, accuracy


def max_rel_diff(a, b):
    return max(abs(u - v) / max(abs(v), 1e-12) for u, v in zip(a, b))


class _BundleRun(unittest.TestCase):
    """Writes a bundle, runs every CPU program once on it (--threads 1) and keeps the runs."""
    workload = None
    bundle_kwargs = {}

    @classmethod
    def setUpClass(cls):
        torch.set_num_threads(1)
        cls.tmp = tempfile.TemporaryDirectory(prefix="pytorch-reference-test-")
        d = pathlib.Path(cls.tmp.name)
        make_start_bundle(d / "bundle", workload=cls.workload, input_shape=(1, 8, 8),
                          train=512, test=128, batch=32, steps=STEPS, warmup=5,
                          **cls.bundle_kwargs)
        cls.bundle = read_bundle(d / "bundle")
        cls.out = d / "result.json"
        cls.proc = run_script("--start", d / "bundle", "--device", "cpu", "--programs",
                              "plain,ddp,dataparallel,rpc_ps", "--world-size", WORLD,
                              "--threads", 1, "--timeout", 60, "--quiet", "--out", cls.out)
        cls.doc = json.loads(cls.out.read_text()) if cls.out.exists() else None
        cls.runs = {r["program"]: r for r in cls.doc["runs"]} if cls.doc else {}

    @classmethod
    def tearDownClass(cls):
        cls.tmp.cleanup()

    def setUp(self):
        self.assertEqual(self.proc.returncode, 0, self.proc.stderr[-2000:])
        self.assertEqual(set(self.runs), {"plain", "ddp", "dataparallel", "rpc_ps"})

    def losses(self, program):
        return self.runs[program]["quality"]["step_train_loss"]


@unittest.skipUnless(HAVE_TORCH, "PyTorch (python3-torch) and numpy are not importable")
class MlpBundle(_BundleRun):
    workload = "mlp"
    bundle_kwargs = {"hidden": (32,)}

    def test_plain_equals_a_plain_pytorch_loop_on_the_bundle(self):
        expected, accuracy = reference_run(self.bundle, global_chunks(self.bundle, 1))
        got = self.losses("plain")
        self.assertEqual(len(got), STEPS)
        self.assertLess(max_rel_diff(got, expected), 1e-6)
        self.assertAlmostEqual(self.runs["plain"]["quality"]["test_accuracy"], accuracy, places=9)
        # The loss falls: the order and the parameters were loaded, not merely run.
        self.assertLess(sum(got[-5:]) / 5, 0.5 * sum(got[:5]) / 5)

    def test_every_multi_process_program_takes_plains_steps(self):
        plain = self.losses("plain")
        for program in ("ddp", "dataparallel", "rpc_ps"):
            with self.subTest(program=program):
                self.assertEqual(len(self.losses(program)), STEPS)
                self.assertLess(max_rel_diff(self.losses(program), plain), 1e-4)

    def test_unequal_chunks_of_three_processes_take_plains_steps(self):
        # 32 samples over 3 processes: torch.chunk gives 11, 11, 10; rpc_ps weighs each
        # trainer's mean-loss gradient by b_r / B.
        out = pathlib.Path(self.tmp.name) / "three.json"
        proc = run_script("--start", pathlib.Path(self.tmp.name) / "bundle", "--device", "cpu",
                          "--programs", "dataparallel,rpc_ps", "--world-size", 3, "--threads", 1,
                          "--timeout", 60, "--quiet", "--out", out)
        self.assertEqual(proc.returncode, 0, proc.stderr[-2000:])
        runs = {r["program"]: r for r in json.loads(out.read_text())["runs"]}
        for program in ("dataparallel", "rpc_ps"):
            with self.subTest(program=program):
                self.assertEqual([p["local_batch"] for p in runs[program]["per_rank"]],
                                 [11, 11, 10])
                got = runs[program]["quality"]["step_train_loss"]
                self.assertLess(max_rel_diff(got, self.losses("plain")), 1e-4)

    def test_run_records_carry_the_cpu_keys(self):
        self.assertEqual(self.doc["schema"], {"name": "dpbench-pytorch-reference", "version": 4})
        # The PyTorch programs are programs (docs/glossary.md): the config's list and each record's key.
        self.assertEqual(self.doc["config"]["programs"], ["plain", "ddp", "dataparallel", "rpc_ps"])
        self.assertNotIn("modes", self.doc["config"])
        self.assertEqual([r["program"] for r in self.doc["runs"]],
                         ["plain", "ddp", "dataparallel", "rpc_ps"])
        self.assertFalse([r for r in self.doc["runs"] if "mode" in r])
        comm = {"plain": "none", "ddp": "gloo",
                "dataparallel": "gloo (DataParallel flow: broadcast/scatter/gather/reduce)",
                "rpc_ps": "rpc (TensorPipe)"}
        spe = self.bundle["doc"]["config"]["steps_per_epoch"]
        for program, r in self.runs.items():
            with self.subTest(program=program):
                self.assertEqual(r["device"], "cpu")
                self.assertEqual(r["comm"], comm[program])
                self.assertEqual(r["processes"], 1 if program == "plain" else WORLD)
                self.assertEqual(r["threads_per_process"], 1)
                self.assertEqual(len(r["step_time_s"]["samples"]), STEPS - 5)
                per_rank = r["memory"]["per_rank"]
                self.assertEqual(len(per_rank), r["processes"])
                self.assertTrue(all(m["peak_rss_bytes"] > 10 * 2**20 for m in per_rank))
                self.assertNotIn("peak_bytes", per_rank[0])
                last = r["quality"]["step_train_loss"][(STEPS - 1) // spe * spe:]
                self.assertAlmostEqual(r["quality"]["final_train_loss"], sum(last) / len(last),
                                       places=12)
                self.assertTrue(0.0 <= r["quality"]["test_accuracy"] <= 1.0)

    def test_wall_time_throughput_covers_every_timed_step(self):
        # The timed span runs from the first timed step's start to the last one's end, so it holds
        # every timed step; its throughput is dpbench's definition (timed samples / that span).
        for program, r in self.runs.items():
            with self.subTest(program=program):
                samples = r["step_time_s"]["samples"]
                self.assertGreaterEqual(r["timed_wall_s"], sum(samples))
                self.assertLess(r["timed_wall_s"], sum(samples) + 5.0)
                batch = self.bundle["doc"]["config"]["global_batch"]
                self.assertAlmostEqual(r["throughput_wall_samples_per_s"],
                                       len(samples) * batch / r["timed_wall_s"], places=6)
                self.assertEqual(r["throughput_median_step_samples_per_s"], r["throughput_samples_per_s"])


@unittest.skipUnless(HAVE_TORCH, "PyTorch (python3-torch) and numpy are not importable")
class CnnBundle(_BundleRun):
    workload = "cnn"
    bundle_kwargs = {"hidden": (16,), "channels": (4, 8)}

    def test_plain_equals_a_plain_pytorch_loop_with_the_bundles_buffers(self):
        expected, accuracy = reference_run(self.bundle, global_chunks(self.bundle, 1))
        self.assertLess(max_rel_diff(self.losses("plain"), expected), 1e-6)
        # Eval-mode accuracy uses the running statistics: the buffers were loaded and updated.
        self.assertAlmostEqual(self.runs["plain"]["quality"]["test_accuracy"], accuracy, places=9)
        # ... and it can tell: from PyTorch's default buffers the accuracy is another one.
        _, accuracy_default = reference_run(self.bundle, global_chunks(self.bundle, 1),
                                            default_buffers=True)
        self.assertNotEqual(accuracy_default, accuracy)

    def test_dataparallel_normalises_each_chunk_by_itself(self):
        expected, _ = reference_run(self.bundle, global_chunks(self.bundle, WORLD))
        self.assertLess(max_rel_diff(self.losses("dataparallel"), expected), 1e-4)
        # ... which is not plain's full-batch statistics, already at step 0.
        self.assertGreater(abs(self.losses("dataparallel")[0] - self.losses("plain")[0]), 1e-5)

    def test_rpc_ps_equals_dataparallel(self):
        self.assertLess(max_rel_diff(self.losses("rpc_ps"), self.losses("dataparallel")), 1e-4)

    def test_ddp_normalises_each_ranks_shard_and_keeps_rank0s_buffers(self):
        expected, _ = reference_run(self.bundle, ddp_chunks(self.bundle, WORLD))
        got = self.losses("ddp")
        self.assertLess(max_rel_diff(got, expected), 1e-4)
        self.assertTrue(all(math.isfinite(v) for v in got))
        self.assertTrue(0.0 <= self.runs["ddp"]["quality"]["test_accuracy"] <= 1.0)


ADAM_STEPS = 8


@unittest.skipUnless(HAVE_TORCH, "PyTorch (python3-torch) and numpy are not importable")
class AdamBundles(unittest.TestCase):
    """Three MLP bundles that differ only in config.optimizer: absent (sgd), adamw (plain) and
    adam (plain, ddp, dataparallel, rpc_ps with 2 processes), each with betas 0.8,0.99, eps 1e-6
    and weight decay 0.05, ADAM_STEPS steps."""

    @classmethod
    def setUpClass(cls):
        torch.set_num_threads(1)
        cls.tmp = tempfile.TemporaryDirectory(prefix="pytorch-reference-adam-")
        d = pathlib.Path(cls.tmp.name)
        cls.bundles, cls.procs, cls.runs = {}, {}, {}
        programs = {"sgd": "plain", "adamw": "plain", "adam": "plain,ddp,dataparallel,rpc_ps"}
        for name, program_list in programs.items():
            make_start_bundle(d / name, workload="mlp", input_shape=(1, 8, 8), hidden=(16,),
                              train=256, test=64, batch=32, steps=ADAM_STEPS, warmup=2, lr=0.01,
                              weight_decay=0.05, betas=(0.8, 0.99), eps=1e-6,
                              optimizer=None if name == "sgd" else name)
            cls.bundles[name] = read_bundle(d / name)
            out = d / f"{name}.json"
            cls.procs[name] = run_script("--start", d / name, "--device", "cpu", "--programs",
                                         program_list, "--world-size", WORLD, "--threads", 1,
                                         "--timeout", 60, "--quiet", "--out", out)
            if out.exists():
                doc = json.loads(out.read_text())
                cls.runs[name] = {r["program"]: r for r in doc["runs"]}
                cls.runs[name]["config"] = doc["config"]

    @classmethod
    def tearDownClass(cls):
        cls.tmp.cleanup()

    def setUp(self):
        for name, proc in self.procs.items():
            self.assertEqual(proc.returncode, 0, f"{name}: {proc.stderr[-2000:]}")

    def losses(self, name, program):
        return self.runs[name][program]["quality"]["step_train_loss"]

    def test_adamw_plain_equals_a_pytorch_loop_with_adamw_and_differs_from_sgd(self):
        b = self.bundles["adamw"]
        self.assertEqual(b["doc"]["config"]["optimizer"], "adamw")
        expected, _ = reference_run(b, global_chunks(b, 1))
        got = self.losses("adamw", "plain")
        self.assertEqual(len(got), ADAM_STEPS)
        self.assertLess(max_rel_diff(got, expected), 1e-6)
        sgd = self.losses("sgd", "plain")
        # Step 0's loss is the start's, the same for both; from step 1 the updates differ.
        self.assertAlmostEqual(got[0], sgd[0], places=6)
        self.assertGreater(max_rel_diff(got[1:], sgd[1:]), 1e-3)
        # ... and the sgd bundle (no optimizer key) is the loop with torch.optim.SGD.
        expected_sgd, _ = reference_run(self.bundles["sgd"], global_chunks(self.bundles["sgd"], 1))
        self.assertLess(max_rel_diff(sgd, expected_sgd), 1e-6)

    def test_adam_and_adamw_differ(self):
        # Weight decay 0.05: Adam adds it to the gradient, AdamW decays the parameters.
        self.assertGreater(max_rel_diff(self.losses("adam", "plain")[1:],
                                        self.losses("adamw", "plain")[1:]), 1e-6)

    def test_every_mode_takes_the_adam_steps(self):
        b = self.bundles["adam"]
        expected, _ = reference_run(b, global_chunks(b, 1))
        self.assertLess(max_rel_diff(self.losses("adam", "plain"), expected), 1e-6)
        for program in ("ddp", "dataparallel", "rpc_ps"):
            with self.subTest(program=program):
                got = self.losses("adam", program)
                self.assertEqual(len(got), ADAM_STEPS)
                self.assertLess(max_rel_diff(got, expected), 1e-4)

    def test_result_config_records_the_optimizer(self):
        expected = {"sgd": "sgd", "adamw": "adamw", "adam": "adam"}
        for name, optimizer in expected.items():
            with self.subTest(bundle=name):
                c = self.runs[name]["config"]
                self.assertEqual(c["optimizer"], optimizer)
                self.assertEqual(c["betas"], [0.8, 0.99])
                self.assertEqual(c["eps"], 1e-6)
                self.assertEqual((c["lr"], c["momentum"], c["weight_decay"]), (0.01, 0.9, 0.05))


@unittest.skipUnless(HAVE_TORCH, "PyTorch (python3-torch) and numpy are not importable")
class BadBundle(unittest.TestCase):
    """A broken bundle is one line on stderr, exit 2, and no result file."""

    def setUp(self):
        self.tmp = tempfile.TemporaryDirectory(prefix="pytorch-reference-bad-")
        self.dir = pathlib.Path(self.tmp.name) / "bundle"
        make_start_bundle(self.dir, workload="mlp", input_shape=(1, 8, 8), hidden=(8,),
                          train=64, test=0, batch=16, steps=4, warmup=1)
        self.out = pathlib.Path(self.tmp.name) / "result.json"

    def tearDown(self):
        self.tmp.cleanup()

    def assert_rejected(self, *expected_words):
        proc = run_script("--start", self.dir, "--device", "cpu", "--programs", "plain",
                          "--out", self.out, timeout=120)
        self.assertEqual(proc.returncode, 2, proc.stderr)
        lines = proc.stderr.strip().splitlines()
        self.assertEqual(len(lines), 1, proc.stderr)
        for word in expected_words:
            self.assertIn(word, lines[0])
        self.assertFalse(self.out.exists())

    def test_truncated_params_file(self):
        params = self.dir / "params.f32"
        params.write_bytes(params.read_bytes()[:-4])
        self.assert_rejected("params.f32", "bytes")

    def test_wrong_tensor_name(self):
        start = self.dir / "start.json"
        start.write_text(start.read_text().replace('"fc2.bias"', '"fc2.b"'))
        self.assert_rejected("fc2.b")

    def test_option_the_bundle_fixes(self):
        proc = run_script("--start", self.dir, "--device", "cpu", "--steps", 3, "--out", self.out)
        self.assertEqual(proc.returncode, 2)
        self.assertIn("--steps", proc.stderr)
        self.assertFalse(self.out.exists())

    def set_config(self, **values):
        start = self.dir / "start.json"
        doc = json.loads(start.read_text())
        doc["config"].update(values)
        start.write_text(json.dumps(doc))

    def test_powersgd_needs_its_start_step_and_its_q_table(self):
        self.set_config(comm_hook="powersgd:2")
        self.assert_rejected("config.start_powersgd_iter")
        self.set_config(comm_hook="powersgd:2", start_powersgd_iter=2)
        self.assert_rejected("powersgd_q", "needs file")
        # fc1 [8, 64] compresses at rank 2 by PyTorch's own rule: a table without it is refused.
        start = self.dir / "start.json"
        doc = json.loads(start.read_text())
        doc["powersgd_q"] = {"file": "powersgd_q.f32", "dtype": "float32", "count": 0, "rank": 2,
                             "tensors": []}
        start.write_text(json.dumps(doc))
        self.assert_rejected("powersgd_q", "fc1.weight", "missing")

    def test_unknown_optimizer(self):
        self.set_config(optimizer="rmsprop")
        self.assert_rejected("config.optimizer", "rmsprop")

    def test_betas_outside_zero_one(self):
        for betas in ([1.0, 0.9], [0.9]):
            with self.subTest(betas=betas):
                self.set_config(betas=betas)
                self.assert_rejected("config.betas")

    def test_negative_eps(self):
        self.set_config(eps=-1e-8)
        self.assert_rejected("config.eps")

    def test_optimizer_options_the_bundle_fixes(self):
        for option, value in (("--optimizer", "adam"), ("--betas", "0.9,0.99"),
                              ("--eps", "1e-6")):
            with self.subTest(option=option):
                proc = run_script("--start", self.dir, "--device", "cpu", option, value,
                                  "--out", self.out)
                self.assertEqual(proc.returncode, 2)
                self.assertIn(f"error: {option}: the start bundle fixes it",
                              proc.stderr.strip().splitlines()[-1])
                self.assertFalse(self.out.exists())

    def test_option_the_bundle_fixes_is_named_as_typed(self):
        for option in ("--max-steps", "--steps"):
            with self.subTest(option=option):
                proc = run_script("--start", self.dir, "--device", "cpu", option, 3,
                                  "--out", self.out)
                self.assertEqual(proc.returncode, 2)
                self.assertIn(f"error: {option}: the start bundle fixes it",
                              proc.stderr.strip().splitlines()[-1])
                self.assertFalse(self.out.exists())


@unittest.skipUnless(HAVE_TORCH, "PyTorch (python3-torch) and numpy are not importable")
class StepsOption(unittest.TestCase):
    """--max-steps, dpbench's spelling, and --steps, the script's first one, are one option."""

    def test_max_steps_and_its_alias_steps_give_the_same_run(self):
        docs = {}
        with tempfile.TemporaryDirectory(prefix="pytorch-reference-steps-") as tmp:
            for option in ("--max-steps", "--steps"):
                out = pathlib.Path(tmp) / f"{option.strip('-')}.json"
                proc = run_script("--device", "cpu", "--programs", "plain", "--hidden", 8,
                                  "--batch-size", 16, "--synthetic-samples", 64, option, 6,
                                  "--warmup-steps", 1, "--threads", 1, "--quiet", "--out", out,
                                  timeout=120)
                self.assertEqual(proc.returncode, 0, proc.stderr[-2000:])
                docs[option] = json.loads(out.read_text())
        new, old = docs["--max-steps"], docs["--steps"]
        for doc in (new, old):
            self.assertEqual(doc["config"]["steps"], 6)
            self.assertEqual(doc["runs"][0]["steps"],
                             {"total": 6, "timed": 5, "warmup": 1, "per_epoch": 4})
        # Same seed, same synthetic data and order, one thread: the same losses, bit for bit.
        losses = [d["runs"][0]["quality"]["step_train_loss"] for d in (new, old)]
        self.assertEqual(len(losses[0]), 6)
        self.assertEqual(losses[0], losses[1])
        self.assertEqual(new["config"], old["config"])


@unittest.skipUnless(HAVE_TORCH, "PyTorch (python3-torch) and numpy are not importable")
class OptimizerOptions(unittest.TestCase):
    """--optimizer, --betas and --eps without a bundle, as dpbench names them."""

    def test_adamw_options_reach_the_config_and_run(self):
        with tempfile.TemporaryDirectory(prefix="pytorch-reference-opt-") as tmp:
            out = pathlib.Path(tmp) / "adamw.json"
            proc = run_script("--device", "cpu", "--programs", "plain", "--hidden", 8,
                              "--batch-size", 16, "--synthetic-samples", 64, "--max-steps", 4,
                              "--warmup-steps", 1, "--threads", 1, "--optimizer", "adamw",
                              "--betas", "0.8,0.99", "--eps", "1e-7", "--lr", "0.01",
                              "--weight-decay", "0.1", "--quiet", "--out", out, timeout=120)
            self.assertEqual(proc.returncode, 0, proc.stderr[-2000:])
            doc = json.loads(out.read_text())
        c = doc["config"]
        self.assertEqual((c["optimizer"], c["betas"], c["eps"], c["lr"], c["weight_decay"]),
                         ("adamw", [0.8, 0.99], 1e-7, 0.01, 0.1))
        losses = doc["runs"][0]["quality"]["step_train_loss"]
        self.assertEqual(len(losses), 4)
        self.assertTrue(all(math.isfinite(v) for v in losses))

    def test_bad_optimizer_options_are_rejected(self):
        for args, word in ((("--optimizer", "rmsprop"), "--optimizer"),
                           (("--betas", "1,0.9"), "--betas"), (("--eps", "-1"), "--eps")):
            with self.subTest(args=args):
                proc = run_script("--device", "cpu", *args, timeout=60)
                self.assertEqual(proc.returncode, 2)
                self.assertIn(word, proc.stderr.strip().splitlines()[-1])


@unittest.skipUnless(HAVE_TORCH, "PyTorch (python3-torch) and numpy are not importable")
class ProgramsOption(unittest.TestCase):
    """--programs names PyTorch programs, never modes (dpbench's --mode values are strategies)."""

    def test_an_unknown_program_and_the_old_modes_option_are_rejected(self):
        for args, word in ((("--programs", "plain,allreduce"), "'allreduce' is not a program "
                            "(available: plain, dataparallel, ddp, rpc_ps)"),
                           (("--modes", "plain"), "unrecognized arguments: --modes")):
            with self.subTest(args=args):
                proc = run_script("--device", "cpu", *args, timeout=60)
                self.assertEqual(proc.returncode, 2)
                self.assertIn(word, proc.stderr.strip().splitlines()[-1])


if __name__ == "__main__":
    unittest.main()
