"""ktuned's benchmarks: one script per question, over one shared harness (``bench.harness``).

Each script runs as ``python bench/<name>.py ...`` (its own ``--help`` says what it measures)
and, where it can, as ``python bench/<name>.py --smoke``: a few seconds on the CPU, in Triton's
interpreter, that exercise the code and print no result worth quoting
(``tests/bench/test_smoke.py`` runs every one in CI). Figures: ``bench/RESULTS.md``.
"""
