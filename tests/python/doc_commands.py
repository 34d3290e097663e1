"""The doc test's machinery: every fenced `dpbench ...` command of README.md and docs/*.md, found,
shortened and run. Used by test_doc_commands.py (untagged commands) and test_doc_commands_long.py
(tagged ones); docs/tests.md describes both.

Commands. In a fenced block (```sh, ```bash, ```console, ```shell or a plain ```), a line, with
its backslash-continued lines joined, a leading `$ ` prompt dropped and `# comments` ignored, is a
command when its program is `dpbench` or a path ending in `/dpbench`, or a launcher (mpirun,
mpiexec, srun, torchrun) with such a word among its arguments. Leading `NAME=value` words go to
its environment. Other lines (output, other programs) are not commands. A command with shell
operators (`&`, `;`, `|`: a loop) fails unless its block is tagged `skip`.

Tags. An HTML comment on the line right before a block's opening fence tags every command of the
block: `<!-- doc-test: TAG TAG... -->`, or `<!-- doc-test: skip: REASON -->`. TAGS below says
what each means; required_tags what a command's own words call for. Untagged commands are the
fast test's; tagged ones the long test's. A command identical to one that passed in an earlier
block (and without checkpoints) is not run again.

The substitution (short_run), and nothing else, makes a documented training run short:
  - `run` and `sweep` (and a bare `dpbench [options]`, which means `run`): `--max-steps N`
    becomes `--max-steps min(N, 3)` (added when absent), `--warmup-steps 1`, `--repetitions 1`
    and `--no-eval` replace or join the command's own; `--checkpoint-every N` becomes
    `min(N, 2)`, so that the short run writes a checkpoint and a `--resume` continues from it.
  - `sweep` on the emulated cluster: its network grid keeps the first value of each axis,
    `--nodes A,B` becomes `--nodes A` and `--links R,S` becomes `--links R`, so that every
    variant axis (modes, hooks, hierarchies, staleness bounds, ranks per node) still runs once
    (each cluster job costs seconds of set-up: the tricks sweep's 14 jobs took 155 s, its 7
    jobs at one rate half that).
  - `project --simulate`: `--max-ranks N` becomes `--max-ranks min(N, 64)` (the simulation of
    every point up to 1,024 ranks takes about 50 s; its cost is measured in docs/projection.md).
  - The program (`dpbench`, `./build/release/dpbench`, also as a launcher's argument) becomes
    the binary under test: $DPBENCH_BINARY, else build/release/dpbench of this checkout.
  - Every block runs in a fresh temporary working directory, its commands in order (relative
    `--out`, `--checkpoint-dir` and the default results/ land there; the repository's
    results/measured/ is linked in as results/measured, for the files documented commands read);
    an absolute `--out`/`-o` is moved into that directory; tests/data/, the committed sample
    data, is linked in too.
  - mpirun is allowed to run as root and to oversubscribe the cores (OMPI_ALLOW_RUN_AS_ROOT,
    OMPI_ALLOW_RUN_AS_ROOT_CONFIRM, OMPI_MCA_rmaps_base_oversubscribe in its environment).
Other subcommands (memory, project, report, compare) run as written.
"""
import dataclasses
import os
import pathlib
import re
import shlex
import shutil
import signal
import subprocess
import sys
import tempfile
import time

ROOT = pathlib.Path(__file__).resolve().parents[2]
BINARY = os.environ.get("DPBENCH_BINARY", str(ROOT / "build" / "release" / "dpbench"))

# The short run: the values that replace the documented ones.
MAX_STEPS = 3
WARMUP_STEPS = 1
CHECKPOINT_EVERY = 2
SIMULATED_RANKS = 64  # `project --simulate`'s --max-ranks at most (1,024 takes about 50 s)
# Seconds one command may take (the fast file's commands take about a second each).
TIMEOUT_S = {"fast": 120, "long": 240}
# Only the commands whose `path:line` this regular expression finds (e.g. docs/launchers.md:16),
# to rerun one command; unset, all.
ONLY = os.environ.get("DPBENCH_DOC_TEST_ONLY", "")

