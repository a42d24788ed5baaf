"""The workers' host sandbox (tuned/evaluation/sandbox.py) confines a real process: the probes
below run Python inside ``bwrap`` exactly as a worker is started (environment, binds, seccomp)
and report what they could reach. Skipped, with bwrap's own reason, only where it cannot run."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import textwrap
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tuned.evaluation.client import worker_environment
from tuned.evaluation.sandbox import (
    SandboxError,
    SandboxSettings,
    check_sandbox,
    descendants,
    sandboxed,
    socket_filter,
)

SECRET = "sk-ktuned-test-0123456789"


def _sandbox_or_skip() -> None:
    try:
        check_sandbox(SandboxSettings())
    except SandboxError as exc:
        pytest.skip(f"bwrap cannot run here: {exc}")


@pytest.fixture
def host(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[dict[str, Path]]:
    """A daemon's secrets and state beside a worker's directory, as on a real host."""
    _sandbox_or_skip()
    creds = tmp_path / "credentials"
    creds.mkdir()
    (creds / "llm.api_key").write_text(SECRET)
    state = tmp_path / "state"
    (state / "workers" / "0" / "modules").mkdir(parents=True)
    (state / "ktuned.sqlite").write_bytes(b"SQLite format 3\x00" + b"\x00" * 100)
    config = tmp_path / "ktuned.yaml"
    config.write_text(f"llm:\n  api_key_file: {creds / 'llm.api_key'}\n")
    monkeypatch.setenv("OPENAI_API_KEY", SECRET)
    monkeypatch.setenv("CREDENTIALS_DIRECTORY", str(creds))
    # A process started with the key in its environment, as systemd starts the daemon.
    with subprocess.Popen(["sleep", "600"], env=dict(os.environ)) as daemon:
        yield {
            "creds": creds,
            "state": state,
            "config": config,
            "work": state / "workers" / "0",
            "daemon_pid": Path(str(daemon.pid)),
        }
        daemon.kill()


def _probe(host: dict[str, Path], code: str, settings: SandboxSettings | None = None) -> dict:
    """Run ``code`` (which fills ``report``) in a worker's sandbox; the report."""
    work = host["work"]
    env = worker_environment(
        os.environ, interpreter=True, cache_dir=work / "triton-cache", memory_limit=None
    )
    script = "import json, os, sys\nreport = {}\n" + textwrap.dedent(code)
    script += "\nprint(json.dumps(report))\n"
    launch = sandboxed(
        [sys.executable, "-c", script],
        settings=settings or SandboxSettings(),
        env=env,
        writable=[work / "modules", work / "triton-cache", Path(env["TMPDIR"])],
        cwd=work,
    )
    try:
        done = subprocess.run(
            launch.argv,
            env=launch.env,
            pass_fds=launch.pass_fds,
            capture_output=True,
            timeout=60,
            check=False,
        )
    finally:
        launch.close()
    assert done.returncode == 0, done.stderr.decode()
    report: dict = json.loads(done.stdout.decode().strip().splitlines()[-1])
    return report


def _attempt(name: str, statement: str) -> str:
    """Code that records in ``report[name]`` "ok" or the error ``statement`` raised."""
    return (
        f"try:\n    {statement}\n    report[{name!r}] = 'ok'\n"
        f"except Exception as exc:\n    report[{name!r}] = type(exc).__name__ + ': ' + str(exc)\n"
    )


