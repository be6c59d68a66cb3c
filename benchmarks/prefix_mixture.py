"""Prefix caching per request vs one uniform ratio: analytic TTFT p50/p90/p99 vs the replay (issue 18 §3).

    QMODEL_DATA_DIR=../shared/data OPENBLAS_NUM_THREADS=1 .venv/bin/python benchmarks/prefix_mixture.py [N_REQUESTS] [--mixture-only]

The Mooncake conversation trace (``data:mooncake/conversation_trace.jsonl``: its arrivals, rescaled, its
lengths in order and its ``hash_ids``) on H200 TP8 instances: Llama-3.1-70B and -8B disaggregated 1 prefill
+ 1 decode (the 8B's larger cache hits 26% of prompt tokens, the 70B's 13%), Llama-3.1-70B colocated 2
instances (least_loaded), at 0.3/0.6/0.85 of the analytic limit of the per-request model.
The replay keeps a per-instance LRU of the trace's prefix blocks (as large as the instance's KV memory)
in every column; the analytic columns are ``hash`` (``workload.prefix_cache = trace_hashes``: the same
LRU over the trace's request order, each of c instances seeing every c-th request), ``uniform``
(``prefix_hit_ratio`` = that model's token-weighted mean hit, today's best single ratio) and ``none``
(no prefix cache). Two seeds: seed s jitters the trace's 3 s timestamp slots (``jitter_seed`` s, in the
solver and the replay alike) and seeds the replay. Prints relative errors (analytic / replay - 1, %) per
seed (``unst``: that reading calls the rate unstable), then the median and max |error| per column over
its stable points and the count of unstable ones.

Second table, a stated mixture (the shape of the multi-turn vLLM run in issue 18: 5.8k-token prompts,
later turns hit ~90%): Poisson arrivals, lognormal prompts (median 5,800, sigma 0.3) and outputs (median
300, sigma 0.5), ``prefix_cache = {mixture, hit_fraction 0.8, hit_ratio 0.9}`` replayed as a mixture (seeded
draws), against the solver's ``mixture`` and the uniform ratio with the same mean (``uniform``: 0.72), on
Llama-3.1-70B FP8 colocated on one H200 and disaggregated 1P(TP8)+1D(TP8) on H200, 0.3/0.6/0.85 of the
mixture's limit, seeds 1 and 2, N_REQUESTS each. Figures: docs/validation.md, "Prefix caching per request".
"""
import pathlib
import sys

import numpy as np

REPO = pathlib.Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
from qmodel.build import resolve  # noqa: E402
from qmodel.errors import UnstableError  # noqa: E402
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
#: set-up name -> (model, deployment)
DEPLOYMENTS = {
    "70B disaggregated 1P(TP8)+1D(TP8)": ("llama-3.1-70b", {
        "topology": "disaggregated",
        "prefill": {"gpu": "h200-sxm", "tp": 8, "instances": 1, "max_batch_tokens": 16384},
        "decode": {"gpu": "h200-sxm", "tp": 8, "instances": 1, "max_batch": 256},
        "link": "roce-4x200", "link_sharing": "fcfs", "transfer_mode": "layerwise"}),
    "8B disaggregated 1P(TP8)+1D(TP8)": ("llama-3.1-8b", {
        "topology": "disaggregated",
        "prefill": {"gpu": "h200-sxm", "tp": 8, "instances": 1, "max_batch_tokens": 16384},
        "decode": {"gpu": "h200-sxm", "tp": 8, "instances": 1, "max_batch": 256},
        "link": "roce-4x200", "link_sharing": "fcfs", "transfer_mode": "layerwise"}),
    "70B colocated 2x TP8 least_loaded": ("llama-3.1-70b", {
        "topology": "colocated", "max_batch_tokens": 16384,
        "pool": {"gpu": "h200-sxm", "tp": 8, "instances": 2, "max_batch": 256, "dispatch": "least_loaded"}}),
}


def scenario(setup: tuple[str, dict], seed: int, prefix: dict) -> Scenario:
    model, dep = setup
    return Scenario.model_validate({
        "name": "mooncake-prefix", "model": model, "slo": SLO, "deployment": dep,
        "perf": {"kind": "roofline"},
        "workload": {"arrivals": {"kind": "trace", "path": TRACE, "format": "mooncake", "jitter_seed": seed},
                     "lengths": {"kind": "empirical", "path": TRACE, "format": "mooncake"}, **prefix}})


def solved_errors(solver: Solver, rate: float, rep: dict[str, float]) -> dict[str, float]:
    """Relative errors of KEYS; NaN where this reading is unstable at the rate (printed "unst")."""
    try:
        an = latency_metrics(solver.solve(rate))
    except UnstableError:
        return {k: float("nan") for k in KEYS}
    return {k: an[k] / rep[k] - 1.0 for k in KEYS}


