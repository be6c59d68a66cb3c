"""JSQ-by-count vs least_loaded dispatch: analytic TTFT/TPOT p50/p90/p99 vs the replay (issue 18 §1).

    QMODEL_DATA_DIR=../shared/data OPENBLAS_NUM_THREADS=1 .venv/bin/python benchmarks/jsq_dispatch.py [N_REQUESTS]

One bundled example per topology (colocated llama3-8b-colocated-h100, chunked llama3-8b-chunked-h100,
disaggregated llama3-70b-disagg-h100: 2 instances per pool), every pool's dispatch overridden to
``least_loaded`` and to ``jsq`` (``--set deployment...dispatch=...``), at 0.5/0.8/0.9 of the analytic
limit; the replay is the mean of 2 seeds x N_REQUESTS (default 20,000). The solver reads jsq as
least_loaded (qmodel.topology.base.station_dispatch), so the analytic answer is the same for both and
the jsq column measures that approximation; jsq-rr is the jsq replay against the analytic round_robin
reading (the alternative). Prints relative errors (analytic / replay - 1) in percent, ``ll`` / ``jsq`` /
``jsq-rr``, then the median and max |error| per column. Figures: docs/validation.md,
"JSQ by count".
"""
import pathlib
import sys

import numpy as np

REPO = pathlib.Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
from qmodel.scenario import load_scenario  # noqa: E402
from qmodel.solver import Solver  # noqa: E402
from qmodel.validation.harness import latency_metrics  # noqa: E402
from qmodel.validation.replay import replay  # noqa: E402

KEYS = ("ttft_p50", "ttft_p90", "ttft_p99", "tpot_p50", "tpot_p90", "tpot_p99")
EXAMPLES = (("colocated", "examples/llama3-8b-colocated-h100.yaml", ("deployment.pool.dispatch",)),
            ("chunked", "examples/llama3-8b-chunked-h100.yaml", ("deployment.pool.dispatch",)),
            ("disaggregated", "examples/llama3-70b-disagg-h100.yaml",
             ("deployment.prefill.dispatch", "deployment.decode.dispatch")))
LOADS = (0.5, 0.8, 0.9)
#: column: (dispatch the replay runs, dispatch the analytic engine is given); ``jsq`` is read as least_loaded
#: by the solver itself; ``jsq-rr`` is the alternative cheap reading (per-instance round-robin split)
COLUMNS = {"ll": ("least_loaded", "least_loaded"), "jsq": ("jsq", "jsq"), "jsq-rr": ("jsq", "round_robin")}


def errors(path: str, fields: tuple[str, ...], u: float, n: int) -> dict[str, dict[str, float]]:
    """Relative errors of KEYS at u x the analytic limit, per column of COLUMNS (replay averaged over
    seeds 1 and 2)."""
    out = {}
    for col, (replayed, read_as) in COLUMNS.items():
        sc = load_scenario(REPO / path, [f"{f}={replayed}" for f in fields])
        solver = Solver(load_scenario(REPO / path, [f"{f}={read_as}" for f in fields]))
        rate = u * solver.max_stable_rate()[0]
        an = latency_metrics(solver.solve(rate))
        rep = [latency_metrics(replay(sc.with_rate(rate), n_requests=n, seed=s)) for s in (1, 2)]
        out[col] = {k: an[k] / float(np.mean([m[k] for m in rep])) - 1.0 for k in KEYS}
    return out


def main(n: int) -> None:
    cols = " / ".join(COLUMNS)
    print("| example | u | " + " | ".join(f"{k} {cols}" for k in KEYS) + " |")
    print("|---|---|" + "---|" * len(KEYS))
    errs: dict[str, list[dict[str, float]]] = {c: [] for c in COLUMNS}
    for topo, path, fields in EXAMPLES:
        for u in LOADS:
            row = errors(path, fields, u, n)
            for c in COLUMNS:
                errs[c].append(row[c])
            print(f"| {topo} | {u} | " + " | ".join(
                " / ".join(f"{100 * row[c][k]:+.1f}" for c in COLUMNS) for k in KEYS) + " |", flush=True)
    for stat, fn in (("median", np.median), ("max", np.max)):
        print(f"| {stat} abs | | " + " | ".join(
            " / ".join(f"{100 * fn([abs(e[k]) for e in errs[c]]):.1f}" for c in COLUMNS) for k in KEYS) + " |")


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 20000)
