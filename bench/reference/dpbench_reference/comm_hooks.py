"""DDP communication hooks as dpbench's --comm-hook names them: PyTorch's default_hooks
(fp16_compress_hook, bf16_compress_hook) and powerSGD_hook, registered on a
DistributedDataParallel model."""

import math
from collections import defaultdict

from .bundle import powersgd_rank
from .common import torch

# Models with a Python hook, kept alive until the process ends with os._exit (spawn._rank_main):
# in PyTorch 1.13 destroying such a model's Reducer joins gloo's worker thread while holding the
# GIL, and a worker still freeing a tensor the hook's futures held waits for the GIL: a deadlock
# (seen as a rank process spinning after its peers exited).
_HOOKED_MODELS = []


def register_comm_hook(ddp_model, cfg):
    """Registers cfg['comm_hook'] on ddp_model: nothing for 'allreduce' (DDP's own all-reduce),
    default_hooks.<name>_compress_hook for fp16 and bf16, and for 'powersgd:R' powerSGD_hook with
    PowerSGDState(matrix_approximation_rank=R, start_powerSGD_iter=cfg['start_powersgd_iter'],
    min_compression_rate=2, use_error_feedback=True, warm_start=True) whose first Qs are the start
    bundle's (powersgd_q), so that both sides start PowerSGD from the same matrices."""
    hook = cfg.get("comm_hook", "allreduce")
    if hook == "allreduce":
        return
    _HOOKED_MODELS.append(ddp_model)
    rank = powersgd_rank(hook)
    if not rank:
        from torch.distributed.algorithms.ddp_comm_hooks import default_hooks
        ddp_model.register_comm_hook(None, getattr(default_hooks, f"{hook}_compress_hook"))
        return
    from torch.distributed.algorithms.ddp_comm_hooks import powerSGD_hook as psgd
    state = psgd.PowerSGDState(process_group=None, matrix_approximation_rank=rank,
                               start_powerSGD_iter=cfg["start_powersgd_iter"],
                               min_compression_rate=2, use_error_feedback=True, warm_start=True)
    initial = _initial_qs(cfg["start"]["powersgd_q"])
    names = {id(p): n for n, p in ddp_model.module.named_parameters()}

    def hook_with_bundle_qs(hook_state, bucket):
        if hook_state.iter >= hook_state.start_powerSGD_iter and \
                bucket.index() not in hook_state.p_memory_dict:
            _set_initial_memory(hook_state, bucket, [initial.get(names[id(p)]) for p in bucket.parameters()])
        return psgd.powerSGD_hook(hook_state, bucket)

    ddp_model.register_comm_hook(state, hook_with_bundle_qs)


def _initial_qs(section):
    """{parameter name: Q [cols, r] float32 tensor} from the bundle's powersgd_q table."""
    import numpy as np
    path, table = section
    flat = np.fromfile(path, dtype="<f4")
    return {name: torch.from_numpy(flat[offset:offset + math.prod(shape)].reshape(shape).copy())
            for name, shape, offset in table}


def _set_initial_memory(state, bucket, qs):
    """Fills state.p_memory_dict and q_memory_dict for bucket as powerSGD_hook lays them out
    (compressed tensors grouped by matrix shape, in order of first appearance), the Qs from `qs`
    (one per parameter of the bucket, None where it is not compressed). powerSGD_hook then
    orthogonalises them instead of drawing random ones."""
    groups = defaultdict(list)
    p_size = 0
    for grad, q in zip(bucket.gradients(), qs):
        if q is None:
            continue
        rows = grad.shape[0] if grad.dim() > 0 else 1
        groups[(rows, grad.numel() // rows)].append(q)
        p_size += rows * q.shape[1]
    ordered = [q.reshape(-1) for group in groups.values() for q in group]
    dtype = bucket.buffer().dtype
    state.p_memory_dict[bucket.index()] = torch.zeros(p_size, dtype=dtype)
    state.q_memory_dict[bucket.index()] = torch.cat(ordered).to(dtype) if ordered else torch.zeros(0, dtype=dtype)
