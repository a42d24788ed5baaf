"""What the benchmark scripts share: the command line (``cli``), state directories
(``state``), timing (``timing``), result tables (``tables``) and recorded spaces
(``bench.harness.spaces``, imported by itself: it loads ``tuned.registry``).

A script run as ``python bench/x.py`` first puts the checkout on ``sys.path`` (three lines:
``if __package__ in (None, "")``) and then imports what it needs from here.
"""

from __future__ import annotations

from bench.harness.cli import (
    add_smoke,
    bench_parser,
    interpreter_for_smoke,
    require_gpu,
    write_json,
)
from bench.harness.state import ROOT, scratch_base, state_dir
from bench.harness.tables import fmt_s, markdown_table, print_table, quartiles
from bench.harness.timing import Stopwatch

__all__ = [
    "ROOT",
    "Stopwatch",
    "add_smoke",
    "bench_parser",
    "fmt_s",
    "interpreter_for_smoke",
    "markdown_table",
    "print_table",
    "quartiles",
    "require_gpu",
    "scratch_base",
    "state_dir",
    "write_json",
]
