"""The command line's options (argparse), with dpbench's spellings: `--max-steps` (alias
`--steps`) and `--ranks` (alias `--world-size`), as `dpbench run` names them. Options a start
bundle fixes default to None while parsing, so that an explicit one can be told from a default.
"""

import argparse
import math
import os

from .common import BUNDLE_FIXED_DEFAULTS, DEFAULT_DATA_DIR, OPTIMIZERS, PROGRAMS

# Options whose dpbench spelling differs from the script's first one (argparse dest -> the
# canonical spelling); the old spelling stays an alias. Messages name the spelling that was
# typed, else this one.
CANONICAL_OPTION = {"steps": "--max-steps", "world_size": "--ranks"}


def _positive_int(text):
    """argparse type: an integer >= 1."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not an integer")
    if value < 1:
        raise argparse.ArgumentTypeError(f"{value} must be at least 1")
    return value


def _non_negative_int(text):
    """argparse type: an integer >= 0."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not an integer")
    if value < 0:
        raise argparse.ArgumentTypeError(f"{value} must be 0 or more")
    return value


def _positive_float(text):
    """argparse type: a finite number > 0."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number")
    if not (value > 0 and math.isfinite(value)):
        raise argparse.ArgumentTypeError(f"{text} must be a positive number")
    return value


def _non_negative_float(text):
    """argparse type: a finite number >= 0."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number")
    if not (value >= 0 and math.isfinite(value)):
        raise argparse.ArgumentTypeError(f"{text} must be 0 or a positive number")
    return value


def _betas(text):
    """'0.9,0.999' -> [0.9, 0.999]: Adam's two decay rates, each in [0, 1)."""
    parts = text.split(",")
    try:
        values = [float(v) for v in parts]
    except ValueError:
        values = None
    if values is None or len(values) != 2 or not all(0.0 <= v < 1.0 for v in values):
        raise argparse.ArgumentTypeError(
            f"{text!r}: give two numbers in [0, 1) separated by a comma, e.g. 0.9,0.999")
    return values


def _hidden_list(text):
    """'4096,4096' -> [4096, 4096]: the hidden widths of the MLP, each at least 1."""
    widths = []
    for part in text.split(","):
        part = part.strip()
        if not part.isdigit() or int(part) < 1:
            raise argparse.ArgumentTypeError(
                f"{text!r}: give positive layer widths separated by commas, e.g. 4096,4096")
        widths.append(int(part))
    return widths


def _program_list(text):
    """'plain,ddp' -> ['plain', 'ddp'] in the order given, duplicates dropped."""
    programs = []
    for part in text.split(","):
        part = part.strip()
        if part not in PROGRAMS:
            raise argparse.ArgumentTypeError(
                f"{part!r} is not a program (available: {', '.join(PROGRAMS)})")
        if part not in programs:
            programs.append(part)
    return programs


class _StoreSpelled(argparse.Action):
    """argparse's store, which also records the option string that was typed (the full one when
    abbreviated) in namespace.option_spelling[dest], for options with an alias."""

    def __call__(self, parser, namespace, values, option_string=None):
        setattr(namespace, self.dest, values)
        spelled = dict(getattr(namespace, "option_spelling", None) or {})
        spelled[self.dest] = option_string
        namespace.option_spelling = spelled


def option_name(args, dest):
    """The option of argparse dest `dest` as the user typed it (`--steps` or `--max-steps`), or
    when not typed its canonical spelling (dpbench's where it has one, else --dest-with-dashes).
    """
    spelled = getattr(args, "option_spelling", None) or {}
    return spelled.get(dest) or CANONICAL_OPTION.get(dest) or f"--{dest.replace('_', '-')}"


def _add_model_options(p):
    """The options of the model, the batch, the steps and the precision."""
    p.add_argument("--hidden", type=_hidden_list, default=None,
                   help="hidden widths of the MLP 784-hidden...-10 (default 4096,4096)")
    p.add_argument("--batch-size", type=_positive_int, default=None,
                   help="global batch per optimizer step (default 1024); dataparallel and rpc_ps "
                        "split it in torch.chunk chunks of ceil(B/world_size), ddp gives each "
                        "rank B/world_size")
    p.add_argument("--max-steps", "--steps", dest="steps", action=_StoreSpelled,
                   type=_positive_int, default=None, metavar="N",
                   help="optimizer steps in total, warm-up included, as dpbench's --max-steps "
                        "(default 200; --steps is an alias)")
    p.add_argument("--warmup-steps", type=_non_negative_int, default=None,
                   help="first steps kept out of the timing (default 20)")
    p.add_argument("--precision", choices=("fp32", "tf32"), default=None,
                   help="CUDA: tf32 tensor-core matmuls (torch.backends.cuda.matmul.allow_tf32 "
                        "and torch.backends.cudnn.allow_tf32) or fp32, default tf32 as dpbench's "
                        "--precision; the CPU runs fp32 only")


