"""Soak test of the daemon: `ktuned run` for N minutes while the registry is edited under it.

    python bench/soak.py [--minutes 30] [--out DIR] [--interval 15]
    python bench/soak.py --smoke     # six seconds: the code runs, the figures mean nothing

Builds a registry of several real Triton kernels (copies of examples/registry entries plus
small vector-add variants), starts `ktuned run` on it (interpreter mode on a CPU machine),
and every `--edit-every` seconds changes the registry the way people do: edit a module in
place (new generation), add an entry, break one (bad dtype), fix it, replace a kernel.yaml
atomically (write + rename), remove an entry. Every `--interval` seconds it samples the
daemon's resident memory and open file descriptors (/proc), its threads, the worker's
memory, and scrapes /metrics (latency, evaluations so far). At the end it stops the daemon
with SIGTERM and prints the figures: resident memory and descriptors early vs late (medians
over the first and last fifth of the run, after a warm-up), the slope, scrape latency and the
stop time. Exit status 1 if memory grew by more than 10 % + 10 MiB or descriptors by more than 3.
"""

from __future__ import annotations

import argparse
import os
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

if __package__ in (None, ""):  # python bench/x.py: the checkout on the path
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.harness import ROOT, bench_parser, state_dir
from tests.conftest import ADD_SOURCE, ADD_YAML

EXAMPLES = ("vector_add", "softmax", "rms_norm", "layer_norm")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def proc_status(pid: int) -> dict[str, int]:
    out: dict[str, int] = {}
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            key, _, value = line.partition(":")
            if key in ("VmRSS", "Threads"):
                out[key] = int(value.split()[0])
        out["fds"] = len(os.listdir(f"/proc/{pid}/fd"))
    except OSError:
        pass
    return out


def children(pid: int) -> list[int]:
    try:
        text = Path(f"/proc/{pid}/task/{pid}/children").read_text()
    except OSError:
        return []
    return [int(p) for p in text.split()]


def write_add(root: Path, name: str) -> None:
    d = root / name
    d.mkdir(parents=True, exist_ok=True)
    (d / "add.py").write_text(ADD_SOURCE)
    (d / "kernel.yaml").write_text(ADD_YAML.format(name=name))


