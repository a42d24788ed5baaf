"""Injection: the generated copy of a module with a candidate's knob values written in.

The user's file is never edited. A candidate is (source, knobs); knobs discovered at a launch
literal, a local binding, an expression, an omitted launch option or a decorator
(:mod:`tuned.registry.discovery`) are not launcher parameters, so before the module runs they
are written into a copy of ``source`` (:func:`materialize`), and the rest are passed to the
launcher as keyword arguments. The copy differs from the source only in those bindings, edited
as text at the positions the syntax tree gives, so comments, formatting and every other line
stay as written; :func:`variant_diff` shows the difference as a unified diff.

How a value is written (``V`` is the value the code computes, a transform's ``x2``/``/2`` its
factor, clamped to the knob's bounds): a literal is replaced (``BLOCK=1024`` -> ``BLOCK=2048``);
an omitted option is added (``, num_warps=8``); a computed binding is followed by
``NAME = min(NAME * 2, 65536)`` (or preceded, for a parameter, at the top of the function), so
everything downstream, the grid included, follows; an expression at the launch becomes
``min((EXPR) * 2, 65536)``; an autotuned kernel's ``configs`` becomes the single pinned
``Config``; a heuristic's lambda body is transformed like an expression. The baseline value
(``x1``, the literal itself, Triton's default, ``auto``) leaves the binding untouched.
"""

from __future__ import annotations

import ast
import difflib
import itertools
from collections.abc import Mapping
from typing import Any

from tuned.errors import TunedError
from tuned.registry.autotune import AUTO, config_text, config_values
from tuned.registry.discovery import Discovery, Site, discover_source
from tuned.registry.kernel_sources import launched_kernel
from tuned.registry.spec import KnobValue

__all__ = [
    "InjectionError",
    "materialize",
    "runnable_request",
    "transform_text",
    "variant_diff",
]


class InjectionError(TunedError):
    """A knob value cannot be written into the module (unknown value, site not found)."""


def _factor(value: KnobValue, knob: str) -> tuple[bool, int]:
    """(grow, factor) of a transform ``x4`` / ``/4``."""
    if isinstance(value, str) and len(value) > 1 and value[0] in "x/" and value[1:].isdigit():
        factor = int(value[1:])
        if factor >= 1 and factor & (factor - 1) == 0:
            return value[0] == "x", factor
    raise InjectionError(
        f"knob {knob}: {value!r} is not a transform (x1, x2, x4, ... or /2, /4, ...); "
        "discovered knobs of computed values take only those"
    )


def transform_text(expr: str, value: KnobValue, site: Site) -> str:
    """The source of ``expr`` transformed by ``value`` within the site's bounds."""
    grow, factor = _factor(value, site.knob)
    low, high = site.bounds
    if grow:
        return f"min({expr} * {factor}, {high})"
    return f"max({expr} // {factor}, {low})"


class _Text:
    """The source as lines of UTF-8 bytes (``ast`` columns count bytes), edited by span."""

    def __init__(self, source: str) -> None:
        self.lines = source.encode().splitlines(keepends=True)
        self.edits: list[tuple[tuple[int, int], tuple[int, int], str]] = []

    def segment(self, node: ast.AST) -> str:
        start, end = self.span(node)
        return self.slice(start, end)

    def span(self, node: ast.AST) -> tuple[tuple[int, int], tuple[int, int]]:
        end_line, end_col = getattr(node, "end_lineno", None), getattr(node, "end_col_offset", None)
        if end_line is None or end_col is None:
            raise InjectionError("a knob's site has no position in the source")
        return (node.lineno, node.col_offset), (end_line, end_col)  # type: ignore[attr-defined]

    def slice(self, start: tuple[int, int], end: tuple[int, int]) -> str:
        (l0, c0), (l1, c1) = start, end
        if l0 == l1:
            return self.lines[l0 - 1][c0:c1].decode()
        parts = [self.lines[l0 - 1][c0:], *self.lines[l0 : l1 - 1], self.lines[l1 - 1][:c1]]
        return b"".join(parts).decode()

    def replace(self, node: ast.AST, text: str) -> None:
        start, end = self.span(node)
        self.edits.append((start, end, text))

    def insert(self, at: tuple[int, int], text: str) -> None:
        self.edits.append((at, at, text))

    def line(self, number: int) -> bytes:
        return self.lines[number - 1]

    def render(self) -> str:
        out = b"".join(self.lines)
        starts = [0]
        for raw in self.lines:
            starts.append(starts[-1] + len(raw))
        spans = sorted(
            ((starts[a[0] - 1] + a[1], starts[b[0] - 1] + b[1], t) for a, b, t in self.edits),
            key=lambda e: (e[0], e[1]),
        )
        for (_, e0, _), (s1, _, _) in itertools.pairwise(spans):
            if s1 < e0:
                raise InjectionError("two knobs write the same part of the module")
        for start, end, text in reversed(spans):
            out = out[:start] + text.encode() + out[end:]
        return out.decode()


