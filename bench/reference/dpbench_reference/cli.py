"""The command line: parse the options, check the bundle and the data, run each mode, write the
result file and print the table. Exit codes: 0 every requested mode ran or was skipped with a
reason, 1 a run failed or none ran, 2 bad arguments, a bad start bundle, no PyTorch, no CUDA
device for --device cuda, or unreadable data.
"""

import datetime
import sys
from pathlib import Path

from .common import CPU_MODES, CUDA_MODES, PROG, REPO_ROOT, RESULT_SCHEMA, TORCH_IMPORT_ERROR, \
    InputError, torch
from .bundle import read_start_bundle
from .config import build_config, mode_plan, resolve_device
from .data import load_fashion_mnist, steps_per_epoch
from .env import collect_env
from .modes import run_cuda_dataparallel, run_cuda_plain
from .options import option_name, parse_args
from .results import print_table, write_json_atomic
from .runtime import current_threads, release_cuda, set_precision, set_threads
from .spawn import run_spawned


def _torch_missing_line():
    """The error line for a PyTorch that could not be imported."""
    if isinstance(TORCH_IMPORT_ERROR, ModuleNotFoundError) and \
            TORCH_IMPORT_ERROR.name in ("torch", None):
        return f"{PROG}: PyTorch is not installed"
    return f"{PROG}: PyTorch could not be imported ({TORCH_IMPORT_ERROR})"


def _prepare(args):
    """Everything checked before the first mode runs: the device, the start bundle or the data,
    the configuration and each mode's plan (mode_plan). Returns (device, bundle, host_data, cfg,
    modes, plans). Raises InputError (exit 2, no result file)."""
    device = resolve_device(args)
    gpu_count = torch.cuda.device_count() if device == "cuda" else 0
    if device == "cuda" and args.world_size is not None and args.world_size > gpu_count:
        raise InputError(f"{option_name(args, 'world_size')} {args.world_size}: only "
                         f"{gpu_count} GPU(s) visible")
    bundle = read_start_bundle(args.start) if args.start is not None else None
    host_data = None
    if bundle is None and args.data == "fashion-mnist":
        host_data = load_fashion_mnist(args.data_dir)
    cfg = build_config(args, device, bundle, host_data)
    modes = args.modes or list(CUDA_MODES if device == "cuda" else CPU_MODES)
    plans = {m: mode_plan(args, cfg, m, gpu_count) for m in modes}
    for m in modes:
        if plans[m][0] is not None:
            steps_per_epoch(cfg, m, plans[m][0])  # not one batch: an input error, now
    return device, bundle, host_data, cfg, modes, plans


def _run_mode(cfg, mode, world_size, threads, host_data):
    """One mode's run record: CUDA plain and dataparallel in this process (threads set here when
    given), every other mode in world_size spawned processes."""
    if cfg["device"] == "cuda" and mode in ("plain", "dataparallel"):
        info = set_threads(threads) if threads is not None else current_threads()
        return (run_cuda_plain(cfg, host_data, info) if mode == "plain" else
                run_cuda_dataparallel(cfg, host_data, world_size, info))
    return run_spawned(cfg, mode, world_size, threads)


def _run_modes(cfg, modes, plans, host_data, log):
    """Runs the modes in order. A skipped mode's reason and a failed run's last error line go to
    stderr and into warnings; the next mode still runs. Returns (runs, warnings, failed).
    Raises InputError when a run finds bad input."""
    warnings, runs, failed = [], [], False
    device = cfg["device"]
    for mode in modes:
        world_size, threads = plans[mode]
        if world_size is None:
            warnings.append(threads)
            print(f"{PROG}: {threads}", file=sys.stderr)
            continue
        unit = "GPU(s)" if device == "cuda" and mode != "plain" else "process(es)"
        log(f"{mode}, {device}, {world_size} {unit}, {cfg['steps']} steps ...")
        try:
            runs.append(_run_mode(cfg, mode, world_size, threads, host_data))
            release_cuda()  # the in-process CUDA modes' tensors are gone with their frames
        except InputError:
            raise
        except Exception as e:  # a failed run is recorded; the other modes still run
            failed = True
            message = str(e).strip().splitlines()[-1] if str(e).strip() else type(e).__name__
            warnings.append(f"{mode} failed: {message}")
            print(f"{PROG}: {mode} failed: {message}", file=sys.stderr)
            release_cuda()
    return runs, warnings, failed


def _result_document(cfg, bundle, created, runs, warnings):
    """The result file's document (schema dpbench-pytorch-reference 3): config is cfg with the
    bundle replaced by its directory (or null), moved to the end."""
    config = {k: v for k, v in cfg.items() if k != "start"}
    config["start"] = bundle["dir"] if bundle is not None else None
    return {
        "schema": RESULT_SCHEMA,
        "created": created.strftime("%Y-%m-%dT%H:%M:%SZ"),
        "env": collect_env(),
        "config": config,
        "runs": runs,
        "warnings": warnings,
    }


def main(argv=None):
    """The command line (argv: the arguments, default sys.argv[1:]). Returns the exit code: 0
    every requested mode ran or was skipped with a reason, 1 a run failed or none ran (the file
    is written), 2 bad input (one line on stderr, no file; argparse's errors exit 2 itself)."""
    args = parse_args(sys.argv[1:] if argv is None else argv)
    log = (lambda *a: None) if args.quiet else (lambda msg: print(f"{PROG}: {msg}",
                                                                  file=sys.stderr))
    if torch is None:
        print(_torch_missing_line(), file=sys.stderr)
        return 2
    try:
        device, bundle, host_data, cfg, modes, plans = _prepare(args)
    except InputError as e:
        print(f"{PROG}: {e}", file=sys.stderr)
        return 2
    if device == "cuda":
        set_precision(cfg["precision"])
    cfg["modes"] = modes
    cfg["world_size"] = {m: p[0] for m, p in plans.items() if p[0] is not None}
    cfg["threads_per_process"] = {m: p[1] for m, p in plans.items() if p[0] is not None}

    created = datetime.datetime.now(datetime.timezone.utc)
    out = Path(args.out) if args.out else (
        REPO_ROOT / "results" / f"pytorch-reference-{created.strftime('%Y%m%d-%H%M%S')}.json")
    try:
        runs, warnings, failed = _run_modes(cfg, modes, plans, host_data, log)
    except InputError as e:
        print(f"{PROG}: {e}", file=sys.stderr)
        return 2

    write_json_atomic(out, _result_document(cfg, bundle, created, runs, warnings))
    if not args.quiet:
        print_table(runs)
        for w in warnings:
            print(f"warning: {w}")
    print(f"\nwrote {out}" if not args.quiet else f"wrote {out}")
    return 1 if failed or not runs else 0