class Editor:
    """Cycles through the registry edits people make."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.n = 0
        self.log: list[str] = []

    def edit(self) -> str:
        step = self.n % 6
        self.n += 1
        r = self.root
        if step == 0:
            mod = r / "vector_add" / "vector_add.py"
            mod.write_text(mod.read_text() + f"\n# soak edit {self.n}\n")
            what = "vector_add: module edited in place (new generation)"
        elif step == 1:
            write_add(r, f"add_new{self.n}")
            what = f"add_new{self.n}: entry added"
        elif step == 2:
            y = r / "add_b" / "kernel.yaml"
            y.write_text(y.read_text().replace("float32", "float33"))
            what = "add_b: broken (dtype float33)"
        elif step == 3:
            y = r / "add_b" / "kernel.yaml"
            y.write_text(y.read_text().replace("float33", "float32"))
            what = "add_b: fixed"
        elif step == 4:
            y = r / "add_a" / "kernel.yaml"
            tmp = y.with_name(".kernel.yaml.tmp")
            tmp.write_text(y.read_text().replace("BLOCK: [64,", "BLOCK: [32, 64,"))
            os.replace(tmp, y)
            what = "add_a: kernel.yaml replaced atomically (knob space changed)"
        else:
            victims = sorted(p for p in r.iterdir() if p.name.startswith("add_new"))
            if victims:
                shutil.rmtree(victims[0])
                what = f"{victims[0].name}: entry removed"
            else:
                what = "nothing to remove"
        self.log.append(what)
        return what


def main(argv: list[str] | None = None) -> int:
    parser = bench_parser(__doc__)
    parser.add_argument("--minutes", type=float, default=30.0)
    parser.add_argument("--interval", type=float, default=15.0, help="seconds between samples")
    parser.add_argument("--edit-every", type=float, default=150.0, help="seconds between edits")
    parser.add_argument("--out", type=Path, default=None, help="keep the state and CSV here")
    args = parser.parse_args(argv)
    if args.smoke:  # six seconds of the daemon: start, samples, an edit, SIGTERM
        args.minutes, args.interval, args.edit_every = 0.1, 1.0, 2.0
    with state_dir(args.out, prefix="ktuned-soak-") as work:
        code = _soak(args, work)
    if args.out:
        print(f"samples in {args.out / 'samples.csv'}, the log in {args.out / 'daemon.log'}")
    return code


def _soak(args: argparse.Namespace, work: Path) -> int:
    registry, state = work / "registry", work / "state"
    shutil.rmtree(registry, ignore_errors=True)
    shutil.rmtree(state, ignore_errors=True)
    registry.mkdir(parents=True)
    for name in EXAMPLES:
        shutil.copytree(ROOT / "examples" / "registry" / name, registry / name)
    write_add(registry, "add_a")
    write_add(registry, "add_b")
    port = free_port()
    config = work / "ktuned.yaml"
    config.write_text(
        f"state_dir: {state}\ndevice: interpreter\n"
        f"registry: {{path: {registry}, poll_interval_s: 2}}\n"
        f'metrics: {{listen: "127.0.0.1:{port}"}}\n'
        "evaluation: {interpreter_max_size: 1048576}\n"
    )
    env = {**os.environ, "PYTHONPATH": str(ROOT), "TRITON_INTERPRET": "1"}
    log_path = work / "daemon.log"
    log = log_path.open("wb")
    daemon = subprocess.Popen(
        [sys.executable, "-m", "tuned.cli", "run", "--config", str(config)],
        env=env,
        cwd=ROOT,
        stdout=log,
        stderr=log,
    )
    url = f"http://127.0.0.1:{port}/metrics"
    if args.smoke:  # seconds of soak: start them once the daemon answers (60 s at most)
        _wait_for(url, daemon, timeout_s=60.0)
    started = time.monotonic()
    end = started + args.minutes * 60
    next_edit = started + args.edit_every
    samples: list[dict[str, float]] = []
    editor = Editor(registry)
    print(f"soak: {args.minutes:g} min, daemon pid {daemon.pid}, work dir {work}", flush=True)
    try:
        while time.monotonic() < end:
            if daemon.poll() is not None:
                print(f"soak: the daemon exited early ({daemon.returncode}); its log ends:")
                print(log_path.read_text(errors="replace")[-3000:])
                return 1
            now = time.monotonic()
            if now >= next_edit:
                print(f"soak: {now - started:6.0f}s edit: {editor.edit()}", flush=True)
                next_edit += args.edit_every
            sample: dict[str, float] = {"t": now - started}
            st = proc_status(daemon.pid)
            sample["rss_kib"] = st.get("VmRSS", 0)
            sample["fds"] = st.get("fds", 0)
            sample["threads"] = st.get("Threads", 0)
            kids = children(daemon.pid)
            sample["worker_rss_kib"] = sum(proc_status(k).get("VmRSS", 0) for k in kids)
            t0 = time.perf_counter()
            try:
                with urllib.request.urlopen(url, timeout=10) as response:
                    body = response.read().decode()
                sample["scrape_ms"] = (time.perf_counter() - t0) * 1000
                sample["evaluations"] = sum(
                    float(line.rsplit(" ", 1)[1])
                    for line in body.splitlines()
                    if line.startswith("ktuned_candidates_evaluated_total{")
                )
            except OSError:
                sample["scrape_ms"] = float("nan")
                sample["evaluations"] = float("nan")
            samples.append(sample)
            time.sleep(max(0.0, args.interval - (time.monotonic() - now)))
    finally:
        t0 = time.monotonic()
        daemon.send_signal(signal.SIGTERM)
        try:
            code = daemon.wait(timeout=90)
        except subprocess.TimeoutExpired:
            daemon.kill()
            code = daemon.wait()
        stop_s = time.monotonic() - t0
        log.close()

    with (work / "samples.csv").open("w") as fh:
        keys = list(samples[0])
        fh.write(",".join(keys) + "\n")
        for s in samples:
            fh.write(",".join(f"{s[k]:.3f}" for k in keys) + "\n")
    return report(samples, editor, stop_s, code, work, args.minutes, judge=not args.smoke)


def _wait_for(url: str, daemon: subprocess.Popen[bytes], *, timeout_s: float) -> None:
    """Until ``url`` answers, the daemon exits or ``timeout_s`` pass."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline and daemon.poll() is None:
        try:
            with urllib.request.urlopen(url, timeout=5):
                return
        except OSError:
            time.sleep(0.2)


