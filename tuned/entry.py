"""The ``ktuned`` command's entry point: :func:`tuned.cli.main`, or, when a dependency of the
``daemon`` extra is missing (``pip install ktuned`` alone installs the runtime's), one line
saying what to install instead of a traceback."""

from __future__ import annotations

import os
import sys
from collections.abc import Sequence

__all__ = ["DAEMON_DEPENDENCIES", "main"]

#: Top-level module -> distribution of the ``daemon`` extra (pyproject.toml).
DAEMON_DEPENDENCIES = {
    "sklearn": "scikit-learn",
    "scipy": "scipy",
    "prometheus_client": "prometheus-client",
    "matplotlib": "matplotlib",
    "openai": "openai",
}


def main(argv: Sequence[str] | None = None) -> int:
    try:
        from tuned.cli import main as cli_main

        return cli_main(argv)
    except BrokenPipeError:
        # The reader left early (`ktuned status --json | head`): not an error of ktuned's.
        # Python's recipe: point stdout at /dev/null so the exit's flush does not fail again.
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        return 141  # 128 + SIGPIPE, as a shell reports a command ended by a closed pipe
    except ModuleNotFoundError as exc:
        missing = DAEMON_DEPENDENCIES.get((exc.name or "").partition(".")[0])
        if missing is None:
            raise
        print(
            f"ktuned: {missing} is not installed ({exc}); the ktuned command needs the "
            "daemon's dependencies: install ktuned[daemon] (pip install 'ktuned[daemon]', "
            "from a checkout pip install -e '.[daemon]' or bash scripts/setup.sh); "
            "tuned.runtime.load needs none of them",
            file=sys.stderr,
        )
        return 2


if __name__ == "__main__":
    raise SystemExit(main())
