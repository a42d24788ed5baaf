"""The ``ktuned`` command line.

Exit codes: 0 success, 1 an environment failure (store, worker), 2 bad input (arguments,
registry entries), 130 interrupted (progress is saved; the same command resumes).
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
import time
from collections.abc import Mapping, Sequence
from pathlib import Path

from tuned import __version__
from tuned.errors import BadInputError, TunedError, WorkerError
from tuned.evaluation.client import EvaluationSettings
from tuned.evaluation.sandbox import SANDBOX_MODES, SandboxSettings
from tuned.registry.spec import KnobValue
from tuned.report import Progress, format_seconds, summary_table
from tuned.search import OnResult, TuneSettings
from tuned.search.base import CampaignSummary
from tuned.store.api import Store
from tuned.store.sqlite import SqliteStore

__all__ = ["main"]

EXIT_OK, EXIT_FAILURE, EXIT_BAD_INPUT, EXIT_INTERRUPTED = 0, 1, 2, 130


def _positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not an integer") from None
    if value < 0:
        raise argparse.ArgumentTypeError(f"must be >= 0, got {value}")
    return value


def _workers(text: str) -> int | None:
    return None if text == "auto" else _positive_int(text)


def _timeout_s(text: str) -> float:
    """Seconds of a deadline: a finite number > 0 (``nan`` and ``inf`` parse as floats)."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number of seconds") from None
    if not 0 < value < float("inf"):  # false for NaN too
        raise argparse.ArgumentTypeError(f"must be a finite number of seconds > 0, got {text}")
    return value


