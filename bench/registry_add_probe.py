"""``ktuned registry add`` + ``registry check`` over a corpus of launchers, as a new user would.

CPU, static (the launchers' modules are imported when they can be, never run beyond that):
for each dotted launcher it writes an entry at one shape and dtype (with several ``--shape``,
the first whose entry is valid, as a user would try a 2-D and then a 4-D one), scans it, and prints
whether it is valid as written, the size of its discovered space, and what stops the rest
(the TODOs ``registry add`` leaves: a value only production knows, e.g. a caller's block size
or an integer offset). Totals at the end.

Launchers come from ``--launchers FILE`` (one dotted path per line, ``#`` comments) or from
``--harnesses DIR``: perf harnesses in TritonBench's layout (``from PKG.MOD import NAME`` and a
``call_op`` that calls ``NAME(...)`` or ``NAME.apply(...)``), e.g. TritonBench-G's
``performance_metrics/perf_G/golden_metrics`` with its ``data/TritonBench_G_v1`` copied to
``TritonBench_v1/`` (and an ``__init__.py``) under ``--path``::

    python bench/registry_add_probe.py --path /tmp/tbg \\
        --harnesses /tmp/tbg/performance_metrics/perf_G/golden_metrics --json /tmp/probe.json
"""

from __future__ import annotations

import json
import re
import shutil
import signal
import sys
import tempfile
from collections import Counter
from pathlib import Path
from typing import Any

if __package__ in (None, ""):  # python bench/x.py: the checkout on the path
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.harness import bench_parser

#: Seconds one launcher may take (its module's import included) before it counts as stuck.
PER_LAUNCHER_S = 90


SMOKE_SOURCE = """
import torch
import triton
import triton.language as tl


@triton.jit
def _add(x_ptr, y_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(out_ptr + offs, tl.load(x_ptr + offs, mask=mask) + tl.load(y_ptr + offs, mask=mask),
             mask=mask)


def add(x, y):
    out = torch.empty_like(x)
    _add[(triton.cdiv(x.numel(), 256),)](x, y, out, x.numel(), BLOCK=256)
    return out


def add_into(x, y, o):
    _add[(triton.cdiv(x.numel(), 256),)](x, y, o, x.numel(), BLOCK=256)
"""


def harness_launchers(directory: Path) -> list[str]:
    """The launcher each perf harness of ``directory`` times (see the module docstring)."""
    found = []
    for harness in sorted(directory.glob("*.py")):
        text = harness.read_text(encoding="utf-8", errors="replace")
        call = re.search(r"def call_op\(self, input_tensor\):\n(.*?)\n\n", text, re.S)
        body = call.group(1) if call else ""
        # The import of the op: the one whose name call_op uses, else the first that is not
        # the harness's own (performance_utils) nor typing's (`from typing import Union`
        # came before the op's import in one harness, and Union was probed as its launcher).
        imports = [
            (m.group(1), [n.strip() for n in m.group(2).split(",") if n.strip()])
            for m in re.finditer(r"^from ([\w.]+) import ([\w, ]+)", text, re.M)
            if m.group(1) not in ("performance_utils", "typing", "__future__")
        ]
        used = [(mod, ns) for mod, ns in imports if any(re.search(rf"\b{n}\b", body) for n in ns)]
        if not (used or imports):
            continue
        module, names = (used or imports)[0]
        name = next((n for n in names if re.search(rf"\b{n}\b", body)), names[0])
        attr = re.search(rf"\b{name}\.(apply|forward)\b", body)
        found.append(f"{module}.{name}" + (f".{attr.group(1)}" if attr else ""))
    return found


def probe(launcher: str, shape: dict[str, int], dtype: str, out: Path) -> dict[str, Any]:
    """One launcher: the entry ``registry add`` writes, scanned."""
    from tuned.registry import scan_registry
    from tuned.registry.scaffold import add_entry

    name = re.sub(r"[^a-z0-9]+", "-", launcher.lower()).strip("-")[-60:].strip("-")
    row: dict[str, Any] = {"launcher": launcher, "name": name}
    try:
        added = add_entry(launcher, [shape], [dtype], out, name=name)
        row["todo"] = list(added.todo)
        row["directory"] = str(added.directory)
        scan = scan_registry(added.directory)
        if scan.entries:
            spec = scan.entries[0]
            row["knobs"] = {k: [str(v) for v in vals] for k, vals in spec.knobs.items()}
            row["space"] = spec.space_size() if spec.knobs else 0
            row["notices"] = list(spec.notices)
        row["problems"] = [f"{p.field}: {p.reason}" for p in scan.problems]
    except Exception as exc:  # noqa: BLE001 (a refusal, whatever its kind, is the finding)
        row["error"] = f"{type(exc).__name__}: {exc}"[:400]
    return row