def _statement(text: _Text, site: Site, value: KnobValue) -> None:
    """Insert ``NAME = transform(NAME)`` after (or before) the statement ``site.node``."""
    stmt = site.node
    assert isinstance(stmt, ast.stmt)
    rebind = f"{site.target} = {transform_text(site.target, value, site)}"
    first = text.line(stmt.lineno)
    indent = first[: stmt.col_offset]
    own_line = not indent.strip()
    if site.before:
        if not own_line:
            raise InjectionError(f"knob {site.knob}: its function's body is on one line")
        text.insert((stmt.lineno, 0), f"{indent.decode()}{rebind}\n")
        return
    assert stmt.end_lineno is not None and stmt.end_col_offset is not None
    rest = text.line(stmt.end_lineno)[stmt.end_col_offset :].strip()
    if own_line and (not rest or rest.startswith(b"#")):
        text.insert((stmt.end_lineno + 1, 0), f"{indent.decode()}{rebind}\n")
        if stmt.end_lineno == len(text.lines) and not text.lines[-1].endswith(b"\n"):
            text.lines[-1] += b"\n"
    else:  # a statement sharing its line: `if c: B = f(n)` or `a = 1; B = f(n)`
        text.insert((stmt.end_lineno, stmt.end_col_offset), f"; {rebind}")


def _option(text: _Text, site: Site, value: KnobValue) -> None:
    call = site.node
    assert isinstance(call, ast.Call)
    args: list[ast.AST] = [*call.args, *call.keywords]
    if args:
        end = max(text.span(a)[1] for a in args)
        text.insert(end, f", {site.target}={value!r}")
    else:
        assert call.end_lineno is not None and call.end_col_offset is not None
        text.insert((call.end_lineno, call.end_col_offset - 1), f"{site.target}={value!r}")


_Pins = dict[int, tuple[Site, dict[str, KnobValue]]]


def _pin_launch(text: _Text, site: Site, values: Mapping[str, KnobValue]) -> None:
    call = site.node
    assert isinstance(call, ast.Call) and isinstance(call.func, ast.Subscript)
    text.insert(text.span(launched_kernel(call.func.value))[1], ".fn")
    args: list[ast.AST] = [*call.args, *call.keywords]
    pinned = ", ".join(f"{k}={v!r}" for k, v in values.items())
    if args:
        text.insert(max(text.span(a)[1] for a in args), f", {pinned}")
    else:
        assert call.end_lineno is not None and call.end_col_offset is not None
        text.insert((call.end_lineno, call.end_col_offset - 1), pinned)


def _apply(text: _Text, sites: list[Site], value: KnobValue, pins: _Pins) -> None:
    for site in sites:
        if site.form in ("autotune", "autotune_launch"):
            pins.setdefault(id(site.node), (site, {}))[1][site.target] = value
            continue
        if site.scale:
            _factor(value, site.knob)  # even x1 must be a transform
            if value == "x1":
                continue
        if site.form == "literal":
            text.replace(site.node, repr(value))
        elif site.form == "option":
            _option(text, site, value)
        elif site.form == "rebind":
            _statement(text, site, value)
        elif site.form in ("wrap", "heuristic"):
            text.replace(site.node, transform_text(f"({text.segment(site.node)})", value, site))
        elif site.form == "heuristic_call":  # evaluated once, where the dict was
            body = transform_text("_ktuned_f(_ktuned_args)", value, site)
            wrapped = f"(lambda _ktuned_f: lambda _ktuned_args: {body})"
            text.replace(site.node, f"{wrapped}({text.segment(site.node)})")
        else:
            raise InjectionError(f"knob {site.knob}: unknown site form {site.form!r}")