def cell(e: float) -> str:
    return "unst" if np.isnan(e) else f"{100 * e:+.1f}"


def replay_row(label: str, sc: Scenario, solvers: dict[str, Solver], rate: float, seed: int, n: int,
               errs: dict[str, list[dict[str, float]]]) -> None:
    """Replay ``sc`` at ``rate``, record each reading's errors in ``errs`` and print the table row."""
    rep = latency_metrics(replay(sc.with_rate(rate), n_requests=n, seed=seed))
    row = {c: solved_errors(s, rate, rep) for c, s in solvers.items()}
    for c in errs:
        errs[c].append(row[c])
    print(f"| {label} | " + " | ".join(" / ".join(cell(row[c][k]) for c in errs) for k in KEYS) + " |", flush=True)


def print_summary(errs: dict[str, list[dict[str, float]]]) -> None:
    """Median and max |error| per reading over the stable points."""
    for stat, fn in (("median", np.nanmedian), ("max", np.nanmax)):
        print(f"| {stat} abs (stable) | | | " + " | ".join(
            " / ".join(f"{100 * fn([abs(e[k]) for e in errs[c]]):.1f}" for c in errs) for k in KEYS) + " |")


def main(n: int) -> None:
    print("| set-up | u | seed | " + " | ".join(f"{k} {' / '.join(COLUMNS)}" for k in KEYS) + " |")
    print("|---|---|---|" + "---|" * len(KEYS))
    errs: dict[str, list[dict[str, float]]] = {c: [] for c in COLUMNS}
    for name, dep in DEPLOYMENTS.items():
        for seed in SEEDS:
            sc = scenario(dep, seed, {"prefix_cache": {"kind": "trace_hashes"}})
            h = resolve(sc).prefix_hit_fraction
            solvers = {"hash": Solver(sc), "uniform": Solver(scenario(dep, seed, {"prefix_hit_ratio": h})),
                       "none": Solver(scenario(dep, seed, {}))}
            limit = solvers["hash"].max_stable_rate()[0]
            for u in LOADS:
                replay_row(f"{name} (h {h:.3f}) | {u} | {seed}", sc, solvers, u * limit, seed, n, errs)
    print_summary(errs)
    print("| unstable points | | | " + " / ".join(str(sum(np.isnan(e[KEYS[0]]) for e in errs[c])) for c in COLUMNS) + " | | |")


MIXTURE = {"prefix_cache": {"kind": "mixture", "hit_fraction": 0.8, "hit_ratio": 0.9}}
MIX_SETUPS = {
    "70B FP8 colocated 1x H200 TP1": {
        "topology": "colocated", "max_batch_tokens": 8192,
        "pool": {"gpu": "h200-sxm", "tp": 1, "instances": 1, "max_batch": 256, "compute_dtype": "fp8", "kv_dtype": "fp8"}},
    "70B disaggregated 1P(TP8)+1D(TP8)": DEPLOYMENTS["70B disaggregated 1P(TP8)+1D(TP8)"][1],
}


def mixture_scenario(dep: dict, prefix: dict) -> Scenario:
    lengths = {"kind": "lognormal", "prompt_median_tokens": 5800, "prompt_sigma": 0.3, "prompt_max_tokens": 16000,
               "output_median_tokens": 300, "output_sigma": 0.5}
    return Scenario.model_validate({
        "name": "mixture-prefix", "model": "llama-3.1-70b", "slo": SLO, "deployment": dep, "perf": {"kind": "roofline"},
        "workload": {"arrivals": {"kind": "poisson", "rate_per_s": 1.0}, "lengths": lengths, **prefix}})


def main_mixture(n: int) -> None:
    cols = ("mixture", "uniform")
    print("\n| set-up | u | seed | " + " | ".join(f"{k} {' / '.join(cols)}" for k in KEYS) + " |")
    print("|---|---|---|" + "---|" * len(KEYS))
    errs: dict[str, list[dict[str, float]]] = {c: [] for c in cols}
    for name, dep in MIX_SETUPS.items():
        sc = mixture_scenario(dep, MIXTURE)
        solvers = {"mixture": Solver(sc), "uniform": Solver(mixture_scenario(dep, {"prefix_hit_ratio": 0.72}))}
        limit = solvers["mixture"].max_stable_rate()[0]
        for u in LOADS:
            for seed in SEEDS:
                replay_row(f"{name} | {u} | {seed}", sc, solvers, u * limit, seed, n, errs)
    print_summary(errs)

if __name__ == "__main__":
    args = [a for a in sys.argv[1:] if not a.startswith("--")]
    n_req = int(args[0]) if args else 20000
    if "--mixture-only" not in sys.argv:
        main(n_req)
    main_mixture(n_req)