def _add_run_options(p):
    """The options of the programs, the processes and their threads."""
    p.add_argument("--programs", type=_program_list, default=None,
                   help="PyTorch programs, comma list of plain, dataparallel, ddp, rpc_ps, run in "
                        "the order given (default: plain,dataparallel,ddp on CUDA, "
                        "plain,dataparallel,ddp,rpc_ps on the CPU)")
    p.add_argument("--ranks", "--world-size", dest="world_size", action=_StoreSpelled,
                   type=_positive_int, default=None, metavar="N",
                   help="processes (CPU) or GPUs (CUDA) of dataparallel, ddp and rpc_ps; plain "
                        "uses 1 (default: 2 on the CPU, every visible GPU on CUDA; --world-size "
                        "is an alias)")
    p.add_argument("--threads", type=_positive_int, default=None,
                   help="intra-op threads per process, set with torch.set_num_threads and "
                        "openblas_set_num_threads (default on the CPU: cpu_count // processes, "
                        "at least 1; on CUDA: left as it is)")


def _add_data_options(p):
    """The options of the data and the optimizer."""
    p.add_argument("--data", choices=("synthetic", "fashion-mnist"), default=None,
                   help="synthetic: class prototypes plus noise generated on the device, no disk "
                        "(default); fashion-mnist: the .gz IDX files read with gzip and numpy")
    p.add_argument("--data-dir", default=None,
                   help="Fashion-MNIST directory (default: $DPBENCH_DATA_DIR, else "
                        f"{DEFAULT_DATA_DIR})")
    p.add_argument("--synthetic-samples", type=_positive_int, default=None,
                   help="synthetic: training samples (default 60000, as dpbench)")
    p.add_argument("--optimizer", choices=OPTIMIZERS, default=None,
                   help="sgd: torch.optim.SGD (default); adam: torch.optim.Adam (weight decay "
                        "added to the gradient); adamw: torch.optim.AdamW (decoupled weight "
                        "decay)")
    p.add_argument("--lr", type=_positive_float, default=None, help="learning rate (0.1)")
    p.add_argument("--momentum", type=float, default=None, help="SGD momentum (0.9)")
    p.add_argument("--weight-decay", type=_non_negative_float, default=None,
                   help="weight decay of every optimizer (0)")
    p.add_argument("--betas", type=_betas, default=None, metavar="B1,B2",
                   help="adam, adamw: the moment decay rates, each in [0, 1) (0.9,0.999)")
    p.add_argument("--eps", type=_non_negative_float, default=None,
                   help="adam, adamw: the denominator's epsilon (1e-8)")
    p.add_argument("--seed", type=_non_negative_int, default=None,
                   help="initial parameters, synthetic data and the DistributedSampler shuffle "
                        "(default 0)")
    p.add_argument("--bucket-cap-mb", type=_positive_float, default=None,
                   help="DDP bucket_cap_mb (default 25)")


def build_parser():
    """The argparse parser of pytorch_reference.py."""
    p = argparse.ArgumentParser(
        prog="pytorch_reference.py",
        description="Train dpbench's model with plain PyTorch, DataParallel, "
                    "DistributedDataParallel and an RPC parameter server, on CUDA or the CPU, and "
                    "time it as dpbench does.")
    p.add_argument("--device", choices=("auto", "cpu", "cuda"), default="auto",
                   help="auto (default): cuda when torch.cuda.is_available(), else cpu")
    p.add_argument("--start", default=None, metavar="DIR",
                   help="start bundle written by dpbench (start.json and raw files): model, "
                        "initial parameters and buffers, data, sample order and optimizer")
    _add_model_options(p)
    _add_run_options(p)
    _add_data_options(p)
    p.add_argument("--timeout", type=_positive_int, default=300,
                   help="seconds a rank waits for its peers: process-group timeout (gloo, NCCL) "
                        "and RPC timeout (default 300)")
    p.add_argument("--out", "-o", default=None,
                   help="result JSON (default results/pytorch-reference-<time>.json)")
    p.add_argument("--quiet", "-q", action="store_true",
                   help="no progress lines and no table; errors and the 'wrote' line only")
    return p


def parse_args(argv):
    """Parses argv. Options a start bundle fixes default to None here, so that an explicit one
    can be told from a default: with --start it is an error (argparse's, exit 2); without, the
    defaults of BUNDLE_FIXED_DEFAULTS fill them in and --warmup-steps, --momentum and --data-dir
    are checked and completed. args.option_spelling holds the spellings typed of the options
    with an alias (option_name)."""
    p = build_parser()
    args = p.parse_args(argv)
    if args.start is not None:
        given = [k for k in BUNDLE_FIXED_DEFAULTS if getattr(args, k) is not None]
        if given:
            p.error(f"{option_name(args, given[0])}: the start bundle fixes it; leave it out "
                    "with --start")
    else:
        for k, v in BUNDLE_FIXED_DEFAULTS.items():
            if getattr(args, k) is None:
                setattr(args, k, list(v) if isinstance(v, list) else v)
        if args.warmup_steps >= args.steps:
            p.error(f"--warmup-steps {args.warmup_steps}: must be less than "
                    f"{option_name(args, 'steps')} {args.steps}")
        if not (0.0 <= args.momentum < 1.0):
            p.error(f"--momentum {args.momentum}: must be in [0, 1)")
        if args.data_dir is None:
            args.data_dir = os.environ.get("DPBENCH_DATA_DIR") or DEFAULT_DATA_DIR
    return args