def build_parser() -> argparse.ArgumentParser:
    from policies import DEFAULT_POLICY, POLICIES

    parser = argparse.ArgumentParser(prog="ktuned", description=__doc__.splitlines()[0])
    parser.add_argument("--version", action="version", version=f"ktuned {__version__}")
    parser.add_argument("-v", "--verbose", action="store_true", help="log debug details")
    sub = parser.add_subparsers(dest="command", required=True)

    def state_dir(p: argparse.ArgumentParser) -> None:
        p.add_argument(
            "--state-dir",
            type=Path,
            default=None,
            help="where the store lives (default: $KTUNED_STATE_DIR, else "
            "$XDG_STATE_HOME/ktuned, else ~/.local/state/ktuned)",
        )

    def store_url(p: argparse.ArgumentParser) -> None:
        p.add_argument(
            "--store",
            default=None,
            metavar="URL",
            help="read this store instead of the state directory's: sqlite:///ABS/PATH.sqlite "
            "or postgresql://USER:PASSWORD@HOST:PORT/DATABASE (a fleet, docs/fleet.md)",
        )

    tune = sub.add_parser("tune", help="tune a registry directory or one entry, bounded")
    tune.add_argument("path", type=Path, help="registry directory, entry directory or kernel.yaml")
    tune.add_argument(
        "--budget",
        type=_positive_int,
        default=8,
        help="evaluated candidates per kernel besides the baseline; a rerun "
        "continues up to it (default: 8)",
    )
    tune.add_argument(
        "--policy",
        default=DEFAULT_POLICY,
        choices=sorted(POLICIES),
        help=f"search policy (default: {DEFAULT_POLICY})",
    )
    tune.add_argument("--seed", type=int, default=0, help="random seed (default: 0)")
    tune.add_argument(
        "--time-limit",
        type=_timeout_s,
        default=None,
        metavar="SECONDS",
        help="start no candidate after this many seconds (queued ones are dropped): the "
        "evaluation on the GPU finishes, then "
        "the claims are settled and shown as after a full run; a rerun continues. The "
        "kernels share the time: one that has had its share gives the GPU to one that has "
        "not (default: none, every budget is spent)",
    )
    tune.add_argument(
        "--device",
        choices=("auto", "gpu", "interpreter"),
        default="auto",
        help="auto: the GPU if CUDA is usable, else Triton's interpreter",
    )
    tune.add_argument(
        "--interpreter-max-size",
        type=_positive_int,
        default=EvaluationSettings.interpreter_max_size,
        help="interpreter only: skip shapes whose product of dimensions is "
        "larger (default: %(default)d)",
    )
    tune.add_argument(
        "--phase-timeout",
        type=_timeout_s,
        default=EvaluationSettings.benchmark_timeout_s,
        help="deadline in seconds of each evaluation phase (default: %(default)g)",
    )
    tune.add_argument(
        "--compile-workers",
        type=_workers,
        default=None,
        metavar="N|auto",
        help="CPU processes compiling candidates ahead while the GPU measures; 0: compile "
        "in the GPU worker, one candidate at a time (default: auto, the cores minus one "
        "on a GPU, 0 in the interpreter)",
    )
    tune.add_argument(
        "--gpu-turn",
        choices=("auto", "yes", "no"),
        nargs="?",
        const="yes",
        default="auto",
        help="the worker's timing waits while a spare makes case data on the same GPU "
        "(docs/evaluation.md, 'One timing at a time'); auto: on a GPU, not in the "
        "interpreter (default: auto)",
    )
    tune.add_argument(
        "--settle",
        choices=("auto", "yes", "no"),
        default="auto",
        help="after the campaigns, re-measure each tuned kernel's claims against the original "
        "in a fresh worker on the now idle GPU (`ktuned referee`), and show and ship those "
        "figures; auto: on a GPU, not in the interpreter (default: auto)",
    )
    tune.add_argument(
        "--sandbox",
        choices=SANDBOX_MODES,
        default="bwrap",
        help="where candidate code runs: bwrap, a bubblewrap sandbox (no network, no access "
        "to the store or credentials); none: plain child processes (docs/security.md)",
    )
    state_dir(tune)
    tune.add_argument(
        "--store",
        default=None,
        metavar="URL",
        help="write this store instead of the state directory's: sqlite:///ABS/PATH.sqlite "
        "or postgresql://USER:PASSWORD@HOST:PORT/DATABASE (a fleet: each candidate is "
        "claimed, so runs on several boxes share the work; docs/fleet.md)",
    )

    status = sub.add_parser("status", help="kernels in the store, their best and their state")
    status.add_argument("--json", action="store_true", help="print one JSON object")
    state_dir(status)
    store_url(status)

    best = sub.add_parser("best", help="the best variant of a kernel: knobs and source")
    best.add_argument("kernel")
    best.add_argument("--json", action="store_true", help="print one JSON object")
    state_dir(best)
    store_url(best)

    registry = sub.add_parser("registry", help="registry tools")
    registry_sub = registry.add_subparsers(dest="registry_command", required=True)
    check = registry_sub.add_parser("check", help="validate every entry and print each problem")
    check.add_argument("path", type=Path)
    check.add_argument("--json", action="store_true", help="print one JSON object")
    add = registry_sub.add_parser(
        "add", help="write an entry for an existing launcher (docs/registry.md, one command)"
    )
    add.add_argument("launcher", help="dotted path, e.g. package.module.function")
    add.add_argument(
        "--shape", action="append", required=True, help="NAME=SIZE,...; repeat for more shapes"
    )
    add.add_argument("--dtype", action="append", default=None, help="repeat for more dtypes")
    add.add_argument("--out", type=Path, default=Path("."), help="registry directory")
    add.add_argument("--name", default=None, help="entry name (default: the launcher's)")

    run = sub.add_parser("run", help="the daemon: tune the registry forever (systemd service)")
    run.add_argument(
        "--config",
        type=Path,
        default=None,
        help="YAML configuration (deploy/ktuned.yaml documents every key; default: the "
        "built-in defaults: the example registry, metrics on 127.0.0.1:9474)",
    )
    run.add_argument(
        "--check-config",
        action="store_true",
        help="validate the configuration (registry.path must exist), print it in force as "
        "YAML and exit (0 valid, 2 invalid)",
    )

    deploy = sub.add_parser("deploy", help="the service's files (unit, config, rules, dashboard)")
    deploy_sub = deploy.add_subparsers(dest="deploy_command", required=True)
    install = deploy_sub.add_parser(
        "install",
        help="write the systemd unit, example config and registry, Prometheus rules, Grafana "
        "dashboard and docs under a prefix (docs/service.md)",
    )
    install.add_argument(
        "--prefix", type=Path, default=Path("/"), help="root to install under (default: /)"
    )
    install.add_argument(
        "--force", action="store_true", help="replace an existing /etc/ktuned/ktuned.yaml too"
    )

    report = sub.add_parser("report", help="PNG plots and an HTML summary of the store")
    report.add_argument("--out", type=Path, required=True, help="directory to write into")
    state_dir(report)
    store_url(report)

    export = sub.add_parser(
        "export", help="a kernel's bests as a directory that runs without ktuned"
    )
    export.add_argument("kernel")
    export.add_argument("--out", type=Path, default=None, help="directory to write (a package)")
    export.add_argument(
        "--format",
        choices=("directory", "triton-configs"),
        default="directory",
        help="directory (default) or triton-configs: print triton.Config lists",
    )
    state_dir(export)
    store_url(export)

    budget = sub.add_parser("budget", help="LLM token spend and what is left (docs/llm.md)")
    budget.add_argument(
        "--config", type=Path, default=None, help="the daemon's YAML configuration (its caps)"
    )
    budget.add_argument("--json", action="store_true", help="print one JSON object")
    state_dir(budget)
    store_url(budget)
    from tuned.referee import add_parser as add_referee

    add_referee(sub, state_dir, store_url)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    logging.basicConfig(
        level=logging.DEBUG if args.verbose else logging.INFO,
        format="ktuned: %(message)s",
        stream=sys.stderr,
    )
    from tuned.evaluation.modules import dump_stacks_on_signal

    dump_stacks_on_signal()  # the campaign's or the daemon's stacks, on SIGUSR2
    try:
        if args.command == "tune":
            return _tune(args)
        if args.command == "status":
            return _status(args)
        if args.command == "best":
            return _best(args)
        if args.command == "run":
            return _run(args)
        if args.command == "report":
            return _report(args)
        if args.command == "export":
            return _export(args)
        if args.command == "budget":
            return _budget(args)
        if args.command == "deploy":
            return _deploy(args)
        if args.command == "referee":
            return _referee(args)
        if args.registry_command == "add":
            return _registry_add(args)
        return _registry_check(args)
    except BadInputError as exc:
        print(f"ktuned: error: {exc}", file=sys.stderr)
        return EXIT_BAD_INPUT
    except TunedError as exc:
        print(f"ktuned: error: {exc}", file=sys.stderr)
        return EXIT_FAILURE
    except KeyboardInterrupt:
        print(
            "\nktuned: interrupted; everything evaluated so far is saved, run the same "
            "command again to resume",
            file=sys.stderr,
        )
        return EXIT_INTERRUPTED