def status(row: dict[str, Any]) -> str:
    if "error" in row:
        return "refused"
    if row.get("problems"):
        return "needs a value" if all("still a stub" in p for p in row["problems"]) else "invalid"
    return "valid, space" if row.get("space", 0) > 1 else "valid, no space"


def main() -> int:
    parser = bench_parser(__doc__)
    parser.add_argument("--launchers", type=Path, help="file: one dotted launcher per line")
    parser.add_argument("--harnesses", type=Path, help="perf harnesses (TritonBench layout)")
    parser.add_argument("--path", type=Path, action="append", default=[], help="on sys.path")
    parser.add_argument(
        "--shape", action="append", help="NAME=SIZE,...; repeat: tried in order (M=256,N=256)"
    )
    parser.add_argument("--dtype", default="float32")
    parser.add_argument("--json", type=Path, help="write every row here")
    parser.add_argument(
        "--keep",
        type=Path,
        help="copy every valid entry with a space here: a registry `ktuned tune` runs",
    )
    args = parser.parse_args()
    from tuned.registry.scaffold import parse_shape

    for extra in args.path:
        sys.path.insert(0, str(extra.resolve()))
    launchers: list[str] = []
    shapes: list[dict[str, int]] = []
    if args.launchers:
        lines = args.launchers.read_text(encoding="utf-8").splitlines()
        launchers += [ln.split("#")[0].strip() for ln in lines if ln.split("#")[0].strip()]
    if args.harnesses:
        launchers += harness_launchers(args.harnesses)
    if args.smoke:  # a two-launcher corpus of its own, in a temporary package
        smoke = Path(tempfile.mkdtemp(prefix="registry-add-probe-smoke-"))
        (smoke / "smoke_corpus").mkdir()
        (smoke / "smoke_corpus" / "__init__.py").write_text("")
        (smoke / "smoke_corpus" / "ops.py").write_text(SMOKE_SOURCE)
        sys.path.insert(0, str(smoke))
        launchers = ["smoke_corpus.ops.add", "smoke_corpus.ops.add_into"]
        shapes = [{"N": 1024}]
    if not launchers:
        parser.error("no launchers: give --launchers FILE or --harnesses DIR")
    if not args.smoke:
        shapes = [parse_shape(text) for text in args.shape or ["M=256,N=256"]]

    def stuck(*_: object) -> None:
        raise TimeoutError(f"more than {PER_LAUNCHER_S} s")

    signal.signal(signal.SIGALRM, stuck)
    rows = []
    out = Path(tempfile.mkdtemp(prefix="registry-add-probe-"))
    try:
        for launcher in launchers:
            signal.alarm(PER_LAUNCHER_S)
            try:
                for i, shape in enumerate(shapes):  # the first shape whose entry is valid
                    row = probe(launcher, shape, args.dtype, out / str(i))
                    row["shape"] = shape
                    if status(row).startswith("valid"):
                        break
            except TimeoutError as exc:
                row = {"launcher": launcher, "error": f"TimeoutError: {exc}"}
            finally:
                signal.alarm(0)
            rows.append(row)
            if args.keep and status(row) == "valid, space":
                kept = args.keep / row["name"]
                shutil.rmtree(kept, ignore_errors=True)
                shutil.copytree(row["directory"], kept)
            why = row.get("error") or "; ".join(row.get("problems", []))
            print(
                f"{status(row):16} {row.get('space', 0):>9} {launcher}"
                + (f"  [{why[:150]}]" if why else ""),
                flush=True,
            )
    finally:
        shutil.rmtree(out, ignore_errors=True)
        if args.smoke:
            shutil.rmtree(smoke, ignore_errors=True)
    counts = Counter(status(r) for r in rows)
    print(f"\n# {len(rows)} launchers: " + ", ".join(f"{k} {v}" for k, v in sorted(counts.items())))
    spaces = sorted(r["space"] for r in rows if r.get("space", 0) > 1)
    if spaces:
        middle = spaces[len(spaces) // 2]
        print(f"# space sizes: median {middle}, min {spaces[0]}, max {spaces[-1]}")
    needed = Counter(
        re.sub(r"^\w+ \(", "(", item.strip())[:60]
        for r in rows
        for p in r.get("problems", [])
        if "still a stub" in p
        for item in re.findall(r"(?:inputs for |; )(\w+ \([^)]*\))", p)
    )
    for what, n in needed.most_common(8):
        print(f"#   needs {n:>3} x {what}")
    if args.json:
        args.json.write_text(json.dumps(rows, indent=1, default=str), encoding="utf-8")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
