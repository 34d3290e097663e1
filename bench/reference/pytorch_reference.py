#!/usr/bin/env python3
"""dpbench's PyTorch reference (bench/reference/README.md). The code is the package
dpbench_reference next to this file; this entry point puts its directory on sys.path and runs
dpbench_reference.cli.main. Exit codes: 0 ran, 1 a run failed or none ran, 2 bad input."""

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from dpbench_reference.cli import main  # noqa: E402  (needs the path above)

if __name__ == "__main__":
    sys.exit(main())
