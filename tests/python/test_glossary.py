"""One meaning per word (docs/glossary.md): the glossary names each word once, and no tracked
file spells a retired name.

Run from the repository root:
    /usr/bin/python3 tests/python/run_suite.py test_glossary.py

A retired spelling is an old name of something that now has one name of its own: the strategy the
others are compared with was the "reference" (now the baseline; "reference" is the PyTorch
reference alone), `ps`'s code was named for a parameter server (it is DataParallel's), the comm
hook and the node hierarchy were strings compared wherever they were read (now a CommHook and
the vocabulary's Hierarchy, spelled in their parsers alone; the PyTorch reference, in Python, reads
the start bundle's spelling of the hook in its own parser), an emulated cluster's programs were
told apart by an environment variable (now subcommands), and `project --link` and `memory
--precision` meant something else than `run`'s options of the same names, a process's
launcher, an emulated cluster's and the object that runs a process's ranks had three names, a
projection's curves were its "modes", and the PyTorch reference's programs were its "modes" too
(`pytorch_reference.py --modes`, CPU_MODES, mode_plan; now --programs, CPU_PROGRAMS, program_plan;
`dpbench sweep --modes` and `dpbench memory --modes` are dpbench's modes and stay). The files that
still name an old spelling on purpose (the readers of old result files, this test) are listed with
it.
"""
import pathlib
import re
import subprocess
import unittest

ROOT = pathlib.Path(__file__).resolve().parents[2]
GLOSSARY = ROOT / "docs" / "glossary.md"

# Files that read or describe older result files under their old names.
OLD_FILE_READERS = {"results/schema_versions.py", "tests/python/test_schema_versions.py",
                    "tests/python/test_report_figures.py", "docs/glossary.md"}

# A pattern of the C++ API alone: every file but C++ sources may spell it.
CPP_ONLY = "c++ only"

# retired spelling (a regular expression) -> (its name now, files allowed to spell it)
RETIRED = {
    r"\breference_strategy\(": ("baseline_strategy()", set()),
    r"\.reference = (true|false)": ("Strategy::baseline", set()),
    r"ratio_to_reference": ("ratio_to_baseline", OLD_FILE_READERS),
    r"traits\[\"reference\"\]": ("the trait \"baseline\"", set()),
    r"\"reference\": (True|False|true|false)\b": ("the trait \"baseline\"", OLD_FILE_READERS),
    r"ps/parameter_server\.|train_parameter_server|validate_parameter_server|parameter_server_strategy":
        ("ps/data_parallel.*, train_data_parallel, data_parallel_strategy", set()),
    r"\bPsRank\b": ("DataParallelRank", set()),
    # C++ alone: the PyTorch reference (Python) parses the start bundle's spelling of the hook.
    r"\bpowersgd_rank\(|\bwire_format\(|\bcomm_hook_error\b": ("CommHook, comm_hook_from", CPP_ONLY),
    r"hierarchy [!=]= \"(node|none)\"": ("Hierarchy::node, Hierarchy::none", CPP_ONLY),
    r"comm_hook [!=]= \"|hook [!=]= \"(fp16|bf16|allreduce)\"|rfind\(\"powersgd\"":
        ("CommHook's kind", CPP_ONLY),
    r"cluster::stage\(\)|DPBENCH_CLUSTER_STAGE": ("the cluster-inner and cluster-rank subcommands", set()),
    r"--link (measured|memory|pcie4|pcie5|nvlink4|ib-ndr)\b|\"--link\", \"(memory|nvlink4|pcie4)\"":
        ("project --link-model", set()),
    r"--precision mixed|precision == \"mixed\"": ("memory --mixed-precision", set()),
    r"\bProjectedMode\b|\bprojected_modes\(|\bprojected_mode\(|doc\[\"modes\"\]": ("ProjectionCurve, projected_curves(), the projection's \"curves\"", set()),
    r"\bLauncherKind\b|\bClusterLauncher\b": ("Launcher, the one launcher vocabulary", set()),
    r"\bmake_launcher\b|\bDeviceLauncher\b|public Launcher\b": ("make_rank_runner, RankRunner, DeviceRanks", set()),
    # The PyTorch reference's programs (bench/reference/): dpbench's own --modes (sweep, memory) stay.
    r"pytorch_reference\.py[^\n]*--modes\b|add_argument\(\"--modes\"": ("pytorch_reference.py --programs", set()),
    r"\b(CPU_|CUDA_)MODES\b|\bmode_plan\(|\b_mode_list\b|\b_run_modes?\(|from \.modes import"
    r"|dpbench_reference\.modes\b":
        ("CPU_PROGRAMS, CUDA_PROGRAMS, program_plan, _program_list, _run_program(s), "
         "dpbench_reference.programs", set()),
}

