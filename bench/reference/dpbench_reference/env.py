"""The result file's env: versions of Python, PyTorch, CUDA, cuDNN and NCCL, the GPUs, the loaded
OpenBLAS, the git commit and the host.
"""

import importlib
import os
import platform
import socket
import subprocess

from .common import REPO_ROOT, torch
from .runtime import loaded_openblas


def _command_output(cmd):
    """stdout of cmd (argv list, 10 s limit), stripped; None when it fails or prints nothing."""
    try:
        out = subprocess.run(cmd, capture_output=True, text=True, timeout=10, check=True)
        return out.stdout.strip() or None
    except (OSError, subprocess.SubprocessError):
        return None


def collect_env():
    """The result file's env object (keys in bench/reference/README.md, "The result file").
    Runs git and nvidia-smi; anything unknown is null."""
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
        "openblas": loaded_openblas(),
        "omp_wait_policy": os.environ.get("OMP_WAIT_POLICY"),
        "torch_parallel_backend": next((line.split(":", 1)[1].strip() for line in
                                        torch.__config__.parallel_info().splitlines()
                                        if line.startswith("ATen parallel backend")), None),
    }
