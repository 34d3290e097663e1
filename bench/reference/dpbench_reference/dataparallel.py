"""nn.DataParallel's data flow (torch/nn/parallel/data_parallel.py: replicate, scatter,
parallel_apply, gather, then the gradients reduced onto the first device) written with gloo
collectives between CPU processes, rank 0 the root that alone steps the optimizer.
"""

import math

from .common import dist, nn, torch
from .data import Problem, chunk_sizes, steps_per_epoch
from .model import make_optimizer
from .programs import init_process_group, rank_result
from .training import evaluate, timed_steps


def _flatten_into(flat, tensors):
    """Copies tensors (any shapes) into the 1-d buffer flat, back to back (coalescing)."""
    offset = 0
    for t in tensors:
        n = t.numel()
        flat[offset:offset + n].copy_(t.reshape(-1))
        offset += n


def _unflatten_from(flat, tensors):
    """The inverse of _flatten_into: copies slices of flat back into tensors (in place)."""
    offset = 0
    with torch.no_grad():
        for t in tensors:
            n = t.numel()
            t.copy_(flat[offset:offset + n].view_as(t))
            offset += n


def _pad_rows(t, rows):
    """t [k, ...] -> contiguous [rows, ...], zero rows appended (gloo's scatter and gather take
    equal sizes; torch.chunk's last chunks are smaller)."""
    if t.shape[0] == rows:
        return t.contiguous()
    return torch.cat([t, t.new_zeros((rows - t.shape[0], *t.shape[1:]))])


def _dense_grad(p):
    """p's gradient as a dense tensor: zeros when it has none."""
    if p.grad is None:
        return torch.zeros_like(p)
    return p.grad.to_dense() if p.grad.is_sparse else p.grad


def _touched_rows(grad):
    """A dense [rows, dim] gradient as a sparse one of its nonzero rows (a table's summed
    gradient: a row no rank looked up is all zeros)."""
    rows = grad.abs().sum(dim=1).nonzero().flatten()
    return torch.sparse_coo_tensor(rows.unsqueeze(0), grad[rows], grad.shape).coalesce()


