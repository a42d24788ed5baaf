"""Loading registry entries into :class:`~tuned.registry.spec.KernelSpec`, without running them.

An entry is a directory holding ``kernel.yaml`` and the Python module(s) it names. The loader
reads files with size caps, parses YAML with PyYAML's safe loader and Python with
:mod:`ast`, and never imports or executes anything from the entry. It reports every problem
of an entry at once (:class:`~tuned.registry.problems.Problem`: file, field, reason), and
:func:`scan_registry` keeps going past invalid entries so one bad kernel never stops the
others.
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from tuned.errors import BadInputError, RegistryError
from tuned.registry.discovery import Discovery, discover_knobs, discover_source
from tuned.registry.installed import InstalledLauncher, find_installed, package_of
from tuned.registry.knobs import check_knobs
from tuned.registry.launchers import (
    CallFieldValues,
    check_call_fields,
    check_dotted_path,
    check_paths_bound,
    constructor_missing,
    launcher_definition,
    returns_nothing,
    stub_reason,
)
from tuned.registry.problems import Problem, Problems, show
from tuned.registry.replay import check_replay
from tuned.registry.roofline import check_roofline
from tuned.registry.source import check_functions, launcher_defaults, outline_module
from tuned.registry.spec import KernelSpec, KnobValue, Roofline, Shape
from tuned.registry.validate import (
    TOP_LEVEL_KEYS,
    check_dtypes,
    check_function_name,
    check_module_path,
    check_name,
    check_shapes,
    check_tolerance,
    check_top_level,
    check_weight,
)
from tuned.yaml_files import YamlFileError, decode_utf8, parse_yaml, read_regular_file

__all__ = [
    "DEFAULT_REFERENCE_LAUNCHER",
    "KERNEL_YAML",
    "MAX_PY_BYTES",
    "MAX_PY_FILES",
    "MAX_YAML_BYTES",
    "RegistryScan",
    "load_entry",
    "load_registry_entry",
    "scan_registry",
]

KERNEL_YAML = "kernel.yaml"
MAX_YAML_BYTES = 1 << 20
MAX_PY_BYTES = 4 << 20
#: More Python files than this in one entry is almost surely a misplaced tree (a venv, a repo).
MAX_PY_FILES = 256
_FUNCTION_KEYS = ("launcher", "inputs", "reference")
#: Cases (shape, element size) each roofline expression is evaluated on by the check.
MAX_ROOFLINE_CASES = 2048
#: The launcher's name in a reference entry that does not name one (docs/registry.md).
DEFAULT_REFERENCE_LAUNCHER = "launcher"


@dataclass(frozen=True)
class RegistryScan:
    """The outcome of :func:`scan_registry`.

    ``entries`` are the valid entries (sorted by directory name), ``problems`` every problem of
    the invalid ones, and ``invalid`` the same problems keyed by entry directory (as given).
    """

    entries: list[KernelSpec]
    problems: list[Problem]
    invalid: dict[str, list[Problem]]

    def summary(self) -> str:
        return f"{len(self.entries)} entries ok, {len(self.invalid)} invalid"


def _read_bytes(path: Path, cap: int, out: Problems) -> bytes | None:
    """The bytes of the regular file ``path`` if it is at most ``cap`` bytes, else a problem
    (:func:`tuned.yaml_files.read_regular_file`: a FIFO or device is refused at once)."""
    try:
        return read_regular_file(path, cap=cap, what="registry file")
    except YamlFileError as exc:
        out.add("", exc.problem, file=path)
        return None


def _decode(data: bytes, path: Path, out: Problems) -> str | None:
    try:
        return decode_utf8(data, path)
    except YamlFileError as exc:
        out.add("", f"{exc.where}: {exc.problem}", file=path)
        return None


def _parse_yaml(text: str, out: Problems) -> dict[object, object] | None:
    """The top-level mapping of ``kernel.yaml``, or None after recording why there is none
    (:func:`tuned.yaml_files.parse_yaml`: safe types, unique keys, bounded aliases/depth)."""
    try:
        doc = parse_yaml(text, out.file)
    except YamlFileError as exc:
        out.add("", f"{exc.where}: {exc.problem}" if exc.where else exc.problem)
        return None
    keys = ", ".join(TOP_LEVEL_KEYS)
    if doc is None:
        out.add("", f"empty; kernel.yaml must be a mapping with the keys {keys}")
        return None
    if not isinstance(doc, dict):
        out.add("", f"the top level must be a mapping with the keys {keys}, got {show(doc)}")
        return None
    return doc


def _python_files(directory: Path, out: Problems) -> list[str]:
    """Relative POSIX paths of the entry's ``*.py`` files, skipping hidden and cache dirs."""

    def unreadable(exc: OSError) -> None:
        out.add("", f"cannot list: {exc.strerror or exc}", file=Path(exc.filename or directory))

    found: list[str] = []
    for top, dirs, files in os.walk(directory, onerror=unreadable):
        dirs[:] = sorted(d for d in dirs if not d.startswith(".") and d != "__pycache__")
        for name in sorted(files):
            if name.endswith(".py") and not name.startswith("."):
                found.append((Path(top) / name).relative_to(directory).as_posix())
        if len(found) > MAX_PY_FILES:
            out.add(
                "",
                f"more than {MAX_PY_FILES} .py files; an entry directory should hold only the "
                "kernel's module(s)",
                file=directory,
            )
            break
    return sorted(found)


