"""The command line: parse the options, check the bundle and the data, run each PyTorch program,
write the result file and print the table. Exit codes: 0 every requested program ran or was
skipped with a reason, 1 a run failed or none ran, 2 bad arguments, a bad start bundle, no
PyTorch, no CUDA device for --device cuda, or unreadable data.
"""

import datetime
import sys
from pathlib import Path

from .common import CPU_PROGRAMS, CUDA_PROGRAMS, PROG, REPO_ROOT, RESULT_SCHEMA, \
    TORCH_IMPORT_ERROR, InputError, torch
from .bundle import read_start_bundle
from .config import build_config, program_plan, resolve_device
from .data import load_fashion_mnist, steps_per_epoch
from .env import collect_env
from .options import option_name, parse_args
from .programs import run_cuda_dataparallel, run_cuda_plain
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
    """Everything checked before the first program runs: the device, the start bundle or the
    data, the configuration and each program's plan (program_plan). Returns (device, bundle,
    host_data, cfg, programs, plans). Raises InputError (exit 2, no result file)."""
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
    programs = args.programs or list(CUDA_PROGRAMS if device == "cuda" else CPU_PROGRAMS)
    plans = {p: program_plan(args, cfg, p, gpu_count) for p in programs}
    for p in programs:
        if plans[p][0] is not None:
            steps_per_epoch(cfg, p, plans[p][0])  # not one batch: an input error, now
    return device, bundle, host_data, cfg, programs, plans


def _run_program(cfg, program, world_size, threads, host_data):
    """One program's run record: CUDA plain and dataparallel in this process (threads set here
    when given), every other program in world_size spawned processes."""
    if cfg["device"] == "cuda" and program in ("plain", "dataparallel"):
        info = set_threads(threads) if threads is not None else current_threads()
        return (run_cuda_plain(cfg, host_data, info) if program == "plain" else
                run_cuda_dataparallel(cfg, host_data, world_size, info))
    return run_spawned(cfg, program, world_size, threads)


def _run_programs(cfg, programs, plans, host_data, log):
    """Runs the programs in order. A skipped program's reason and a failed run's last error line
    go to stderr and into warnings; the next program still runs. Returns (runs, warnings,
    failed). Raises InputError when a run finds bad input."""
    warnings, runs, failed = [], [], False
    device = cfg["device"]
    for program in programs:
        world_size, threads = plans[program]
        if world_size is None:
            warnings.append(threads)
            print(f"{PROG}: {threads}", file=sys.stderr)
            continue
        unit = "GPU(s)" if device == "cuda" and program != "plain" else "process(es)"
        log(f"{program}, {device}, {world_size} {unit}, {cfg['steps']} steps ...")
        try:
            runs.append(_run_program(cfg, program, world_size, threads, host_data))
            release_cuda()  # the in-process CUDA programs' tensors are gone with their frames
        except InputError:
            raise
        except Exception as e:  # a failed run is recorded; the other programs still run
            failed = True
            message = str(e).strip().splitlines()[-1] if str(e).strip() else type(e).__name__
            warnings.append(f"{program} failed: {message}")
            print(f"{PROG}: {program} failed: {message}", file=sys.stderr)
            release_cuda()
    return runs, warnings, failed


def _result_document(cfg, bundle, created, runs, warnings):
    """The result file's document (schema dpbench-pytorch-reference 4): config is cfg with the
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
    every requested program ran or was skipped with a reason, 1 a run failed or none ran (the file
    is written), 2 bad input (one line on stderr, no file; argparse's errors exit 2 itself)."""
    args = parse_args(sys.argv[1:] if argv is None else argv)
    log = (lambda *a: None) if args.quiet else (lambda msg: print(f"{PROG}: {msg}",
                                                                  file=sys.stderr))
    if torch is None:
        print(_torch_missing_line(), file=sys.stderr)
        return 2
    try:
        device, bundle, host_data, cfg, programs, plans = _prepare(args)
    except InputError as e:
        print(f"{PROG}: {e}", file=sys.stderr)
        return 2
    if device == "cuda":
        set_precision(cfg["precision"])
    cfg["programs"] = programs
    cfg["world_size"] = {program: plan[0] for program, plan in plans.items() if plan[0] is not None}
    cfg["threads_per_process"] = {program: plan[1] for program, plan in plans.items()
                                  if plan[0] is not None}

    created = datetime.datetime.now(datetime.timezone.utc)
    out = Path(args.out) if args.out else (
        REPO_ROOT / "results" / f"pytorch-reference-{created.strftime('%Y%m%d-%H%M%S')}.json")
    try:
        runs, warnings, failed = _run_programs(cfg, programs, plans, host_data, log)
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