def _open_sqlite(args: argparse.Namespace) -> tuple[SqliteStore, Path]:
    from tuned.paths import default_state_dir

    state = args.state_dir or default_state_dir()
    return SqliteStore(state / "ktuned.sqlite"), state


def _open_store(args: argparse.Namespace) -> tuple[Store, Path]:
    """``--store URL`` when given, else the state directory's SQLite store."""
    if getattr(args, "store", None):
        from tuned.paths import default_state_dir
        from tuned.store.url import open_store

        return open_store(args.store), args.state_dir or default_state_dir()
    return _open_sqlite(args)


def _open_for_reading(args: argparse.Namespace) -> Store:
    """The store of a read command (``status``, ``best``, ``report``, ``export``), opened
    read-only: nothing is created, migrated or checkpointed, and the write-ahead log is left
    to its writer. A missing SQLite store reads as an empty one (there is nothing yet); a
    file that is not a ktuned store is refused as damaged."""
    from tuned.paths import default_state_dir

    if getattr(args, "store", None):
        from tuned.store.url import open_store, sqlite_path

        path = sqlite_path(args.store)
        if path is None:  # a fleet's PostgreSQL store
            return open_store(args.store)
    else:
        path = (args.state_dir or default_state_dir()) / "ktuned.sqlite"
    if path.parent.exists() and not path.parent.is_dir():
        raise BadInputError(
            f"the state directory {path.parent} is not a directory (it holds the store "
            f"{path.name}); point --state-dir or state_dir to a directory"
        )
    return SqliteStore.open_reader(path, missing_ok=True)