def _read_sources(directory: Path, module: str, out: Problems) -> dict[str, bytes] | None:
    """Bytes of the module and every other ``*.py`` of the entry, by relative path."""
    rels = _python_files(directory, out)
    if module not in rels:
        rels.append(module)  # a module inside a hidden directory is still the module
    sources: dict[str, bytes] = {}
    for rel in rels:
        path = directory / rel
        if not _inside_entry(path, directory, out):
            continue
        data = _read_bytes(path, MAX_PY_BYTES, out)
        if data is not None:
            sources[rel] = data
    return sources if len(sources) == len(rels) else None


def _inside_entry(path: Path, directory: Path, out: Problems) -> bool:
    """Whether the file ``path`` resolves inside the entry ``directory``, else a problem: a
    symlink out of the entry would make ktuned read (and hash) a file that is not the entry's."""
    try:
        inside = path.resolve().is_relative_to(directory.resolve())
    except (OSError, RuntimeError) as exc:  # RuntimeError: a symlink loop (Python < 3.13)
        out.add("", f"cannot resolve: {exc}", file=path)
        return False
    if not inside:
        out.add("", "a symlink to a file outside the entry directory; copy it in", file=path)
    return inside


def _generation(files: Mapping[str, bytes]) -> str:
    """SHA-256 over (path, NUL, content, NUL) of each file in sorted relative-path order."""
    digest = hashlib.sha256()
    for rel in sorted(files):
        digest.update(rel.encode() + b"\0")
        digest.update(files[rel] + b"\0")
    return digest.hexdigest()


def _entry_paths(path: Path) -> tuple[Path, Path]:
    """(entry directory, its kernel.yaml) for a directory or a kernel.yaml path."""
    if path.name == KERNEL_YAML and not path.is_dir():
        return path.parent, path
    return path, path / KERNEL_YAML


