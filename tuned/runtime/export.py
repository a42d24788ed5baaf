"""``ktuned export``: a kernel's bests as a directory that runs without ktuned.

Layout of ``DIR`` (a Python package; import it by its directory name, or load it with
``_ktuned_runtime.load_export(DIR)``)::

    __init__.py          loads the kernel at import: ``kernel`` and the launcher's name
    _ktuned_runtime.py   tuned/runtime/standalone.py, verbatim (the code ``load`` runs)
    manifest.json        kernel, generation, fingerprint, date, variants (file, SHA-256,
                         knobs), knobs and speedup per timed shape with bootstrap intervals,
                         the best's acceptance intervals
    modules/             the original module, each variant's module, sibling modules

At import, every module file is checked against its SHA-256 in the manifest; the bests run
only on the device and software they were measured on (else the original runs, one log line).
``--format triton-configs`` prints ``triton.Config`` lists instead, for users who keep
Triton's autotuner.
"""

from __future__ import annotations

import datetime
import hashlib
import json
import keyword
import math
import shutil
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from tuned import __version__
from tuned.errors import BadInputError, StoreError
from tuned.registry.injection import materialize, variant_diff
from tuned.runtime import standalone
from tuned.runtime.plan import Plan, describe_device, plan_on
from tuned.runtime.shapes import ShapeBest
from tuned.store.api import Store
from tuned.text import printable

__all__ = ["CONFIG_KWARGS", "export_kernel", "export_plan", "triton_configs"]

#: Knobs that are keyword arguments of ``triton.Config`` rather than kernel meta-parameters.
CONFIG_KWARGS = ("num_warps", "num_stages", "num_ctas", "maxnreg")

ORIGINAL_FILE = "modules/ktuned_original.py"


def export_plan(store: Store, name: str, fingerprint_id: str | None = None) -> Plan:
    """The plan to export: on ``fingerprint_id``, else on the newest fingerprint on which
    the kernel's current generation has a successful evaluation."""
    kernel = store.kernel(name)
    if kernel is None:
        names = ", ".join(printable(k.name, 80) for k in store.kernels()) or "none yet"
        raise BadInputError(
            f"no kernel {printable(repr(name))} in the store {store.location} (known: {names})"
        )
    if fingerprint_id is None:
        evaluated = store.evaluated_fingerprints(name, kernel.generation)
        if not evaluated:
            raise BadInputError(
                f"{printable(name, 80)} (generation {printable(kernel.generation[:12])}) has no "
                "successful evaluation "
                "yet: nothing to export; run `ktuned tune` first"
            )
        fingerprint_id = evaluated[0][0]
    plan = plan_on(store, name, fingerprint_id)
    if plan.notes:  # a stored row that would have been exported failed its checks
        raise BadInputError(
            f"{printable(name, 80)}: nothing exported: the store {printable(store.location)} "
            f"holds rows that fail their checks: {'; '.join(plan.notes)}"
        )
    if plan.status not in ("tuned", "original"):
        raise BadInputError(f"{printable(name, 80)}: nothing to export: {plan.reason}")
    return plan


def _checked_source(store: Store, source_hash: str, what: str) -> str:
    text = store.source(source_hash)
    if text is None or standalone.sha256_text(text) != source_hash:
        raise StoreError(
            f"the stored source of {what} does not match its hash {source_hash[:16]}...: the "
            f"store {store.location} was modified; nothing was exported"
        )
    return text


def _interval(interval: Any) -> dict[str, float] | None:
    return None if interval is None else dict(interval.to_dict())


def _shape_entry(shape: ShapeBest, variant: int) -> dict[str, Any]:
    dims, dtype = standalone.parse_label(shape.label)
    return {
        "label": shape.label,
        "dims": dims,
        "dtype": dtype,
        "variant": variant,
        "candidate": shape.candidate_id,
        "time_s": shape.time_s,
        "baseline_s": shape.baseline_s,
        "speedup": shape.speedup,
        "speedup_interval": _interval(shape.vs_baseline),
        "vs_overall_best_interval": _interval(shape.vs_incumbent),
    }


