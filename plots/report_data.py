"""Reads the JSON the report is built from and turns it into plain records: the report's data
layer, one module per family, all of whose names this module gives its readers (figures.py,
report.py, trends.py and the tests read `report_data.X`).

For: dpbench result and sweep files (schema "dpbench-result"), with the PyTorch reference runs
that `dpbench run --reference pytorch` adds to them, Google Benchmark JSON from
bench/micro/dpbench_collectives, `dpbench project` files (schema "dpbench-projection") and
`dpbench memory` files (schema "dpbench-memory": the memory model's bytes per mode, world size
and role, and the largest parameter count that fits a capacity);
aggregating repetitions by median; choosing which slice of a sweep a figure shows; the
ten-second verdict that opens the report, computed once: every number a figure's caption shares
with it (throughput ratios, memory imbalance, exposed communication) is read from the Verdict; the
one order of the strategies (the baseline, ps, first, then the others as the files first name
them) that every table, figure and sentence uses; the rule for when communication hidden by
overlap is drawn (hidden_comm); for an emulated-cluster sweep (`dpbench sweep --nodes
--links`, runs with a `cluster` block), the throughput of each strategy per node count and link
rate, its projection, and the ratios and crossovers the network verdict states.

Not for: drawing (figures.py), HTML/Markdown rendering (report.py and templates/), or running
dpbench. Nothing here reads anything but the JSON files it is given.

The families:
- report_records.py: result and sweep files, the PyTorch reference runs in them, the points
  (repetitions aggregated by median), the strategies' one order and hidden_comm;
- report_slices.py: which slice of a sweep a figure shows, and the verdict (Ratio, Imbalance,
  Exposed, compute_verdict);
- report_network.py: the emulated-cluster sweep (NetworkPoint, compute_network_verdict);
- report_collectives.py: Google Benchmark collectives (load_collectives, merge_collectives);
- report_projection.py: projection and memory-model files (load_projection, load_memory).
"""
from report_records import *  # noqa: F401,F403
from report_slices import *  # noqa: F401,F403
from report_network import *  # noqa: F401,F403
from report_collectives import *  # noqa: F401,F403
from report_projection import *  # noqa: F401,F403
