"""Does NVML (and CUDA, and a Triton kernel) work under the unit's restrictions? Without systemd.

    sudo python bench/unit_nvml.py [--gpu 0] [--json OUT]     # on a GPU box, as root
    sudo python bench/unit_nvml.py --smoke                    # the mechanics, on any Linux box

deploy/ktuned.service confines the daemon; this script rebuilds as much of that confinement as
a root shell can, runs the daemon's own NVML code and a CUDA/Triton evaluation inside it, and
checks what systemd would have enforced:

- ``ProtectProc=invisible``: a private mount namespace whose /proc is mounted with
  ``hidepid=invisible`` (what systemd does), with a foreign CUDA process of another user on the
  GPU; the check asserts the foreign pid is hidden from /proc and still named by
  ``NvmlMonitor.foreign_work`` (NVML asks the driver, not /proc).
- ``DynamicUser=``, ``CapabilityBoundingSet=``, ``NoNewPrivileges=``: ``setpriv`` to user
  ``nobody`` (group ``video`` added, as ``SupplementaryGroups=video``) with every capability
  dropped and no_new_privs. Where ``nobody`` cannot read the Python environment (e.g. a venv in
  /root), the child runs as root with no capabilities instead and the /proc check is skipped.
- ``SystemCallFilter=``: every system call the child makes (``strace -f``) must be in the
  unit's allowed set, computed with ``systemd-analyze syscall-filter`` from the unit's lines.
- ``DevicePolicy=closed`` + ``DeviceAllow=``: every device node the child opened must be one
  the unit allows (by path, or by ``char-NAME`` major from /proc/devices), or one of the pseudo
  devices ``closed`` always allows.

Not rebuilt: ``ProtectSystem=strict``/``PrivateTmp=`` (the child writes only to its own
temporary HOME and caches, as the unit's ``Environment=`` lines direct) and the cgroup device
filter itself (checked by the list of opened nodes instead). Where ``/run/systemd/system``
exists the real thing is one command away and is printed at the end.

``--smoke`` (no GPU needed): the same mechanics with a foreign idle process instead of a CUDA
one and the Triton kernel in Triton's interpreter, so a CPU machine checks that the
confinement, the trace and the filter computation work. Exit status 0 when every check passed.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import stat
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
UNIT = ROOT / "deploy" / "ktuned.service"
#: Always allowed by ``DevicePolicy=closed`` (systemd.resource-control(5)).
PSEUDO_DEVICES = {"/dev/null", "/dev/zero", "/dev/full", "/dev/random", "/dev/urandom"}

#: The foreign work: a process of another user holding the GPU (or, --smoke, just alive).
FOREIGN_CPU = "import signal; print('ready', flush=True); signal.pause()"
FOREIGN_GPU = "import torch; x = torch.ones(1, device='cuda'); " + FOREIGN_CPU


def unit_values(key: str) -> list[str]:
    return [
        line.split("=", 1)[1].strip()
        for line in UNIT.read_text().splitlines()
        if line.startswith(f"{key}=")
    ]


def syscall_groups(saved: Path | None = None) -> dict[str, list[str]]:
    """``systemd-analyze syscall-filter``: every group with its members (calls and groups);
    ``saved``: that command's output saved on a machine that has systemd (a GPU box may not)."""
    out = (
        saved.read_text()
        if saved is not None
        else subprocess.run(
            ["systemd-analyze", "syscall-filter", "--no-pager"],
            capture_output=True,
            text=True,
            check=True,
        ).stdout
    )
    groups: dict[str, list[str]] = {}
    current = None
    for line in out.splitlines():
        if line.startswith("@"):
            current = line.strip()
            groups[current] = []
        elif current and line.strip() and not line.strip().startswith("#"):
            groups[current].append(line.strip())
    return groups


def expand(names: list[str], groups: dict[str, list[str]]) -> set[str]:
    calls: set[str] = set()
    for name in names:
        calls |= expand(groups[name], groups) if name.startswith("@") else {name}
    return calls


def allowed_syscalls(saved: Path | None = None) -> set[str]:
    """The unit's ``SystemCallFilter=`` lines: an allow list, then ``~`` deny lists."""
    groups = syscall_groups(saved)
    allowed: set[str] = set()
    for value in unit_values("SystemCallFilter"):
        deny = value.startswith("~")
        names = value.lstrip("~").split()
        allowed = allowed - expand(names, groups) if deny else allowed | expand(names, groups)
    return allowed


def char_majors() -> dict[int, str]:
    majors, section = {}, ""
    for line in Path("/proc/devices").read_text().splitlines():
        if line.endswith("devices:"):
            section = line
        elif line.strip() and section.startswith("Character"):
            number, name = line.split(None, 1)
            majors[int(number)] = name
    return majors


def _major_of(path: str, majors: dict[int, str]) -> str:
    try:
        major = os.major(os.stat(path).st_rdev)
    except OSError as exc:
        return f"cannot stat: {exc}"
    return f"{major} ({majors.get(major, '?')})"