def export_kernel(
    store: Store,
    name: str,
    out: Path,
    *,
    fingerprint_id: str | None = None,
    extra_files: Mapping[str, str] | None = None,
) -> Path:
    """Write kernel ``name``'s bests to the directory ``out`` (see the module docstring) and
    return the manifest's path. ``out`` must be empty, absent or an earlier export (it is
    replaced). ``extra_files``: sibling modules of a multi-file entry (by relative path)."""
    plan = export_plan(store, name, fingerprint_id)
    if out.exists() and any(out.iterdir()) and not (out / standalone.MANIFEST).is_file():
        raise BadInputError(
            f"{out} exists and is not an earlier export (no {standalone.MANIFEST}); give an "
            "empty or new directory"
        )
    original = _checked_source(store, plan.original_hash, f"{name}'s original")
    files: dict[str, str] = {ORIGINAL_FILE: original}
    modules = (out / "modules").resolve()
    for rel, text in (extra_files or {}).items():
        if not (modules / rel).resolve().is_relative_to(modules):
            raise BadInputError(f"sibling module {printable(rel)!r} is outside its entry")
        files[f"modules/{rel}"] = text
    variants = []
    _, base_knobs = materialize(original, plan.launcher, plan.baseline_knobs, sources=extra_files)
    for ref in plan.variants:
        # Knobs discovered in the code are written into a generated copy (issue 19).
        stored = _checked_source(store, ref.source_hash, f"candidate {ref.candidate_id}")
        text, knobs = materialize(stored, plan.launcher, ref.knobs, sources=extra_files)
        if text == original:
            file = ORIGINAL_FILE
        else:
            file = f"modules/ktuned_variant_{standalone.sha256_text(text)[:16]}.py"
            files[file] = text
        variants.append(
            {
                "candidate": ref.candidate_id,
                "provenance": ref.provenance,
                "file": file,
                "sha256": standalone.sha256_text(files[file]),
                "knobs": knobs,
                "diff": variant_diff(original, text, ORIGINAL_FILE),
            }
        )
    best = plan.best
    assert best is not None  # export_plan returns tuned/original plans only
    manifest = {
        "format": standalone.EXPORT_FORMAT,
        "kernel": plan.kernel,
        "generation": plan.generation,
        "launcher": plan.launcher,
        "inputs": plan.inputs,
        "status": plan.status,
        "exported_at": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "exported_by": f"ktuned {__version__}",
        "fingerprint": dict(plan.fingerprint),
        "fingerprint_id": plan.fingerprint_id,
        "timing_kind": plan.timing_kind,
        "original": {
            "file": ORIGINAL_FILE,
            "sha256": standalone.sha256_text(original),
            "knobs": base_knobs,
        },
        "variants": variants,
        "default": plan.default,
        "differs_by_shape": plan.differs_by_shape,
        "shapes": [_shape_entry(s, v) for s, v in zip(plan.shapes, plan.shape_variant)],
        "best": {
            "candidate": best.candidate_id,
            "time_s": best.time_s,
            "baseline_time_s": best.baseline_time_s,
            "speedup": best.speedup,
            "acceptance": [
                {
                    **{k: a[k] for k in ("status", "second", "decided_at")},
                    # a referee's record holds every sample per case: not for the manifest
                    "first": {k: v for k, v in a["first"].items() if k != "cases"},
                }
                for a in plan.acceptances
            ],
        },
        "extra_files": [
            {"file": f"modules/{rel}", "sha256": standalone.sha256_text(text)}
            for rel, text in (extra_files or {}).items()
        ],
    }
    if (out / "modules").is_dir():
        shutil.rmtree(out / "modules")  # an earlier export's modules
    for rel, text in files.items():
        path = out / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
    package = {
        "_ktuned_runtime.py": Path(standalone.__file__).read_text(encoding="utf-8"),
        "__init__.py": _package_init(plan),
    }
    for rel, text in package.items():
        (out / rel).write_text(text, encoding="utf-8")
    # For audits: the package's own files (the loader checks the modules/ files at import).
    manifest["package_files"] = [
        {"file": rel, "sha256": hashlib.sha256(text.encode()).hexdigest()}
        for rel, text in package.items()
    ]
    manifest_path = out / standalone.MANIFEST
    text = json.dumps(_finite(manifest), indent=2, sort_keys=True, allow_nan=False)
    manifest_path.write_text(text + "\n", "utf-8")
    return manifest_path


