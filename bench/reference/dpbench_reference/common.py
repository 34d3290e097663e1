"""Names every module of the reference shares: PyTorch (imported once, None when it cannot be
imported, so that the command line can say so and exit 2), the constants of the model, the data
and the result file, and InputError.
"""

from pathlib import Path

try:
    import torch
    import torch.distributed as dist
    import torch.multiprocessing as mp
    from torch import nn
    from torch.nn.parallel import DistributedDataParallel

    TORCH_IMPORT_ERROR = None
except (ImportError, OSError) as e:  # not installed (ModuleNotFoundError), or a broken install
    torch = dist = mp = nn = DistributedDataParallel = None
    TORCH_IMPORT_ERROR = e

PROG = "pytorch_reference"
# bench/reference/dpbench_reference/common.py -> the repository's root.
REPO_ROOT = Path(__file__).resolve().parents[3]
# The PyTorch programs the reference runs (--programs), on each device.
CUDA_PROGRAMS = ("plain", "dataparallel", "ddp")
CPU_PROGRAMS = ("plain", "dataparallel", "ddp", "rpc_ps")
PROGRAMS = CPU_PROGRAMS
# The dpbench mode each PyTorch program stands for (plain: dpbench's 1-rank runs).
DPBENCH_EQUIVALENT = {"plain": None, "dataparallel": "ps", "ddp": "allreduce", "rpc_ps": "ps"}
INPUT_FEATURES = 28 * 28
NUM_CLASSES = 10
FASHION_MNIST_MEAN, FASHION_MNIST_STD = 0.2860, 0.3530
DEFAULT_DATA_DIR = "/usr/share/datasets/fashion-mnist"
START_SCHEMA = {"name": "dpbench-start", "version": 1}
# Version 4: a run record names its PyTorch program `program` (3 and before: `mode`).
RESULT_SCHEMA = {"name": "dpbench-pytorch-reference", "version": 4}
# The optimizers (dpbench's --optimizer names): torch.optim.SGD, Adam and AdamW.
OPTIMIZERS = ("sgd", "adam", "adamw")
# start.json's optional optimizer keys, with the values they take when absent.
OPTIMIZER_DEFAULTS = {"optimizer": "sgd", "betas": [0.9, 0.999], "eps": 1e-8}
# Options a start bundle fixes (by argparse dest), with the defaults they take without one.
BUNDLE_FIXED_DEFAULTS = {
    "hidden": [4096, 4096], "batch_size": 1024, "steps": 200, "warmup_steps": 20, "lr": 0.1,
    "momentum": 0.9, "weight_decay": 0.0, "seed": 0, "bucket_cap_mb": 25.0, "data": "synthetic",
    "data_dir": None, "synthetic_samples": 60000, **OPTIMIZER_DEFAULTS,
}


class InputError(Exception):
    """Bad input (data files, a start bundle, options that only the device can check): one line,
    exit 2."""
