"""A new kernel's strategy arms start from the statistics of kernels that behave like it.

Replay entries of one real recorded space (a convolution on an A6000), each with its own
seed and so its own original (a random working configuration): six are tuned first, then a
seventh starts its hierarchical policy with a prior pooled from the kernels whose originals
behave like its own.
"""

from __future__ import annotations

import math
from pathlib import Path

from clustering.kernels import cluster_kernels
from tuned.evaluation.replay import ReplayClient
from tuned.outcomes import Provenance
from tuned.registry import load_entry
from tuned.registry.spec import KernelSpec
from tuned.search import Campaign, TuneSettings
from tuned.store import SqliteStore

ROOT = Path(__file__).resolve().parents[2]
CONV = ROOT / "tests" / "fixtures" / "convolution_A6000_small.json.gz"
NEW_SEED = 6


def _entry(root: Path, name: str, cache: Path, seed: int) -> KernelSpec:
    directory = root / name
    directory.mkdir(parents=True)
    (directory / "kernel.yaml").write_text(
        f"name: {name}\nkind: replay\ncache: {cache}\nnoise: none\nseed: {seed}\n"
    )
    return load_entry(directory)


def _campaign(store: SqliteStore, spec: KernelSpec, tmp: Path, budget: int) -> Campaign:
    client = ReplayClient(spec)
    fid = store.record_fingerprint(client.start())
    return Campaign(
        spec=spec,
        store=store,
        client=client,  # type: ignore[arg-type]
        fingerprint=fid,
        settings=TuneSettings(budget=budget),
    )


def test_a_new_kernel_borrows_its_cluster_peers_strategy_statistics(tmp_path: Path) -> None:
    store = SqliteStore(tmp_path / "s.sqlite")
    tuned = [_entry(tmp_path, f"conv_{seed}", CONV, seed) for seed in range(6)]
    for spec in tuned:
        store.sync_kernel(spec)
        _campaign(store, spec, tmp_path, budget=12).run()
    new = _entry(tmp_path, "conv_new", CONV, NEW_SEED)
    store.sync_kernel(new)
    campaign = _campaign(store, new, tmp_path, budget=3)
    campaign.step()  # the baseline
    prior = campaign._peer_prior()
    assert prior, "the new kernel should share a cluster with some tuned kernel"
    assert all(pulls == 3.0 and 0.0 <= reward <= pulls for pulls, reward in prior.values())

    # The pooled means are the peers' own: recompute them from the peers' stored arms.
    rows = {
        s.name: [
            {"log_latency": math.log(t.result.time_s)}
            for t in store.trials(s.name, s.generation, campaign.fingerprint)
            if t.provenance is Provenance.ORIGINAL
        ]
        for s in [*tuned, new]
    }
    clusters = cluster_kernels(rows)
    peers = [k for k, c in clusters.items() if c == clusters["conv_new"] and k != "conv_new"]
    assert peers, clusters
    arms = store.evaluation_totals().arms
    for strategy, (_, reward) in prior.items():
        n = sum(arms[(p, strategy)][0] for p in peers if (p, strategy) in arms)
        total = sum(arms[(p, strategy)][1] for p in peers if (p, strategy) in arms)
        assert math.isclose(reward, 3.0 * total / n), strategy

    campaign.run()  # the prior reaches the policy and is saved with its state
    state = store.policy_state(new.name, new.generation, campaign.fingerprint, "hierarchical")
    assert state is not None and state["prior"] == {s: [n, r] for s, (n, r) in prior.items()}
