"""``ktuned deploy install``: the service's files, from the installed package to the system.

The wheel carries the systemd unit, the example configuration, the Prometheus rules and
scrape configuration, the Grafana dashboard and its provisioning, the docs (the unit's
``Documentation=`` and the alerts' ``runbook_url``) and the example registry, under
``tuned/deploy_files`` (links to ``deploy/``, ``docs/`` and ``examples/registry`` in the
source tree). :func:`install` writes them where a service expects them, under ``prefix``
(``/`` for the real thing), with every path inside them pointing at the installed copies
and ``ExecStart=`` at the ``ktuned`` that runs the command. An existing configuration is
kept (it is the operator's); the other files are replaced, so an upgrade updates them.
"""

from __future__ import annotations

import shutil
import sys
from dataclasses import dataclass
from pathlib import Path

from tuned.errors import BadInputError

__all__ = ["InstalledFile", "deploy_files", "install"]

#: Where each file goes, relative to the prefix: (source under deploy_files, target).
LAYOUT = (
    ("deploy/ktuned.service", "etc/systemd/system/ktuned.service"),
    ("deploy/ktuned.yaml", "etc/ktuned/ktuned.yaml"),
    ("deploy/prometheus/ktuned-alerts.yml", "etc/prometheus/rules/ktuned-alerts.yml"),
    ("deploy/prometheus/ktuned-alerts.yml", "usr/share/ktuned/prometheus/ktuned-alerts.yml"),
    (
        "deploy/prometheus/ktuned-alerts.test.yml",
        "usr/share/ktuned/prometheus/ktuned-alerts.test.yml",
    ),
    ("deploy/prometheus/prometheus.yml", "usr/share/ktuned/prometheus/prometheus.yml"),
    ("deploy/grafana", "usr/share/ktuned/grafana"),
    ("docs", "usr/share/doc/ktuned"),
    ("registry", "usr/share/ktuned/registry"),
)
#: Absolute paths the files name, rewritten under the prefix.
_PATHS = (
    "/etc/ktuned/",
    "/etc/prometheus/rules/",
    "/usr/share/doc/ktuned/",
    "/usr/share/ktuned/",
    "/var/lib/ktuned",
)
#: Files that are the operator's once installed: never replaced.
_KEEP = ("etc/ktuned/ktuned.yaml",)


@dataclass(frozen=True)
class InstalledFile:
    path: Path
    #: ``written``, ``kept`` (an operator's file left as it was) or ``replaced``.
    action: str


def deploy_files() -> Path:
    """The directory of the packaged files (``tuned/deploy_files``)."""
    root = Path(__file__).resolve().parent / "deploy_files"
    if not (root / "deploy" / "ktuned.service").is_file():
        raise BadInputError(
            f"the service's files are missing from {root}: reinstall ktuned from its wheel "
            "or source tree"
        )
    return root


def ktuned_command() -> str:
    """How the unit starts ktuned: this ``ktuned`` script, else this Python with ``-m``."""
    script = Path(sys.argv[0]) if sys.argv and sys.argv[0] else None
    if script is not None and script.name == "ktuned" and script.exists():
        return str(script.resolve())
    found = shutil.which("ktuned")
    if found:
        return str(Path(found).resolve())
    return f"{sys.executable} -m tuned.cli"


def _rewrite(text: str, prefix: Path, command: str) -> str:
    text = text.replace("/usr/local/bin/ktuned", command)
    if prefix == Path("/"):
        return text
    root = str(prefix).rstrip("/")
    for path in _PATHS:
        # Only where the path starts (after a space, quote, colon or '=', or at a line start).
        for before in ("file://", " ", '"', "'", ":", "=", "\n"):
            text = text.replace(before + path, before + root + path)
    return text


def install(
    prefix: Path, *, force: bool = False, command: str | None = None
) -> list[InstalledFile]:
    """Write every file of :data:`LAYOUT` under ``prefix``; see the module docstring.

    ``force``: replace the configuration too. ``command``: the unit's ``ExecStart`` program
    (default :func:`ktuned_command`)."""
    prefix = prefix.resolve()
    command = command or ktuned_command()
    root = deploy_files()
    done: list[InstalledFile] = []
    for source, target in LAYOUT:
        src = root / source
        files = [src] if src.is_file() else sorted(p for p in src.rglob("*") if p.is_file())
        for f in files:
            if "__pycache__" in f.parts:
                continue
            relative = Path(target) if f == src else Path(target) / f.relative_to(src)
            dest = prefix / relative
            existed = dest.exists()
            if existed and str(relative) in _KEEP and not force:
                done.append(InstalledFile(dest, "kept"))
                continue
            try:
                dest.parent.mkdir(parents=True, exist_ok=True)
                data = f.read_bytes()
                if f.suffix in (".service", ".yaml", ".yml", ".md", ".json"):
                    data = _rewrite(data.decode(), prefix, command).encode()
                dest.write_bytes(data)
            except OSError as exc:
                raise BadInputError(
                    f"cannot write {dest}: {exc.strerror or exc}; run as root for --prefix /, "
                    "or choose a --prefix you may write"
                ) from exc
            done.append(InstalledFile(dest, "replaced" if existed else "written"))
    return done
