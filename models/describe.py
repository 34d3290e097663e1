#!/usr/bin/python3
"""dpbench's model describer: turns a PyTorch module into a model description (JSON, schema
results/schema/dpbench-model.schema.json) that `dpbench run|sweep|project|memory --model FILE`
replays.

What it records, all observed on this machine and none assumed:
- the parameter tensors in registration order (`named_parameters()`: name, shape), embedding
  tables flagged;
- the layers: one entry per call of a leaf module (a module without children, or an
  nn.MultiheadAttention) in the order forward calls them, with forward and backward time per
  sample and analytic FLOPs per sample (Linear, Conv, attention matmuls; 0 elsewhere);
- backward as it ran: the layers in the order autograd reached them (a tensor hook on each
  call's output), and after each the parameters whose gradients became final there (the hook
  DDP itself uses: the parameter's AccumulateGrad node), so their concatenation is the
  gradient-ready order;
- activation bytes per sample: the bytes autograd saved for backward
  (torch.autograd.graph.saved_tensors_hooks), parameters excluded, storages counted once;
- input, label and output bytes per sample, and the source (module, torch version, host, CPU).

Times: a layer's forward time runs from its pre-hook to the next layer's pre-hook (the last to
the end of forward), so functional code between modules counts to the layer before it and the
layers sum to the whole forward; backward likewise between consecutive output-gradient events.
Each figure is the median over --repetitions timed passes after one warm-up, divided by the
batch size.

Usage:
  describe.py resnet50 [--batch 8] [-o resnet50.json]       # torchvision models by name
  describe.py bert-large | gpt2 | mlp | cnn                   # dpbench's own definitions
  describe.py my_model.py:MyNet --input 3x32x32 [--classes 10]  # a user's module
"""
import argparse
import datetime
import importlib.util
import json
import math
import os
import platform
import socket
import statistics
import sys
import time

import torch
import torch.nn as nn
import torch.nn.functional as F

SCHEMA = {"name": "dpbench-model", "version": 1}


# ---------------------------------------------------------------------------------------------
# Transformer definitions from the published configurations (no weights needed).

class AttentionCore(nn.Module):
    """softmax(QK^T / sqrt(d)) V over heads: the attention's two matmuls, a leaf of its own so
    that its FLOPs are counted. q, k, v: [batch, seq, hidden]."""

    def __init__(self, heads, causal):
        super().__init__()
        self.heads, self.causal = heads, causal

    def forward(self, q, k, v):
        b, s, h = q.shape
        d = h // self.heads
        q, k, v = (t.view(b, s, self.heads, d).transpose(1, 2) for t in (q, k, v))
        scores = q @ k.transpose(-1, -2) / math.sqrt(d)
        if self.causal:
            mask = torch.ones(s, s, dtype=torch.bool, device=q.device).triu(1)
            scores = scores.masked_fill(mask, float("-inf"))
        return (scores.softmax(-1) @ v).transpose(1, 2).reshape(b, s, h)


class BertLayer(nn.Module):
    """One post-LayerNorm BERT encoder layer (Devlin et al. 2019), HuggingFace's names."""

    def __init__(self, hidden, heads, ffn):
        super().__init__()
        self.attention = nn.Module()
        self.attention.self = nn.Module()
        self.attention.self.query = nn.Linear(hidden, hidden)
        self.attention.self.key = nn.Linear(hidden, hidden)
        self.attention.self.value = nn.Linear(hidden, hidden)
        self.attention.self.core = AttentionCore(heads, causal=False)
        self.attention.output = nn.Module()
        self.attention.output.dense = nn.Linear(hidden, hidden)
        self.attention.output.LayerNorm = nn.LayerNorm(hidden, eps=1e-12)
        self.intermediate = nn.Module()
        self.intermediate.dense = nn.Linear(hidden, ffn)
        self.intermediate.act = nn.GELU()
        self.output = nn.Module()
        self.output.dense = nn.Linear(ffn, hidden)
        self.output.LayerNorm = nn.LayerNorm(hidden, eps=1e-12)

    def forward(self, x):
        a = self.attention
        ctx = a.self.core(a.self.query(x), a.self.key(x), a.self.value(x))
        x = a.output.LayerNorm(a.output.dense(ctx) + x)
        h = self.intermediate.act(self.intermediate.dense(x))
        return self.output.LayerNorm(self.output.dense(h) + x)