def report(
    samples: list[dict[str, float]],
    editor: Editor,
    stop_s: float,
    code: int,
    work: Path,
    minutes: float,
    *,
    judge: bool = True,
) -> int:
    warm = [s for s in samples if s["t"] >= min(180.0, samples[-1]["t"] / 5)]
    fifth = max(1, len(warm) // 5)
    early, late = warm[:fifth], warm[-fifth:]

    def med(rows: list[dict[str, float]], key: str) -> float:
        return statistics.median(r[key] for r in rows)

    rss0, rss1 = med(early, "rss_kib") / 1024, med(late, "rss_kib") / 1024
    fd0, fd1 = med(early, "fds"), med(late, "fds")
    ts = [s["t"] / 3600 for s in warm]
    slope = statistics.linear_regression(ts, [s["rss_kib"] / 1024 for s in warm]).slope
    scrapes = sorted(s["scrape_ms"] for s in samples if s["scrape_ms"] == s["scrape_ms"])
    evaluations = samples[-1]["evaluations"]
    print()
    print("| figure | value |\n|---|---|")
    duration = samples[-1]["t"] / 60
    print(f"| duration | {duration:.1f} min ({minutes:g} asked), {len(samples)} samples |")
    print(f"| evaluations recorded | {evaluations:.0f} |")
    print(f"| registry edits | {len(editor.log)} ({'; '.join(sorted(set(editor.log)))}) |")
    print(f"| daemon RSS early -> late (median) | {rss0:.1f} MiB -> {rss1:.1f} MiB |")
    lo, hi = (f(s["rss_kib"] for s in warm) / 1024 for f in (min, max))
    print(f"| daemon RSS min / max after warm-up | {lo:.1f} / {hi:.1f} MiB |")
    print(f"| daemon RSS slope (least squares) | {slope:+.2f} MiB/h |")
    fd_max = max(s["fds"] for s in warm)
    print(f"| open fds early -> late (median) | {fd0:.0f} -> {fd1:.0f} (max {fd_max:.0f}) |")
    print(f"| threads early -> late | {med(early, 'threads'):.0f} -> {med(late, 'threads'):.0f} |")
    w0, w1 = (med(rows, "worker_rss_kib") / 1024 for rows in (early, late))
    print(f"| worker RSS early -> late (median) | {w0:.0f} MiB -> {w1:.0f} MiB |")
    if scrapes:
        s_med, s_max = statistics.median(scrapes), max(scrapes)
        print(f"| /metrics scrape median / max | {s_med:.1f} / {s_max:.1f} ms |")
    else:
        print("| /metrics scrape median / max | no scrape answered |")
    print(f"| SIGTERM to exit | {stop_s:.2f} s (exit status {code}) |")
    grew = rss1 > rss0 * 1.10 + 10 or fd1 > fd0 + 3
    if not judge:  # a smoke run: seconds, warm-up only; growth means nothing
        print("\nsoak: smoke run (no verdict)")
        return 1 if code != 0 else 0
    print(f"\nsoak: {'FAIL: growth' if grew else 'flat'}")
    return 1 if grew or code != 0 else 0


if __name__ == "__main__":
    sys.exit(main())
