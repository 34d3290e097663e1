"""The build's layers, checked on every #include: a folder may include its own headers and those
of lower layers only.

    core (runtime) -> workloads, sim, launch, history -> cluster, train -> strategies (ps, allreduce, sharded_ps, ...), cuda
        -> registry -> record -> analysis, harness -> bench

The strategies and cuda/ are siblings: a strategy never sees CUDA, the CUDA target never sees a
strategy, and no strategy sees another. A strategy is a top-level folder holding a
*_strategy.cpp, as CMakeLists.txt finds them. The CMake targets (dpbench_layer) link in the same
direction.

One exception: a strategy's options header, <strategy>/<strategy>_config.hpp (a section of
TrainConfig), sits at the train layer's level: train/ and every folder above it may include it,
and it includes standard headers only.
"""
import pathlib
import re
import unittest

ROOT = pathlib.Path(__file__).resolve().parents[2]

# folder -> layer; a folder may include folders of a strictly lower layer, and itself.
LAYERS = {
    "core": 0,
    "workloads": 1,
    "sim": 1,
    "launch": 1,
    "history": 1,
    "cluster": 2,
    "train": 2,
    "cuda": 3,
    "registry": 4,
    "record": 5,
    "analysis": 6,
    "harness": 6,
    "bench": 7,
}
STRATEGY_LAYER = 3
# Every strategy folder, found as the build finds them.
STRATEGIES = sorted({p.parent.name for p in ROOT.glob("*/*_strategy.cpp")})
LAYERS.update({name: STRATEGY_LAYER for name in STRATEGIES})
SOURCE_SUFFIXES = {".hpp", ".cpp", ".cu", ".cuh", ".in"}
INCLUDE = re.compile(r'^\s*#\s*include\s+"([a-z_]+)/([^"]*)"', re.MULTILINE)
ANY_PROJECT_INCLUDE = re.compile(r'^\s*#\s*include\s+"', re.MULTILINE)


def is_strategy_config(target: str, rest: str) -> bool:
    """Whether "target/rest" is a strategy's options header, which train/ and above may include."""
    return target in STRATEGIES and rest == f"{target}_config.hpp"


def violations(folder: str, text: str) -> list:
    """The included folders of `text` (a file under `folder`) that break the layering."""
    own = LAYERS[folder]
    bad = []
    for target, rest in INCLUDE.findall(text):
        if target == folder or target not in LAYERS:
            continue
        if is_strategy_config(target, rest) and own >= LAYERS["train"]:
            continue
        if LAYERS[target] >= own:
            bad.append(target)
    return bad


def scan(root: pathlib.Path) -> list:
    """Every 'file: includes folder' breach under root's layer folders."""
    found = []
    for folder in LAYERS:
        for path in sorted((root / folder).rglob("*")):
            if path.suffix not in SOURCE_SUFFIXES or not path.is_file():
                continue
            for target in violations(folder, path.read_text(encoding="utf-8", errors="replace")):
                found.append(f"{path.relative_to(root)} includes {target}/ (a higher or sibling layer)")
    return found


class Layers(unittest.TestCase):
    def test_no_file_includes_a_higher_or_sibling_layer(self):
        self.assertEqual(scan(ROOT), [])

    def test_strategy_config_headers_include_standard_headers_only(self):
        for name in STRATEGIES:
            path = ROOT / name / f"{name}_config.hpp"
            if path.is_file():
                text = path.read_text(encoding="utf-8")
                self.assertIsNone(ANY_PROJECT_INCLUDE.search(text), f"{path.relative_to(ROOT)} includes a project header")

    def test_every_layer_folder_holds_sources(self):
        for folder in LAYERS:
            files = [p for p in (ROOT / folder).rglob("*") if p.suffix in SOURCE_SUFFIXES]
            self.assertTrue(files, f"{folder}/ has no sources: the layer table is stale")

    def test_strategies_are_found_by_their_traits_file(self):
        self.assertTrue({"ps", "allreduce", "sharded_ps"} <= set(STRATEGIES), STRATEGIES)

    def test_check_catches_upward_and_sibling_includes(self):
        self.assertEqual(violations("workloads", '#include "train/training.hpp"\n'), ["train"])
        self.assertEqual(violations("core", '#include "workloads/model.hpp"\n'), ["workloads"])
        self.assertEqual(violations("ps", '#include "cuda/cuda_runtime.hpp"\n'), ["cuda"])
        self.assertEqual(violations("cuda", '#  include "allreduce/ddp_trainer.hpp"\n'), ["allreduce"])
        self.assertEqual(violations("sharded_ps", '#include "allreduce/ddp_trainer.hpp"\n'), ["allreduce"])
        self.assertEqual(violations("train", '#include "core/comm.hpp"\n#include "train/x.hpp"\n'), [])
        self.assertEqual(violations("bench", '#include "cuda/register.hpp"\n'), [])
        self.assertEqual(violations("train", '#include "allreduce/allreduce_config.hpp"\n'), [])
        self.assertEqual(violations("cuda", '#include "sharded_ps/sharded_ps_config.hpp"\n'), [])
        self.assertEqual(violations("workloads", '#include "ps/ps_config.hpp"\n'), ["ps"])
        self.assertEqual(violations("train", '#include "allreduce/powersgd.hpp"\n'), ["allreduce"])


if __name__ == "__main__":
    unittest.main()