class Bert(nn.Module):
    """BertModel with its pooler: BERT-large is layers 24, hidden 1024, heads 16, ffn 4096,
    vocabulary 30,522, 512 positions, 2 token types (335,141,888 parameters)."""

    def __init__(self, layers=24, hidden=1024, heads=16, ffn=4096, vocab=30522, positions=512):
        super().__init__()
        self.embeddings = nn.Module()
        self.embeddings.word_embeddings = nn.Embedding(vocab, hidden)
        self.embeddings.position_embeddings = nn.Embedding(positions, hidden)
        self.embeddings.token_type_embeddings = nn.Embedding(2, hidden)
        self.embeddings.LayerNorm = nn.LayerNorm(hidden, eps=1e-12)
        self.encoder = nn.Module()
        self.encoder.layer = nn.ModuleList(BertLayer(hidden, heads, ffn) for _ in range(layers))
        self.pooler = nn.Module()
        self.pooler.dense = nn.Linear(hidden, hidden)
        self.pooler.activation = nn.Tanh()

    def forward(self, ids):
        e = self.embeddings
        pos = torch.arange(ids.shape[1], device=ids.device).unsqueeze(0)
        x = e.word_embeddings(ids) + e.position_embeddings(pos) + e.token_type_embeddings(torch.zeros_like(ids))
        x = e.LayerNorm(x)
        for layer in self.encoder.layer:
            x = layer(x)
        return self.pooler.activation(self.pooler.dense(x[:, 0]))


class Conv1D(nn.Module):
    """GPT-2's Conv1D: a Linear whose weight is stored [in, out] (HuggingFace's layout)."""

    def __init__(self, n_in, n_out):
        super().__init__()
        self.weight = nn.Parameter(torch.empty(n_in, n_out).normal_(std=0.02))
        self.bias = nn.Parameter(torch.zeros(n_out))

    def forward(self, x):
        return torch.addmm(self.bias, x.reshape(-1, x.shape[-1]), self.weight).view(*x.shape[:-1], -1)


class Gpt2Block(nn.Module):
    def __init__(self, hidden, heads):
        super().__init__()
        self.ln_1 = nn.LayerNorm(hidden)
        self.attn = nn.Module()
        self.attn.c_attn = Conv1D(hidden, 3 * hidden)
        self.attn.core = AttentionCore(heads, causal=True)
        self.attn.c_proj = Conv1D(hidden, hidden)
        self.ln_2 = nn.LayerNorm(hidden)
        self.mlp = nn.Module()
        self.mlp.c_fc = Conv1D(hidden, 4 * hidden)
        self.mlp.act = nn.GELU(approximate="tanh")
        self.mlp.c_proj = Conv1D(4 * hidden, hidden)

    def forward(self, x):
        q, k, v = self.attn.c_attn(self.ln_1(x)).chunk(3, dim=-1)
        x = x + self.attn.c_proj(self.attn.core(q, k, v))
        return x + self.mlp.c_proj(self.mlp.act(self.mlp.c_fc(self.ln_2(x))))


class LmHead(nn.Module):
    """The language-model head tied to the token embedding: logits = x @ wte^T. It owns no
    parameter (the tied weight is registered once, as transformer.wte.weight)."""

    def __init__(self, wte):
        super().__init__()
        self.wte = [wte]  # a list, so the tied table is not registered twice

    def forward(self, x):
        return x @ self.wte[0].weight.t()


class Gpt2(nn.Module):
    """GPT2LMHeadModel, GPT-2 small: layers 12, hidden 768, heads 12, vocabulary 50,257, context
    1,024, the LM head tied to wte (124,439,808 parameters)."""

    def __init__(self, layers=12, hidden=768, heads=12, vocab=50257, positions=1024):
        super().__init__()
        self.transformer = nn.Module()
        self.transformer.wte = nn.Embedding(vocab, hidden)
        self.transformer.wpe = nn.Embedding(positions, hidden)
        self.transformer.h = nn.ModuleList(Gpt2Block(hidden, heads) for _ in range(layers))
        self.transformer.ln_f = nn.LayerNorm(hidden)
        self.lm_head = LmHead(self.transformer.wte)

    def forward(self, ids):
        t = self.transformer
        pos = torch.arange(ids.shape[1], device=ids.device).unsqueeze(0)
        x = t.wte(ids) + t.wpe(pos)
        for block in t.h:
            x = block(x)
        return self.lm_head(t.ln_f(x))