def _check_module(
    source: str,
    directory: Path,
    module: str,
    functions: Mapping[str, str | None],
    knobs: Mapping[str, tuple[KnobValue, ...]] | None,
    out: Problems,
    extra: Mapping[str, str] | None = None,
    call: CallFieldValues | None = None,
    local: frozenset[str] = frozenset(),
) -> tuple[
    dict[str, tuple[KnobValue, ...]], dict[str, KnobValue], list[Problem], InstalledLauncher | None
]:
    """Check the named functions against the module's syntax tree.

    Returns the knobs (``knobs`` as declared, or discovered from the launch sites when
    ``knobs`` is None), the baseline knobs, the notices of discovery and, for a launcher
    imported from an installed package, that module (the one whose copy is tuned).
    """
    outline = outline_module(source, directory / module, out)
    if outline is None:
        return dict(knobs or {}), {}, [], None
    # Launchers as written (tuned.registry.launchers): a def of the module is checked as
    # before; any other dotted path must start from a name the module binds, or a package.
    plain = {k: v for k, v in functions.items() if v is None or v in outline.functions}
    check_functions(outline, module, plain, out)
    others = {k: v for k, v in functions.items() if k not in plain}
    check_paths_bound(outline, module, others, out, local)
    maker = outline.functions.get(functions["inputs"] or "")
    stub = None if maker is None else stub_reason(maker)
    if maker is not None and stub is not None:
        out.add(
            "inputs",
            f"{maker.name} (line {maker.lineno} of {module}) is still a stub: {stub}; write "
            "it and remove the raise",
        )
    launcher, _ = launcher_definition(source, outline, functions["launcher"] or "")
    backward = call is None or bool(call.backward)  # without it, no backward kernel runs
    notices: list[Problem] = []
    injected: dict[str, KnobValue] = {}  # discovered knobs written into a generated copy
    if launcher is None:
        installed = None
        if functions["launcher"] is not None:
            installed = find_installed(source, functions["launcher"], local)
        # The installed module, parsed once (its own syntax errors are the worker's to say).
        theirs = None
        if installed is not None:
            theirs = outline_module(installed.source, installed.path, Problems(installed.path))
        if installed is not None and theirs is not None and call is not None and not call.outputs:
            fn, _ = launcher_definition(installed.source, theirs, installed.qualname)
            if fn is not None and returns_nothing(fn):
                where = f"line {fn.lineno} of {installed.path}"
                _returns_nothing_problem(functions["launcher"] or "", where, out)
        if knobs is not None:
            installed = None  # declared knobs: passed to the launcher, nothing injected
        if installed is not None:  # the copy tuned is the installed module's (installed.py)
            found = discover_source(
                installed.source, installed.qualname, installed.module, backward=backward
            )
            space, base, notices = _injected_only(found, installed.path, functions["launcher"])
            if found is not None and theirs is not None and "." not in installed.qualname:
                # a plain function: its knob parameters are passed as keywords, as a local
                # launcher's are (baselines: its literal defaults)
                params = {k: v for k, v in found.knobs.items() if k not in found.sites}
                fn = theirs.functions.get(installed.qualname)
                if fn is not None and params:
                    space = {**params, **space}
                    base = {**launcher_defaults(fn, params, installed.module, out), **base}
            # nothing to write into a copy: the entry runs the installed module itself
            return space, base, notices, installed if space else None
        if knobs is None and functions["launcher"] is not None:
            notices = [
                Problem(
                    file=directory / module,
                    field="knobs",
                    reason=f"the launcher {functions['launcher']} is not defined in {module} "
                    "nor in an installed module found on the import path: no knobs "
                    "discovered; declare knobs to tune it",
                )
            ]
        return dict(knobs or {}), {}, notices, None
    if call is not None and not call.outputs and returns_nothing(launcher):
        where = f"line {launcher.lineno} of {module}"
        _returns_nothing_problem(functions["launcher"] or "", where, out)
    if knobs is None and launcher.name != (functions["launcher"] or "").split(".")[-1]:
        # a method, Function.apply or forward: its own module's copy, by qualified name
        name = functions["launcher"] or ""
        found = discover_source(source, name, module, sources=extra, backward=backward)
        return *_injected_only(found, directory / module, functions["launcher"] or ""), None
    if knobs is None:
        found = discover_knobs(
            outline, launcher, module, source=source, sources=extra, backward=backward
        )
        knobs, injected = found.knobs, found.baseline
        notices = [
            Problem(file=directory / module, field="knobs", reason=f"line {n.line}: {n.reason}")
            for n in found.notices
        ]
    params = {k: v for k, v in knobs.items() if k not in injected}
    baseline = {**launcher_defaults(launcher, params, module, out), **injected}
    return dict(knobs), baseline, notices, None


