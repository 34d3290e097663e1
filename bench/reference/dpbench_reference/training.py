"""One training step, the timed loop around it (timed as dpbench times a step) and the test-set
evaluation.
"""

import time

from .common import torch


def train_step(model, optimizer, loss_fn, x, y):
    """Forward, mean softmax cross-entropy, backward, optimizer step. Returns the loss as a 0-d
    device tensor (not .item(): no host synchronisation inside the step beyond the caller's)."""
    optimizer.zero_grad(set_to_none=True)
    loss = loss_fn(model(x), y)
    loss.backward()
    optimizer.step()
    return loss.detach()


def no_sync():
    """The CPU's end-of-step synchronisation: nothing to wait for."""


def cuda_sync(devices):
    """A sync() for timed_steps: torch.cuda.synchronize on every device in devices."""
    def sync():
        for d in devices:
            torch.cuda.synchronize(d)
    return sync


def timed_steps(cfg, order, step, sync=no_sync):
    """Runs cfg['steps'] steps: step(t) does global step t from fetching its batch to the end of
    the optimizer step and returns its loss (float, 0-d tensor or None). Each step's wall-clock
    time (time.perf_counter) ends after sync() (CUDA: a synchronize of every device involved).
    The epoch's shuffle is done before the timer starts.
    Returns (step_times_s of the steps after the warm-up, [loss as float or None] for every
    step, timed_wall_s): the last is the wall-clock time from the start of the first timed step
    to the end of the last, what happens between steps included, as dpbench's timed_wall_s
    (0.0 when no step is timed)."""
    times, losses = [], []
    first = last = None
    sync()
    for t in range(cfg["steps"]):
        order.prepare(t)
        t0 = time.perf_counter()
        loss = step(t)
        sync()
        end = time.perf_counter()
        if t >= cfg["warmup_steps"]:
            times.append(end - t0)
            first = t0 if first is None else first
            last = end
        losses.append(loss)
    wall = last - first if first is not None else 0.0
    return times, [None if v is None else float(v) for v in losses], wall


def evaluate(model, x, y, batch=1024):
    """Fraction of correctly classified samples of (x, y) with the model in eval mode (BatchNorm
    uses its running statistics); the model is put back in train mode. None without a set."""
    if x is None:
        return None
    model.eval()
    correct = 0
    with torch.no_grad():
        for i in range(0, x.shape[0], batch):
            correct += int((model(x[i:i + batch]).argmax(1) == y[i:i + batch]).sum())
    model.train()
    return correct / max(1, x.shape[0])