class Mlp(nn.Module):
    """dpbench's built-in MLP 784-512-256-10 (workloads/mlp.hpp)."""

    def __init__(self):
        super().__init__()
        self.fc1, self.fc2, self.fc3 = nn.Linear(784, 512), nn.Linear(512, 256), nn.Linear(256, 10)

    def forward(self, x):
        x = F.relu(self.fc1(x.flatten(1)))
        return self.fc3(F.relu(self.fc2(x)))


class Cnn(nn.Module):
    """dpbench's built-in CNN (workloads/cnn.hpp): conv(16, no bias) BN ReLU pool, conv(32, no bias) BN ReLU pool,
    fc 128, fc 10, on 1x28x28."""

    def __init__(self):
        super().__init__()
        self.conv1, self.bn1 = nn.Conv2d(1, 16, 3, padding=1, bias=False), nn.BatchNorm2d(16)
        self.conv2, self.bn2 = nn.Conv2d(16, 32, 3, padding=1, bias=False), nn.BatchNorm2d(32)
        self.fc1, self.fc2 = nn.Linear(32 * 7 * 7, 128), nn.Linear(128, 10)

    def forward(self, x):
        x = F.max_pool2d(F.relu(self.bn1(self.conv1(x))), 2)
        x = F.max_pool2d(F.relu(self.bn2(self.conv2(x))), 2)
        return self.fc2(F.relu(self.fc1(x.flatten(1))))


def token_input(vocab, seq):
    return {"shape": [seq], "dtype": "int64", "make": lambda b: torch.randint(0, vocab, (b, seq))}


def image_input(c, h, w):
    return {"shape": [c, h, w], "dtype": "float32", "make": lambda b: torch.randn(b, c, h, w)}


def builtin(name):
    """(module, input spec, label bytes per sample, source text, default batch) of a built-in name."""
    if name in ("resnet50", "vit_b_16"):
        import torchvision
        module = getattr(torchvision.models, name)(weights=None)
        return module, image_input(3, 224, 224), 8, f"torchvision.models.{name}(weights=None)", 4
    if name == "bert-large":
        return (Bert(), token_input(30522, 128), 8, "models/describe.py Bert (BERT-large: 24x1024, 16 heads, "
                "FFN 4096, vocabulary 30522, pooler), sequence 128", 2)
    if name == "gpt2":
        return (Gpt2(), token_input(50257, 1024), 1024 * 8, "models/describe.py Gpt2 (GPT-2 small: 12x768, 12 heads, "
                "vocabulary 50257, context 1024, tied LM head)", 1)
    if name == "mlp":
        return Mlp(), image_input(1, 28, 28), 8, "models/describe.py Mlp (dpbench's MLP 784-512-256-10)", 64
    if name == "cnn":
        return Cnn(), image_input(1, 28, 28), 8, "models/describe.py Cnn (dpbench's CNN 16-32 channels, fc 128)", 64
    return None


def user_module(spec, input_shape, classes):
    path, _, cls = spec.partition(":")
    if not cls or not path.endswith(".py"):
        sys.exit(f"describe: {spec}: expected FILE.py:Class")
    if not os.path.isfile(path):
        sys.exit(f"describe: {path}: no such file")
    mod_spec = importlib.util.spec_from_file_location("dpbench_user_model", path)
    mod = importlib.util.module_from_spec(mod_spec)
    mod_spec.loader.exec_module(mod)
    if not hasattr(mod, cls):
        sys.exit(f"describe: {path} has no class {cls}")
    module = getattr(mod, cls)()
    if not isinstance(module, nn.Module):
        sys.exit(f"describe: {spec} is not a torch.nn.Module")
    try:
        dims = [int(d) for d in input_shape.split("x")]
    except ValueError:
        dims = []
    if not dims or any(d <= 0 for d in dims):
        sys.exit(f"describe: --input {input_shape}: expected positive dimensions such as 3x32x32")
    spec_in = {"shape": dims, "dtype": "float32", "make": lambda b: torch.randn(b, *dims)}
    return module, spec_in, 8, f"{os.path.basename(path)}:{cls}", 8