def _check_constructor(
    source: str,
    module: str,
    launcher: str | None,
    given: Mapping[str, object],
    local: frozenset[str],
    out: Problems,
) -> None:
    """A class launcher (the entry's own or an installed module's) whose constructor needs an
    argument that neither ``init`` nor a knob gives (:func:`constructor_missing`)."""
    if launcher is None:
        return
    installed = find_installed(source, launcher, local)
    text, qualname, where = source, launcher, module
    if installed is not None:
        text, qualname, where = installed.source, installed.qualname, str(installed.path)
    line, missing = constructor_missing(text, qualname, given)
    if missing:
        names = ", ".join(missing)
        out.add(
            "init",
            f"the launcher {launcher} is a class whose constructor (line {line} of {where}) "
            f"requires {names}, which init does not give: write `init: {{{missing[0]}: ...}}` "
            "(a number, boolean or string; a shape dimension's name stands for its size); "
            "a value YAML cannot hold (a tensor) cannot be given to a constructor",
        )


def _returns_nothing_problem(launcher: str, where: str, out: Problems) -> None:
    """A launcher that returns nothing, in an entry that declares no outputs: there would be
    nothing to check (a local launcher's or an installed one's)."""
    out.add(
        "outputs",
        f"the launcher {launcher} ({where}) returns nothing and the entry declares no outputs, "
        "so there would be nothing to check; if it writes its results into arguments, list "
        "them, e.g. `outputs: [out]` (parameter names or positions), else return the outputs",
    )


def _injected_only(
    found: Discovery | None, file: Path, launcher: str | None
) -> tuple[dict[str, tuple[KnobValue, ...]], dict[str, KnobValue], list[Problem]]:
    """The knobs discovery writes into the copy (a method's or ``apply``'s parameters cannot
    be passed as keyword knobs), their baselines and the notices of discovery."""
    if found is None:
        reason = f"the launcher {launcher} is not found in {file.name}: no knobs discovered"
        return {}, {}, [Problem(file=file, field="knobs", reason=reason)]
    knobs = {k: v for k, v in found.knobs.items() if k in found.sites}
    notices = [
        Problem(file=file, field="knobs", reason=f"line {n.line}: {n.reason}")
        for n in found.notices
    ]
    return knobs, {k: v for k, v in found.baseline.items() if k in knobs}, notices


