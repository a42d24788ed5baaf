"""How a process that runs candidate code is started: its environment (an allowlist, nothing
secret-looking) and its start in the host sandbox (:mod:`tuned.evaluation.sandbox`) with a pair
of pipes for requests and answers. Used by the GPU worker and its spares
(:class:`tuned.evaluation.client.WorkerClient`) and the compile pool
(:class:`tuned.evaluation.compile_pool.CompilePool`)."""

from __future__ import annotations

import os
import subprocess
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING

from tuned.evaluation.gpu_turn import FD_VARIABLE
from tuned.evaluation.sandbox import WORKDIR, check_sandbox, sandboxed

if TYPE_CHECKING:
    from tuned.evaluation.settings import EvaluationSettings

__all__ = ["spawn_child", "worker_environment"]

# Environment variables a worker inherits; everything else (API keys, tokens, ...) is dropped.
_ENV_KEEP = (
    "PATH",
    "HOME",
    "LANG",
    "TZ",
    "TMPDIR",
    "PYTHONPATH",
    "VIRTUAL_ENV",
    "USER",
    "LD_LIBRARY_PATH",
    "OMP_NUM_THREADS",
    "MKL_NUM_THREADS",
)
_ENV_KEEP_PREFIXES = ("LC_", "CUDA_", "NVIDIA_", "TRITON_")
_ENV_SECRET_MARKERS = ("KEY", "TOKEN", "SECRET", "PASSWORD", "CREDENTIAL")


def worker_environment(
    base: Mapping[str, str], *, interpreter: bool, cache_dir: Path, memory_limit: int | None
) -> dict[str, str]:
    """The environment of a worker: an allowlist of ``base``, never anything secret-looking."""
    env = {
        k: v
        for k, v in base.items()
        if (k in _ENV_KEEP or k.startswith(_ENV_KEEP_PREFIXES))
        and not any(marker in k.upper() for marker in _ENV_SECRET_MARKERS)
    }
    # The worker imports ``tuned`` and ``profilers`` from wherever this process found them.
    code_root = str(Path(__file__).resolve().parents[2])
    env["PYTHONPATH"] = os.pathsep.join(p for p in (code_root, env.get("PYTHONPATH")) if p)
    env["TRITON_CACHE_DIR"] = str(cache_dir)
    env["TRITON_HOME"] = str(cache_dir.parent)  # Triton's other files (dumps, overrides)
    # Temporary files (Triton's compiler writes some) stay inside the worker's directory.
    tmp = cache_dir.parent / "tmp"
    tmp.mkdir(parents=True, exist_ok=True)
    env["TMPDIR"] = str(tmp)
    env["PYTHONUNBUFFERED"] = "1"
    env["PYTHONDONTWRITEBYTECODE"] = "1"
    if interpreter:
        env["TRITON_INTERPRET"] = "1"
        if memory_limit:
            env["KTUNED_WORKER_MEMORY_BYTES"] = str(memory_limit)
    else:
        env.pop("TRITON_INTERPRET", None)
    return env


def spawn_child(
    python: str,
    module: str,
    workdir: Path,
    *,
    settings: EvaluationSettings,
    cache_dir: Path,
    env: Mapping[str, str] | None = None,
    turn_fd: int | None = None,
) -> tuple[subprocess.Popen[bytes], int, int]:
    """Start ``python -m module REQUEST_FD ANSWER_FD workdir/modules`` isolated: in the
    sandbox of ``settings.sandbox`` (:mod:`tuned.evaluation.sandbox`: writable only its
    ``workdir/modules``, ``cache_dir`` and ``TMPDIR``, mounted at ``/ktuned/modules``,
    ``/ktuned/triton-cache`` and ``/ktuned/tmp``, and a private ``/tmp``), its own session and
    process group (killed as a whole), the scrubbed environment of :func:`worker_environment` with
    ``cache_dir`` as its Triton cache, stdout and stderr to ``workdir/stderr.log``; ``env`` is
    set over the inherited environment (a GPU's ``CUDA_VISIBLE_DEVICES``); ``turn_fd``, the
    client's GPU turn (:mod:`tuned.evaluation.gpu_turn`), stays open in the child. Returns the
    process, the fd to write requests to and the fd to read answers from. Raises ``OSError``
    (with nothing left open) when it cannot start, :class:`~tuned.evaluation.sandbox.SandboxError`
    when the sandbox cannot run here."""
    check_sandbox(settings.sandbox)
    modules = workdir / "modules"
    modules.mkdir(parents=True, exist_ok=True)
    cache_dir.mkdir(parents=True, exist_ok=True)
    child_env = worker_environment(
        {**os.environ, **(env or {})},
        interpreter=settings.interpreter,
        cache_dir=cache_dir,
        memory_limit=settings.memory_limit_bytes,
    )
    modules_arg, cwd, writable = str(modules), str(workdir), []
    if settings.sandbox.enabled:  # its directories, at paths that say nothing of the host's
        tmp = Path(child_env["TMPDIR"])
        modules_arg, cwd = f"{WORKDIR}/modules", WORKDIR
        writable = [(modules, modules_arg), (cache_dir, f"{WORKDIR}/triton-cache")]
        writable += [(tmp, f"{WORKDIR}/tmp")]
        child_env.update(
            TRITON_CACHE_DIR=f"{WORKDIR}/triton-cache", TRITON_HOME=WORKDIR, TMPDIR=f"{WORKDIR}/tmp"
        )
    extra_fds: tuple[int, ...] = ()
    if turn_fd is not None:
        child_env[FD_VARIABLE] = str(turn_fd)
        extra_fds = (turn_fd,)
    req_r, req_w = os.pipe()
    res_r, res_w = os.pipe()
    launch = sandboxed(
        [python, "-m", module, str(req_r), str(res_w), modules_arg],
        settings=settings.sandbox,
        env=child_env,
        writable=writable,
        cwd=cwd,
        pass_fds=(req_r, res_w, *extra_fds),
    )
    try:
        with open(workdir / "stderr.log", "wb") as stderr:
            proc = subprocess.Popen(
                launch.argv,
                stdin=subprocess.DEVNULL,
                stdout=stderr,
                stderr=stderr,
                env=launch.env,
                pass_fds=launch.pass_fds,
                start_new_session=True,
                cwd=workdir,
            )
    except OSError:
        os.close(req_w)
        os.close(res_r)
        raise
    finally:
        os.close(req_r)
        os.close(res_w)
        launch.close()
    return proc, req_w, res_r
