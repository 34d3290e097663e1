"""The training data and its order: Fashion-MNIST (IDX files), the synthetic set, the
DistributedSampler sample order (SampleOrder), one process's model plus data (Problem), the steps
per epoch and torch.chunk's split of a batch.
"""

import math
from pathlib import Path

from .bundle import read_array
from .common import FASHION_MNIST_MEAN, FASHION_MNIST_STD, INPUT_FEATURES, NUM_CLASSES, \
    InputError, torch
from .model import initial_model


def _read_idx(path, magic, dims):
    """Reads one gzip-compressed IDX file. Returns a uint8 numpy array of shape (count, *dims).
    Raises InputError naming the file on a missing file, bad gzip, wrong magic or size."""
    import gzip
    import zlib

    import numpy as np
    try:
        with gzip.open(path, "rb") as f:
            raw = f.read()
    except FileNotFoundError:
        raise InputError(f"{path}: no such file (is dataset-fashion-mnist installed? "
                         "--data-dir and DPBENCH_DATA_DIR pick another directory)")
    except (OSError, EOFError, zlib.error) as e:
        raise InputError(f"{path}: not a readable gzip file ({e})")
    header = 4 + 4 * (1 + len(dims))
    if len(raw) < header:
        raise InputError(f"{path}: {len(raw)} bytes, shorter than the IDX header ({header})")
    got_magic = int.from_bytes(raw[0:4], "big")
    if got_magic != magic:
        raise InputError(f"{path}: IDX magic {got_magic:#010x}, expected {magic:#010x}")
    count = int.from_bytes(raw[4:8], "big")
    got_dims = tuple(int.from_bytes(raw[8 + 4 * i:12 + 4 * i], "big") for i in range(len(dims)))
    if got_dims != tuple(dims):
        raise InputError(f"{path}: sample dimensions {got_dims}, expected {tuple(dims)}")
    expected = header + count * math.prod(dims)
    if len(raw) != expected:
        raise InputError(f"{path}: {len(raw)} bytes, the header says {expected}")
    return np.frombuffer(raw, dtype=np.uint8, offset=header).reshape((count, *dims))


def load_fashion_mnist(data_dir):
    """Fashion-MNIST training split. Returns (x, y): x float32 numpy [60000, 784] normalised as
    (x/255 - 0.2860)/0.3530, y int64 numpy [60000] in 0..9. Raises InputError."""
    try:
        import numpy as np
    except ImportError:
        raise InputError("--data fashion-mnist needs numpy, which is not installed")
    d = Path(data_dir)
    if not d.is_dir():
        raise InputError(f"--data-dir {data_dir}: no such directory")
    images = _read_idx(d / "train-images-idx3-ubyte.gz", 0x00000803, (28, 28))
    labels = _read_idx(d / "train-labels-idx1-ubyte.gz", 0x00000801, ())
    if images.shape[0] != labels.shape[0]:
        raise InputError(f"{d}: {images.shape[0]} training images but {labels.shape[0]} labels")
    if labels.size and int(labels.max()) >= NUM_CLASSES:
        raise InputError(f"{d / 'train-labels-idx1-ubyte.gz'}: label {int(labels.max())} "
                         f"outside 0..{NUM_CLASSES - 1}")
    x = images.reshape(images.shape[0], INPUT_FEATURES).astype(np.float32)
    x = (x / np.float32(255.0) - np.float32(FASHION_MNIST_MEAN)) / np.float32(FASHION_MNIST_STD)
    return x, labels.astype(np.int64)


def make_dataset(cfg, device, host_data=None):
    """The training set as device tensors (x [N, 784] float32, y [N] int64) on `device`.
    synthetic: each class has a prototype in [-1, 1)^784 and a sample is its class's prototype
    plus N(0, 0.5^2) noise (the statistics of dpbench's synthetic data, not its exact bytes),
    generated on the device from `seed`, so every rank builds the same set.
    fashion-mnist: host_data (from load_fashion_mnist), or read here when None."""
    if cfg["data"] == "synthetic":
        g = torch.Generator(device=device)
        g.manual_seed(cfg["seed"])
        n = cfg["synthetic_samples"]
        y = torch.randint(0, NUM_CLASSES, (n,), generator=g, device=device)
        prototypes = torch.rand(NUM_CLASSES, INPUT_FEATURES, generator=g, device=device) * 2 - 1
        x = torch.randn(n, INPUT_FEATURES, generator=g, device=device)
        x.mul_(0.5).add_(prototypes[y])
        return x, y
    if host_data is None:
        host_data = load_fashion_mnist(cfg["data_dir"])
    hx, hy = host_data
    return torch.from_numpy(hx).to(device), torch.from_numpy(hy).to(device)


def tensor_bytes(tensors):
    """Bytes held by the given device tensors."""
    return sum(t.element_size() * t.numel() for t in tensors)


