"""Retiring a discovered knob that is wrong on most of its values (issue 19).

Discovery decides what is a knob from names and uses (:mod:`tuned.registry.discovery`), never
from values; a performance parameter it misjudges (a "block" that is in fact part of the math)
shows up as candidates that compile and run but give wrong results. :func:`retired_knobs`
reads the trials of an entry and retires such a knob: its space shrinks to its baseline value,
and a note says which values failed.

A value of a knob *fails* when every trial that set it (and reached a verdict on
correctness) was ``incorrect`` or ``nan``; it *passes* when one of them was correct. A failed
trial that moved several knobs is blamed on one only when the others' values were correct
elsewhere, or when that one alone has such a clean failure: a quantizer's block size moved
with ``num_warps`` in three wrong trials once retired ``num_warps``, which was innocent. Compile
and runtime errors say nothing about the math (a tile too large for shared memory), so they
are not counted. A knob is retired once at least :data:`MIN_VALUES` of its non-baseline values
have a verdict and more of them fail than pass.

This is a pure function of the trials: the campaign (``tuned/search/base.py``, discovered
knobs only) calls it on the knob moves of the original's code and proposes from the returned
space.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from tuned.registry.spec import KnobValue

__all__ = ["CORRECTNESS_FAILURES", "MIN_VALUES", "retired_knobs"]

#: Outcomes that say a candidate's math is wrong (see ``tuned.outcomes.Outcome``).
CORRECTNESS_FAILURES = frozenset({"incorrect", "nan"})
#: Outcomes that say it is right.
CORRECT = frozenset({"ok"})
#: Non-baseline values with a verdict needed before a knob may be retired.
MIN_VALUES = 3


def retired_knobs(
    knobs: Mapping[str, tuple[KnobValue, ...]],
    baseline: Mapping[str, KnobValue],
    trials: Iterable[tuple[Mapping[str, KnobValue], str]],
) -> tuple[dict[str, tuple[KnobValue, ...]], list[str]]:
    """The space with retired knobs pinned to their baseline, and one note per retired knob.

    ``trials``: (knobs of the candidate, outcome value such as ``"ok"`` or ``"incorrect"``).
    """
    judged = [
        ([(n, v) for n, v in config.items() if n in knobs and v != baseline.get(n)], o in CORRECT)
        for config, o in trials
        if o in CORRECTNESS_FAILURES or o in CORRECT
    ]
    correct = {move for moves, ok in judged if ok for move in moves}
    # A failure is clean for a knob when every other knob the trial moved took a value that
    # was correct elsewhere: then only this knob can be the cause.
    clean = {
        name
        for moves, ok in judged
        if not ok
        for name, value in moves
        if all(m in correct for m in moves if m != (name, value))
    }
    verdicts: dict[str, dict[KnobValue, set[bool]]] = {k: {} for k in knobs}
    for moves, ok in judged:
        for name, value in moves:
            others = [m for m in moves if m != (name, value)]
            # Ambiguous: another moved knob may be the cause. Blamed only on a knob known to
            # break the math (a clean failure), and only when no other one is.
            ambiguous = not ok and not all(m in correct for m in others)
            if ambiguous and (name not in clean or any(m in clean for m, _ in others)):
                continue
            verdicts[name].setdefault(value, set()).add(ok)
    space = dict(knobs)
    notes: list[str] = []
    for name, seen in verdicts.items():
        failed = sorted((v for v, ok in seen.items() if True not in ok), key=str)
        passed = [v for v, ok in seen.items() if True in ok]
        if len(seen) < MIN_VALUES or len(failed) <= len(passed) or name not in baseline:
            continue
        space[name] = (baseline[name],)
        notes.append(
            f"knob {name} retired: candidates were incorrect with {len(failed)} of the "
            f"{len(seen)} values tried ({', '.join(map(str, failed))}), so it changes the "
            f"math rather than the speed; it stays at its baseline {baseline[name]!r}"
        )
    return space, notes