# ---------------------------------------------------------------------------------------------
# Observation.

def is_layer(m):
    return isinstance(m, nn.MultiheadAttention) or (len(list(m.children())) == 0 and not isinstance(m, nn.ModuleList))


def layer_modules(module):
    """Leaf modules (and MultiheadAttention, whose out_proj forward never calls) with their names."""
    out, skip = {}, set()
    for name, m in module.named_modules():
        if any(name.startswith(s + ".") for s in skip):
            continue
        if isinstance(m, nn.MultiheadAttention):
            skip.add(name)
        if is_layer(m):
            out[m] = name
    return out


def flops_of(m, inputs, output):
    """Forward FLOPs of one call (multiply-adds count 2), analytic for the layers that carry the
    model's arithmetic; 0 for element-wise and memory layers."""
    if isinstance(m, nn.Linear):
        return 2 * inputs[0].numel() // m.in_features * m.in_features * m.out_features
    if isinstance(m, Conv1D):
        n_in, n_out = m.weight.shape
        return 2 * inputs[0].numel() // n_in * n_in * n_out
    if isinstance(m, nn.modules.conv._ConvNd):
        k = math.prod(m.kernel_size) * m.in_channels // m.groups
        return 2 * output.numel() * k
    if isinstance(m, AttentionCore):
        b, s, h = inputs[0].shape
        return 2 * 2 * b * s * s * h
    if isinstance(m, LmHead):
        return 2 * output.numel() * m.wte[0].weight.shape[1]
    if isinstance(m, nn.MultiheadAttention):
        # self-attention (key length = query length); forward hooks see no keyword inputs, so the
        # shapes come from the output [batch, seq, embed] (batch_first) or [seq, batch, embed]
        seq, e = (output.shape[1], output.shape[2]) if m.batch_first else (output.shape[0], output.shape[2])
        b = output.numel() // (seq * e)
        return b * (2 * 4 * seq * e * e + 2 * 2 * seq * seq * e)
    return 0


class Recorder:
    """Hooks every layer call in forward and backward; one instance per pass."""

    def __init__(self, module):
        self.names = layer_modules(module)
        self.params = list(module.named_parameters())
        self.calls = []  # per call: [module, name, t_pre, flops, param ids]
        self.bwd_events = []  # (time, "layer", call index) or (time, "param", param index)
        self.handles = []
        self.counts = {}
        self.param_index = {id(p): i for i, (_, p) in enumerate(self.params)}
        for m in self.names:
            self.handles.append(m.register_forward_pre_hook(self.pre))
            self.handles.append(m.register_forward_hook(self.post))

    def pre(self, m, inputs):
        self.calls.append([m, self.names[m], time.perf_counter(), 0, []])

    def post(self, m, inputs, output):
        call = len(self.calls) - 1
        while self.calls[call][0] is not m:
            call -= 1
        out = output[0] if isinstance(output, tuple) else output
        self.calls[call][3] = flops_of(m, inputs, out)
        own = [p for p in m.parameters()] if not isinstance(m, LmHead) else []
        self.calls[call][4] = [self.param_index[id(p)] for p in own]
        if isinstance(out, torch.Tensor) and out.requires_grad:
            out.register_hook(lambda g, c=call: self.bwd_events.append((time.perf_counter(), "layer", c)))

    def watch_params(self):
        """DDP's hook: the AccumulateGrad node of each parameter, which runs once its gradient is final."""
        self.keep = []
        for i, (_, p) in enumerate(self.params):
            acc = p.expand_as(p).grad_fn.next_functions[0][0]
            acc.register_hook(lambda *_, i=i: self.bwd_events.append((time.perf_counter(), "param", i)))
            self.keep.append(acc)

    def close(self):
        for h in self.handles:
            h.remove()