def _tune(args: argparse.Namespace) -> int:
    from tuned.pipeline import compile_workers_for
    from tuned.registry import format_problems
    from tuned.tuning import detect_interpreter, tune_claims, tune_registry

    if not args.path.exists():
        raise BadInputError(
            f"{args.path} does not exist; give a registry directory, an entry "
            "directory or a kernel.yaml"
        )
    args.path = _entry_path(args.path)
    fleet = False
    if args.store:
        from tuned.store.url import sqlite_path

        fleet = sqlite_path(args.store) is None  # checks the URL first: bad input exits 2
    store, state = _open_store(args)
    interpreter = detect_interpreter(args.device)
    t = args.phase_timeout
    evaluation = EvaluationSettings(
        interpreter=interpreter,
        compile_timeout_s=t,
        correctness_timeout_s=t,
        benchmark_timeout_s=t,
        interpreter_max_size=args.interpreter_max_size,
        sandbox=SandboxSettings(mode=args.sandbox, hidden=(state,)),
        gpu_turn=EvaluationSettings.turn_choice(args.gpu_turn),
    )
    settings = TuneSettings(
        budget=args.budget,
        policy=args.policy,
        seed=args.seed,
        deadline=None if args.time_limit is None else time.monotonic() + args.time_limit,
    )
    progress: list[Progress] = []

    def on_start(total: int) -> OnResult:
        progress.append(Progress(total))
        return progress[0].update

    try:
        report = tune_registry(
            args.path,
            store=store,
            state_dir=state,
            settings=settings,
            evaluation=evaluation,
            on_start=on_start,
            compile_workers=compile_workers_for(args.compile_workers, interpreter=interpreter),
            # A fleet's store: claim each candidate, so runs on other boxes share the work.
            claims=tune_claims(evaluation) if fleet else None,
        )
        if args.settle == "yes" or (args.settle == "auto" and not interpreter):
            _settle(report.summaries, store=store, state=state, evaluation=evaluation)
    finally:
        if progress:
            progress[0].close()
        location = store.location
        store.close()
    if report.problems:
        print(f"Skipped invalid entries:\n{format_problems(report.problems)}\n")
    fp = report.fingerprint
    device = "CPU, Triton interpreter" if fp.get("mode") == "interpreter" else fp.get("gpu_model")
    if fp.get("mode") == "replay":  # only replay entries: nothing ran here
        print(f"Device: none, replayed measurements of {device}; store: {location}")
    else:
        print(
            f"Device: {device}; triton {fp.get('triton')}, torch {fp.get('torch')}; "
            f"store: {location}"
        )
    print(summary_table(report.summaries))
    return EXIT_OK