def test_a_worker_cannot_read_the_key_the_store_the_config_or_the_daemon(
    host: dict[str, Path],
) -> None:
    key, store, config = (
        host["creds"] / "llm.api_key",
        host["state"] / "ktuned.sqlite",
        host["config"],
    )
    code = "\n".join(
        [
            _attempt("key", f"open({str(key)!r}).read()"),
            _attempt("store", f"open({str(store)!r}, 'rb').read()"),
            _attempt("config", f"open({str(config)!r}).read()"),
            _attempt("daemon_environ", f"open('/proc/{host['daemon_pid']}/environ', 'rb').read()"),
            "report['environ'] = dict(os.environ)",
            "report['ppid'] = os.getppid()",
            "report['proc_pids'] = sorted(int(p) for p in os.listdir('/proc') if p.isdigit())",
            "envs = b''",
            "for p in report['proc_pids']:",
            "    try: envs += open(f'/proc/{p}/environ', 'rb').read()",
            "    except OSError: pass",
            f"report['secret_in_proc'] = {SECRET!r}.encode() in envs",
            "report['uid'] = os.getuid()",
            "report['cap_eff'] = open('/proc/self/status').read().split('CapEff:')[1].split()[0]",
        ]
    )
    report = _probe(host, code)
    for what in ("key", "store", "config"):
        assert report[what].startswith("FileNotFoundError"), (what, report[what])
    assert report["daemon_environ"] != "ok"
    assert SECRET not in json.dumps(report["environ"])
    assert "CREDENTIALS_DIRECTORY" not in report["environ"]
    assert not report["secret_in_proc"]  # no process it can see holds the key in its env
    assert os.getpid() not in report["proc_pids"] or report["ppid"] != os.getpid()
    assert max(report["proc_pids"]) < 10  # its own PID namespace: a handful of processes
    assert report["uid"] == 65534 and int(report["cap_eff"], 16) == 0


def test_a_worker_writes_only_its_own_directories(host: dict[str, Path], tmp_path: Path) -> None:
    outside = tmp_path / "outside.txt"
    work = host["work"]
    code = "\n".join(
        [
            _attempt("outside", f"open({str(outside)!r}, 'w').write('x')"),
            _attempt("state", f"open({str(host['state'] / 'forged')!r}, 'w').write('x')"),
            _attempt("workdir", f"open({str(work / 'forged')!r}, 'w').write('x')"),
            _attempt("delete_store", f"os.unlink({str(host['state'] / 'ktuned.sqlite')!r})"),
            _attempt("usr", "open(sys.prefix + '/forged', 'w').write('x')"),
            _attempt("modules", f"open({str(work / 'modules' / 'm.py')!r}, 'w').write('x')"),
            _attempt("tmp", "open('/tmp/private', 'w').write('x')"),
        ]
    )
    report = _probe(host, code)
    # Paths under the host's /tmp (pytest's tmp_path) land in the sandbox's private /tmp when
    # they land anywhere: what counts is that none of it reaches the host.
    assert report["delete_store"].startswith("FileNotFoundError")  # the store is not there
    assert report["usr"].startswith("OSError: [Errno 30]")  # read-only file system
    assert report["modules"] == "ok" and report["tmp"] == "ok"
    assert not outside.exists() and not (host["state"] / "forged").exists()
    assert not (work / "forged").exists() and (host["state"] / "ktuned.sqlite").exists()
    assert (work / "modules" / "m.py").read_text() == "x"
    assert not Path("/tmp/private").exists()  # its /tmp is its own


def test_a_worker_cannot_open_a_network_socket(host: dict[str, Path]) -> None:
    code = "\n".join(
        [
            "import socket",
            _attempt("inet", "socket.socket(socket.AF_INET, socket.SOCK_STREAM)"),
            _attempt("inet6", "socket.socket(socket.AF_INET6, socket.SOCK_DGRAM)"),
            _attempt("netlink", "socket.socket(socket.AF_NETLINK, socket.SOCK_RAW)"),
            _attempt("raw_syscall", "import ctypes; assert ctypes.CDLL(None).socket(2, 1, 0) >= 0"),
            _attempt("unix", "socket.socket(socket.AF_UNIX).close()"),
        ]
    )
    report = _probe(host, code)
    for what in ("inet", "inet6", "netlink"):
        assert report[what].startswith("PermissionError"), (what, report[what])
    assert report["raw_syscall"] != "ok"  # libc's socket() directly: the filter is in the kernel
    assert report["unix"] == "ok"


