"""The run configuration every program and process reads (from the options or the start bundle)
and the plan of each PyTorch program: its processes and threads, or the reason it is skipped.
"""

import math
import os

from .common import NUM_CLASSES, InputError, torch
from .data import chunk_sizes
from .options import option_name


def resolve_device(args):
    """--device auto|cpu|cuda -> "cpu" or "cuda". Raises InputError for cuda without a GPU."""
    if args.device == "auto":
        return "cuda" if torch.cuda.is_available() else "cpu"
    if args.device == "cuda" and not torch.cuda.is_available():
        raise InputError("--device cuda: no CUDA device (torch.cuda.is_available() is False)")
    return args.device


def build_config(args, device, bundle, host_data):
    """The run configuration every program and process reads (picklable; `start` holds the checked
    bundle or None): the result file's config. optimizer ("sgd", "adam" or "adamw"), lr,
    momentum (sgd), weight_decay, betas and eps (adam, adamw) come from the bundle or the
    options. Raises InputError when the options do not fit the device or the data."""
    if device == "cpu" and args.precision == "tf32":
        raise InputError("--precision tf32: the CPU runs fp32 only")
    precision = args.precision or ("tf32" if device == "cuda" else "fp32")
    if bundle is not None:
        c = bundle["config"]
        spec = bundle["spec"]
        train = dict(global_batch=c["global_batch"], steps=c["steps"],
                     warmup_steps=c["warmup_steps"], steps_per_epoch=c["steps_per_epoch"],
                     optimizer=c["optimizer"], lr=c["lr"], momentum=c["momentum"],
                     weight_decay=c["weight_decay"], betas=list(c["betas"]), eps=c["eps"],
                     seed=c["seed"], bucket_cap_mb=c["bucket_cap_mb"], comm_hook=c["comm_hook"],
                     start_powersgd_iter=c.get("start_powersgd_iter"))
        data = {"data": "start bundle", "data_dir": None, "synthetic_samples": None,
                "dataset_samples": bundle["train"]["y"][1][0],
                "test_samples": bundle["test"]["y"][1][0] if bundle["test"] else None}
    else:
        spec = {"workload": "mlp", "input": [1, 28, 28], "classes": NUM_CLASSES,
                "hidden": args.hidden, "channels": None}
        train = dict(global_batch=args.batch_size, steps=args.steps,
                     warmup_steps=args.warmup_steps, steps_per_epoch=None,
                     optimizer=args.optimizer, lr=args.lr, momentum=args.momentum,
                     weight_decay=args.weight_decay, betas=list(args.betas), eps=args.eps,
                     seed=args.seed, bucket_cap_mb=args.bucket_cap_mb, comm_hook="allreduce")
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
        "loss": "CrossEntropyLoss (mean)",
        "timeout": args.timeout,
        "start": bundle,
    }


def program_plan(args, cfg, program, gpu_count):
    """(world_size, threads per process) for program, or (None, reason) when it is skipped."""
    cpu = cfg["device"] == "cpu"
    if program == "plain":
        world_size = 1
    elif cpu:
        world_size = args.world_size or 2
    else:
        world_size = args.world_size or gpu_count
    if program != "plain":
        if world_size < 2:
            unit = "processes" if cpu else "GPUs"
            return None, (f"{program} skipped: it needs 2 or more {unit}, "
                          f"{option_name(args, 'world_size')} {world_size}"
                          + ("" if cpu else f" ({gpu_count} visible)"))
        if program == "rpc_ps" and not cpu:
            return None, "rpc_ps skipped: it runs on the CPU only (--device cpu)"
        if program == "ddp" and cfg["global_batch"] % world_size != 0:
            return None, (f"ddp skipped: batch {cfg['global_batch']} does not split evenly over "
                          f"{world_size} ranks")
        if program == "ddp" and cpu and cfg.get("comm_hook") == "bf16":
            return None, ("ddp skipped: bf16_compress_hook needs a bfloat16 all_reduce, which "
                          f"PyTorch {torch.__version__}'s gloo lacks (Invalid scalar type)")
        if cpu and program in ("dataparallel", "rpc_ps"):
            idle = chunk_sizes(cfg["global_batch"], world_size).count(0)
            if idle:
                return None, (f"{program} skipped: batch {cfg['global_batch']} in torch.chunk "
                              f"chunks leaves {idle} of {world_size} processes without samples")
    if args.threads is not None:
        threads = args.threads
    elif cpu:
        threads = max(1, (os.cpu_count() or 1) // world_size)
    else:
        threads = None
    return world_size, threads