def device_allowed(path: str, majors: dict[int, str]) -> bool:
    if path in PSEUDO_DEVICES:
        return True
    allow = [v.split()[0] for v in unit_values("DeviceAllow")]
    if path in allow:
        return True
    try:
        rdev = os.stat(path).st_rdev
    except OSError:
        return False
    return f"char-{majors.get(os.major(rdev), '?')}" in allow


def child(gpu: int, smoke: bool, foreign_pid: int, check_proc: bool) -> dict[str, object]:
    """Inside the confinement: what the daemon does with NVML, CUDA and Triton."""
    result: dict[str, object] = {"uid": os.getuid(), "pid": os.getpid()}
    if check_proc:
        result["foreign_pid_hidden_from_proc"] = not Path(f"/proc/{foreign_pid}").exists()
    from tuned.daemon.gpu import NvmlMonitor, open_monitor

    monitor = open_monitor(
        interpreter=False, index=gpu, busy_utilization_percent=10.0, busy_memory_bytes=1 << 30
    )
    result["nvml"] = isinstance(monitor, NvmlMonitor)
    result["devices"] = [d.model for d in monitor.devices()]
    reason = monitor.foreign_work({os.getpid()})
    result["foreign_work"] = reason
    result["foreign_pid_named_by_nvml"] = bool(reason and str(foreign_pid) in reason)
    mark = monitor.throttle_mark()
    import torch
    import triton
    import triton.language as tl

    @triton.jit  # type: ignore[untyped-decorator]
    def add(x_ptr, y_ptr, out_ptr, n, BLOCK: tl.constexpr):  # type: ignore[no-untyped-def]
        offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
        mask = offs < n
        x, y = tl.load(x_ptr + offs, mask=mask), tl.load(y_ptr + offs, mask=mask)
        tl.store(out_ptr + offs, x + y, mask=mask)

    # --smoke: Triton's interpreter on the CPU (TRITON_INTERPRET=1), no GPU.
    x = torch.randn(4096, device="cpu" if smoke else f"cuda:{gpu}")
    out = torch.empty_like(x)
    add[(4,)](x, x, out, x.numel(), BLOCK=1024)
    if not smoke:
        torch.cuda.synchronize()
    result["triton_kernel_correct"] = bool(torch.allclose(out, 2 * x))
    result["throttled"] = monitor.throttled_since(mark)
    monitor.close()
    return result


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--gpu", type=int, default=0)
    parser.add_argument("--smoke", action="store_true", help="no GPU: the mechanics only")
    parser.add_argument("--json", type=Path, help="write the findings here too")
    parser.add_argument(
        "--syscall-groups",
        type=Path,
        default=None,
        help="`systemd-analyze syscall-filter --no-pager` saved elsewhere (no systemd here)",
    )
    parser.add_argument(
        "--child", nargs=2, type=int, metavar=("FOREIGN_PID", "CHECK_PROC"), help=argparse.SUPPRESS
    )
    args = parser.parse_args()
    if args.child:
        print(
            "RESULT " + json.dumps(child(args.gpu, args.smoke, args.child[0], bool(args.child[1])))
        )
        return 0
    if os.geteuid() != 0:
        parser.error("run as root: the confinement needs a mount namespace and setpriv")
    tools = ("unshare", "setpriv", "strace") + (() if args.syscall_groups else ("systemd-analyze",))
    for tool in tools:
        if shutil.which(tool) is None:
            parser.error(f"{tool} is missing (Debian: util-linux, strace, systemd)")

    work = Path(tempfile.mkdtemp(prefix="ktuned-unit-"))
    work.chmod(0o777)
    home = work / "state"
    home.mkdir()
    home.chmod(0o777)  # mkdir's mode is masked by the umask: nobody could not write its cache
    foreign = subprocess.Popen(
        [sys.executable, "-c", FOREIGN_CPU if args.smoke else FOREIGN_GPU],
        stdout=subprocess.PIPE,
        text=True,
    )
    assert foreign.stdout is not None and foreign.stdout.readline().strip() == "ready"
    python_env = {
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
        "PYTHONPATH": str(ROOT),
        "HOME": str(home),
        "KTUNED_STATE_DIR": str(home),
        "XDG_CACHE_HOME": str(home / "cache"),
        "TRITON_CACHE_DIR": str(home / "cache" / "triton"),
        **({"TRITON_INTERPRET": "1"} if args.smoke else {}),
        # a strace unpacked beside its libraries (a GPU box without the package)
        **{k: os.environ[k] for k in ("LD_LIBRARY_PATH",) if k in os.environ},
    }
    probe = "import tuned.daemon.gpu, torch, triton" + ("" if args.smoke else ", pynvml")
    drop = ["--inh-caps=-all", "--bounding-set=-all", "--no-new-privs"]
    video = [f"--groups={_gid('video')}"] if _gid("video") is not None else ["--clear-groups"]
    as_nobody = ["setpriv", "--reuid=65534", "--regid=65534", *video, *drop]
    readable = (
        subprocess.run(
            [*as_nobody, *strace(os.devnull), sys.executable, "-c", probe],
            env=python_env,
            capture_output=True,
        ).returncode
        == 0
    )
    user = as_nobody if readable else ["setpriv", "--reuid=0", "--regid=0", "--clear-groups", *drop]
    trace = work / "trace"
    inner = [
        *user,
        "strace",
        "-f",
        "-qq",
        "-o",
        str(trace),
        sys.executable,
        str(Path(__file__).resolve()),
    ]
    inner += [
        "--gpu",
        str(args.gpu),
        *(["--smoke"] if args.smoke else []),
        "--child",
        str(foreign.pid),
        str(int(readable)),
    ]
    script = 'mount -t proc -o hidepid=invisible proc /proc && exec "$@"'
    started = time.monotonic()
    run = subprocess.run(
        ["unshare", "--mount", "--propagation", "private", "sh", "-c", script, "sh", *inner],
        env=python_env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    foreign.terminate()
    foreign.wait()
    findings: dict[str, object] = {
        "child_as": "nobody" if readable else "root without capabilities"
    }
    lines = [line for line in run.stdout.splitlines() if line.startswith("RESULT ")]
    findings["child"] = json.loads(lines[-1][7:]) if lines else None
    findings["child_rc"] = run.returncode
    if run.returncode != 0:
        findings["child_stderr"] = run.stderr[-4000:]
    traced = trace.read_text() if trace.exists() else ""
    used = set(re.findall(r"^\d+\s+([a-z_0-9]+)\(", traced, re.M))
    allowed = allowed_syscalls(args.syscall_groups)
    findings["syscalls_used"] = len(used)
    findings["syscalls_outside_filter"] = sorted(used - allowed)
    findings["syscalls_refused_eperm"] = sorted(
        set(re.findall(r"^\d+\s+([a-z_0-9]+)\(.*= -1 EPERM", traced, re.M))
    )
    opened = set(re.findall(r'open(?:at)?\((?:AT_FDCWD, )?"(/dev/[^"]+)".*= \d+', traced))
    majors = char_majors()
    opened = {d for d in opened if _is_device(d)}  # not /dev/shm's files (a tmpfs)
    findings["devices_opened"] = sorted(opened)
    refused = sorted(d for d in opened if not device_allowed(d, majors))
    findings["devices_not_allowed"] = refused
    # Why not: the node's major and the name /proc/devices gives it ('?': none), which is
    # what a DeviceAllow=char-NAME line has to name (the H100 box refused /dev/nvidia0).
    findings["devices_not_allowed_majors"] = {d: _major_of(d, majors) for d in refused}
    findings["seconds"] = round(time.monotonic() - started, 1)
    child_ok = isinstance(findings["child"], dict)
    checks = {
        "child ran (and was traced)": run.returncode == 0 and child_ok and bool(used),
        "system calls inside the unit's filter": not findings["syscalls_outside_filter"],
        "device nodes inside DeviceAllow": not findings["devices_not_allowed"],
    }
    result = findings["child"] if child_ok else {}
    assert isinstance(result, dict)
    if readable:
        checks["foreign pid hidden from /proc (ProtectProc=invisible)"] = bool(
            result.get("foreign_pid_hidden_from_proc")
        )
    checks["Triton kernel ran correctly"] = bool(result.get("triton_kernel_correct"))
    if not args.smoke:
        checks["NVML initialised"] = bool(result.get("nvml"))
        checks["foreign CUDA process seen by NVML"] = bool(result.get("foreign_pid_named_by_nvml"))
        checks["device nodes of the GPU were opened"] = any(
            d.startswith("/dev/nvidia") for d in opened
        )
    findings["checks"] = checks
    text = json.dumps(findings, indent=2)
    print(text)
    if args.json:
        args.json.write_text(text + "\n")
    for name, ok in checks.items():
        print(f"{'ok  ' if ok else 'FAIL'} {name}")
    if Path("/run/systemd/system").exists():
        print(
            "systemd runs here: the real unit is the final word (docs/service.md, verified where)."
        )
    shutil.rmtree(work, ignore_errors=True)
    return 0 if all(checks.values()) else 1


def _is_device(path: str) -> bool:
    try:
        mode = os.stat(path).st_mode
    except OSError:
        return not path.startswith("/dev/shm/")  # gone: judge it by name
    return stat.S_ISCHR(mode) or stat.S_ISBLK(mode)


def strace(out: str) -> list[str]:
    return ["strace", "-f", "-qq", "-o", out]


def _gid(name: str) -> int | None:
    import grp

    try:
        return grp.getgrnam(name).gr_gid
    except KeyError:
        return None


if __name__ == "__main__":
    sys.exit(main())
