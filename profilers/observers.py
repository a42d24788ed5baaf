"""Measurement add-ons around a benchmark, in Kernel Tuner's observer style.

An :class:`Observer` is told when a benchmark starts and finishes and then hands back what
it saw as a flat ``{name: value}`` dict, so the code that times kernels needs no knowledge
of NVML or Triton's profiler::

    observers = available_observers(gpu_index=0)
    with observing(observers) as results:
        time_the_kernel()
    results  # {"nvml_power_w_mean": 412.0, "nvml_sm_clock_hz_mean": 1.98e9, ...}

* :class:`NvmlObserver`: power, SM clock and temperature sampled by a background thread
  while the benchmark runs (``pynvml`` from the package ``nvidia-ml-py``, imported lazily;
  without it the observer is simply not offered by :func:`available_observers`).
* :class:`ProtonObserver`: a Triton ``proton`` session around the benchmark, written to a
  ``.hatchet`` file for Triton's own viewer; offered only where ``triton.profiler`` imports
  and a GPU backend exists. It adds the file's path, not numbers.

Observers never raise out of :func:`observing` for their own trouble (a driver call that
fails mid-run): they report ``{name}_error`` instead, so a measurement is never lost to an
add-on. Not thread-safe; one benchmark at a time.
"""

from __future__ import annotations

import contextlib
import importlib.util
import statistics
import threading
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any, ClassVar, Protocol

__all__ = [
    "NvmlObserver",
    "Observer",
    "ProtonObserver",
    "available_observers",
    "observing",
]

ObservedValue = float | str


class Observer(Protocol):
    """Lifecycle hooks around one benchmark; ``results`` after ``after_finish``."""

    name: ClassVar[str]

    def before_start(self) -> None: ...

    def after_finish(self) -> None: ...

    def results(self) -> dict[str, ObservedValue]: ...


@contextlib.contextmanager
def observing(observers: Sequence[Observer]) -> Iterator[dict[str, ObservedValue]]:
    """Run the body between every observer's start and finish; fill the yielded dict after."""
    results: dict[str, ObservedValue] = {}
    started: list[Observer] = []
    for observer in observers:
        try:
            observer.before_start()
            started.append(observer)
        except _observer_errors() as exc:
            results[f"{observer.name}_error"] = f"{type(exc).__name__}: {exc}"
    try:
        yield results
    finally:
        for observer in reversed(started):
            try:
                observer.after_finish()
                results.update(observer.results())
            except _observer_errors() as exc:
                results[f"{observer.name}_error"] = f"{type(exc).__name__}: {exc}"


class NvmlObserver:
    """Samples power (W), SM clock (Hz) and temperature (deg C) every ``interval_s``."""

    name: ClassVar[str] = "nvml"

    def __init__(self, *, gpu_index: int = 0, interval_s: float = 0.01) -> None:
        import pynvml

        self._nvml: Any = pynvml
        pynvml.nvmlInit()
        self._handle = pynvml.nvmlDeviceGetHandleByIndex(gpu_index)
        self.interval_s = interval_s
        self._samples: list[tuple[float, float, float]] = []
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def _sample(self) -> tuple[float, float, float]:
        nvml = self._nvml
        power_w = nvml.nvmlDeviceGetPowerUsage(self._handle) / 1000.0
        clock_hz = nvml.nvmlDeviceGetClockInfo(self._handle, nvml.NVML_CLOCK_SM) * 1e6
        temp_c = float(nvml.nvmlDeviceGetTemperature(self._handle, nvml.NVML_TEMPERATURE_GPU))
        return power_w, clock_hz, temp_c

    def _run(self) -> None:
        while not self._stop.is_set():
            self._samples.append(self._sample())
            self._stop.wait(self.interval_s)

    def before_start(self) -> None:
        self._samples = [self._sample()]  # fails here, loudly, if NVML cannot read the GPU
        self._stop.clear()
        self._thread = threading.Thread(target=self._run, name="nvml-observer", daemon=True)
        self._thread.start()

    def after_finish(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
        self._samples.append(self._sample())

    def results(self) -> dict[str, ObservedValue]:
        if not self._samples:
            return {}
        power, clock, temp = zip(*self._samples)
        return {
            "nvml_power_w_mean": statistics.fmean(power),
            "nvml_power_w_max": max(power),
            "nvml_sm_clock_hz_mean": statistics.fmean(clock),
            "nvml_sm_clock_hz_min": min(clock),
            "nvml_temperature_c_max": max(temp),
            "nvml_samples": float(len(self._samples)),
        }


class ProtonObserver:
    """A Triton proton session around the benchmark, saved as ``{path}.hatchet``."""

    name: ClassVar[str] = "proton"

    def __init__(self, *, path: Path) -> None:
        import triton.profiler as proton

        self._proton: Any = proton
        self.path = path
        self._session: int | None = None

    def before_start(self) -> None:
        self._session = self._proton.start(str(self.path), hook="triton")

    def after_finish(self) -> None:
        self._proton.finalize(self._session)

    def results(self) -> dict[str, ObservedValue]:
        return {"proton_profile": str(self.path) + ".hatchet"}


def available_observers(*, gpu_index: int = 0, proton_path: Path | None = None) -> list[Observer]:
    """The observers this machine supports: NVML when ``pynvml`` loads and sees the GPU;
    proton when ``proton_path`` is given and ``triton.profiler`` exists."""
    out: list[Observer] = []
    if importlib.util.find_spec("pynvml") is not None:
        try:
            out.append(NvmlObserver(gpu_index=gpu_index))
        except _observer_errors():
            pass  # no driver or no such GPU: nothing to observe
    if proton_path is not None and _has_proton():
        out.append(ProtonObserver(path=proton_path))
    return out


def _has_proton() -> bool:
    try:
        return importlib.util.find_spec("triton.profiler") is not None
    except ModuleNotFoundError:
        return False


def _observer_errors() -> tuple[type[BaseException], ...]:
    """What an observer's own trouble looks like: NVML errors (when pynvml is installed;
    imported only here, lazily), missing symbols, OS and runtime errors."""
    errors: tuple[type[BaseException], ...] = (OSError, RuntimeError, AttributeError)
    if importlib.util.find_spec("pynvml") is not None:
        import pynvml

        errors = (*errors, pynvml.NVMLError)
    return errors
