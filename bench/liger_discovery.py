"""How much of an installed kernel library knob discovery reaches, before and after issue 19.

Static analysis only (CPU, nothing imported from the library, nothing run): for every module
of ``liger_kernel.ops`` (or ``--package``), every top-level function that launches a
``@triton.jit`` kernel is a launcher, and every ``*Function`` class with ``forward`` is one
as ``Cls.apply``. Per module it prints the launch sites and kernels, and how many get a
non-empty space from

- **before**: the discovery of ``--before`` (a git revision; default the commit this work
  started from), run per launching function (it took a top-level function only);
- **after**: the discovery in this tree, on the same functions and on ``Cls.apply``.

A kernel counts as reached when at least one knob reaches one of its launches. Usage::

    python bench/liger_discovery.py                      # liger_kernel.ops, before 29f6386
    python bench/liger_discovery.py --package liger_kernel.ops --before main
    python bench/liger_discovery.py --smoke             # this tree's discovery only (no git)
"""

from __future__ import annotations

import ast
import importlib.util
import subprocess
import sys
import types
from pathlib import Path

if __package__ in (None, ""):  # python bench/x.py: the checkout on the path
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.harness import bench_parser
from tuned.registry.discovery import discover_source
from tuned.registry.kernel_facts import kernel_facts
from tuned.registry.kernel_sources import imported_kernels, launched_name
from tuned.registry.problems import Problems
from tuned.registry.source import outline_module

BEFORE = "29f6386"
#: The ops the issue names (other modules of the package are listed too, after them).
NAMED = (
    "rms_norm",
    "layer_norm",
    "swiglu",
    "geglu",
    "cross_entropy",
    "rope",
    "kl_div",
    "jsd",
    "softmax",
    "sparsemax",
    "dyt",
    "group_norm",
    "fused_add_rms_norm",
)


def _old_discovery(rev: str) -> types.ModuleType | None:
    """The discovery module as it was at ``rev`` (None when git cannot show it)."""
    root = Path(__file__).resolve().parents[1]
    try:
        text = subprocess.run(
            ["git", "show", f"{rev}:tuned/registry/discovery.py"],
            cwd=root,
            check=True,
            capture_output=True,
            text=True,
        ).stdout
    except (OSError, subprocess.CalledProcessError):
        return None
    module = types.ModuleType("ktuned_discovery_before")
    sys.modules[module.__name__] = module  # dataclasses look their module up
    exec(compile(text, f"{rev}:discovery.py", "exec"), module.__dict__)  # our own old code
    return module


def _launches(fn: ast.AST, kernels: set[str]) -> list[str]:
    return [
        launched_name(node.func.value)
        for node in ast.walk(fn)
        if isinstance(node, ast.Call)
        and isinstance(node.func, ast.Subscript)
        and launched_name(node.func.value) in kernels
    ]


def measure(path: Path, old: types.ModuleType | None) -> dict[str, object]:
    source = path.read_text(encoding="utf-8")
    tree = ast.parse(source)
    functions = {s.name: s for s in tree.body if isinstance(s, ast.FunctionDef)}
    kernels = set(kernel_facts(functions)) | set(imported_kernels(tree))
    launchers = {n: f for n, f in functions.items() if n not in kernels and _launches(f, kernels)}
    sites = sum(len(_launches(f, kernels)) for f in launchers.values())
    launched = {k for f in launchers.values() for k in _launches(f, kernels)}
    before_fns, after_fns = 0, 0
    reached: set[str] = set()
    outline = outline_module(source, path, Problems(path))
    for name, fn in launchers.items():
        if (
            old is not None
            and outline is not None
            and old.discover_knobs(outline, fn, path.name).knobs
        ):
            before_fns += 1
        found = discover_source(source, name, path.name)
        if found is not None and found.knobs:
            after_fns += 1
            for ks in found.reach.values():
                reached |= ks
    applies = [
        f"{s.name}.apply"
        for s in tree.body
        if isinstance(s, ast.ClassDef)
        and any(isinstance(b, ast.FunctionDef) and b.name == "forward" for b in s.body)
    ]
    apply_space = 0
    for qual in applies:
        found = discover_source(source, qual, path.name)
        if found is not None and found.knobs:
            apply_space += 1
            for ks in found.reach.values():
                reached |= ks
    prefix = "_triton/" if path.parent.name == "_triton" else ""
    return {
        "module": prefix + path.stem,
        "sites": sites,
        "kernels": len(launched),
        "launchers": len(launchers),
        "before": before_fns,
        "after": after_fns,
        "reached": len(reached & launched),
        "applies": len(applies),
        "apply_space": apply_space,
    }


def main(argv: list[str] | None = None) -> int:
    parser = bench_parser(__doc__)
    parser.add_argument(
        "--package",
        action="append",
        help="dotted package to scan (repeatable; default liger_kernel.ops and its Triton "
        "backend liger_kernel.ops.backends._triton)",
    )
    parser.add_argument("--before", default=BEFORE, help="git revision of the old discovery")
    args = parser.parse_args(argv)
    if args.smoke:  # this tree's discovery alone (no git), one module
        args.before = None
    packages = args.package or ["liger_kernel.ops", "liger_kernel.ops.backends._triton"]
    top = importlib.util.find_spec(packages[0].split(".")[0])  # not executed: located only
    if top is None or not top.submodule_search_locations:
        print(f"{packages[0]} is not installed (pip install liger-kernel==0.8.5)")
        return 2
    base = Path(next(iter(top.submodule_search_locations))).parent
    old = None if args.before is None else _old_discovery(args.before)
    if old is None and args.before is not None:
        print(f"(git cannot show {args.before}: the before column is empty)", file=sys.stderr)
    paths = [
        path for package in packages for path in (base / package.replace(".", "/")).glob("*.py")
    ]
    paths.sort(key=lambda p: (p.stem not in NAMED, p.stem, str(p)))
    rows = [measure(p, old) for p in paths]
    rows = [r for r in rows if r["sites"]]
    head = (
        f"{'module':28} {'sites':>5} {'kernels':>7} {'launch fns':>10} "
        f"{'before':>6} {'after':>5} {'kernels reached':>15} {'Fn.apply w/ space':>17}"
    )
    print(head)
    print("-" * len(head))
    total = dict.fromkeys(("sites", "kernels", "launchers", "before", "after", "reached"), 0)
    total |= {"applies": 0, "apply_space": 0}
    for r in rows:
        mark = "*" if str(r["module"]).rsplit("/", 1)[-1] in NAMED else " "
        print(
            f"{mark}{r['module']:27} {r['sites']:>5} {r['kernels']:>7} {r['launchers']:>10} "
            f"{r['before']:>6} {r['after']:>5} {r['reached']:>15} "
            f"{r['apply_space']:>8}/{r['applies']:<8}"
        )
        for k in total:
            total[k] += int(r[k])  # type: ignore[call-overload]
    print("-" * len(head))
    print(
        f"{'total':28} {total['sites']:>5} {total['kernels']:>7} {total['launchers']:>10} "
        f"{total['before']:>6} {total['after']:>5} {total['reached']:>15} "
        f"{total['apply_space']:>8}/{total['applies']:<8}"
    )
    print(
        "\nbefore/after: launching functions with a non-empty discovered space; "
        "kernels reached: kernels at least one knob reaches (after); * the ops issue 19 names"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