def _load(path: Path) -> tuple[KernelSpec | None, list[Problem]]:
    directory, yaml_path = _entry_paths(path)
    out = Problems(yaml_path)
    if not yaml_path.exists():
        out.add(
            "",
            f"not found; a registry entry is a directory holding {KERNEL_YAML} (name, module, "
            "launcher, inputs, shapes, dtypes) and the module it names",
        )
        return None, out.items
    if not _inside_entry(yaml_path, directory, out):
        return None, out.items
    raw = _read_bytes(yaml_path, MAX_YAML_BYTES, out)
    text = None if raw is None else _decode(raw, yaml_path, out)
    doc = None if text is None else _parse_yaml(text, out)
    if raw is None or doc is None:
        return None, out.items
    kind = doc.get("kind", "triton")
    if kind == "replay":
        return _load_replay(doc, directory, raw, out)
    if kind not in ("triton", "reference"):
        out.add("kind", f"must be triton (the default), reference or replay, got {show(kind)}")
    reference_only = kind == "reference"

    check_top_level(doc, out, kind="reference" if reference_only else "triton")
    name = check_name(doc.get("name"), out)
    module = check_module_path(doc.get("module"), directory, out)
    if reference_only:
        functions = {key: check_function_name(key, doc.get(key), out) for key in _FUNCTION_KEYS}
    else:
        functions = {key: check_dotted_path(key, doc.get(key), out) for key in _FUNCTION_KEYS}
    call = check_call_fields(doc, out)
    if reference_only:
        if doc.get("launcher") is None:
            functions["launcher"] = DEFAULT_REFERENCE_LAUNCHER
        if doc.get("knobs") is not None:
            out.add(
                "knobs",
                "a reference entry has no knobs of its own: they are discovered from the "
                "first correct LLM-written module; remove knobs (or write the Triton module "
                "and drop kind: reference)",
            )
    shapes, dims = check_shapes(doc.get("shapes"), out)
    dtypes = check_dtypes(doc.get("dtypes"), out)
    tolerance = check_tolerance(doc.get("tolerance"), dtypes, out)
    knobs = check_knobs(doc.get("knobs"), out)
    weight = check_weight(doc.get("weight"), out)
    roofline = check_roofline(doc.get("roofline"), dims, out)
    if roofline is not None and dtypes:
        _check_roofline_values(roofline, shapes, dtypes, out)

    if module is None:
        return None, out.items
    sources = _read_sources(directory, module, out)
    texts: dict[str, str | None] = {}
    if sources is not None:
        texts = {rel: _decode(data, directory / rel, out) for rel, data in sources.items()}
    source = texts.get(module)
    declared = doc.get("knobs") is not None
    notices: list[Problem] = []
    baseline: dict[str, KnobValue] = {}
    installed: InstalledLauncher | None = None
    if source is not None and reference_only:
        _check_reference_module(source, directory, module, functions, out)
        knobs, declared = {}, True
    elif source is not None:
        extra = {r: t for r, t in texts.items() if r != module and t is not None}
        knobs, baseline, notices, installed = _check_module(
            source,
            directory,
            module,
            functions,
            knobs if declared else None,
            out,
            extra,
            call,
            frozenset(rel.split("/")[0].removesuffix(".py") for rel in texts),
        )
        _check_constructor(
            source,
            module,
            functions["launcher"],
            {**(call.init if call is not None else {}), **knobs},
            frozenset(rel.split("/")[0].removesuffix(".py") for rel in texts),
            out,
        )
        for keyword in call.keywords if call is not None else ():
            if keyword in knobs:
                out.add(
                    "keywords", f"{keyword!r} is a knob (the tuner passes it); list inputs only"
                )

    if out.items:
        return None, out.items
    # No problems: every required field was present and valid.
    assert sources is not None and source is not None and dtypes is not None
    launcher_name, inputs_name = functions["launcher"], functions["inputs"]
    assert launcher_name is not None and inputs_name is not None
    files: dict[str, bytes] = {KERNEL_YAML: raw, **sources}
    entry_source = ""
    if installed is not None:  # the installed module is what runs: its copy is the candidate
        files[f"<installed>/{installed.module}"] = installed.source.encode()
        entry_source, source, launcher_name = source, installed.source, installed.qualname
    spec = KernelSpec(
        name=name,
        directory=directory.absolute(),
        module=module,
        launcher=launcher_name,
        inputs=inputs_name,
        reference=functions["reference"],
        shapes=shapes,
        dtypes=dtypes,
        tolerance=tolerance,
        knobs=knobs,
        knobs_declared=declared,
        baseline_knobs=baseline,
        weight=weight,
        roofline=roofline,
        module_source=source,
        generation=_generation(files),
        extra_files={r: t for r, t in texts.items() if r != module and t is not None},
        notices=tuple(notices),
        kind="reference" if reference_only else "triton",
        outputs=call.outputs,
        backward=call.backward,
        init=call.init,
        grad_outputs=call.grad_outputs,
        keywords=call.keywords,
        installed_module=installed.module if installed is not None else "",
        package=package_of(installed.module) if installed is not None else "",
        entry_source=entry_source,
    )
    return spec, []


