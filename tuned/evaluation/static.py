"""The static gate: checks on a candidate's source before any worker time is spent.

:func:`static_check` is the minimal gate every candidate passes (it parses, and defines the
launcher as a top-level function); :func:`candidate_check` adds the full gate for
LLM-written modules (:mod:`tuned.llm.gate`: imports, kernel launched, signature kept, no
torch compute, no exec/os/threads/module state).
"""

from __future__ import annotations

import ast

from tuned.outcomes import Candidate, Provenance
from tuned.registry.kernel_sources import module_statements
from tuned.registry.spec import KernelSpec

__all__ = ["candidate_check", "static_check"]


def static_check(source: str, launcher: str) -> str | None:
    """``None`` if ``source`` may be run, else the rule it breaks (the rejection reason)."""
    try:
        tree = ast.parse(source)
    except SyntaxError as exc:
        return f"syntax error at line {exc.lineno}: {exc.msg}"
    # The launcher is a dotted path (docs/registry.md, "Launchers"): its first part must be
    # bound at the top level (a def, a class, an import; also inside a top-level `if`, `try`
    # or `with`: `if has_triton(): def op(...)`), or it is an installed module's path.
    head = launcher.split(".")[0]
    bound: set[str] = set()
    for node in module_statements(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            bound.add(node.name)
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            bound.update((a.asname or a.name).split(".")[0] for a in node.names)
        elif isinstance(node, (ast.Assign, ast.AnnAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            bound.update(n.id for t in targets for n in ast.walk(t) if isinstance(n, ast.Name))
    if head not in bound and "." not in launcher:
        return f"the module defines no top-level function {launcher!r} (the launcher)"
    return None


def candidate_check(spec: KernelSpec, candidate: Candidate) -> str | None:
    """The static gate of one candidate, before any worker time: :func:`static_check` for
    every candidate and, for an LLM-written module (provenance ``llm``), the full gate of
    :mod:`tuned.llm.gate` (its reason starts with the rule broken). Every path that runs
    candidate code (the evaluation client, the compile pool) should call this."""
    rejection = static_check(candidate.source, spec.launcher)
    if rejection is not None or candidate.provenance is not Provenance.LLM:
        return rejection
    from tuned.llm.gate import check_llm_module

    found = check_llm_module(
        candidate.source,
        launcher=spec.launcher,
        original_source=spec.module_source,
        reference=spec.reference,
    )
    return None if found is None else str(found)