FENCE_LANGUAGES = {"", "sh", "bash", "console", "shell"}
LAUNCHERS = {"mpirun", "mpiexec", "srun", "torchrun"}
TRAINING_SUBCOMMANDS = {"run", "sweep"}
SUBCOMMANDS = TRAINING_SUBCOMMANDS | {"report", "compare", "project", "memory"}
SHELL_OPERATORS = {"&", "&&", "|", "||", ";", ">", ">>", "<"}


def _which(program):
    return None if shutil.which(program) else f"{program} is not on PATH"


def _gpu():
    if os.path.exists("/dev/nvidia0"):
        return None
    if shutil.which("nvidia-smi"):
        p = subprocess.run(["nvidia-smi", "-L"], capture_output=True, text=True, timeout=60)
        if p.returncode == 0 and "GPU" in p.stdout:
            return None
    return "no NVIDIA GPU here (no /dev/nvidia0; nvidia-smi -L lists none)"


def _torch():
    p = subprocess.run(["/usr/bin/python3", "-c", "import torch"], capture_output=True, text=True)
    return None if p.returncode == 0 else "/usr/bin/python3 cannot import torch (apt-get install python3-torch)"


# Every tag: what it means and what it needs (a probe that returns None when the need is met,
# else the reason to skip). Every tagged command runs in the long test; a command whose need is
# not met is skipped with the reason, as is one tagged with a need (any tag but `slow`) that
# dpbench refuses (exit 2) naming a missing prerequisite (MISSING_PREREQUISITE).
TAGS = {
    "cluster": ("an emulated cluster (--nodes): network namespaces, ip and tc; "
                "dpbench's own check decides (exit 2: `cannot host an emulated cluster`)", lambda: None),
    "gpu": ("a CUDA device (--device cuda)", _gpu),
    "mpirun": ("started by Open MPI's mpirun (and a build with MPI)", lambda: _which("mpirun")),
    "torchrun": ("torchrun, PyTorch's launcher (python3-torch)", lambda: _which("torchrun")),
    "pytorch": ("PyTorch for Debian's python3 (--reference pytorch)", _torch),
    "slow": ("runs here, but takes tens of seconds even when shortened", lambda: None),
    "skip": ("never run by the doc test, for the reason given (other hosts, Slurm, shell loops)", None),
}
MISSING_PREREQUISITE = re.compile(
    r"this build has no (MPI|gloo)|cannot host an emulated cluster|is not installed|cannot import"
    r"|--device cuda: no CUDA device|built without CUDA")
TAG_COMMENT = re.compile(r"^\s*<!--\s*doc-test:\s*(.*?)\s*-->\s*$")


@dataclasses.dataclass
class Command:
    """One documented command: where it is, as written, its words and its block's tags."""
    path: str          # relative to the repository root
    line: int          # 1-based line of its first line
    block: int         # 1-based line of its block's opening fence
    text: str          # as written, continuation lines joined
    env: dict          # its leading NAME=value words
    argv: list         # the rest of its words
    tags: list         # the block's tags (empty: untagged)
    skip_reason: str   # with the tag `skip`
    tag_error: str     # an unreadable tag comment

    @property
    def where(self):
        return f"{self.path}:{self.line}"

    @property
    def long(self):
        return bool(self.tags) or bool(self.skip_reason) or bool(self.tag_error)


def doc_files():
    """README.md and docs/*.md."""
    return [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]


def is_dpbench(word):
    return word == "dpbench" or word.endswith("/dpbench")