def _finite(value: Any) -> Any:
    """``value`` with non-finite floats (stored timings are untrusted) as ``None``: the
    manifest is strict JSON, never a bare ``NaN`` or ``Infinity``. Knobs never get here
    non-finite: :func:`~tuned.runtime.plan.knob_problem` refuses them."""
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, Mapping):
        return {k: _finite(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_finite(v) for v in value]
    return value


def _literal(text: object) -> str:
    """Stored text made safe inside a generated triple-quoted string: ASCII only, no raw
    newline, every quote and backslash escaped, so it cannot end the literal; the literal's
    value is ``text`` again."""
    return str(text).encode("unicode_escape").decode("ascii").replace('"', '\\"')


def _package_init(plan: Plan) -> str:
    fp = plan.fingerprint
    device = fp.get("gpu_model") if fp.get("mode") == "gpu" else "the Triton interpreter"
    launcher = plan.launcher
    if not launcher.isidentifier() or keyword.iskeyword(launcher) or launcher.startswith("_"):
        launcher = "kernel"
    # Every stored string goes through _literal: none can end the docstring (a kernel named
    # 'k"""; import os; ...' ran its code when the package was imported).
    kernel, device = _literal(plan.kernel), _literal(device)
    triton, torch = _literal(fp.get("triton")), _literal(fp.get("torch"))
    return f'''"""{kernel}: the bests found by ktuned, runnable without ktuned.

Measured on {device}, triton {triton}, torch {torch} (manifest.json has
everything: knobs and speedups per timed shape, intervals, the fingerprint, the date)::

    from <this package> import {launcher}
    out = {launcher}(*inputs)    # the launcher's signature; tuned knobs for the call's shape

Elsewhere (another GPU model, other driver/CUDA/Triton/PyTorch versions) or if a module file
does not match its SHA-256, the original runs and one log line says why.
"""

from pathlib import Path as _Path

from ._ktuned_runtime import load_export as _load_export

kernel = _load_export(_Path(__file__).resolve().parent)
{launcher} = kernel

__all__ = {sorted({"kernel", launcher})!r}
'''


def triton_configs(plan: Plan) -> str:
    """``triton.Config`` lists of a plan: the distinct variants, overall best first, and per
    timed shape which one wins (Python source, printed by ``--format triton-configs``).

    Assumes the launcher passes its knobs to the ``@triton.jit`` kernel under the same names
    (true of the example registry); ``num_warps``/``num_stages``/``num_ctas``/``maxnreg``
    become ``triton.Config`` keyword arguments.
    """
    fp = plan.fingerprint
    # Comments hold stored text: printable() escapes newlines, so none ends its comment.
    lines = [
        printable(
            f"# ktuned: {plan.kernel}, generation {plan.generation[:12]}, "
            f"{fp.get('gpu_model')} ({fp.get('mode')}), triton {fp.get('triton')}, "
            f"torch {fp.get('torch')}; {plan.timing_kind} timings",
            1000,
        ),
    ]
    for shape, index in zip(plan.shapes, plan.shape_variant):
        speedup = f"{shape.speedup:.2f}x vs original" if shape.speedup else "no baseline"
        lines.append(printable(f"# {shape.label}: configs[{index}] ({speedup})", 1000))
    lines += ["import triton", "", "configs = ["]
    for v in plan.variants:
        meta = {k: val for k, val in v.knobs.items() if k not in CONFIG_KWARGS}
        kwargs = "".join(f", {k}={v.knobs[k]!r}" for k in CONFIG_KWARGS if k in v.knobs)
        body = ", ".join(f"{k!r}: {val!r}" for k, val in sorted(meta.items()))
        lines.append(f"    triton.Config({{{body}}}{kwargs}),")
    lines.append("]")
    return "\n".join(lines) + "\n"


def export_command(store: Store, name: str, out: Path | None, fmt: str) -> str:
    """What ``ktuned export`` prints: the ``triton.Config`` lists, or a summary of the
    directory written to ``out`` (required for the directory format)."""
    if fmt == "triton-configs":
        return triton_configs(export_plan(store, name))
    if out is None:
        raise BadInputError("ktuned export: give --out DIR (or --format triton-configs)")
    extra = _entry_extra_files(store, name)
    manifest_path = export_kernel(store, name, out, extra_files=extra)
    manifest = json.loads(manifest_path.read_text(encoding="utf-8"))
    lines = [
        f"exported {printable(name, 80)} to {out} ({len(manifest['variants'])} variant(s), "
        f"{len(manifest['shapes'])} timed shape(s), speedup "
        f"{_ratio(manifest['best']['speedup'])} on {describe_device(manifest['fingerprint'])}"
        f" ({manifest['timing_kind']} timings))",
    ]
    if manifest["differs_by_shape"]:
        lines.append("the best differs by shape:")
        for s in manifest["shapes"]:
            knobs = manifest["variants"][s["variant"]]["knobs"]
            label = printable(s["label"])
            lines.append(f"  {label}: {knobs} ({_ratio(s['speedup'])} vs original)")
    lines.append(
        f"use: sys.path.insert(0, {str(out.resolve().parent)!r}); "
        f"from {out.name} import {printable(manifest['launcher'], 80)}"
        if out.name.isidentifier()
        else f"use: load_export(Path({str(out.resolve())!r})) from {out / '_ktuned_runtime.py'}"
    )
    return "\n".join(lines) + "\n"


def _ratio(value: float | None) -> str:
    return "-" if value is None else f"{value:.2f}x"


def _entry_extra_files(store: Store, name: str) -> dict[str, str]:
    """Sibling modules of a multi-file entry, from its directory while it holds the tuned
    generation (the store keeps the main module only)."""
    kernel = store.kernel(name)
    if kernel is None or not Path(kernel.directory).is_dir():
        return {}
    from tuned.errors import TunedError
    from tuned.registry import load_entry

    try:
        spec = load_entry(kernel.directory)
    except TunedError:
        return {}
    return dict(spec.extra_files) if spec.generation == kernel.generation else {}
