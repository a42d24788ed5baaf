"""Where does a thread spend its time? A sampling profiler light enough to leave timings alone.

    with StackSampler(interval_s=0.005) as sampler:
        work()
    print(sampler.report(top=30))

A daemon thread reads the watched thread's stack (``sys._current_frames``) every
``interval_s`` and counts, per function (``file:line name`` of its definition), the samples
it was on the stack (inclusive) and at the top (exclusive). cProfile instruments every call
and slows policy code several-fold, which would change the very timings a benchmark reports;
sampling every 5 ms costs the watched thread a GIL hand-over per sample (well under 1 %).
"""

from __future__ import annotations

import sys
import threading
import time
from collections import Counter
from types import FrameType, TracebackType


def _name(frame: FrameType) -> str:
    code = frame.f_code
    path = code.co_filename
    for marker in ("/tuned/", "/policies/", "/clustering/", "/profilers/", "/bench/"):
        if marker in path:
            path = marker.strip("/") + "/" + path.split(marker, 1)[1]
            break
    else:
        path = path.rsplit("/", 1)[-1]
    return f"{path}:{code.co_firstlineno} {code.co_name}"


class StackSampler:
    """Samples ``thread`` (default: the one that enters the ``with``)."""

    def __init__(self, interval_s: float = 0.005, thread: threading.Thread | None = None):
        self.interval_s = interval_s
        self.thread = thread
        self.inclusive: Counter[str] = Counter()
        self.exclusive: Counter[str] = Counter()
        self.samples = 0
        self._stop = threading.Event()
        self._runner = threading.Thread(target=self._run, name="stack-sampler", daemon=True)

    def __enter__(self) -> StackSampler:
        self._ident = (self.thread or threading.current_thread()).ident
        self._runner.start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self._stop.set()
        self._runner.join()

    def _run(self) -> None:
        while not self._stop.wait(self.interval_s):
            frame = None if self._ident is None else sys._current_frames().get(self._ident)
            if frame is None:
                continue
            self.samples += 1
            self.exclusive[_name(frame)] += 1
            seen: set[str] = set()
            while frame is not None:
                name = _name(frame)
                if name not in seen:
                    seen.add(name)
                    self.inclusive[name] += 1
                frame = frame.f_back

    def report(self, top: int = 30) -> str:
        """The ``top`` functions by inclusive and by exclusive share of the samples."""
        n = max(1, self.samples)
        lines = [f"{self.samples} samples every {self.interval_s * 1e3:.0f} ms", "", "inclusive:"]
        lines += [f"{c / n:7.1%}  {k}" for k, c in self.inclusive.most_common(top)]
        lines += ["", "exclusive:"]
        lines += [f"{c / n:7.1%}  {k}" for k, c in self.exclusive.most_common(top)]
        return "\n".join(lines)


if __name__ == "__main__":  # a self-check: the sampler sees where the time goes

    def busy(seconds: float) -> None:
        end = time.perf_counter() + seconds
        while time.perf_counter() < end:
            pass

    with StackSampler() as s:
        busy(0.3)
        time.sleep(0.1)
    print(s.report(top=5))