def parse_tags(comment):
    """(tags, skip reason, error) of the text of a `doc-test:` comment."""
    if comment.startswith("skip"):
        reason = comment[len("skip"):].lstrip(" :").strip()
        return [], reason, "" if reason else "`skip` needs a reason: <!-- doc-test: skip: REASON -->"
    tags = comment.split()
    unknown = [t for t in tags if t not in TAGS or t == "skip"]
    if unknown or not tags:
        return tags, "", f"unknown doc-test tag(s) {unknown or comment!r}; known: {', '.join(TAGS)}"
    return tags, "", ""


def parse_command(line):
    """(env, argv) of a command line, or None when it is no dpbench command."""
    line = line.strip()
    if line.startswith("$ "):
        line = line[2:]
    try:
        words = shlex.split(line, comments=True)
    except ValueError:
        return None
    env = {}
    while words and re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*=.*", words[0]):
        name, value = words.pop(0).split("=", 1)
        env[name] = value
    if not words:
        return None
    if is_dpbench(words[0]) or (os.path.basename(words[0]) in LAUNCHERS and any(map(is_dpbench, words[1:]))):
        return env, words
    return None


def commands_of(path):
    """Every command of the fenced blocks of one Markdown file, with its block's tags."""
    rel = str(path.relative_to(ROOT))
    lines = path.read_text().split("\n")
    found = []
    i = 0
    while i < len(lines):
        m = re.match(r"^(\s*)(`{3,})\s*([^`\s]*)", lines[i])
        if not m:
            i += 1
            continue
        fence, language, block = m.group(2), m.group(3).lower(), i + 1
        tags, skip_reason, tag_error = [], "", ""
        tag = TAG_COMMENT.match(lines[i - 1]) if i > 0 else None
        if tag:
            tags, skip_reason, tag_error = parse_tags(tag.group(1))
        i += 1
        body = []
        while i < len(lines) and not re.match(rf"^\s*{fence}\s*$", lines[i]):
            body.append((i + 1, lines[i]))
            i += 1
        i += 1  # the closing fence
        if language not in FENCE_LANGUAGES:
            continue
        j = 0
        while j < len(body):
            number, text = body[j]
            while text.rstrip().endswith("\\") and j + 1 < len(body):
                j += 1
                text = text.rstrip()[:-1] + " " + body[j][1].strip()
            j += 1
            parsed = parse_command(text)
            if parsed:
                env, argv = parsed
                found.append(Command(rel, number, block, " ".join(text.split()), env, argv, tags,
                                     skip_reason, tag_error))
    return found


def all_commands():
    """Every documented command, in file order (README.md first)."""
    return [c for path in doc_files() for c in commands_of(path)]


def _option(args, names):
    """Index of an option among args (`--name value` or `--name=value`), or None."""
    for k, a in enumerate(args):
        if a in names or any(a.startswith(n + "=") for n in names if n.startswith("--")):
            return k
    return None


def _take(args, names):
    """Removes every use of an option that takes a value; returns its last value (or None)."""
    value = None
    while (k := _option(args, names)) is not None:
        if "=" in args[k]:
            value = args[k].split("=", 1)[1]
            del args[k]
        else:
            value = args[k + 1] if k + 1 < len(args) else None
            del args[k:k + 2]
    return value


def required_tags(command):
    """The tags a command's own words call for: what it cannot run without."""
    k = next(n for n, w in enumerate(command.argv) if is_dpbench(w))
    launcher = os.path.basename(command.argv[0]) if k > 0 else ""
    args = command.argv[k + 1:]

    def value(name):
        i = _option(args, [name])
        if i is None:
            return None
        return args[i].split("=", 1)[1] if "=" in args[i] else (args[i + 1] if i + 1 < len(args) else "")

    need = set()
    if value("--nodes") is not None:
        need.add("cluster")
    if value("--device") == "cuda" or value("--comm") == "nccl":
        need.add("gpu")
    if launcher in ("mpirun", "mpiexec") or value("--launcher") == "mpirun":
        need.add("mpirun")
    if launcher == "torchrun" or value("--launcher") == "torchrun":
        need.add("torchrun")
    if value("--reference") is not None:
        need.add("pytorch")
    return need