def _settle(
    summaries: Sequence[CampaignSummary],
    *,
    store: Store,
    state: Path,
    evaluation: EvaluationSettings,
) -> None:
    """Re-measure the claims of the kernels tuned to a speedup, on the idle GPU: the
    campaign's comparisons ran beside the compile pool and the spares, and on the H100 5-7
    of 11-14 of its per-shape figures were more than 2 % from an idle re-measurement. The
    re-measurements are stored as the referee's (:mod:`tuned.store.speedups` prefers them)
    and the summary shows them. A failure here loses nothing: the campaign is stored."""
    from tuned.referee import referee

    names = [
        s.kernel for s in summaries if s.speedup not in (None, 1.0) and s.timing_kind != "replay"
    ]
    if not names:
        return
    print(
        f"Settling: re-measuring the claims of {len(names)} kernel(s) against the original "
        "in a fresh worker (--settle no: skip)",
        file=sys.stderr,
        flush=True,
    )
    try:
        report = referee(
            store, kernels=names, evaluation=evaluation, workdir=state / "workers" / "settle"
        )
    except (WorkerError, BadInputError, OSError) as exc:
        print(
            f"ktuned: settling failed ({exc}); the campaign's own figures stand; "
            "`ktuned referee` re-measures later",
            file=sys.stderr,
        )
        return
    measured = {c.kernel: c.measured for c in report.claims if c.label is None and not c.error}
    for summary in summaries:
        if measured.get(summary.kernel) is not None:
            summary.measured_speedup = measured[summary.kernel]
    print(f"Settled on the idle device:\n{report.table()}\n", flush=True)


def _referee(args: argparse.Namespace) -> int:
    from tuned.referee import command

    store, state = _open_store(args)
    try:
        return command(args, store, state)
    finally:
        store.close()


def _status(args: argparse.Namespace) -> int:
    from tuned.reporting.status import status_json, status_table
    from tuned.store.overview import kernel_overview
    from tuned.text import printable

    store = _open_for_reading(args)
    try:
        kernels = kernel_overview(store)
        invalid = store.invalid_entries()
        if args.json:
            print(status_json(store.location, kernels, invalid))
            return EXIT_OK
        print(f"store: {store.location}")
        if not kernels and not invalid:
            print("no kernels yet: run `ktuned tune REGISTRY_DIR`")
            return EXIT_OK
        failed = {  # nothing succeeded: say so when the original itself failed
            k.name: _original_failure(store, k.name, k.progress.generation)
            for k in kernels
            if k.progress.best_s is None
        }
        print(status_table(kernels, failed))
        from tuned.runtime.notes import status_notes

        notes = status_notes(store)
        if notes:
            print(printable(notes, None, keep="\n"))
        for directory, problems in invalid.items():
            shown = printable(problems, None, keep="\n")
            print(f"\ninvalid entry {printable(directory)}:\n{shown}")
    finally:
        store.close()
    return EXIT_OK


def _original_failure(store: Store, kernel: str, generation: str) -> str:
    """Describe the generation's original's failure, on any fingerprint ("" when the original
    never failed); a place in a worker's copy of the module is said as a line of the copy
    (:func:`tuned.search.campaign.copy_places`: the copy's path is inside the sandbox)."""
    from tuned.search.campaign import copy_places

    for fid in store.known_fingerprints():
        for t in store.trials(kernel, generation, fid):
            if t.provenance.value == "original" and t.result.outcome.value != "ok":
                text = copy_places(t.result.reason or "", "its module")
                reason = text.strip().splitlines()
                said = f"the original failed: {t.result.outcome.value} in {t.result.phase}"
                return said + (f" ({reason[0][:160]})" if reason else "")
    return ""


