"""validation/stations/core.RunningBatch: the running decode batch kept as a step counter, a context
sum and a finish heap, checked exactly against a list of explicit per-sequence contexts."""

from __future__ import annotations

import numpy as np

from qmodel.validation.stations.core import RunningBatch


def test_running_batch_matches_explicit_contexts():
    rng = np.random.default_rng(11)
    b = RunningBatch()
    live: dict[int, list[int]] = {}  # request -> [context, steps left]
    retired: list[int] = []
    seq_steps = 0
    r = 0
    for _ in range(300):
        for _ in range(int(rng.integers(0, 3))):
            ctx, left = int(rng.integers(1, 500)), int(rng.integers(1, 40))
            b.join(r, ctx, left)
            live[r] = [ctx, left]
            r += 1
        k = int(rng.integers(0, 5))
        n = len(live)
        assert b.advance(k) == n * k
        seq_steps += n * k
        for v in live.values():
            v[0] += k
            v[1] -= k
        done = sorted((v[1], q) for q, v in live.items() if v[1] <= 0)
        out = b.retire()
        assert sorted(out) == sorted(q for _, q in done)
        for q in out:
            del live[q]
        retired += out
        assert b.S == sum(v[0] for v in live.values())
        assert len(b.running) == len(live)
    assert seq_steps > 0 and len(retired) > 100