def test_without_the_filter_the_network_namespace_still_has_no_route(host: dict[str, Path]) -> None:
    with socket.socket() as server:
        server.bind(("127.0.0.1", 0))
        server.listen()
        port = server.getsockname()[1]
        code = "import socket\n" + _attempt(
            "connect", f"socket.create_connection(('127.0.0.1', {port}), timeout=5)"
        )
        report = _probe(host, code, SandboxSettings(seccomp=False))
    assert report["connect"] != "ok"
    assert "refused" in report["connect"].lower() or "unreachable" in report["connect"].lower()


def test_hidden_paths_inside_a_mounted_directory_are_covered(host: dict[str, Path]) -> None:
    # The interpreter's site-packages are mounted read-only; a directory inside them that is
    # listed as hidden (as the daemon lists its state directory) is an empty tmpfs instead.
    pip = pytest.importorskip("pip")
    inside = Path(pip.__file__).resolve().parent
    code = f"report['n'] = len(os.listdir({str(inside)!r}))"
    assert _probe(host, code)["n"] > 0
    assert _probe(host, code, SandboxSettings(hidden=(inside,)))["n"] == 0


def test_killing_the_sandbox_ends_every_process_it_started(host: dict[str, Path]) -> None:
    """A setsid and double-fork escape dies with the sandbox: it lives in the sandbox's PID
    namespace, which the kernel empties when the sandbox's first process dies."""
    escape = textwrap.dedent(
        """
        import os, time
        if os.fork() == 0:
            os.setsid()
            if os.fork() == 0:
                time.sleep(600)
            os._exit(0)
        time.sleep(600)
        """
    )
    work = host["work"]
    launch = sandboxed(
        [sys.executable, "-c", escape], settings=SandboxSettings(), env={}, writable=[], cwd=work
    )
    proc = subprocess.Popen(
        launch.argv, env=launch.env, pass_fds=launch.pass_fds, start_new_session=True
    )
    launch.close()
    try:
        deadline = time.monotonic() + 30
        while len(descendants({proc.pid})) < 4 and time.monotonic() < deadline:
            time.sleep(0.1)
        everyone = descendants({proc.pid})
        assert len(everyone) >= 4  # bwrap, its init, the script and the escaped grandchild
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
        deadline = time.monotonic() + 10
        while any(_alive(p) for p in everyone) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert not any(_alive(p) for p in everyone)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()[0]
    except OSError:
        return False
    return state != "Z"


def test_no_sandbox_starts_the_command_as_it_is() -> None:
    launch = sandboxed(
        ["python", "-c", "pass"],
        settings=SandboxSettings(mode="none"),
        env={"A": "1"},
        writable=[],
        cwd=Path("/"),
        pass_fds=(7,),
    )
    assert launch.argv == ["python", "-c", "pass"] and launch.env == {"A": "1"}
    assert launch.pass_fds == (7,)


def test_an_unusable_bwrap_is_a_clear_error(tmp_path: Path) -> None:
    fake = tmp_path / "bwrap"
    fake.write_text("#!/bin/sh\necho 'bwrap: No permissions to create new namespace' >&2\nexit 1\n")
    fake.chmod(0o755)
    with pytest.raises(SandboxError, match=r"No permissions.*evaluation\.sandbox: none"):
        check_sandbox(SandboxSettings(bwrap=str(fake)))
    with pytest.raises(SandboxError, match="unknown sandbox mode 'docker'"):
        SandboxSettings(mode="docker")


def test_the_socket_filter_is_a_valid_program_for_known_machines() -> None:
    for machine in ("x86_64", "aarch64"):
        program = socket_filter(machine)
        assert program is not None and len(program) % 8 == 0
        assert 8 <= len(program) // 8 <= 16
    assert socket_filter("riscv64") is None
