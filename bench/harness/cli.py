"""The command line every benchmark shares: its parser, ``--smoke``, the GPU check, JSON out."""

from __future__ import annotations

import argparse
import json
import os
from pathlib import Path
from typing import Any

#: What ``--smoke`` promises, in every script's ``--help``.
SMOKE_HELP = (
    "CPU, Triton's interpreter, tiny sizes, seconds: exercises the code (CI), gives no result"
)


def bench_parser(doc: str | None, *, smoke: bool = True) -> argparse.ArgumentParser:
    """A parser described by the first line of the script's docstring (``__doc__``), its
    whole docstring as the epilog; with ``smoke`` the ``--smoke`` flag."""
    text = (doc or "").strip()
    parser = argparse.ArgumentParser(
        description=text.splitlines()[0] if text else None,
        epilog="\n".join(text.splitlines()[1:]).strip() or None,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    if smoke:
        add_smoke(parser)
    return parser


def add_smoke(parser: argparse.ArgumentParser) -> None:
    """``--smoke``: see :data:`SMOKE_HELP`."""
    parser.add_argument("--smoke", action="store_true", help=SMOKE_HELP)


def interpreter_for_smoke(smoke: bool) -> None:
    """A smoke run uses Triton's interpreter (set before anything imports triton; the
    workers the script starts inherit it)."""
    if smoke:
        os.environ.setdefault("TRITON_INTERPRET", "1")


def require_gpu(parser: argparse.ArgumentParser, *, what: str = "this benchmark") -> str:
    """The name of the CUDA device, or a parser error (exit 2) saying to run ``--smoke``."""
    import torch

    if not torch.cuda.is_available():
        parser.error(f"{what} needs an NVIDIA GPU with CUDA; on a CPU run it with --smoke")
    return str(torch.cuda.get_device_name())


def write_json(path: Path | None, data: Any, *, indent: int = 1) -> None:
    """Write ``data`` as JSON to ``path`` (its folder made), and say so; nothing for None."""
    if path is None:
        return
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(data, indent=indent, default=str) + "\n")
    print(f"wrote {path}")