SOURCES = ("*.cpp", "*.hpp", "*.cu", "*.cuh", "*.py", "*.md", "*.sh", "*.j2", "*.txt", ".ci/run")


def tracked_files():
    out = subprocess.run(["git", "ls-files", "--", *SOURCES], cwd=ROOT, capture_output=True, text=True,
                         check=True)
    return [line for line in out.stdout.splitlines() if line and line != "tests/python/test_glossary.py"]


def retired_uses(files, read=lambda f: (ROOT / f).read_text(errors="replace")):
    """['path:line: spelling (now: name)'] of every retired spelling outside its allowed files."""
    found = []
    for path in files:
        text = read(path)
        for pattern, (now, allowed) in RETIRED.items():
            if allowed == CPP_ONLY and not path.endswith((".cpp", ".hpp", ".cu", ".cuh")):
                continue
            if allowed != CPP_ONLY and path in allowed:
                continue
            for m in re.finditer(pattern, text):
                line = text.count("\n", 0, m.start()) + 1
                found.append(f"{path}:{line}: {m.group(0)} (now: {now})")
    return found


def glossary_words():
    """The words the glossary's headings define, in order (a heading may define several,
    comma-separated; a parenthesised option beside a word is not a word of its own)."""
    words = []
    for line in GLOSSARY.read_text().splitlines():
        if line.startswith("## "):
            title = re.sub(r"\s*\(.*?\)", "", line[3:])
            words.extend(w.strip().lower() for w in title.split(",") if w.strip())
    return words


class GlossaryTest(unittest.TestCase):
    def test_the_glossary_defines_each_word_once(self):
        words = glossary_words()
        self.assertGreater(len(words), 30)
        self.assertEqual(sorted({w for w in words if words.count(w) > 1}), [])
        for word in ("baseline", "reference", "mode", "program", "launcher", "communication hook"):
            self.assertIn(word, words)

    def test_no_tracked_file_spells_a_retired_name(self):
        self.assertEqual(retired_uses(tracked_files()), [])

    def test_the_check_finds_each_retired_spelling(self):
        samples = {
            "a.cpp": 'if (config.hierarchy == "node") x = reference_strategy();\n',
            "b.py": 'traits["reference"] and run["ratio_to_reference"]\n',
            "c.md": "dpbench project f.json --link nvlink4\nmemory --precision mixed\n",
            "d.cpp": "powersgd_rank(h); // DPBENCH_CLUSTER_STAGE=rank\nPsRank r;\n",
            "results/schema_versions.py": 'rename "ratio_to_reference"\n',
            "f.md": "python3 bench/reference/pytorch_reference.py --device cpu --modes plain\n",
            "g.py": 'p.add_argument("--modes", type=_mode_list)\nfrom .modes import plain_rank\n',
        }
        found = retired_uses(samples, read=samples.get)
        self.assertEqual(13, len([f for f in found if not f.startswith("results/")]), found)
        self.assertFalse([f for f in found if f.startswith("results/")], found)
        current = {"e.cpp": "config.hierarchy == Hierarchy::node; run --link 1gbit\n",
                   "h.md": "dpbench sweep --modes ps,allreduce\ndpbench memory --modes ps\n"
                           "pytorch_reference.py --programs plain,ddp\n"}
        self.assertEqual([], retired_uses(current, read=current.get))


if __name__ == "__main__":
    unittest.main()
