"""Where a disaggregated trace scenario's decode TPOT comes from, window by window: the replay's
decode occupancy and mean TPOT per window of arrivals against the token-clock model
(qmodel/trace_decode.py) and against the stations at each window's own arrival rate (the model
before it). The table behind docs/validation.md, "Trace arrivals as a nonstationary process",
"The decode pool under bursts".

    QMODEL_DATA_DIR=../shared/data python benchmarks/trace_decode_windows.py examples/azure-conv-trace-disagg-a100.yaml 0.8,0.9 [--requests 19366]

Per load u (a fraction of the analytic limit): the replay's decode admission wait (entry to first
step), its pool occupancy (mean, p99, max over time, sampled every half mean gap) and per-window
mean TPOT by arrival window; the model's per-window occupancy N_w and mean TPOT T_w; the median and
90th percentile of |T_w / replay - 1| and the correlations. The first window is left out of the
comparison: the replay starts empty, the model is periodic.
"""

from __future__ import annotations

import argparse
import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(__file__))


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("scenario")
    ap.add_argument("loads")
    ap.add_argument("--requests", type=int, default=19366)
    a = ap.parse_args(argv)
    from qmodel.solver import Solver
    from qmodel.source import as_scenario
    from qmodel.trace_decode import decode_pool, window_means
    from qmodel.trace_law import LOAD_CAP, fluid_backlog, pass_on
    from qmodel.validation.replay import replay_requests, request_table

    sc0 = as_scenario(a.scenario)
    lam = Solver(sc0).max_stable_rate()[0]
    for u in (float(x) for x in a.loads.split(",")):
        sc = sc0.with_rate(u * lam)
        t = request_table(replay_requests(sc, n_requests=a.requests, seed=0)[1])
        arr = t["arrival_s"]
        gap = (arr[-1] - arr[0]) / (len(arr) - 1)
        ds, dx, de = t["decode_start_s"], t["decode_exit_s"], t["decode_entry_s"]
        ok = np.isfinite(ds)
        ts = np.arange(arr[0], arr[-1], gap / 2)
        occ = np.searchsorted(np.sort(ds[ok]), ts, "right") - np.searchsorted(np.sort(dx[ok]), ts, "right")
        solver = Solver(sc)
        law = solver.resolved.arrival_law
        rate = u * lam
        lim = min(solver.served_limits())[0]
        base = solver.topology.compose(solver, min(rate, LOAD_CAP * lim), False)
        pool = decode_pool(solver, base, rate)
        if pool is None:
            print(f"u {u:g}: no decode pool with an affine step fit; nothing to compare")
            continue
        # the handoffs per window, as trace_law.compose_windows feeds the decode pool: the prefill
        # stage's fluid (fed its window's prompt work) passed on in output work
        pre = min(x for x, name in solver.served_limits() if name == "prefill")
        fed = law.rel_rate if law.prompt_rel is None else law.rel_rate * law.prompt_rel
        q0, q1, _, out = fluid_backlog(law, rate / pre, fed)
        means = window_means(pool, pass_on(law, q0, q1, law.prompt_rel, out, law.output_rel), law.length)
        n_w, t_w = means.occupancy, means.tpot
        # the replay per window of arrivals (windows of the model's lengths, in the replay's time)
        edges = arr[0] + np.concatenate(([0.0], np.cumsum(law.length))) * gap
        w = np.clip(np.searchsorted(edges, arr, side="right") - 1, 0, len(law.length) - 1)
        tw = np.array([np.nanmean(t["tpot_s"][w == i]) if np.any(w == i) else np.nan for i in range(len(law.length))])
        ow = np.array([occ[(ts >= edges[i]) & (ts < edges[i + 1])].mean() if np.any((ts >= edges[i]) & (ts < edges[i + 1]))
                       else np.nan for i in range(len(law.length))])
        # the stations at each window's own rate (capped as the trace model caps them)
        rs = np.unique(np.minimum(rate * law.levels, LOAD_CAP * lim))
        tm = {r: solver.topology.compose(solver, float(r), False).stations[-1].tpot.mean_s for r in rs}
        own = np.array([tm[min(rate * law.levels[k], LOAD_CAP * lim)] for k in law.cls])
        sel = np.isfinite(tw) & np.isfinite(ow)
        sel[0] = False
        e_model, e_own = np.abs(t_w[sel] / tw[sel] - 1), np.abs(own[sel] / tw[sel] - 1)
        wait = (ds - de)[ok]
        print(f"u {u:g}: replay decode admission wait p50/p99/max {np.percentile(wait, 50):.3f}/"
              f"{np.percentile(wait, 99):.3f}/{wait.max():.3f} s; occupancy mean/p99/max {occ.mean():.0f}/"
              f"{np.percentile(occ, 99):.0f}/{occ.max():.0f} of {pool.cap:.0f}; model N_w mean/max {n_w.mean():.0f}/"
              f"{n_w.max():.0f}, fills: {means.fills}")
        print(f"  per-window mean TPOT |error| median/p90: token clock {100 * np.median(e_model):.1f}/"
              f"{100 * np.percentile(e_model, 90):.1f}%, stations at the window's rate {100 * np.median(e_own):.1f}/"
              f"{100 * np.percentile(e_own, 90):.1f}%; correlation with the replay: occupancy "
              f"{np.corrcoef(n_w[sel], ow[sel])[0, 1]:.3f}, TPOT {np.corrcoef(t_w[sel], tw[sel])[0, 1]:.3f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
