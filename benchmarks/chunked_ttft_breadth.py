"""Chunked TTFT/TPOT vs the replay over the budget sweep and the suite's chunked configs (minutes).

    .venv/bin/python benchmarks/chunked_ttft_breadth.py [--cache F] [--out F] [--requests N]
    .venv/bin/python benchmarks/chunked_ttft_breadth.py --budget 8192 --load 0.95 --seeds 8 [--poisson]

Budgets 256..8192 on examples/llama3-8b-chunked-h100.yaml (Gamma CV 2) and the suite's chunked
configs (Poisson and Gamma CV 2, synthetic lengths), each at 0.5 / 0.8 / 0.95 of the analytic
limit. Replays (seed 0) are cached in ``--cache``: they do not depend on the analytic engine.
Prints the relative error per case and the median |error| per metric (docs/validation.md).
``--seeds K``: the replay's seed spread of TTFT p50/p90/p99 for one budget and load of the example
(seeds 0..K-1, pooled percentiles against the analytic ones).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from qmodel.solver import Solver  # noqa: E402
from qmodel.scenario import load_scenario, parse_scenario  # noqa: E402
from qmodel.validation.harness import latency_metrics  # noqa: E402
from qmodel.validation.suites import CONFIGS  # noqa: E402

from _breadth import default_cache, error_table  # noqa: E402  (beside this script)

BUDGETS = (256, 512, 1024, 2048, 4096, 8192)
LOADS = (0.5, 0.8, 0.95)
METRICS = [f"{m}_{k}" for m in ("ttft", "tpot") for k in ("p50", "p90", "p99")]


def scenarios() -> list[tuple[str, object]]:
    base = load_scenario(REPO / "examples" / "llama3-8b-chunked-h100.yaml")
    out = []
    for b in BUDGETS:
        d = base.model_dump(mode="json")
        d["deployment"]["chunk_tokens"] = b
        out.append((f"llama3-8b-chunked/B{b}", parse_scenario(d, source=f"B{b}")))
    for c in CONFIGS.values():
        if c.topology == "chunked":
            out += [(f"{c.name}/{a}", c.scenario(a, 1.0, empirical=False)) for a in ("poisson", "gamma-cv2")]
    return out


def seed_spread(budget: int, load: float, seeds: int, n: int, poisson: bool) -> None:
    from qmodel.validation.replay import replay_requests, request_table

    d = load_scenario(REPO / "examples" / "llama3-8b-chunked-h100.yaml").model_dump(mode="json")
    d["deployment"]["chunk_tokens"] = budget
    if poisson:
        d["workload"]["arrivals"] = {"kind": "poisson", "rate_per_s": 1.0}
    sc = parse_scenario(d, source=f"B{budget}")
    solver = Solver(sc)
    rate = load * solver.max_stable_rate()[0]
    an = latency_metrics(solver.solve(rate))
    pooled = []
    for s in range(seeds):
        t = request_table(replay_requests(sc.with_rate(rate), n_requests=n, seed=s)[1])["ttft_s"][n // 10:]
        t = t[np.isfinite(t)]
        pooled.append(t)
        print(f"seed {s}: TTFT p50/p90/p99 " + " / ".join(f"{v:.3f}" for v in np.percentile(t, [50, 90, 99])) + " s")
    rep = np.percentile(np.concatenate(pooled), [50, 90, 99])
    ana = [an["ttft_p50"], an["ttft_p90"], an["ttft_p99"]]
    print("pooled " + " / ".join(f"{v:.3f}" for v in rep) + " s; analytic " + " / ".join(f"{v:.3f}" for v in ana)
          + " s; error " + " / ".join(f"{(a - r) / r * 100:+.1f}%" for a, r in zip(ana, rep)))


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--budget", type=int, default=8192)
    ap.add_argument("--load", type=float, default=0.95)
    ap.add_argument("--seeds", type=int, default=0)
    ap.add_argument("--poisson", action="store_true")
    ap.add_argument("--cache", default=default_cache("chunked_ttft_breadth"))
    ap.add_argument("--out", default=None)
    ap.add_argument("--requests", type=int, default=20000)
    a = ap.parse_args()
    if a.seeds:
        seed_spread(a.budget, a.load, a.seeds, a.requests, a.poisson)
        return
    error_table(scenarios(), LOADS, METRICS, a.requests, a.cache, a.out, 44, key_limit=True)


if __name__ == "__main__":
    main()
