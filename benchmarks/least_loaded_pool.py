"""least_loaded colocated pools: analytic TTFT p50/p90/p99 vs the replay (issue 18 item 3).

    .venv/bin/python benchmarks/least_loaded_pool.py suite [ARRIVALS]      # both colocated suite configs
    .venv/bin/python benchmarks/least_loaded_pool.py corpus N SEED         # data-free corpus cases

``suite``: colocated-llama8b-h100 and colocated-qwen32b-h200 (2 engines, least_loaded) at 0.3-0.95 of
the analytic limit, Poisson (or ``gamma-cv2``) arrivals, 2 replay seeds x 20,000 requests; with the
data folder the Azure traces set the lengths. ``corpus``: every colocated least_loaded case with more
than one instance among N generated scenarios of SEED (no data folder needed: set QMODEL_DATA_DIR to an
empty folder, as CI does), at the corpus-ci replay lengths. Prints relative errors in percent (corpus:
as fractions, like the corpus rows). Measured figures: docs/validation.md, "least_loaded pools: the
pooled bulk chain".
"""
import pathlib
import sys

import numpy as np

REPO = pathlib.Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
from qmodel.solver import Solver  # noqa: E402
from qmodel.validation.replay import replay  # noqa: E402
from qmodel.validation.harness import latency_metrics  # noqa: E402
from qmodel.validation.suites import CONFIGS  # noqa: E402

KEYS = ("ttft_p50", "ttft_p90", "ttft_p99")


def suite(arrivals: str) -> None:
    for name in ("colocated-llama8b-h100", "colocated-qwen32b-h200"):
        sc = CONFIGS[name].scenario(arrivals, 1.0, False)
        solver = Solver(sc)
        lim = solver.max_stable_rate()[0]
        print(name, arrivals, f"limit {lim:.3f} req/s", flush=True)
        for u in (0.3, 0.5, 0.7, 0.8, 0.85, 0.9, 0.95):
            rate = u * lim
            r = solver.solve(rate)
            rep = [latency_metrics(replay(sc.with_rate(rate), n_requests=20000, seed=s)) for s in (1, 2)]
            model = {"ttft_p50": r.ttft.p50, "ttft_p90": r.ttft.p90, "ttft_p99": r.ttft.p99}
            errs = [100.0 * (model[k] / float(np.mean([m[k] for m in rep])) - 1.0) for k in KEYS]
            print(f"  u {u:.2f}  p50/p90/p99 " + "/".join(f"{e:+.1f}" for e in errs) + "%", flush=True)


def corpus(n: int, seed: int) -> None:
    from validation.corpus import generate
    from validation.corpus_run import RUN_LENGTHS, run_corpus_case

    cases = [c for c in generate(n, seed, data=False).cases if c.features["topology"] == "colocated"
             and c.features["dispatch"] == "least_loaded" and c.features["instances"] != "1"]
    print(len(cases), "colocated least_loaded cases with > 1 instance", flush=True)
    for c in cases:
        row = run_corpus_case(c, RUN_LENGTHS["ci"])
        err = row.get("error_rel") or {}
        f = c.features
        print(c.id, f"u{c.utilization:.3f}", f["arrivals"], f["lengths"], f["instances"], f["model"], f["gpu"],
              " ".join(f"{k} {err[k]:+.3f}" for k in KEYS if k in err), row.get("error", ""), flush=True)


if __name__ == "__main__":
    if len(sys.argv) >= 2 and sys.argv[1] == "suite":
        suite(sys.argv[2] if len(sys.argv) > 2 else "poisson")
    elif len(sys.argv) == 4 and sys.argv[1] == "corpus":
        corpus(int(sys.argv[2]), int(sys.argv[3]))
    else:
        print("usage: least_loaded_pool.py suite [poisson|gamma-cv2] | corpus N SEED", file=sys.stderr)
        sys.exit(2)