def one_pass(module, x, loss_of, watch):
    """One forward and backward under the hooks: (Recorder, forward end, backward start, end)."""
    rec = Recorder(module)
    if watch:
        rec.watch_params()
    module.zero_grad(set_to_none=True)
    out = module(x)
    t_fwd_end = time.perf_counter()
    loss = loss_of(out)
    t_bwd_start = time.perf_counter()
    loss.backward()
    t_end = time.perf_counter()
    rec.close()
    return rec, t_fwd_end, t_bwd_start, t_end


def measure(module, x, loss_of, repetitions):
    """Per call: forward and backward seconds for the batch (medians), and the backward sequence."""
    one_pass(module, x, loss_of, watch=False)  # warm-up
    fwd, bwd, seqs = [], [], []
    for _ in range(repetitions):
        rec, t_fwd_end, t_bwd_start, t_end = one_pass(module, x, loss_of, watch=True)
        starts = [c[2] for c in rec.calls] + [t_fwd_end]
        fwd.append([starts[i + 1] - starts[i] for i in range(len(rec.calls))])
        layer_events = [(t, c) for t, kind, c in rec.bwd_events if kind == "layer"]
        b = [0.0] * len(rec.calls)
        for k, (t, c) in enumerate(layer_events):
            nxt = layer_events[k + 1][0] if k + 1 < len(layer_events) else t_end
            b[c] += nxt - t
        if layer_events:  # the loss's own backward counts to the first layer reached
            b[layer_events[0][1]] += layer_events[0][0] - t_bwd_start
        bwd.append(b)
        seqs.append(rec.bwd_events)
    med = lambda rows: [statistics.median(col) for col in zip(*rows)]
    return rec, med(fwd), med(bwd), seqs[-1]


def saved_activation_bytes(module, x, loss_of):
    """Bytes autograd saves for backward in one forward of x (parameters excluded, each storage once)."""
    params = {p.data_ptr() for p in module.parameters()}
    seen = {}

    def pack(t):
        try:
            ptr = t.untyped_storage().data_ptr() if hasattr(t, "untyped_storage") else t.storage().data_ptr()
            size = t.untyped_storage().nbytes() if hasattr(t, "untyped_storage") else t.storage().nbytes()
        except (RuntimeError, NotImplementedError):
            ptr, size = id(t), t.numel() * t.element_size()
        if t.data_ptr() not in params:
            seen[ptr] = max(seen.get(ptr, 0), size)
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        out = module(x)
    del out
    return sum(seen.values())


