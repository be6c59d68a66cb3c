"""Prefill station vs a token-budget FCFS batcher (the DES of tests/test_stations_prefill.py).

    .venv/bin/python benchmarks/prefill_accuracy.py poisson 300000
    .venv/bin/python benchmarks/prefill_accuracy.py rr 400000        # round robin over 4 engines
    .venv/bin/python benchmarks/prefill_accuracy.py gamma 400000     # Gamma CV 2 arrivals
    .venv/bin/python benchmarks/prefill_accuracy.py examples/llama2-70b-disagg-splitwise.toml 200000

Prints, at 50/80/90% of the station's capacity, the DES mean wait (batch-means SE) and TTFT
(prefill part) p50/p90/p99 next to the analytic ones and the solve's CPU time. A scenario file
uses its own prefill station (service model and uncached prompt sample) on one engine, Poisson.
"""

from __future__ import annotations

import dataclasses
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))

from test_stations_prefill import LinearPrefill, _batch_means, _prompts, des_engine  # noqa: E402

from qmodel.stations.prefill import PrefillStation  # noqa: E402


def station(kind: str) -> PrefillStation:
    if kind.endswith(".toml"):
        from qmodel.solver import Solver
        from qmodel.scenario import load_scenario

        return dataclasses.replace(Solver(load_scenario(kind))._prefill, instances=1, dispatch="random", ca2=1.0)
    c = 4 if kind == "rr" else 1
    return PrefillStation(c, LinearPrefill(), _prompts(), max_batch_tokens=8192,
                          dispatch="round_robin" if kind == "rr" else "random", ca2=4.0 if kind == "gamma" else 1.0)


def main(kind: str, n: int) -> None:
    st = station(kind)
    prompts, svc, budget = np.asarray(st.prompt_tokens, float), st.service, st.max_batch_tokens
    print(f"{kind}: capacity {st.max_stable_rate_per_s():.4g}/s, E[N], E[S_N] = {st.law.mean_drain}")
    for load in (0.5, 0.8, 0.9):
        lam = load * st.max_stable_rate_per_s()
        rng = np.random.default_rng(21)
        gaps = rng.gamma(0.25, 4 / lam, n) if kind == "gamma" else rng.exponential(1 / lam, n)
        arr = np.cumsum(gaps)
        if kind == "rr":  # every 4th arrival to each engine
            parts = [des_engine(arr[i::4], prompts, svc, budget=budget, seed=2 + i) for i in range(4)]
            w = np.concatenate([p[0][p[0].size // 20 :] for p in parts])
            d = np.concatenate([p[1][p[1].size // 20 :] for p in parts])
        else:
            w, d = des_engine(arr, prompts, svc, budget=budget)
            w, d = w[n // 20 :], d[n // 20 :]
        mw, se = _batch_means(w, np.mean, nb=10)
        st.solve(lam)
        t0 = time.process_time()
        s = st.solve(lam)
        cpu = time.process_time() - t0
        q_des = "/".join(f"{np.quantile(d, q):.3f}" for q in (0.5, 0.9, 0.99))
        q_an = "/".join(f"{s.delay.quantile(q):.3f}" for q in (0.5, 0.9, 0.99))
        print(f"  load {load}: DES E[W] {mw:.4f} ± {se:.4f}, TTFT p50/p90/p99 {q_des} | analytic E[W] {s.wait.mean_s:.4f} "
              f"({s.wait.mean_s / mw - 1:+.1%}), {q_an}, util {s.utilization:.3f}, solve {cpu * 1e3:.0f} ms cpu")


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "poisson", int(sys.argv[2]) if len(sys.argv) > 2 else 200_000)
