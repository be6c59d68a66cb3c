"""Bursty arrivals at least_loaded / jsq single pools: analytic TTFT p50/p90/p99 vs the replay (issue 18).

    QMODEL_DATA_DIR=../shared/data OPENBLAS_NUM_THREADS=1 .venv/bin/python benchmarks/burst_pools.py \
        CACHE.json [N_REQUESTS] [CONFIGS] [DISPATCHES] [CVS] [LOADS]

The suite's colocated (llama8b-h100, qwen32b-h200) and chunked (llama8b-h100, mistral7b-l40s) configs,
2 engines, ``pool.dispatch`` set to least_loaded / jsq, Gamma arrivals at the given cvs (1 = Poisson),
the catalog length presets (as benchmarks/least_loaded_pool.py), at fractions of the analytic limit;
the replay is the mean of seeds 1 and 2 x N_REQUESTS (default 20,000). Replays are cached in CACHE.json (keyed by config, dispatch, cv, rate, seed, n), so a model
change re-runs only the analytic side. Comma-separated lists; defaults: all four configs, both
dispatches, cv 0.5,1,2,4, loads 0.3,0.5,0.7,0.8,0.9,0.95. Prints TTFT p50/p90/p99 relative error (%)
per cell and the median |error| per (topology, cv). Figures: docs/validation.md, "Bursty arrivals at
least_loaded / jsq pools".
"""
import copy
import json
import pathlib
import sys

import numpy as np

REPO = pathlib.Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
from qmodel.scenario import parse_scenario  # noqa: E402
from qmodel.solver import Solver  # noqa: E402
from qmodel.validation.harness import latency_metrics  # noqa: E402
from qmodel.validation.replay import replay  # noqa: E402
from qmodel.validation.suites import CONFIGS, length_source  # noqa: E402

KEYS = ("ttft_p50", "ttft_p90", "ttft_p99")
ALL_CONFIGS = ("colocated-llama8b-h100", "colocated-qwen32b-h200", "chunked-llama8b-h100", "chunked-mistral7b-l40s")


def scenario(name: str, dispatch: str, cv: float):
    cfg = CONFIGS[name]
    dep = copy.deepcopy(cfg.deployment)
    dep["pool"]["dispatch"] = dispatch
    arr = {"kind": "poisson"} if cv == 1.0 else {"kind": "gamma", "cv": cv}
    return parse_scenario({"name": f"{name}/{dispatch}/cv{cv:g}", "model": cfg.model,
                           "workload": {"arrivals": dict(arr, rate_per_s=1.0),
                                        "lengths": length_source(cfg.mix, False)},
                           "slo": cfg.slo, "deployment": dep, "perf": cfg.perf}, source="benchmarks/burst_pools.py")


def main(cache_path: str, n: int, configs, dispatches, cvs, loads) -> None:
    path = pathlib.Path(cache_path)
    cache = json.loads(path.read_text()) if path.exists() else {}
    errs: dict[tuple[str, float], list[list[float]]] = {}
    for name in configs:
        for disp in dispatches:
            for cv in cvs:
                sc = scenario(name, disp, cv)
                solver = Solver(sc)
                lim = solver.max_stable_rate()[0]
                for u in loads:
                    rate = u * lim
                    an = latency_metrics(solver.solve(rate))
                    reps = []
                    for seed in (1, 2):
                        key = f"{name}|{disp}|{cv:g}|{rate:.6g}|{seed}|{n}"
                        if key not in cache:
                            cache[key] = {k: float(v) for k, v in
                                          latency_metrics(replay(sc.with_rate(rate), n_requests=n, seed=seed)).items()
                                          if isinstance(v, (int, float))}
                            path.write_text(json.dumps(cache))
                        reps.append(cache[key])
                    e = [100.0 * (an[k] / float(np.mean([m[k] for m in reps])) - 1.0) for k in KEYS]
                    errs.setdefault((name.split("-")[0], cv), []).append(e)
                    print(f"{name} {disp} cv{cv:g} u{u:.2f} p50/p90/p99 " + "/".join(f"{x:+.1f}" for x in e),
                          flush=True)
    for (topo, cv), rows in sorted(errs.items()):
        a = np.abs(np.array(rows))
        print(f"median |err| {topo} cv{cv:g} (n={len(rows)}): " + "/".join(f"{x:.1f}" for x in np.median(a, axis=0))
              + "  max " + "/".join(f"{x:.1f}" for x in a.max(axis=0)))


if __name__ == "__main__":
    a = sys.argv[1:]
    if not a:
        print(__doc__, file=sys.stderr)
        sys.exit(2)
    lst = lambda i, d, f=str: [f(x) for x in a[i].split(",")] if len(a) > i else list(d)  # noqa: E731
    main(a[0], int(a[1]) if len(a) > 1 else 20000, lst(2, ALL_CONFIGS), lst(3, ("least_loaded", "jsq")),
         lst(4, (0.5, 1.0, 2.0, 4.0), float), lst(5, (0.3, 0.5, 0.7, 0.8, 0.9, 0.95), float))