def _check_roofline_values(
    roofline: Roofline, shapes: Sequence[Shape], dtypes: Sequence[str], out: Problems
) -> None:
    """Each roofline expression evaluated on every (shape, dtype) case it will be evaluated
    on: a division by zero, a negative or complex result or an overflow is a problem of the
    field here, not a missing roofline point after a campaign. An expression that already
    has a problem (a syntax or name error) is not evaluated again, nor any while the shapes
    have one. At most :data:`MAX_ROOFLINE_CASES` cases per expression are evaluated (a bound
    on the time a huge shapes list takes); beyond them, a case the expression cannot be
    evaluated for gets no roofline point (:func:`profilers.classify.roofline_point`)."""
    # Imported here: the runtime imports this module, and a user's process never needs the
    # profilers (tests/layers/test_package_boundaries.py).
    from profilers.classify import DTYPE_BYTES, evaluate_expression

    flagged = {p.field for p in out.items}
    if any(f == "shapes" or f.startswith("shapes[") for f in flagged):
        return
    elems = sorted({DTYPE_BYTES.get(d, 1): d for d in dtypes}.items())  # one dtype per size
    cases = [(i, shape, e, d) for i, shape in enumerate(shapes) for e, d in elems]
    for key, expr in (("bytes", roofline.bytes), ("flops", roofline.flops)):
        where = f"roofline.{key}"
        if expr is None or where in flagged:
            continue
        for i, shape, elem, dtype in cases[:MAX_ROOFLINE_CASES]:
            names = {**shape.dims, "elem": elem}
            try:
                value = evaluate_expression(expr, names)
            except ValueError as exc:
                reason = str(exc)
            else:
                if value >= 0:
                    continue
                reason = f"it is {value:g}, a negative amount of work"
            out.add(
                where,
                f"{show(expr)} cannot be evaluated for shapes[{i}] with {dtype} "
                f"(elem={elem}): {reason}",
            )
            break


def _check_reference_module(
    source: str, directory: Path, module: str, functions: Mapping[str, str | None], out: Problems
) -> None:
    """A reference entry's module: ``reference`` and ``inputs`` are top-level defs, and the
    launcher (the function the LLM writes) is not defined yet."""
    outline = outline_module(source, directory / module, out)
    if outline is None:
        return
    check_functions(outline, module, {k: v for k, v in functions.items() if k != "launcher"}, out)
    launcher = functions.get("launcher")
    if launcher is not None and (launcher in outline.functions or launcher in outline.other):
        out.add(
            "launcher",
            f"'{launcher}' is already defined in {module}; in a reference entry it names the "
            "Triton launcher the LLM proposer writes: choose an unused name, or drop "
            "kind: reference to tune the module you wrote",
        )


def _load_replay(
    doc: Mapping[object, object], directory: Path, raw: bytes, out: Problems
) -> tuple[KernelSpec | None, list[Problem]]:
    """A ``kind: replay`` entry (:mod:`tuned.registry.replay`): knobs from a recorded cache."""
    if doc.get("name") is None:
        out.add("name", "required but missing; add it, e.g. `name: convolution-a100`")
    name = check_name(doc.get("name"), out)
    weight = check_weight(doc.get("weight"), out)
    parts = check_replay(doc, directory, out)
    if out.items or parts is None:
        return None, out.items
    src = parts.source
    cache_field = str(doc["cache"])
    description = (
        f"# ktuned replay entry {name}: every configuration is looked up in the Kernel Tuner "
        f"cache {cache_field}\n# (kernel {src.kernel}, recorded on {src.device}, sha256 "
        f"{src.sha256}); nothing is compiled or run.\n"
    )
    spec = KernelSpec(
        name=name,
        directory=directory.absolute(),
        module=cache_field,
        launcher="",
        inputs="",
        reference=None,
        shapes=(),
        dtypes=(),
        tolerance={},
        knobs=parts.knobs,
        knobs_declared=True,  # by the cache's tune_params
        baseline_knobs=parts.baseline,
        weight=weight,
        roofline=None,
        module_source=description,
        generation=_generation({KERNEL_YAML: raw, f"cache:{cache_field}": parts.data}),
        replay=src,
        kind="replay",
    )
    return spec, []