def describe(name, module, spec_in, label_bytes, source_text, batch, repetitions, threads):
    torch.manual_seed(0)
    torch.set_num_threads(threads)
    for m in module.modules():  # in-place activations would hide the output hooks' tensors
        if hasattr(m, "inplace"):
            m.inplace = False
    module.train()
    x = spec_in["make"](batch)
    loss_of = lambda out: out.float().pow(2).mean()
    rec, fwd_s, bwd_s, events = measure(module, x, loss_of, repetitions)
    with torch.no_grad():
        out = module(x)
    act = saved_activation_bytes(module, x, loss_of)
    params = rec.params
    embedding_ids = {id(m.weight) for m in module.modules() if isinstance(m, (nn.Embedding, nn.EmbeddingBag))}
    owner = {}
    for c, call in enumerate(rec.calls):
        for p in call[4]:
            owner.setdefault(p, c)
    layers = []
    for c, (m, lname, _, flops, pids) in enumerate(rec.calls):
        has_weight = any(params[p][1].dim() > 1 for p in pids)
        layers.append({
            "name": lname,
            "type": type(m).__name__,
            "params": [p for p in pids if owner[p] == c],
            "forward_us_per_sample": round(fwd_s[c] / batch * 1e6, 3),
            "backward_us_per_sample": round(bwd_s[c] / batch * 1e6, 3),
            "forward_flops_per_sample": flops // batch,
            # input gradient and weight gradient: twice the forward's arithmetic where a weight is
            # multiplied; the input gradient alone (once) for a weightless matmul
            "backward_flops_per_sample": (2 if has_weight else 1) * flops // batch,
        })
    backward, current = [], None
    for _, kind, idx in events:
        if kind == "layer":
            current = {"layer": idx, "grads_ready": []}
            backward.append(current)
        else:
            if current is None:
                current = {"layer": None, "grads_ready": []}
                backward.append(current)
            current["grads_ready"].append(idx)
    seen_layers = {b["layer"] for b in backward}
    ready = [p for b in backward for p in b["grads_ready"]]
    if sorted(ready) != list(range(len(params))):
        sys.exit(f"describe: {name}: {len(params) - len(set(ready))} parameters got no gradient in backward "
                 "(unused parameters are not supported)")
    backward = [b for b in backward if b["layer"] is not None or b["grads_ready"]]
    out_t = out[0] if isinstance(out, tuple) else out
    cpu = platform.processor() or platform.machine()
    try:
        with open("/proc/cpuinfo") as f:
            cpu = next(l.split(":", 1)[1].strip() for l in f if l.startswith("model name"))
    except (OSError, StopIteration):
        pass
    return {
        "schema": SCHEMA,
        "name": name,
        "num_params": sum(p.numel() for _, p in params),
        "source": {
            "how": "models/describe.py: one forward and backward under autograd hooks, timed over "
                   f"{repetitions} passes after one warm-up",
            "module": source_text,
            "torch": torch.__version__,
            "host": socket.gethostname(),
            "created": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        },
        "device": {"kind": "cpu", "name": cpu, "threads": threads, "batch": batch},
        "input": {"shape": spec_in["shape"], "dtype": spec_in["dtype"],
                  "bytes_per_sample": x[0].numel() * x.element_size()},
        "label_bytes_per_sample": label_bytes,
        "output": {"shape": list(out_t.shape[1:]), "bytes_per_sample": out_t[0].numel() * out_t.element_size()},
        "activation_bytes_per_sample": act // batch,
        "params": [{"name": n, "shape": list(p.shape), **({"embedding": True} if id(p) in embedding_ids else {})}
                   for n, p in params],
        "layers": layers,
        "backward": [{"layer": b["layer"], "grads_ready": b["grads_ready"]} for b in backward
                     if b["layer"] is not None and b["layer"] in seen_layers] +
                    [b for b in backward if b["layer"] is None],
    }


def main(argv=None):
    ap = argparse.ArgumentParser(description="Describe a PyTorch module for dpbench's replay (--model FILE).")
    ap.add_argument("model", help="resnet50, vit_b_16, bert-large, gpt2, mlp, cnn, or FILE.py:Class")
    ap.add_argument("--input", default="", help="a user module's input shape per sample, e.g. 3x32x32")
    ap.add_argument("--batch", type=int, default=0, help="samples per timed pass (default: per model)")
    ap.add_argument("--repetitions", type=int, default=3, help="timed passes (median)")
    ap.add_argument("--threads", type=int, default=torch.get_num_threads(), help="torch CPU threads")
    ap.add_argument("--name", default="", help="the description's name (default: the model's)")
    ap.add_argument("-o", "--output", default="", help="output file (default: stdout)")
    a = ap.parse_args(argv)
    if a.repetitions < 1:
        sys.exit(f"describe: --repetitions {a.repetitions}: must be at least 1")
    if a.batch < 0:
        sys.exit(f"describe: --batch {a.batch}: must be positive")
    found = builtin(a.model)
    if found is None:
        if ":" not in a.model:
            sys.exit(f"describe: {a.model}: unknown model (built-in: resnet50, vit_b_16, bert-large, gpt2, mlp, cnn; "
                     "or FILE.py:Class --input CxHxW)")
        if not a.input:
            sys.exit(f"describe: {a.model}: a user module needs --input (its input shape per sample)")
        found = user_module(a.model, a.input, 0)
    module, spec_in, label_bytes, source_text, default_batch = found
    name = a.name or (a.model if ":" not in a.model else a.model.split(":")[1])
    d = describe(name, module, spec_in, label_bytes, source_text, a.batch or default_batch, a.repetitions, a.threads)
    text = json.dumps(d, indent=1) + "\n"
    if a.output:
        tmp = a.output + ".tmp"
        with open(tmp, "w") as f:
            f.write(text)
        os.replace(tmp, a.output)
    else:
        sys.stdout.write(text)


if __name__ == "__main__":
    main()
