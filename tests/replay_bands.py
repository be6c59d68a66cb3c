"""Shared check of the replay-agreement tests: the analytic TTFT percentiles at ``u`` of the
stability limit against the mean of the replay's seeds, each relative error inside its band."""

from __future__ import annotations

from typing import Any

import numpy as np

__all__ = ["assert_ttft_within_bands"]


def assert_ttft_within_bands(sc: Any, u: float, bands: dict[str, tuple[float, float]],
                             seeds: tuple[int, ...] = (1, 2), n_requests: int = 20000) -> None:
    """Solve ``sc`` at ``u`` x its limit, replay it once per seed (``n_requests`` each) and assert
    (analytic / mean replay - 1) lies in ``bands[key]`` for TTFT p50/p90/p99."""
    from qmodel.solver import Solver
    from qmodel.validation.harness import latency_metrics
    from qmodel.validation.replay import replay

    solver = Solver(sc)
    rate = u * solver.max_stable_rate()[0]
    r = solver.solve(rate)
    rep = [latency_metrics(replay(sc.with_rate(rate), n_requests=n_requests, seed=seed)) for seed in seeds]
    for key, model in (("ttft_p50", r.ttft.p50), ("ttft_p90", r.ttft.p90), ("ttft_p99", r.ttft.p99)):
        err = model / float(np.mean([m[key] for m in rep])) - 1.0
        lo, hi = bands[key]
        assert lo <= err <= hi, (key, err)
