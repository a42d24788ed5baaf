"""One tuning process of a simulated fleet, for tests/store/test_fleet.py.

    python -m tests.store.fleet_worker STORE_URL ENTRY_DIR LOG --budget N [--lease S]
        [--die-after-claims K] [--barrier DIR --parties N]

Tunes the (replay) entry in ENTRY_DIR into the shared store with claims on, and appends the
id of every candidate it evaluates to LOG, one a line. With ``--die-after-claims K`` it
exits abruptly (``os._exit``, like SIGKILL: no cleanup) right after its K-th successful claim,
before evaluating that candidate, writing the candidate's id to ``LOG.orphan`` first. With
``--barrier DIR --parties N`` it starts tuning only once N processes are ready (each leaves a
file in DIR): replay evaluations take microseconds, and under CI's load one process could
finish the whole budget while the other was still importing PyTorch.
"""

from __future__ import annotations

import argparse
import os
import time
from pathlib import Path
from typing import Any

from tuned.evaluation.replay import ReplayClient
from tuned.registry import load_entry
from tuned.search import Campaign, TuneSettings
from tuned.store import ClaimSettings, open_store


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("store")
    parser.add_argument("entry", type=Path)
    parser.add_argument("log", type=Path)
    parser.add_argument("--budget", type=int, required=True)
    parser.add_argument("--lease", type=float, default=60.0)
    parser.add_argument("--die-after-claims", type=int, default=0)
    parser.add_argument("--barrier", type=Path)
    parser.add_argument("--parties", type=int, default=1)
    args = parser.parse_args()

    store = open_store(args.store)
    spec = load_entry(args.entry)
    store.sync_kernel(spec)
    client = ReplayClient(spec)
    fid = store.record_fingerprint(client.start())
    claims = ClaimSettings(lease_s=args.lease, poll_s=0.05, max_wait_s=args.lease * 3)
    if args.die_after_claims:
        claim = store.claim
        count = [0]

        def dying_claim(candidate: Any, *a: Any, **kw: Any) -> bool:
            won = claim(candidate, *a, **kw)
            if won:
                count[0] += 1
                if count[0] == args.die_after_claims:
                    Path(f"{args.log}.orphan").write_text(candidate.id)
                    os._exit(9)
            return won

        store.claim = dying_claim  # type: ignore[method-assign]

    def logged(_spec: Any, candidate: Any, _result: Any, _summary: Any) -> None:
        with args.log.open("a") as f:
            f.write(candidate.id + "\n")

    campaign = Campaign(
        spec=spec,
        store=store,
        client=client,
        fingerprint=fid,
        settings=TuneSettings(budget=args.budget),
        on_result=logged,
        claims=claims,
    )
    if args.barrier is not None:
        (args.barrier / str(os.getpid())).touch()
        deadline = time.monotonic() + 120
        while len(list(args.barrier.iterdir())) < args.parties and time.monotonic() < deadline:
            time.sleep(0.02)
    campaign.run()
    store.close()


if __name__ == "__main__":
    main()
