"""Closed-loop workloads, analytic (qmodel.closed) against the replay's closed loop (issue 18 §3).

For each example and concurrency N: throughput X(N) error and TTFT/TPOT p50/p90 errors,
(analytic - replay)/replay, plus the SCV of the replay's inter-arrival times (what a closed loop's
arrivals look like). The concurrencies are 1, 2, 4, ..., 64 and a near-saturation N (the smallest
power of two above 64 whose analytic X(N) reaches 0.9 of the stability limit, at most 4096).

    QMODEL_DATA_DIR=/path/to/data OPENBLAS_NUM_THREADS=1 .venv/bin/python benchmarks/closed_loop_validation.py \\
        [--requests 20000] [--seeds 0,1] [--think-time 0] [--examples a.yaml,b.yaml] [--markdown]

Each replay runs max(--requests, 200 N) requests (the loop drains at the end of a run; 200 N keeps
that edge under 0.5% of the requests), averaged over the seeds.

``--measured-scv`` also solves each row with Gamma arrivals of the replay's measured c_a² instead of
Poisson's and prints that solve's TTFT/TPOT p90 errors (the check of the SCV qmodel.closed uses).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np

_ROOT = Path(__file__).resolve().parent.parent
EXAMPLES = ("llama3-8b-colocated-h100.yaml", "llama3-8b-chunked-h100.yaml", "llama3-70b-disagg-h100.yaml",
            "opt13b-disagg-a100.yaml")
COLUMNS = ("X", "ttft_p50", "ttft_p90", "tpot_p50", "tpot_p90")


def concurrencies(scenario, think_time_s: float) -> list[int]:
    from qmodel.closed import solve_closed, with_concurrency
    from qmodel.solver import Solver

    ns = [1, 2, 4, 8, 16, 32, 64]
    solver = Solver(with_concurrency(scenario, 1, think_time_s))
    n = 128
    while n <= 4096:
        loop = solve_closed(with_concurrency(scenario, n, think_time_s), solver).loop
        if loop.throughput_per_s >= 0.9 * loop.max_stable_rate_per_s:
            break
        n *= 2
    return ns + [min(n, 4096)]


def measure(path: Path, think_time_s: float, requests: int, seeds: list[int], measured_scv: bool = False) -> list[dict]:
    from qmodel.closed import solve_closed, with_concurrency
    from qmodel.solver import Solver
    from qmodel.source import as_scenario
    from qmodel.validation.replay import replay_requests

    base = as_scenario(path)
    solver = None
    rows = []
    for n in concurrencies(base, think_time_s):
        sc = with_concurrency(base, n, think_time_s)
        solver = Solver(sc) if solver is None else solver
        sol = solve_closed(sc, solver)
        a = {"X": sol.loop.throughput_per_s, "ttft_p50": sol.result.ttft.p50, "ttft_p90": sol.result.ttft.p90,
             "tpot_p50": sol.result.tpot.p50, "tpot_p90": sol.result.tpot.p90}
        reps, ca2 = [], []
        for seed in seeds:
            rep, req = replay_requests(sc, n_requests=max(requests, 200 * n), seed=seed)
            reps.append({"X": rep.throughput_rps, "ttft_p50": rep.ttft.p50, "ttft_p90": rep.ttft.p90,
                         "tpot_p50": rep.tpot.p50, "tpot_p90": rep.tpot.p90})
            t = np.asarray(req.arrival)
            g = np.diff(t[len(t) // 10:])
            ca2.append(float(g.var() / g.mean() ** 2))
        r = {k: float(np.mean([x[k] for x in reps])) for k in COLUMNS}
        if measured_scv:
            from qmodel.scenario import GammaArrivals

            rate = sol.loop.seen_rate_per_s
            arr = GammaArrivals(rate_per_s=rate, cv=max(float(np.mean(ca2)), 1e-4) ** 0.5)
            g = Solver(base.model_copy(update={"workload": base.workload.model_copy(update={"arrivals": arr})})).solve(rate)
            print(f"  measured c_a2 {np.mean(ca2):.2f}: TTFT p90 {(g.ttft.p90 / r['ttft_p90'] - 1) * 100:+.1f}% "
                  f"(Poisson {(a['ttft_p90'] / r['ttft_p90'] - 1) * 100:+.1f}%), TPOT p90 "
                  f"{(g.tpot.p90 / r['tpot_p90'] - 1) * 100:+.1f}% (Poisson {(a['tpot_p90'] / r['tpot_p90'] - 1) * 100:+.1f}%)",
                  file=sys.stderr, flush=True)
        rows.append({"example": path.stem, "N": n, "rho": sol.loop.seen_rate_per_s / sol.loop.max_stable_rate_per_s,
                     "saturated": sol.loop.saturated, "X_analytic": a["X"], "X_replay": r["X"],
                     "replay_ca2": float(np.mean(ca2)),
                     **{f"err_{k}": (a[k] - r[k]) / r[k] for k in COLUMNS}})
        print(_line(rows[-1]), file=sys.stderr, flush=True)
    return rows


def _line(row: dict) -> str:
    errs = " ".join(f"{k} {row['err_' + k] * 100:+.1f}%" for k in COLUMNS)
    return (f"{row['example']:28s} N={row['N']:<5d} rho {row['rho']:.2f}{'*' if row['saturated'] else ' '} "
            f"X {row['X_analytic']:.4g}/{row['X_replay']:.4g} {errs} ca2 {row['replay_ca2']:.2f}")


def markdown(rows: list[dict]) -> str:
    out = ["| example | N | load seen | X analytic / replay (req/s) | X | TTFT p50 | TTFT p90 | TPOT p50 | TPOT p90 | replay c_a² |",
           "|---|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        errs = " | ".join(f"{r['err_' + k] * 100:+.1f}%" for k in COLUMNS)
        out.append(f"| {r['example']} | {r['N']} | {r['rho']:.2f}{' (sat.)' if r['saturated'] else ''} | "
                   f"{r['X_analytic']:.4g} / {r['X_replay']:.4g} | {errs} | {r['replay_ca2']:.2f} |")
    return "\n".join(out)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--requests", type=int, default=20000)
    ap.add_argument("--seeds", default="0,1")
    ap.add_argument("--think-time", type=float, default=0.0)
    ap.add_argument("--examples", default=",".join(EXAMPLES))
    ap.add_argument("--markdown", action="store_true")
    ap.add_argument("--measured-scv", action="store_true", help="also solve with the replay's measured arrival SCV")
    args = ap.parse_args(argv)
    seeds = [int(s) for s in args.seeds.split(",")]
    rows = []
    for name in args.examples.split(","):
        rows += measure(_ROOT / "examples" / name, args.think_time, args.requests, seeds, args.measured_scv)
    print(markdown(rows) if args.markdown else "\n".join(_line(r) for r in rows))
    for k in COLUMNS:
        e = np.abs([r["err_" + k] for r in rows])
        print(f"{k}: median |error| {np.median(e) * 100:.1f}%, max {e.max() * 100:.1f}%", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