def short_run(argv, workdir):
    """The command as the doc test runs it: the substitution of the module docstring."""
    argv = list(argv)
    k = next(n for n, w in enumerate(argv) if is_dpbench(w))
    argv[k] = os.path.abspath(BINARY)
    args = argv[k + 1:]
    sub = args[0] if args and args[0] in SUBCOMMANDS else ("run" if not args or args[0].startswith("-") else None)
    if sub in TRAINING_SUBCOMMANDS and not {"-h", "--help"} & set(args):
        max_steps = _take(args, ["--max-steps"])
        steps = MAX_STEPS if max_steps is None or int(max_steps) < 0 else min(int(max_steps), MAX_STEPS)
        _take(args, ["--warmup-steps"])
        _take(args, ["--repetitions"])
        while "--no-eval" in args:
            args.remove("--no-eval")
        every = _take(args, ["--checkpoint-every"])
        if every is not None:
            args += ["--checkpoint-every", str(min(int(every), CHECKPOINT_EVERY))]
        args += ["--max-steps", str(steps), "--warmup-steps", str(WARMUP_STEPS), "--repetitions", "1", "--no-eval"]
    if sub == "sweep":
        for axis in ("--nodes", "--links"):
            values = _take(args, [axis])
            if values is not None:
                args += [axis, values.split(",")[0]]
    if sub == "project" and "--simulate" in args:
        max_ranks = _take(args, ["--max-ranks"])
        if max_ranks is not None:
            args += ["--max-ranks", str(min(int(max_ranks), SIMULATED_RANKS))]
    out = _option(args, ["--out", "-o"])
    if out is not None:
        value = _take(args, ["--out", "-o"])
        if value is not None and os.path.isabs(value):
            value = os.path.join(workdir, os.path.basename(value))
        args[out:out] = ["--out", value]
    return argv[:k + 1] + args


def environment(command):
    """The environment a command runs with: ours, its own NAME=value words, mpirun's permissions."""
    env = dict(os.environ)
    env.update(command.env)
    if any(os.path.basename(w) in ("mpirun", "mpiexec") for w in command.argv[:1]):
        if os.geteuid() == 0:
            env.setdefault("OMPI_ALLOW_RUN_AS_ROOT", "1")
            env.setdefault("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1")
        env.setdefault("OMPI_MCA_rmaps_base_oversubscribe", "1")
    return env


@dataclasses.dataclass
class Outcome:
    """How one command went."""
    argv: list
    returncode: int
    stdout: str
    stderr: str
    seconds: float
    timed_out: bool


