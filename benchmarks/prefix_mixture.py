"""Prefix caching per request vs one uniform ratio: analytic TTFT p50/p90/p99 vs the replay (issue 18 §3).

    QMODEL_DATA_DIR=../shared/data OPENBLAS_NUM_THREADS=1 .venv/bin/python benchmarks/prefix_mixture.py [N_REQUESTS]

The Mooncake conversation trace (``data:mooncake/conversation_trace.jsonl``: its arrivals, rescaled, its
lengths in order and its ``hash_ids``) on Llama-3.1-70B, H200 TP8: disaggregated 1 prefill + 1 decode and
colocated 2 instances (least_loaded), at 0.3/0.6/0.85 of the analytic limit of the per-request model.
The replay keeps a per-instance LRU of the trace's prefix blocks (as large as the instance's KV memory)
in every column; the analytic columns are ``hash`` (``workload.prefix_cache = trace_hashes``: the same
LRU over the trace's request order, each of c instances seeing every c-th request), ``uniform``
(``prefix_hit_ratio`` = that model's token-weighted mean hit, today's best single ratio) and ``none``
(no prefix cache). Two seeds: seed s jitters the trace's 3 s timestamp slots (``jitter_seed`` s, in the
solver and the replay alike) and seeds the replay. Prints relative errors (analytic / replay - 1, %) per
seed, then the median and max |error| per column. Figures: docs/validation.md, "Prefix caching per request".
"""
import pathlib
import sys

import numpy as np

REPO = pathlib.Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
from qmodel.build import resolve  # noqa: E402
from qmodel.scenario import Scenario  # noqa: E402
from qmodel.solver import Solver  # noqa: E402
from qmodel.validation.harness import latency_metrics  # noqa: E402
from qmodel.validation.replay import replay  # noqa: E402

TRACE = "data:mooncake/conversation_trace.jsonl"
KEYS = ("ttft_p50", "ttft_p90", "ttft_p99")
LOADS = (0.3, 0.6, 0.85)
SEEDS = (1, 2)
COLUMNS = ("hash", "uniform", "none")
SLO = {"ttft_s": 10.0, "tpot_s": 0.2}
DEPLOYMENTS = {
    "disaggregated 1P(TP8)+1D(TP8)": {
        "topology": "disaggregated",
        "prefill": {"gpu": "h200-sxm", "tp": 8, "instances": 1, "max_batch_tokens": 16384},
        "decode": {"gpu": "h200-sxm", "tp": 8, "instances": 1, "max_batch": 256},
        "link": "roce-4x200", "link_sharing": "fcfs", "transfer_mode": "layerwise"},
    "colocated 2x TP8 least_loaded": {
        "topology": "colocated", "max_batch_tokens": 16384,
        "pool": {"gpu": "h200-sxm", "tp": 8, "instances": 2, "max_batch": 256, "dispatch": "least_loaded"}},
}


def scenario(dep: dict, seed: int, prefix: dict) -> Scenario:
    return Scenario.model_validate({
        "name": "mooncake-prefix", "model": "llama-3.1-70b", "slo": SLO, "deployment": dep,
        "perf": {"kind": "roofline"},
        "workload": {"arrivals": {"kind": "trace", "path": TRACE, "format": "mooncake", "jitter_seed": seed},
                     "lengths": {"kind": "empirical", "path": TRACE, "format": "mooncake"}, **prefix}})


def mean_hit(sc: Scenario) -> float:
    r = resolve(sc)
    return float(1.0 - r.uncached_prompt.sum() / r.lengths.prompt.sum())


def main(n: int) -> None:
    print("| set-up | u | seed | " + " | ".join(f"{k} {' / '.join(COLUMNS)}" for k in KEYS) + " |")
    print("|---|---|---|" + "---|" * len(KEYS))
    errs: dict[str, list[dict[str, float]]] = {c: [] for c in COLUMNS}
    for name, dep in DEPLOYMENTS.items():
        for seed in SEEDS:
            sc = scenario(dep, seed, {"prefix_cache": {"kind": "trace_hashes"}})
            h = mean_hit(sc)
            solvers = {"hash": Solver(sc), "uniform": Solver(scenario(dep, seed, {"prefix_hit_ratio": h})),
                       "none": Solver(scenario(dep, seed, {}))}
            limit = solvers["hash"].max_stable_rate()[0]
            for u in LOADS:
                rate = u * limit
                rep = latency_metrics(replay(sc.with_rate(rate), n_requests=n, seed=seed))
                row = {c: {k: latency_metrics(s.solve(rate))[k] / rep[k] - 1.0 for k in KEYS} for c, s in solvers.items()}
                for c in COLUMNS:
                    errs[c].append(row[c])
                print(f"| {name} (h {h:.3f}) | {u} | {seed} | " + " | ".join(
                    " / ".join(f"{100 * row[c][k]:+.1f}" for c in COLUMNS) for k in KEYS) + " |", flush=True)
    for stat, fn in (("median", np.median), ("max", np.max)):
        print(f"| {stat} abs | | | " + " | ".join(
            " / ".join(f"{100 * fn([abs(e[k]) for e in errs[c]]):.1f}" for c in COLUMNS) for k in KEYS) + " |")


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 20000)