def _best(args: argparse.Namespace) -> int:
    from tuned.errors import StoreError
    from tuned.outcomes import source_hash

    store = _open_for_reading(args)
    try:
        if store.kernel(args.kernel) is None:
            names = ", ".join(repr(k.name) for k in store.kernels()) or "none yet"
            raise BadInputError(f"no kernel {args.kernel!r} in the store (known: {names})")
        best = store.best(args.kernel)
        if best is None:
            kernel = store.kernel(args.kernel)
            failed = kernel is not None and _original_failure(store, args.kernel, kernel.generation)
            raise BadInputError(
                f"{args.kernel} has no successful evaluation: {failed}; see `ktuned status`"
                if failed
                else f"{args.kernel} has no successful evaluation yet; run `ktuned tune` first"
            )
        stored = store.source(best.source_hash)
        if stored is None or source_hash(stored) != best.source_hash:
            raise StoreError(  # as export and load refuse it
                f"the stored source of {best.kernel!r} candidate {best.candidate_id[:24]!r} "
                f"does not match its hash {best.source_hash[:16]}...: the store "
                f"{store.location} was modified; nothing is shown"
            )
        source = stored
        fp = store.fingerprint(best.fingerprint)
        diff = _knob_diff(store, best.generation, source, best.knobs)
    finally:
        store.close()
    if args.json:
        print(
            json.dumps(
                {
                    "kernel": best.kernel,
                    "generation": best.generation,
                    "candidate": best.candidate_id,
                    "provenance": best.provenance.value,
                    "knobs": dict(best.knobs),
                    "time_s": best.time_s,
                    "baseline_time_s": best.baseline_time_s,
                    "speedup": best.speedup,
                    "timing_kind": best.timing_kind,
                    "fingerprint": fp,
                    "source": source,
                    "diff": diff,
                },
                indent=2,
            )
        )
        return EXIT_OK
    from tuned.text import printable

    speedup = f"{best.speedup:.3f}x" if best.speedup else "-"
    header = [  # stored text: each line one line, no control characters
        f"# kernel {best.kernel}, generation {best.generation[:12]}, candidate "
        f"{best.candidate_id} ({best.provenance.value})",
        f"# time {format_seconds(best.time_s)} ({best.timing_kind}), baseline "
        f"{format_seconds(best.baseline_time_s)}, speedup {speedup}",
        f"# on {fp.get('gpu_model', '?')} ({fp.get('mode', '?')}), triton {fp.get('triton')}",
        f"# knobs: {json.dumps(dict(best.knobs))}",
    ]
    print("\n".join(printable(line) for line in header))
    if diff:  # knobs discovered in the code run as a generated copy: show what it changes
        shown = printable(diff, None, keep="\n\t")
        print("# the copy that runs, against the original:\n" + shown, end="")
    print(printable(source, None, keep="\n\t"), end="" if source.endswith("\n") else "\n")
    return EXIT_OK


def _entry_path(path: Path) -> Path:
    """A registry or entry directory; an entry's ``kernel.yaml`` stands for its directory."""
    if path.is_file():
        if path.name != "kernel.yaml":
            raise BadInputError(
                f"{path} is a file; give a registry directory, an entry directory or a kernel.yaml"
            )
        return path.parent
    return path


def _knob_diff(store: Store, generation: str, source: str, knobs: Mapping[str, KnobValue]) -> str:
    """The unified diff of the generated copy (injected knobs written in) against the
    original; "" when the candidate runs its source as it is."""
    from tuned.registry.injection import InjectionError, materialize, variant_diff

    info = store.generation_info(generation)
    if info is None:
        return ""
    try:
        variant, _ = materialize(source, str(info[1].get("launcher", "")), knobs)
    except InjectionError as exc:
        return f"# (the knobs cannot be written into the source: {exc})\n"
    return variant_diff(source, variant, "original.py")


