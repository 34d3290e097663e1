"""Process settings: intra-op threads (torch's OpenMP pool and OpenBLAS's own), the environment
spawned ranks inherit, tf32, peak RSS, and releasing cached CUDA memory between programs.
"""

import contextlib
import ctypes
import gc
import os
import resource

from .common import torch


def loaded_openblas():
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
    None when no OpenBLAS is loaded, "cpus_allowed": the CPUs this process may run on}."""
    torch.set_num_threads(threads)
    info = {"torch": torch.get_num_threads(), "openblas": None, "cpus_allowed": cpus_allowed()}
    lib = loaded_openblas()
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


def cpus_allowed():
    """How many CPUs this process's affinity lets it run on."""
    return len(os.sched_getaffinity(0))


def current_threads():
    """This process's thread settings, untouched: {"torch": n, "openblas": None, "cpus_allowed"}."""
    return {"torch": torch.get_num_threads(), "openblas": None, "cpus_allowed": cpus_allowed()}


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


def set_precision(precision):
    """tf32 tensor-core matmuls on or off; set in every process (spawned ranks too)."""
    torch.backends.cuda.matmul.allow_tf32 = precision == "tf32"
    torch.backends.cudnn.allow_tf32 = precision == "tf32"


def release_cuda():
    """Garbage-collects and empties the CUDA caching allocator (when CUDA is usable), between
    programs."""
    gc.collect()
    if torch.cuda.is_available():
        torch.cuda.empty_cache()