class SampleOrder:
    """Which samples each step takes. Epoch e uses a permutation of [0, n): the bundle's row e,
    or without a bundle DistributedSampler's shuffle (torch.randperm with seed + e, as
    torch/utils/data/distributed.py). Global step t is in epoch t // steps_per_epoch at index
    i = t % steps_per_epoch.
    - global_batch_indices(t): perm[i*B:(i+1)*B] (plain, dataparallel, rpc_ps);
    - ddp_batch_indices(t, rank, world_size): DistributedSampler without drop_last: perm padded by
      repeating its head to a multiple of world_size, shard = padded[rank::world_size], and the
      rank's batch is shard[i*b:(i+1)*b] with b = B / world_size.
    Index tensors are int64 on `device`. prepare(t) computes epoch t's permutation and is called
    outside the timed step (a DataLoader would have it ready)."""

    def __init__(self, n, global_batch, steps_per_epoch, device, seed=0, rows=None):
        self.n, self.global_batch, self.spe = n, global_batch, steps_per_epoch
        self.device, self.seed, self.rows = device, seed, rows
        self.epoch, self.perm, self.shards = None, None, {}

    def prepare(self, t):
        """Makes epoch (t // steps_per_epoch)'s permutation current (no-op within an epoch)."""
        e = t // self.spe
        if e == self.epoch:
            return
        if self.rows is not None:
            perm = torch.from_numpy(self.rows[e].copy())
        else:
            g = torch.Generator()
            g.manual_seed(self.seed + e)
            perm = torch.randperm(self.n, generator=g)
        self.epoch, self.perm, self.shards = e, perm.to(self.device), {}

    def global_batch_indices(self, t):
        """Step t's global batch: int64 indices [B] (plain, dataparallel, rpc_ps)."""
        self.prepare(t)
        i = t % self.spe
        return self.perm[i * self.global_batch:(i + 1) * self.global_batch]

    def ddp_batch_indices(self, t, rank, world_size):
        """Step t's batch of DDP rank `rank`: int64 indices [B / world_size]."""
        self.prepare(t)
        shard = self.shards.get((rank, world_size))
        if shard is None:
            total = -(-self.n // world_size) * world_size
            reps = -(-total // self.n)
            padded = self.perm.repeat(reps)[:total]
            shard = self.shards[(rank, world_size)] = padded[rank::world_size]
        b = self.global_batch // world_size
        i = t % self.spe
        return shard[i * b:(i + 1) * b]


class Problem:
    """One process's model, data and sample order, built from the start bundle or, without one,
    from the options (seeded init, synthetic or Fashion-MNIST data).
    model: initial_model on `device`; x [n, features] float32 and y [n] int64 on `device` (None
    unless need_data); test_x, test_y (None without a test set or need_test); order:
    SampleOrder; dataset_bytes (of x and y)."""

    def __init__(self, cfg, device, host_data=None, need_data=True, need_test=True,
                 steps_per_epoch=None):
        bundle = cfg["start"]
        self.test_x = self.test_y = None
        self.x = self.y = None
        model = initial_model(cfg)
        if bundle is not None:
            n = bundle["train"]["y"][1][0]
            if need_data:
                self.x, self.y = self._read_split(bundle["train"], device)
            if need_test and bundle["test"] is not None:
                self.test_x, self.test_y = self._read_split(bundle["test"], device)
            rows = read_array(bundle["order"][0], "int64", bundle["order"][1])
            self.order = SampleOrder(n, cfg["global_batch"], cfg["steps_per_epoch"], device,
                                     rows=rows)
        else:
            n = cfg["dataset_samples"]
            if need_data:
                self.x, self.y = make_dataset(cfg, device, host_data)
            self.order = SampleOrder(n, cfg["global_batch"], steps_per_epoch, device,
                                     seed=cfg["seed"])
        self.model = model.to(device)
        self.n = n
        self.dataset_bytes = tensor_bytes([self.x, self.y]) if need_data else 0

    @staticmethod
    def _read_split(split, device):
        """A bundle split's (x [n, features] float32, y [n] int64) on device."""
        (xp, xs), (yp, ys) = split["x"], split["y"]
        x = torch.from_numpy(read_array(xp, "float32", xs).reshape(xs[0], -1))
        y = torch.from_numpy(read_array(yp, "int64", ys))
        return x.to(device), y.to(device)

    def num_params(self):
        """Number of parameter elements of the model."""
        return sum(p.numel() for p in self.model.parameters())


def steps_per_epoch(cfg, program, world_size):
    """Steps per epoch: the bundle's, else full batches of one rank's DistributedSampler share
    (the last incomplete batch dropped): n // B for one sampler replica, ceil(n/N) // (B/N) for
    ddp. Raises InputError when not one batch fits."""
    if cfg["start"] is not None:
        return cfg["steps_per_epoch"]
    n, batch = cfg["dataset_samples"], cfg["global_batch"]
    if program == "ddp":
        spe = -(-n // world_size) // (batch // world_size)
    else:
        spe = n // batch
    if spe < 1:
        raise InputError(f"{n} samples give no batch of {batch}")
    return spe


def chunk_sizes(batch, world_size):
    """torch.chunk's split of `batch` rows over world_size: ceil(B/N) each, the last ones smaller
    or 0 (B=10, N=4 -> [3,3,3,1]; B=6, N=4 -> [2,2,2,0])."""
    c = -(-batch // world_size)
    return [max(0, min(c, batch - r * c)) for r in range(world_size)]
