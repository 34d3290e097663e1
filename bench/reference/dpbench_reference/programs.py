"""The programs that need no hand-written communication: on CUDA, plain eager on one GPU and
nn.DataParallel, both in this process; in spawned processes, plain eager on the CPU and
DistributedDataParallel (gloo on the CPU, NCCL on CUDA). dataparallel.py and rpc_ps.py hold the
CPU's DataParallel flow and parameter server.
"""

import datetime

from .comm_hooks import register_comm_hook
from .common import DistributedDataParallel, dist, nn, torch
from .data import Problem, chunk_sizes, steps_per_epoch
from .model import make_optimizer
from .results import run_record
from .runtime import peak_rss_bytes
from .training import cuda_sync, evaluate, no_sync, timed_steps, train_step


def rank_result(rank, times, timed_wall_s, local_batch, problem, step_losses, test_accuracy=None):
    """A CPU rank's result dict (peak RSS taken now), with the names of the parameters whose
    last gradient was a sparse tensor (observed, e.g. nn.EmbeddingBag(sparse=True)'s)."""
    sparse = [n for n, p in problem.model.named_parameters() if p.grad is not None and p.grad.is_sparse]
    return {"rank": rank, "times": times, "timed_wall_s": timed_wall_s, "local_batch": local_batch,
            "num_params": problem.num_params(), "peak_rss_bytes": peak_rss_bytes(),
            "dataset_bytes": problem.dataset_bytes, "step_losses": step_losses,
            "test_accuracy": test_accuracy, "sparse_gradients": sparse}


def run_cuda_plain(cfg, host_data, threads):
    """Plain PyTorch eager on cuda:0. threads: this process's thread settings (recorded).
    Returns the run record."""
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

    times, losses, wall = timed_steps(cfg, problem.order, step, cuda_sync([dev]))
    rank = {"rank": 0, "times": times, "timed_wall_s": wall, "local_batch": cfg["global_batch"],
            "num_params": problem.num_params(), "peak_bytes": torch.cuda.max_memory_allocated(dev),
            "dataset_bytes": problem.dataset_bytes, "threads": threads,
            "test_accuracy": evaluate(model, problem.test_x, problem.test_y)}
    return run_record(cfg, "plain", 1, 1, [rank], losses, spe, "none")


def run_cuda_dataparallel(cfg, host_data, world_size, threads):
    """nn.DataParallel over cuda:0..world_size-1: the full batch on cuda:0, scattered in
    ceil(B/n) chunks, parameters broadcast every step, outputs gathered and the loss taken on
    cuda:0, gradients reduce-added onto cuda:0, which alone steps the optimizer
    (torch/nn/parallel/data_parallel.py). Returns the run record."""
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

    times, losses, wall = timed_steps(cfg, problem.order, step, cuda_sync(devices))
    local = chunk_sizes(cfg["global_batch"], world_size)
    warnings = []
    idle = sum(1 for b in local if b == 0)
    if idle:
        warnings.append(f"batch {cfg['global_batch']} in chunks of {local[0]}: {idle} of "
                        f"{world_size} GPUs get no samples")
    peaks = [torch.cuda.max_memory_allocated(d) for d in devices]  # before the evaluation
    accuracy = evaluate(model, problem.test_x, problem.test_y)
    # One thread times the step for every replica, so every rank carries rank 0's samples.
    ranks = [{"rank": r, "times": times, "timed_wall_s": wall, "local_batch": local[r],
              "num_params": problem.num_params(), "peak_bytes": peaks[r],
              "dataset_bytes": problem.dataset_bytes if r == 0 else 0,
              "threads": threads, "test_accuracy": accuracy}
             for r in range(world_size)]
    return run_record(cfg, "dataparallel", world_size, 1, ranks, losses, spe,
                      "torch.nn.parallel (broadcast_coalesced / reduce_add_coalesced)", warnings)


def plain_rank(rank, world_size, cfg, init_method):
    """Plain eager training in one CPU process."""
    spe = steps_per_epoch(cfg, "plain", 1)
    problem = Problem(cfg, torch.device("cpu"), steps_per_epoch=spe)
    model, loss_fn = problem.model, nn.CrossEntropyLoss()
    optimizer = make_optimizer(cfg, model)

    def step(t):
        idx = problem.order.global_batch_indices(t)
        return train_step(model, optimizer, loss_fn, problem.x[idx], problem.y[idx])

    times, losses, wall = timed_steps(cfg, problem.order, step)
    accuracy = evaluate(model, problem.test_x, problem.test_y)
    return [rank_result(0, times, wall, cfg["global_batch"], problem, losses, accuracy)]


def init_process_group(cfg, rank, world_size, init_method):
    """torch.distributed's process group for this rank: NCCL on CUDA, gloo on the CPU, at
    init_method (tcp://127.0.0.1:PORT), with cfg['timeout'] seconds for peers."""
    backend = "nccl" if cfg["device"] == "cuda" else "gloo"
    dist.init_process_group(backend, init_method=init_method, world_size=world_size, rank=rank,
                            timeout=datetime.timedelta(seconds=cfg["timeout"]))


def ddp_rank(rank, world_size, cfg, init_method):
    """One DistributedDataParallel rank (torch/nn/parallel/distributed.py): gloo on the CPU,
    NCCL on cuda:rank; the rank's DistributedSampler shard of every global batch
    (B / world_size samples), bucket_cap_mb buckets, broadcast_buffers (the default: rank 0's
    BatchNorm buffers before every forward). Returns [this rank's result dict]."""
    cuda = cfg["device"] == "cuda"
    dev = torch.device("cuda", rank) if cuda else torch.device("cpu")
    if cuda:
        torch.cuda.set_device(dev)
    init_process_group(cfg, rank, world_size, init_method)
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
        register_comm_hook(ddp_model, cfg)
        optimizer = make_optimizer(cfg, ddp_model)
        loss_fn = nn.CrossEntropyLoss()
        local_batch = cfg["global_batch"] // world_size

        def step(t):
            idx = problem.order.ddp_batch_indices(t, rank, world_size)
            return train_step(ddp_model, optimizer, loss_fn, problem.x[idx], problem.y[idx])

        times, losses, wall = timed_steps(cfg, problem.order, step,
                                          cuda_sync([dev]) if cuda else no_sync)
        peak = torch.cuda.max_memory_allocated(dev) if cuda else None  # before the evaluation
        accuracy = evaluate(problem.model, problem.test_x, problem.test_y) if rank == 0 else None
        result = rank_result(rank, times, wall, local_batch, problem, losses, accuracy)
        if cuda:
            result["peak_bytes"] = peak
        dist.barrier(device_ids=[rank] if cuda else None)
    finally:
        dist.destroy_process_group()
    return [result]