class _DataParallelFlow:
    """One rank's buffers and model for the DataParallel flow of dataparallel_rank; step(t) is one
    global step, its phases the methods below, in the order they run. Shapes: x_chunk
    [ceil(B/N), features], grad_chunk and logits_out [ceil(B/N), classes] (the padded chunk);
    b is this rank's real rows, possibly fewer or 0."""

    def __init__(self, rank, world_size, cfg, problem):
        self.rank, self.world_size, self.problem = rank, world_size, problem
        model = self.model = problem.model
        self.params = list(model.parameters())
        self.state = self.params + [b for b in model.buffers() if b.is_floating_point()]
        self.flat_state = torch.zeros(sum(t.numel() for t in self.state))
        self.flat_grad = torch.zeros(sum(p.numel() for p in self.params))
        self.sizes = chunk_sizes(cfg["global_batch"], world_size)
        self.rows, self.b = self.sizes[0], self.sizes[rank]
        features = math.prod(cfg["model"]["input"])
        self.classes = cfg["model"]["classes"]
        self.x_chunk = torch.zeros(self.rows, features)
        self.grad_chunk = torch.zeros(self.rows, self.classes)
        self.logits_out = torch.zeros(self.rows, self.classes)
        self.optimizer = make_optimizer(cfg, model) if rank == 0 else None
        self.loss_fn = nn.CrossEntropyLoss()

    def step(self, t):
        """Global step t. Returns rank 0's loss over the global batch (0-d tensor), else None."""
        self._replicate()
        y = self._scatter_batch(t)
        logits = self._parallel_apply()
        loss = self._gather_and_loss(y)
        self._backward_and_reduce(logits)
        if self.rank == 0:
            self._root_step()
            return loss.detach()
        return None

    def _replicate(self):
        """1. Rank 0's parameters and floating-point buffers, broadcast in one flat buffer."""
        if self.rank == 0:
            _flatten_into(self.flat_state, [s.detach() for s in self.state])
        dist.broadcast(self.flat_state, src=0)
        if self.rank != 0:
            _unflatten_from(self.flat_state, self.state)

    def _scatter_batch(self, t):
        """2. Rank 0 fetches the global batch and scatters x in padded torch.chunk chunks into
        x_chunk. Returns the global batch's labels on rank 0, None elsewhere."""
        if self.rank != 0:
            dist.scatter(self.x_chunk, None, src=0)
            return None
        idx = self.problem.order.global_batch_indices(t)
        x, y = self.problem.x[idx], self.problem.y[idx]
        chunks = [_pad_rows(c, self.rows) for c in x.split(self.sizes)]
        dist.scatter(self.x_chunk, chunks, src=0)
        return y

    def _parallel_apply(self):
        """3. Forward of this rank's chunk (None for an empty one); the logits are copied into
        logits_out for the gather."""
        self.model.zero_grad(set_to_none=False)
        b = self.b
        logits = self.model(self.x_chunk[:b]) if b > 0 else None
        if logits is not None:
            self.logits_out[:b].copy_(logits.detach())
        return logits

    def _gather_and_loss(self, y):
        """4. The logits gathered to rank 0, which takes the mean cross-entropy over the global
        batch and scatters d(loss)/d(logits) into every rank's grad_chunk. Returns the loss on
        rank 0, None elsewhere."""
        rows, classes, sizes = self.rows, self.classes, self.sizes
        gathered = [torch.empty(rows, classes) for _ in range(self.world_size)] \
            if self.rank == 0 else None
        dist.gather(self.logits_out, gathered, dst=0)
        if self.rank != 0:
            dist.scatter(self.grad_chunk, None, src=0)
            return None
        out = torch.cat([g[:s] for g, s in zip(gathered, sizes)]).requires_grad_()
        loss = self.loss_fn(out, y)
        loss.backward()
        grads = [_pad_rows(g, rows) for g in out.grad.split(sizes)]
        dist.scatter(self.grad_chunk, grads, src=0)
        return loss

    def _backward_and_reduce(self, logits):
        """5. Backward of this rank's chunk, then every rank's gradients summed onto rank 0 with
        one dist.reduce over flat_grad (a parameter without a gradient counts as zeros; a sparse
        one, nn.EmbeddingBag(sparse=True)'s, as its dense sum: zero where no row was touched)."""
        if logits is not None:
            logits.backward(self.grad_chunk[:self.b])
        _flatten_into(self.flat_grad, [_dense_grad(p) for p in self.params])
        dist.reduce(self.flat_grad, dst=0, op=dist.ReduceOp.SUM)

    def _root_step(self):
        """6. Rank 0 loads the summed gradients and alone steps the optimizer. A table's summed
        gradient goes back as a sparse tensor of the rows it touched, so the tables' optimizer
        (SGD without momentum, or Adagrad) steps those rows alone, as on a replica's own."""
        sparse = {id(p) for p in self.params if p.grad is not None and p.grad.is_sparse}
        for p in self.params:
            if p.grad is None or p.grad.is_sparse:
                p.grad = torch.zeros_like(p)
        _unflatten_from(self.flat_grad, [p.grad for p in self.params])
        for p in self.params:
            if id(p) in sparse:
                p.grad = _touched_rows(p.grad)
        self.optimizer.step()


def dataparallel_rank(rank, world_size, cfg, init_method):
    """nn.DataParallel's data flow over gloo collectives, rank 0 the root. Each step:
    1. replicate: rank 0 broadcasts its parameters and floating-point buffers (BatchNorm running
       statistics), coalesced into one flat buffer;
    2. scatter: rank 0 fetches the global batch and scatters it in torch.chunk chunks
       (ceil(B/N) rows, the last ones smaller, padded for dist.scatter);
    3. parallel_apply: each rank runs forward on its chunk (BatchNorm uses the chunk's own
       statistics; only rank 0's running-statistic updates survive the next broadcast);
    4. gather: the logits go to rank 0, which takes the mean cross-entropy over the global batch
       and scatters d(loss)/d(logits) back in the same chunks;
    5. each rank backpropagates its chunk's logits with that gradient; the gradients are summed
       onto rank 0 with one dist.reduce over a flat buffer, after every rank's backward;
    6. rank 0 alone runs optimizer.step().
    Rank 0 also holds the only copy of the training data. Returns [this rank's result dict]
    (programs.rank_result) with rank 0's global loss per step (the other ranks' are None)."""
    dev = torch.device("cpu")
    init_process_group(cfg, rank, world_size, init_method)
    try:
        spe = steps_per_epoch(cfg, "dataparallel", world_size)
        problem = Problem(cfg, dev, need_data=rank == 0, need_test=rank == 0,
                          steps_per_epoch=spe)
        flow = _DataParallelFlow(rank, world_size, cfg, problem)
        times, losses, wall = timed_steps(cfg, problem.order, flow.step)
        accuracy = evaluate(problem.model, problem.test_x, problem.test_y) if rank == 0 else None
        result = rank_result(rank, times, wall, flow.b, problem, losses, accuracy)
        dist.barrier()
    finally:
        dist.destroy_process_group()
    return [result]
