"""rpc_ps: the batch-updating parameter server of PyTorch's RPC tutorial ("Implementing Batch RPC
Processing Using Asynchronous Executions") over TensorPipe, process 0 holding the server and
trainer 0, processes 1..N-1 the other trainers.
"""

import threading

from .common import nn, torch
from .data import Problem, chunk_sizes, steps_per_epoch
from .model import initial_model, make_optimizer
from .programs import rank_result
from .training import evaluate, timed_steps


class BatchUpdateParameterServer:
    """The batch-updating parameter server of PyTorch's RPC tutorial ("Implementing Batch RPC
    Processing Using Asynchronous Executions"): it holds the model and the optimizer; each
    trainer sends its gradients, and when all world_size trainers have reported for the step the
    server steps once and resolves every trainer's future with the new parameters.
    Trainer r's gradient is that of its chunk's mean loss, so the server combines
    sum_r (b_r / B) grad_r (b_r: trainer r's chunk of the global batch B), summed in rank order,
    which is the gradient of the global batch's mean loss; the step's loss is
    sum_r (b_r / B) loss_r."""

    def __init__(self, cfg, model, world_size):
        self.model = model
        self.params = list(model.parameters())
        for p in self.params:
            p.grad = torch.zeros_like(p)
        self.optimizer = make_optimizer(cfg, model)
        sizes = chunk_sizes(cfg["global_batch"], world_size)
        self.weights = [b / cfg["global_batch"] for b in sizes]
        self.world_size = world_size
        self.lock = threading.Lock()
        self.pending = {}
        self.future_model = torch.futures.Future()

    def update_and_fetch_model(self, rank, grads, loss):
        """Records trainer rank's gradients (list in parameter order) and loss; returns a future
        of (new parameters, step loss) resolved when the step's last trainer has reported."""
        with self.lock:
            self.pending[rank] = (grads, loss)
            fut = self.future_model
            if len(self.pending) == self.world_size:
                step_loss = 0.0
                with torch.no_grad():
                    for r in range(self.world_size):
                        grads_r, loss_r = self.pending[r]
                        w = self.weights[r]
                        for p, g in zip(self.params, grads_r):
                            p.grad.add_(g, alpha=w)
                        step_loss += w * loss_r
                self.optimizer.step()
                for p in self.params:
                    p.grad.zero_()
                self.pending = {}
                fut.set_result(([p.detach().clone() for p in self.params], step_loss))
                self.future_model = torch.futures.Future()
        return fut


_PS = None  # process 0's BatchUpdateParameterServer (rpc_ps)


def _ps_update_and_fetch_model(rank, grads, loss):
    """The server's entry for trainers 1..N-1 (called by RPC on process 0, which holds _PS).
    Marked @rpc.functions.async_execution below: it returns the server's future, and the RPC
    reply is sent when that future completes."""
    return _PS.update_and_fetch_model(rank, grads, loss)


if torch is not None:
    try:
        from torch.distributed import rpc as _rpc
        _ps_update_and_fetch_model = _rpc.functions.async_execution(_ps_update_and_fetch_model)
    except (ImportError, AttributeError):  # a torch without RPC: rpc_ps fails when it runs
        pass


def rpc_ps_rank(rank, world_size, cfg, init_method):
    """One rpc_ps process: trainer `rank`, and on process 0 also the server (co-located with
    trainer 0, which calls it directly; the others through rpc_async over TensorPipe). Trainer r
    takes chunk r (torch.chunk) of each global batch, computes its mean loss and gradient, sends
    them, waits for the server's new parameters and loads them. Each step is timed from fetching
    the batch to loading the new parameters. Process 0 returns the step losses of the server
    (the weighted sum); the other processes' are their local chunk losses."""
    global _PS
    from torch.distributed import rpc
    dev = torch.device("cpu")
    spe = steps_per_epoch(cfg, "rpc_ps", world_size)
    problem = Problem(cfg, dev, need_test=rank == 0, steps_per_epoch=spe)
    if rank == 0:
        _PS = BatchUpdateParameterServer(cfg, initial_model(cfg), world_size)
    options = rpc.TensorPipeRpcBackendOptions(init_method=init_method,
                                              rpc_timeout=cfg["timeout"])
    rpc.init_rpc(f"trainer{rank}", rank=rank, world_size=world_size, rpc_backend_options=options)
    graceful = False
    try:
        model, loss_fn = problem.model, nn.CrossEntropyLoss()
        params = list(model.parameters())
        sizes = chunk_sizes(cfg["global_batch"], world_size)
        b, start = sizes[rank], sum(sizes[:rank])

        def step(t):
            idx = problem.order.global_batch_indices(t)[start:start + b]
            model.zero_grad(set_to_none=True)
            if b > 0:
                loss = loss_fn(model(problem.x[idx]), problem.y[idx])
                loss.backward()
                grads, loss_value = [p.grad for p in params], loss.item()
            else:
                grads, loss_value = [torch.zeros_like(p) for p in params], 0.0
            if rank == 0:
                fut = _PS.update_and_fetch_model(rank, grads, loss_value)
            else:
                fut = rpc.rpc_async("trainer0", _ps_update_and_fetch_model,
                                    args=(rank, grads, loss_value))
            new_params, step_loss = fut.wait()
            with torch.no_grad():
                for p, v in zip(params, new_params):
                    p.copy_(v)
            return step_loss if rank == 0 else loss_value

        times, losses, wall = timed_steps(cfg, problem.order, step)
        # Trainer 0's model: the server's final parameters, trainer 0's BatchNorm statistics.
        accuracy = evaluate(model, problem.test_x, problem.test_y) if rank == 0 else None
        result = rank_result(rank, times, wall, b, problem, losses, accuracy)
        graceful = True
    finally:
        # Graceful: wait for the other trainers' outstanding calls; after an error, do not wait.
        rpc.shutdown(graceful=graceful)
        _PS = None
    return [result]
