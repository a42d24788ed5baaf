"""On a GPU with Nsight Compute: the daemon's profiling path end to end (ncu, the target)."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from profilers.classify import Bottleneck, classify
from profilers.ncu import Profile, ProfileStatus
from tests.conftest import has_gpu
from tuned.daemon.config import default_registry
from tuned.outcomes import Candidate, Provenance
from tuned.profiling import HardwareFeedback
from tuned.registry import load_entry
from tuned.settings import ProfilingConfig
from tuned.store import SqliteStore

pytestmark = pytest.mark.gpu


def test_the_vector_add_baseline_is_profiled_through_the_target(tmp_path: Path) -> None:
    if not has_gpu() or shutil.which("ncu") is None:
        pytest.skip("needs an NVIDIA GPU and ncu on PATH")
    import torch

    spec = load_entry(default_registry() / "vector_add")
    store = SqliteStore(tmp_path / "s.sqlite")
    store.sync_kernel(spec)
    candidate = Candidate(
        kernel=spec.name,
        generation=spec.generation,
        source=spec.module_source,
        knobs=dict(spec.baseline_knobs),
        provenance=Provenance.ORIGINAL,
    )
    store.add_candidate(candidate)
    hw = HardwareFeedback(
        store=store, config=ProfilingConfig(), workdir=tmp_path / "hw", interpreter=False
    )
    hw.set_fingerprint({"gpu_model": torch.cuda.get_device_name()})
    status = hw.profile(spec, candidate.id)
    assert status is ProfileStatus.OK, store._query("SELECT reason FROM profiling_runs")[0][0]
    stored = store.profiles(spec.name, spec.generation, hw.gpu_model)[candidate.id]
    profile = Profile.from_dict(stored)
    assert profile.kernels == ("_add_kernel",)
    assert profile.launches == 3  # the target's calls inside the profiler range
    assert profile.sol_dram is not None and profile.sol_dram > 0.5
    assert classify(profile) is Bottleneck.MEMORY
