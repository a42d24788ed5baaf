"""Reading the user's module without running it: its top-level functions and launcher defaults.

The module is parsed with :func:`ast.parse` and never imported here (it is imported only inside
an evaluation worker). Only what the syntax tree states is trusted: a top-level ``def`` that is
not rebound later, and parameter defaults that :func:`ast.literal_eval` accepts.
"""

from __future__ import annotations

import ast
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path

from tuned.registry.problems import Problems, show
from tuned.registry.spec import KnobValue

__all__ = ["ModuleOutline", "check_functions", "launcher_defaults", "outline_module"]


@dataclass(frozen=True)
class ModuleOutline:
    """The top-level names of a module: plain ``def`` functions, and how the others are bound.

    The last binding of a name wins, as when Python runs the module: ``f`` defined by ``def``
    and then reassigned is listed in ``other`` as ``("an assignment", line)``.
    """

    functions: Mapping[str, ast.FunctionDef]
    other: Mapping[str, tuple[str, int]]


def _bound_names(target: ast.expr) -> list[str]:
    return [n.id for n in ast.walk(target) if isinstance(n, ast.Name)]


def outline_module(source: str, path: Path, out: Problems) -> ModuleOutline | None:
    """Parse ``source`` (the text of ``path``); a syntax error is a problem, and None."""
    try:
        tree = ast.parse(source, filename=str(path))
    except SyntaxError as exc:
        at = f"line {exc.lineno}" + (f", column {exc.offset}" if exc.offset else "")
        out.add("", f"Python syntax error at {at}: {exc.msg}", file=path)
        return None
    except ValueError as exc:  # Python < 3.12: null bytes in the source
        out.add("", f"not Python source: {exc}", file=path)
        return None
    except (RecursionError, MemoryError):  # the parser's signals for too deep nesting
        out.add("", "nested too deeply for the Python parser", file=path)
        return None
    functions: dict[str, ast.FunctionDef] = {}
    other: dict[str, tuple[str, int]] = {}

    def bind(name: str, how: str, line: int) -> None:
        functions.pop(name, None)
        other[name] = (how, line)

    for stmt in tree.body:
        if isinstance(stmt, ast.FunctionDef):
            other.pop(stmt.name, None)
            functions[stmt.name] = stmt
        elif isinstance(stmt, ast.AsyncFunctionDef):
            bind(stmt.name, "an async def", stmt.lineno)
        elif isinstance(stmt, ast.ClassDef):
            bind(stmt.name, "a class", stmt.lineno)
        elif isinstance(stmt, (ast.Import, ast.ImportFrom)):
            for alias in stmt.names:
                bind(alias.asname or alias.name.split(".")[0], "an import", stmt.lineno)
        elif isinstance(stmt, (ast.Assign, ast.AnnAssign, ast.AugAssign)):
            targets = stmt.targets if isinstance(stmt, ast.Assign) else [stmt.target]
            for target in targets:
                for name in _bound_names(target):
                    bind(name, "an assignment", stmt.lineno)
        else:  # if/try/with/for blocks: a def in there exists only when the block runs
            for node in ast.walk(stmt):
                if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                    bind(node.name, "a def inside a top-level block", node.lineno)
    return ModuleOutline(functions=functions, other=other)


def check_functions(
    outline: ModuleOutline, module: str, names: Mapping[str, str | None], out: Problems
) -> None:
    """Each of ``names`` (field -> function name, None when absent) is a top-level ``def``."""
    for field, name in names.items():
        if name is None or name in outline.functions:
            continue
        if name in outline.other:
            how, line = outline.other[name]
            out.add(
                field,
                f"'{name}' is bound by {how} (line {line} of {module}), not by a top-level "
                "def; the loader reads the module without running it, so it must be a plain "
                "top-level def that is not rebound later",
            )
        else:
            defined = ", ".join(sorted(outline.functions)) or "none"
            out.add(
                field,
                f"no top-level function '{name}' in {module} (top-level functions: {defined})",
            )


def launcher_defaults(
    launcher: ast.FunctionDef,
    knobs: Mapping[str, Iterable[KnobValue]],
    module: str,
    out: Problems,
) -> dict[str, KnobValue]:
    """The launcher's literal default for each knob: the baseline configuration.

    Every knob must be a keyword-passable parameter with a literal default (``BLOCK=1024``);
    a default outside the knob's listed values is allowed (the baseline lies outside the
    space).
    """
    args = launcher.args
    positional = [*args.posonlyargs, *args.args]
    defaults: dict[str, ast.expr | None] = {p.arg: None for p in positional}
    tail = positional[len(positional) - len(args.defaults) :]
    defaults.update({p.arg: d for p, d in zip(tail, args.defaults, strict=True)})
    defaults.update({p.arg: d for p, d in zip(args.kwonlyargs, args.kw_defaults, strict=True)})
    positional_only = {p.arg for p in args.posonlyargs}
    where = f"launcher '{launcher.name}' in {module}"
    baseline: dict[str, KnobValue] = {}
    for name, values in knobs.items():
        example = f"{name}={next(iter(values), '...')!r}"
        field = f"knobs.{name}"
        if name in positional_only:
            out.add(field, f"{name} is positional-only in {where}; knobs are passed by keyword")
        elif name not in defaults:
            if args.kwarg is not None:
                reason = (
                    f"{where} takes {name} only through **{args.kwarg.arg}, so it has no "
                    f"default; add a keyword parameter such as {example}: the default is "
                    "the baseline"
                )
            else:
                reason = (
                    f"{name} is not a parameter of {where} (parameters: "
                    f"{', '.join(defaults) or 'none'}); add a keyword parameter such as "
                    f"{example}: the tuner passes knobs as keyword arguments"
                )
            out.add(field, reason)
        elif (node := defaults[name]) is None:
            out.add(
                field,
                f"give the launcher a literal default for knob {name} ({where}), e.g. "
                f"{example}; the default is the baseline",
            )
        else:
            try:
                value = ast.literal_eval(node)
            except (ValueError, TypeError, SyntaxError, RecursionError, MemoryError):
                out.add(
                    field,
                    f"the default of {name} in {where} is `{ast.unparse(node)}`, not a literal; "
                    f"write the value itself, e.g. {example}: the default is the baseline",
                )
                continue
            if isinstance(value, (bool, int, float, str)):
                baseline[name] = value
            else:
                out.add(
                    field,
                    f"the default of {name} in {where} is {show(value)}; a baseline knob value "
                    "must be an int, float, bool or string",
                )
    return baseline
