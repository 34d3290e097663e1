"""Running a PyTorch program in spawned processes (torch.multiprocessing.spawn): the per-process
entry, the ranks' results handed back through files, and the program's run record.
"""

import json
import os
import socket
import sys
import tempfile

from .common import mp
from .data import steps_per_epoch
from .dataparallel import dataparallel_rank
from .programs import ddp_rank, plain_rank
from .results import run_record
from .rpc_ps import rpc_ps_rank
from .runtime import child_thread_env, current_threads, set_precision, set_threads


def _free_port():
    """A free TCP port on 127.0.0.1 for the ranks' rendezvous (free when asked)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def spawn_ranks(cfg, program, world_size, threads):
    """Runs _rank_main in world_size spawned processes (torch.multiprocessing.spawn, which
    terminates the others and raises when one fails) with OPENBLAS_NUM_THREADS/OMP_NUM_THREADS
    = threads in their environment. Returns the ranks' result dicts in rank order."""
    init_method = f"tcp://127.0.0.1:{_free_port()}"
    with tempfile.TemporaryDirectory(prefix=f"pytorch-reference-{program}-") as result_dir:
        with child_thread_env(threads):
            mp.spawn(_rank_main, args=(program, world_size, cfg, threads, init_method, result_dir),
                     nprocs=world_size, join=True)
        ranks = []
        for r in range(world_size):
            with open(os.path.join(result_dir, f"rank{r}.json")) as f:
                ranks.append(json.load(f))
    return ranks


def _rank_main(rank, program, world_size, cfg, threads, init_method, result_dir):
    """Entry of one spawned process: sets its threads (and precision), runs the program's rank
    function, which returns its result dict(s), writes them to result_dir/rank<r>.json and ends
    the process with os._exit(0), skipping the interpreter's teardown (see comm_hooks.py: a DDP
    model with a Python comm hook can deadlock PyTorch 1.13 when it is destroyed)."""
    thread_info = set_threads(threads) if threads is not None else current_threads()
    if cfg["device"] == "cuda":
        set_precision(cfg["precision"])
    fn = {"plain": plain_rank, "ddp": ddp_rank, "dataparallel": dataparallel_rank,
          "rpc_ps": rpc_ps_rank}[program]
    results = fn(rank, world_size, cfg, init_method)
    for result in results:
        result.setdefault("threads", thread_info)
        with open(os.path.join(result_dir, f"rank{result['rank']}.json"), "w") as f:
            json.dump(result, f)
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)


def run_spawned(cfg, program, world_size, threads):
    """Runs `program` in world_size spawned processes and builds its run record."""
    ranks = spawn_ranks(cfg, program, world_size, threads)
    if program == "ddp":
        # The global batch's loss is the mean of the ranks' local means (equal local batches).
        step_losses = [sum(vs) / len(vs) for vs in zip(*(r["step_losses"] for r in ranks))]
        comm = f"nccl (bucket_cap_mb {cfg['bucket_cap_mb']:g})" if cfg["device"] == "cuda" \
            else "gloo"
    else:
        step_losses = ranks[0]["step_losses"]
        comm = {"plain": "none",
                "dataparallel": "gloo (DataParallel flow: broadcast/scatter/gather/reduce)",
                "rpc_ps": "rpc (TensorPipe)"}[program]
    spe = steps_per_epoch(cfg, program, world_size)
    return run_record(cfg, program, world_size, world_size, ranks, step_losses, spe, comm)