def run(command, workdir, timeout_s):
    """Runs one command (shortened) in workdir; a timeout kills its whole process group."""
    argv = short_run(command.argv, workdir)
    start = time.monotonic()
    p = subprocess.Popen(argv, cwd=workdir, env=environment(command), stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, text=True, start_new_session=True)
    timed_out = False
    try:
        stdout, stderr = p.communicate(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        timed_out = True
        os.killpg(p.pid, signal.SIGKILL)
        stdout, stderr = p.communicate()
    return Outcome(argv, p.returncode, stdout, stderr, time.monotonic() - start, timed_out)


def tail(text, lines=25):
    kept = text.rstrip("\n").split("\n")[-lines:]
    return "\n".join("    " + line for line in kept)


def failure_message(command, outcome, timeout_s):
    what = f"timed out after {timeout_s} s" if outcome.timed_out else f"exit {outcome.returncode}"
    output = outcome.stderr if outcome.stderr.strip() else outcome.stdout
    return (f"{command.where}: {what} ({outcome.seconds:.1f} s)\n"
            f"  documented: {command.text}\n"
            f"  ran:        {shlex.join(outcome.argv)}\n"
            f"  {'stderr' if outcome.stderr.strip() else 'stdout'} (last lines):\n{tail(output)}")


def needs_unmet(command):
    """The reason a tagged command cannot run here, or None."""
    for tag in command.tags:
        reason = TAGS[tag][1]()
        if reason:
            return f"{tag}: {reason}"
    return None


def run_all(test, commands, kind):
    """Runs commands as subtests of test, block by block, each block in a fresh directory.

    A tagged command whose need is unmet, or that dpbench refuses naming a missing prerequisite,
    is skipped with the reason, after the others ran, and only when none of them failed: ctest
    counts a file with any skip as skipped, so a failure must not print one. Then the unmet ones
    are listed on stderr instead."""
    timeout_s = TIMEOUT_S[kind]
    unmet, failed, passed = [], False, {}
    probes = {}
    blocks = {}
    for c in (c for c in commands if re.search(ONLY, c.where)):
        blocks.setdefault((c.path, c.block), []).append(c)
    if ONLY and not blocks:
        test.fail(f"DPBENCH_DOC_TEST_ONLY={ONLY}: matches no command of this suite")
    for cmds in blocks.values():
        with tempfile.TemporaryDirectory(prefix="dpbench-doc-test-") as workdir:
            # The repository's measured results, read by documented `project` and `report` lines.
            os.makedirs(os.path.join(workdir, "results"))
            os.symlink(ROOT / "results" / "measured", os.path.join(workdir, "results", "measured"))
            # The committed sample data documented commands read (tests/data/criteo-sample.txt).
            os.makedirs(os.path.join(workdir, "tests"))
            os.symlink(ROOT / "tests" / "data", os.path.join(workdir, "tests", "data"))
            for c in cmds:
                if c.skip_reason:
                    print(f"doc-test: not run: {c.where} (skip: {c.skip_reason}): {c.text}", file=sys.stderr)
                    continue
                with test.subTest(c.where, command=c.text):
                    if c.tag_error:
                        failed = True
                        test.fail(f"{c.where}: {c.tag_error}")
                    shell = [w for w in c.argv if w in SHELL_OPERATORS or w.endswith(";")]
                    if shell:
                        failed = True
                        test.fail(f"{c.where}: {' '.join(shell)}: a shell construct, not one command; tag its "
                                  f"block <!-- doc-test: skip: REASON -->")
                    key = tuple(c.tags)
                    if key not in probes:
                        probes[key] = needs_unmet(c)
                    if probes[key]:
                        unmet.append((c, probes[key]))
                        continue
                    # The same command, stateless, in another block: once is enough.
                    same = (tuple(sorted(c.env.items())), tuple(short_run(c.argv, "")))
                    if same in passed and _option(c.argv, ["--resume", "--checkpoint-dir"]) is None:
                        print(f"doc-test: {c.where}: as {passed[same]}, which passed", file=sys.stderr)
                        continue
                    outcome = run(c, workdir, timeout_s)
                    print(f"doc-test: {c.where}: exit {outcome.returncode} in {outcome.seconds:.1f} s",
                          file=sys.stderr)
                    if (set(c.tags) - {"slow"} and outcome.returncode == 2 and not outcome.timed_out
                            and (m := MISSING_PREREQUISITE.search(outcome.stderr))):
                        line = next(l for l in outcome.stderr.splitlines() if m.group(0) in l)
                        unmet.append((c, f"dpbench: {line.removeprefix('dpbench: error: ')}"))
                        continue
                    if outcome.timed_out or outcome.returncode != 0:
                        failed = True
                        test.fail(failure_message(c, outcome, timeout_s))
                    passed[same] = c.where
    for c, reason in unmet:
        if failed:
            print(f"doc-test: not run: {c.where} ({reason}): {c.text}", file=sys.stderr)
        else:
            with test.subTest(c.where, command=c.text):
                test.skipTest(f"{c.where}: {reason}")


def check_binary(test):
    if not (os.path.isfile(BINARY) and os.access(BINARY, os.X_OK)):
        test.fail(f"dpbench binary not found at {BINARY}: build it (cmake --build --preset release) "
                  f"or set DPBENCH_BINARY")