def materialize(
    source: str,
    launcher: str,
    knobs: Mapping[str, KnobValue],
    *,
    discovery: Discovery | None = None,
    sources: Mapping[str, str] | None = None,
    package: str = "",
) -> tuple[str, dict[str, KnobValue]]:
    """The generated copy of ``source`` with the injected knobs of ``knobs`` written in, and
    the knobs left to pass to the launcher. Knobs that discovery on ``source`` (for the
    launcher named ``launcher``) does not inject are passed through unchanged; a source
    without injected knobs among ``knobs`` is returned as it is (the same string).
    ``package``: the installed package the copy is imported in (its relative imports)."""
    found = discovery or discover_source(source, launcher, sources=sources, package=package)
    injected = {k: v for k, v in knobs.items() if found is not None and k in found.sites}
    rest = {k: v for k, v in knobs.items() if k not in injected}
    lost = [k for k in rest if not k.isidentifier()]
    if lost:  # `kernel.NAME` knobs exist only as injected ones: the site is gone
        raise InjectionError(
            f"knob {lost[0]} names a binding discovery no longer finds in this source "
            f"(launcher {launcher!r}); it cannot be passed to the launcher either"
        )
    if not injected or found is None:
        return source, rest
    baseline = found.baseline
    changed = {k: v for k, v in injected.items() if v != baseline.get(k)}
    if not changed:
        return source, rest
    text = _Text(source)
    pins: _Pins = {}
    for knob, value in injected.items():
        if value == baseline.get(knob) and found.sites[knob][0].form != "autotune":
            continue
        _apply(text, found.sites[knob], value, pins)
    for site, values in pins.values():
        assert site.autotune is not None
        if all(v == AUTO for v in values.values()):
            continue
        if site.form == "autotune":
            text.replace(site.autotune.configs_node, config_text(site.autotune, values))
        else:  # an imported autotuned kernel: launch its function with the config's values
            _pin_launch(text, site, config_values(site.autotune, values))
    return text.render(), rest


def variant_diff(original: str, variant: str, path: str = "module.py") -> str:
    """A unified diff from ``original`` to ``variant`` ("" when they are the same)."""
    if original == variant:
        return ""
    return "".join(
        difflib.unified_diff(
            original.splitlines(keepends=True),
            variant.splitlines(keepends=True),
            fromfile=f"a/{path}",
            tofile=f"b/{path}",
            n=1,
        )
    )


def runnable_request(request: Mapping[str, Any]) -> dict[str, Any]:
    """A worker request (``kernel``, ``candidate``, ``options``) with every module it runs
    materialized: the candidate's and the incumbent's sources get their injected knobs written
    in (:func:`materialize`) and keep only the knobs their launcher takes (an entry that
    declares its knobs, ``knobs_declared``, passes them all: nothing is injected), and the entry's
    ``baseline_knobs`` (used to call the original as the reference) keep only those too. A
    knob value that cannot be written leaves the candidate as it is, with ``injection_error``
    saying why (the worker reports it as ``rejected_static``)."""
    out: dict[str, Any] = dict(request)
    kernel = dict(request.get("kernel") or {})
    launcher = str(kernel.get("launcher", ""))
    original = str(kernel.get("original_source", ""))
    extra = dict(kernel.get("extra_files") or {})  # the entry's other files: imported kernels
    package = str(kernel.get("package") or "")  # an installed module's: relative imports
    if kernel.get("knobs_declared"):  # declared knobs are the launcher's parameters: passed
        out["kernel"] = kernel
        return out
    if "baseline_knobs" in kernel:
        _, kernel["baseline_knobs"] = materialize(
            original, launcher, kernel["baseline_knobs"], sources=extra, package=package
        )
    out["kernel"] = kernel

    def run(candidate: Mapping[str, Any]) -> dict[str, Any]:
        done = dict(candidate)
        try:
            done["source"], done["knobs"] = materialize(
                str(candidate["source"]),
                launcher,
                dict(candidate["knobs"]),
                sources=extra,
                package=package,
            )
        except InjectionError as exc:
            done["injection_error"] = str(exc)
        return done

    if request.get("candidate"):
        out["candidate"] = run(request["candidate"])
    options = request.get("options")
    if isinstance(options, Mapping) and options.get("incumbent"):
        out["options"] = {**options, "incumbent": run(options["incumbent"])}
    return out
