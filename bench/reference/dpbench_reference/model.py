"""dpbench's models in PyTorch (the MLP and the CNN, by state_dict key as dpbench's start bundle
names them), the initial parameters every program starts from, and the optimizer (SGD, Adam or
AdamW).
"""

import math

from .common import nn, torch


class MLP(nn.Module if torch is not None else object):
    """dpbench's MLP: fc1..fcL (nn.Linear), ReLU between them, none after the last. Input
    [batch, *] is flattened. nn.Linear's default initialisation (weights and biases uniform in
    +-1/sqrt(fan_in), as dpbench's init_params), drawn in layer order."""

    def __init__(self, in_features, hidden, classes):
        super().__init__()
        dims = [in_features, *hidden, classes]
        self.depth = len(dims) - 1
        for i in range(self.depth):
            setattr(self, f"fc{i + 1}", nn.Linear(dims[i], dims[i + 1]))

    def forward(self, x):
        """x [batch, *] -> logits [batch, classes]."""
        x = x.flatten(1)
        for i in range(1, self.depth + 1):
            x = getattr(self, f"fc{i}")(x)
            if i < self.depth:
                x = torch.relu(x)
        return x


class CNN(nn.Module if torch is not None else object):
    """dpbench's CNN: [conv3x3 (pad 1, no bias) -> BatchNorm2d -> ReLU -> MaxPool2d(2)] x 2,
    flatten (NCHW), fc1 -> ReLU -> fc2. Input [batch, C*H*W] or [batch, C, H, W]."""

    def __init__(self, input_shape, channels, hidden, classes):
        super().__init__()
        c, h, w = input_shape
        self.input_shape = tuple(input_shape)
        self.conv1 = nn.Conv2d(c, channels[0], 3, padding=1, bias=False)
        self.bn1 = nn.BatchNorm2d(channels[0], eps=1e-5, momentum=0.1)
        self.conv2 = nn.Conv2d(channels[0], channels[1], 3, padding=1, bias=False)
        self.bn2 = nn.BatchNorm2d(channels[1], eps=1e-5, momentum=0.1)
        self.fc1 = nn.Linear(channels[1] * (h // 2 // 2) * (w // 2 // 2), hidden[0])
        self.fc2 = nn.Linear(hidden[0], classes)

    def forward(self, x):
        """x [batch, C*H*W] or [batch, C, H, W] -> logits [batch, classes]."""
        x = x.reshape(x.shape[0], *self.input_shape)
        x = torch.max_pool2d(torch.relu(self.bn1(self.conv1(x))), 2)
        x = torch.max_pool2d(torch.relu(self.bn2(self.conv2(x))), 2)
        return self.fc2(torch.relu(self.fc1(x.flatten(1))))


class DLRM(nn.Module if torch is not None else object):
    """dpbench's DLRM (workloads/dlrm.hpp; facebookresearch/dlrm dlrm_s_pytorch.py): emb_l
    (nn.EmbeddingBag, mode "sum", sparse gradients when sparse_grad), bot_l (Linear + ReLU per
    layer, the last one too), the dot interaction [z, f_i . f_j for i > j] with f_0 = z, and top_l
    (Linear, ReLU between, two logits). Input [batch, dense + tables * lookups]: the dense
    features, then each table's `lookups` row indices as floats."""

    def __init__(self, d):
        super().__init__()
        self.dense, self.tables, self.lookups = d["dense_features"], d["tables"], d["lookups"]
        self.embedding_optimizer = d.get("embedding_optimizer", "sgd")
        self.emb_l = nn.ModuleList(nn.EmbeddingBag(d["rows"], d["dim"], mode="sum",
                                                   sparse=d["sparse_grad"])
                                   for _ in range(self.tables))
        self.bot_l = _sequential([self.dense, *d["bottom"], d["dim"]], relu_last=True)
        width = d["dim"] + self.tables * (self.tables + 1) // 2
        self.top_l = _sequential([width, *d["top"], 2], relu_last=False)
        k = self.tables + 1
        self.li = [i for i in range(k) for _ in range(i)]
        self.lj = [j for i in range(k) for j in range(i)]

    def forward(self, x):
        """x [batch, dense + tables * lookups] -> logits [batch, 2]."""
        x = x.flatten(1)
        z = self.bot_l(x[:, :self.dense])
        idx = x[:, self.dense:].long().reshape(x.shape[0], self.tables, self.lookups)
        bags = [emb(idx[:, t, :]) for t, emb in enumerate(self.emb_l)]
        f = torch.stack([z, *bags], dim=1)
        pairs = torch.bmm(f, f.transpose(1, 2))[:, self.li, self.lj]
        return self.top_l(torch.cat([z, pairs], dim=1))


def _sequential(dims, relu_last):
    """nn.Sequential of Linear(dims[i], dims[i+1]) with a ReLU after each (after the last one
    only when relu_last): Linear layers at the even indices, as DLRM's create_mlp names them."""
    layers = []
    for i in range(len(dims) - 1):
        layers.append(nn.Linear(dims[i], dims[i + 1]))
        if relu_last or i < len(dims) - 2:
            layers.append(nn.ReLU())
    return nn.Sequential(*layers)


def build_model(spec):
    """spec: {"workload": "mlp"|"cnn"|"dlrm", "input": [C, H, W], "classes", "hidden",
    "channels", "dlrm"} -> an nn.Module on the CPU, initialised from the current torch seed."""
    if spec["workload"] == "dlrm":
        return DLRM(spec["dlrm"])
    if spec["workload"] == "mlp":
        return MLP(math.prod(spec["input"]), spec["hidden"], spec["classes"])
    return CNN(spec["input"], spec["channels"], spec["hidden"], spec["classes"])


def load_start_state(bundle, model):
    """Copies the bundle's parameters and floating-point buffers into model (on the CPU, before
    any .to(device)), by state_dict key."""
    import numpy as np
    state = model.state_dict()
    for key in ("params", "buffers"):
        if bundle[key] is None:
            continue
        path, table = bundle[key]
        flat = np.fromfile(path, dtype="<f4")
        with torch.no_grad():
            for name, shape, offset in table:
                values = flat[offset:offset + math.prod(shape)].reshape(shape)
                state[name].copy_(torch.from_numpy(values.copy()))


def initial_model(cfg):
    """The model every program starts from, on the CPU: the bundle's parameters and buffers, or
    without a bundle the default initialisation after torch.manual_seed(seed)."""
    bundle = cfg["start"]
    if bundle is not None:
        model = build_model(bundle["spec"])
        load_start_state(bundle, model)
        return model
    torch.manual_seed(cfg["seed"])
    return build_model(cfg["model"])


def make_optimizer(cfg, model):
    """The optimizer cfg['optimizer'] names, over model's parameters:
    sgd: torch.optim.SGD(lr, momentum, weight_decay) (dampening 0, no Nesterov);
    adam: torch.optim.Adam(lr, betas, eps, weight_decay), weight decay added to the gradient (L2);
    adamw: torch.optim.AdamW(lr, betas, eps, weight_decay), decoupled decay
    (param *= 1 - lr * weight_decay). Both with bias correction, no amsgrad, and foreach=False
    (the per-tensor loop) where the torch has the argument. Embedding bags with sparse gradients
    step with SGD without momentum (PyTorch's SGD refuses momentum on a sparse gradient), as
    dpbench's tables do under --sparse-grad."""
    name = cfg.get("optimizer", "sgd")
    tables = _sparse_tables(model)
    if name == "sgd" and tables and _embedding_optimizer(model) == "adagrad":
        dense = [p for p in model.parameters() if id(p) not in {id(t) for t in tables}]
        return _Optimizers([
            torch.optim.SGD(dense, lr=cfg["lr"], momentum=cfg["momentum"], weight_decay=cfg["weight_decay"]),
            torch.optim.Adagrad(tables, lr=cfg["lr"], eps=1e-10, **_foreach_off(torch.optim.Adagrad))])
    if name == "sgd":
        return torch.optim.SGD(_sgd_groups(model), lr=cfg["lr"], momentum=cfg["momentum"],
                               weight_decay=cfg["weight_decay"])
    cls = {"adam": torch.optim.Adam, "adamw": torch.optim.AdamW}[name]
    return cls(model.parameters(), lr=cfg["lr"], betas=tuple(cfg["betas"]), eps=cfg["eps"],
               weight_decay=cfg["weight_decay"], amsgrad=False, **_foreach_off(cls))


def _sparse_tables(model):
    """The weights of model's embedding bags with sparse gradients, in parameter order."""
    module = getattr(model, "module", model)
    sparse = {id(m.weight) for m in module.modules()
              if isinstance(m, nn.EmbeddingBag) and m.sparse}
    return [p for p in model.parameters() if id(p) in sparse]


def _embedding_optimizer(model):
    """The DLRM's tables' optimizer ("sgd" or "adagrad"); "sgd" for any other model."""
    return getattr(getattr(model, "module", model), "embedding_optimizer", "sgd")


def _sgd_groups(model):
    """model's parameters as SGD's param groups: the sparse embedding bags' weights in a group of
    their own with momentum 0, the others in one group taking the optimizer's settings."""
    tables = {id(p) for p in _sparse_tables(model)}
    dense = [p for p in model.parameters() if id(p) not in tables]
    return [{"params": dense}] + ([{"params": [p for p in model.parameters() if id(p) in tables],
                                    "momentum": 0.0}] if tables else [])


class _Optimizers:
    """Several optimizers stepped as one (the dense layers' and the sparse tables' Adagrad)."""

    def __init__(self, optimizers):
        self.optimizers = optimizers

    def step(self):
        for o in self.optimizers:
            o.step()

    def zero_grad(self, set_to_none=False):
        for o in self.optimizers:
            o.zero_grad(set_to_none=set_to_none)


def _foreach_off(cls):
    """{"foreach": False} when the optimizer class takes foreach (torch >= 1.12), else {}."""
    import inspect
    try:
        return {"foreach": False} if "foreach" in inspect.signature(cls).parameters else {}
    except (TypeError, ValueError):
        return {}
