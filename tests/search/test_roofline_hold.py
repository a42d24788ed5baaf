"""Times the hardware cannot deliver are held, not accepted, and counted in the metrics.

The evaluator here is scripted (it returns GPU timings without a GPU): what is under test is
the campaign's acceptance path, the store's record of the decision and the exported gauge.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from prometheus_client import CollectorRegistry, generate_latest

from tests.conftest import ADD_YAML, WriteEntry
from tuned.metrics.collector import StoreCollector
from tuned.outcomes import Candidate, EvalResult, Outcome, Provenance
from tuned.registry import load_entry
from tuned.registry.spec import KernelSpec
from tuned.search import Campaign, TuneSettings
from tuned.store import SqliteStore

PEAK_BYTES = 1e12  # 1 TB/s, the scripted GPU's measured copy bandwidth
LABEL = "N=3000/float32"
BYTES = 3 * 3000 * 4  # the roofline below: two reads and one write of N float32


class ScriptedGpu:
    """Answers every evaluation with fixed per-candidate GPU times (seconds)."""

    def __init__(self, times: dict[int, float]) -> None:
        self.times = times  # by BLOCK knob
        self.starts = 0

    def _samples(self, seconds: float) -> list[float]:
        return [seconds * (1 + 0.001 * (i % 3)) for i in range(30)]

    def evaluate(
        self,
        spec: KernelSpec,
        candidate: Candidate,
        incumbent: Candidate | None = None,
        *,
        derived_skip: Sequence[str] = (),
        lenient_derived: bool = False,
    ) -> EvalResult:
        mine = self.times[int(candidate.knobs["BLOCK"])]
        metadata: dict[str, object] = {"samples": {LABEL: self._samples(mine)}}
        if incumbent is not None:
            theirs = self.times[int(incumbent.knobs["BLOCK"])]
            metadata["incumbent_samples"] = {LABEL: self._samples(theirs)}
        return EvalResult(
            Outcome.OK, time_s=mine, timings={LABEL: mine}, timing_kind="gpu", metadata=metadata
        )

    def close(self) -> None:
        pass

    def fresh(self) -> None:
        self.starts += 1


def test_a_time_below_the_roofline_floor_is_held_and_exported(
    tmp_path: Path, write_entry: WriteEntry
) -> None:
    yaml = ADD_YAML.format(name="add").replace("[float16, float32]", "[float32]")
    yaml += 'roofline: {bytes: "3*N*elem"}\n'
    spec = load_entry(write_entry(yaml=yaml))
    store = SqliteStore(tmp_path / "s.sqlite")
    store.sync_kernel(spec)
    fid = store.record_fingerprint({"gpu_model": "Scripted GPU", "mode": "gpu"})
    store.record_peaks(
        "Scripted GPU",
        {"gpu_model": "Scripted GPU", "bytes_per_s": PEAK_BYTES, "flops_per_s": 1e15},
    )
    floor = BYTES / PEAK_BYTES  # 36 ns: nothing moving these bytes can be faster
    client = ScriptedGpu({256: 4 * floor, 512: 2 * floor, 1024: 0.5 * floor})
    campaign = Campaign(
        spec=spec,
        store=store,
        client=client,  # type: ignore[arg-type]
        fingerprint=fid,
        settings=TuneSettings(budget=None),
    )
    campaign.step()  # the baseline (BLOCK=256)

    def candidate(block: int) -> Candidate:
        return Candidate(
            kernel=spec.name,
            generation=spec.generation,
            source=spec.module_source,
            knobs={"BLOCK": block, "num_warps": 4},
            provenance=Provenance.PARAMETRIC,
        )

    campaign.evaluate(candidate(512))  # 2x, physically possible: accepted
    campaign.evaluate(candidate(1024))  # 4x faster than the new best: 2x what the roofline allows
    decisions = store.acceptances(spec.name)
    assert [d["status"] for d in decisions] == ["accepted", "held"]
    assert "roofline" in decisions[1]["first"]["held_reason"]
    assert "2.00x" in decisions[1]["first"]["held_reason"]
    best = store.best(spec.name)
    assert best is not None and best.knobs["BLOCK"] == 512  # the held one is not the best

    registry = CollectorRegistry()
    registry.register(StoreCollector(tmp_path / "s.sqlite"))
    text = generate_latest(registry).decode()
    assert 'ktuned_held_candidates{kernel="add"} 1.0' in text