def _outside_registry(root: Path, directory: Path) -> Problem | None:
    """A problem when the entry ``directory`` (a symlink) resolves outside ``root``."""
    if directory == root or not directory.is_symlink():
        return None
    try:
        target = directory.resolve(strict=True)
        inside = target.is_relative_to(root.resolve(strict=True))
    except (OSError, RuntimeError) as exc:  # RuntimeError: a symlink loop (Python < 3.13)
        return Problem(file=directory, field="", reason=f"cannot resolve the symlink: {exc}")
    if inside:
        return None
    return Problem(
        file=directory,
        field="",
        reason=f"a symlink to {target}, outside the registry {root}; the registry is the "
        "set of files ktuned reads and hashes, so copy or move the entry into it",
    )


def load_registry_entry(
    root: str | os.PathLike[str], directory: str | os.PathLike[str]
) -> tuple[KernelSpec | None, list[Problem]]:
    """Load the entry ``directory`` of the registry ``root``, as :func:`scan_registry` and
    the daemon's watcher do: ``(spec, [])``, or ``(None, problems)`` for an invalid entry,
    including an entry directory that is a symlink to somewhere outside the registry."""
    escape = _outside_registry(Path(root), Path(directory))
    if escape is not None:
        return None, [escape]
    return _load(Path(directory))


def load_entry(path: str | os.PathLike[str]) -> KernelSpec:
    """Load and validate one entry: its directory, or its ``kernel.yaml``.

    Raises :class:`~tuned.errors.RegistryError` listing every problem of the entry.
    """
    spec, problems = _load(Path(path))
    if spec is None:
        raise RegistryError([*problems])  # list[object]: RegistryError does not know Problem
    return spec


def scan_registry(root: str | os.PathLike[str]) -> RegistryScan:
    """Load every entry under ``root``; invalid entries are reported, never fatal.

    ``root`` is either one entry (it holds ``kernel.yaml``) or a directory whose immediate,
    non-hidden subdirectories holding ``kernel.yaml`` are entries, loaded in name order.
    Other subdirectories are ignored. A name already taken by an earlier entry makes the
    later entry invalid. Raises :class:`~tuned.errors.BadInputError` when ``root`` is not a
    directory.
    """
    root = Path(root)
    if not root.exists():
        raise BadInputError(
            f"registry directory {root} does not exist; pass the directory that holds one "
            f"subdirectory per kernel, each with a {KERNEL_YAML}"
        )
    if not root.is_dir():
        raise BadInputError(f"registry path {root} is not a directory")
    if (root / KERNEL_YAML).exists():
        directories = [root]
    else:
        try:
            children = sorted(root.iterdir(), key=lambda p: p.name)
        except OSError as exc:
            raise BadInputError(f"cannot list registry directory {root}: {exc}") from exc
        directories = [
            d
            for d in children
            if not d.name.startswith(".") and d.is_dir() and (d / KERNEL_YAML).exists()
        ]
    entries: list[KernelSpec] = []
    problems: list[Problem] = []
    invalid: dict[str, list[Problem]] = {}
    owners: dict[str, Path] = {}
    for directory in directories:
        spec, found = load_registry_entry(root, directory)
        if spec is not None and spec.name in owners:
            found = [
                Problem(
                    file=directory / KERNEL_YAML,
                    field="name",
                    reason=f"name '{spec.name}' already used by {owners[spec.name]}; names "
                    "identify kernels, give each entry its own",
                )
            ]
        if spec is None or found:
            problems.extend(found)
            invalid[str(directory)] = found
            continue
        owners[spec.name] = directory
        entries.append(spec)
    return RegistryScan(entries=entries, problems=problems, invalid=invalid)