def _registry_check(args: argparse.Namespace) -> int:
    from tuned.registry import format_problems, scan_registry

    scan = scan_registry(_entry_path(args.path))
    if args.json:
        from tuned.reporting.registry import registry_json

        print(json.dumps(registry_json(scan), indent=2))
        return EXIT_BAD_INPUT if scan.problems else EXIT_OK
    for spec in scan.entries:
        space = spec.space_size() if spec.knobs else 0
        if spec.replay is not None:
            what = f"replay of {spec.module} ({spec.replay.device})"
        else:
            what = f"{len(spec.shapes)} shapes, {len(spec.dtypes)} dtypes"
        found = " (discovered)" if spec.knobs and not spec.knobs_declared else ""
        print(f"ok       {spec.name}: {what}, {space} knob configurations{found}")
        for knob, values in spec.knobs.items():  # the space itself
            base = spec.baseline_knobs.get(knob)
            shown = ", ".join(str(v) for v in values)
            print(f"  knob   {knob}: {shown}" + ("" if base is None else f" (baseline {base})"))
        for notice in spec.notices:
            print(f"note     {notice}")
    if scan.problems:
        print(format_problems(scan.problems))
    print(f"{len(scan.entries)} entries ok, {len(scan.invalid)} invalid")
    return EXIT_BAD_INPUT if scan.problems else EXIT_OK


def _registry_add(args: argparse.Namespace) -> int:
    from tuned.registry.scaffold import add_entry, parse_shape

    shapes = [parse_shape(text) for text in args.shape]
    added = add_entry(args.launcher, shapes, args.dtype or ["float16"], args.out, name=args.name)
    if added.note:
        print(f"note: {added.note}")
    print(f"wrote {added.directory}/kernel.yaml and entry.py")
    if added.todo:
        print(f"TODO: {'; '.join(added.todo)}")
    print(f"next: ktuned registry check {added.directory}")
    return EXIT_OK


def _run(args: argparse.Namespace) -> int:
    from tuned.daemon import Daemon, DaemonConfig, load_config

    config = load_config(args.config) if args.config else DaemonConfig()
    if args.check_config:
        from tuned.daemon.effective import check_paths, config_yaml

        check_paths(config)
        print(f"# configuration {config.source} is valid; in force (defaults included):")
        print(config_yaml(config), end="")
        return EXIT_OK
    from tuned.daemon.journal import configure_logging

    configure_logging(logging.DEBUG if args.verbose else getattr(logging, config.log_level.upper()))
    Daemon(config, config_path=args.config).run()
    return EXIT_OK


def _report(args: argparse.Namespace) -> int:
    from tuned.reporting import write_report

    store = _open_for_reading(args)
    location = store.location
    try:
        index = write_report(store, args.out)
    finally:
        store.close()
    print(f"report of {location}: {index}")
    return EXIT_OK


def _export(args: argparse.Namespace) -> int:
    from tuned.runtime.export import export_command

    store = _open_for_reading(args)
    try:
        print(export_command(store, args.kernel, args.out, args.format), end="")
    finally:
        store.close()
    return EXIT_OK


def _budget(args: argparse.Namespace) -> int:
    from tuned.daemon import DaemonConfig, load_config
    from tuned.llm.budget import budget_data, budget_report
    from tuned.store.url import default_store_url, sqlite_path

    config = load_config(args.config) if args.config else DaemonConfig()
    state = args.state_dir or config.state_dir
    url = args.store or config.store or default_store_url(state)
    local = sqlite_path(url)  # a fleet's PostgreSQL store: its shared ledger, this box's log
    where = local or state / "ktuned-llm.sqlite"
    ledger_url = None if local else url
    if args.json:
        data = budget_data(where, config.llm, source=config.source, ledger_url=ledger_url)
        print(json.dumps(data, indent=2))
        return EXIT_OK
    print(budget_report(where, config.llm, source=config.source, ledger_url=ledger_url), end="")
    return EXIT_OK


def _deploy(args: argparse.Namespace) -> int:
    from tuned.deployment import install

    for f in install(args.prefix, force=args.force):
        print(f"{f.action:<9}{f.path}")
    config = args.prefix / "etc/ktuned/ktuned.yaml"
    print(
        f"next: edit {config} (registry.path: the example registry for now), check it with "
        f"`ktuned run --config {config} --check-config`, then `systemctl daemon-reload && "
        "systemctl enable --now ktuned` (docs/service.md)"
    )
    return EXIT_OK


if __name__ == "__main__":
    sys.exit(main())
