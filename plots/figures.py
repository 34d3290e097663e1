"""The report's figures: one function per figure, each writing one PNG with matplotlib (Agg).

For: drawing the records report_data.py builds. Every function returns a Figure; when its data
is missing (a sweep with one num_workers value, no --collectives file...) it writes nothing and
the Figure carries one sentence saying what to run to get it, so the report never shows an empty
axis. The rules every figure keeps:
- order: strategies in the report's one order (report_data.series_order: the baseline, ps,
  first, then the others as the files first name them) in legends, panels and bar groups, and one
  colour per strategy across the figures;
- spread: a throughput that has repetitions is drawn as its median with a bar from the smallest
  to the largest repetition (the step-time marker too);
- overlap: communication hidden by overlap is drawn only where report_data.hidden_comm says it
  can exist (more than one rank, a strategy that overlaps backward, a hidden part above zero);
- limits: the y axis holds every bar and error bar whole, with headroom;
- modelled: the memory model's figure (`dpbench memory`, --memory) says "modelled" in its title,
  axis and caption, and stacks the categories in the measured memory figure's colours and order;
- captions: a number the verdict also states (throughput ratios, memory imbalance, exposed
  communication) is read from the Verdict (report_data.compute_verdict, computed once by
  report.py), never recomputed; the two emulated-cluster figures quote the NetworkVerdict alike.

Not for: reading JSON or choosing verdicts (report_data.py), or HTML/Markdown (report.py).

The parts: figures_common.py (the styles, the Figure record, shared helpers), figures_measured.py
(throughput, per-rank memory, step breakdown, workers, batch size), figures_models.py (the memory
model and the projection) and figures_network.py (collectives' bus bandwidth, the emulated
cluster); this module gives their names to its readers (report.py, the tests).
"""
from figures_common import *  # noqa: F401,F403
from figures_measured import *  # noqa: F401,F403
from figures_models import *  # noqa: F401,F403
from figures_network import *  # noqa: F401,F403
