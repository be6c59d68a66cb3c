"""Chunked occupancy: the analytic per-instance chain against the replay's time-average histograms.

    python benchmarks/chunked_occupancy.py BASE.json [--where axis=value ...] [--ids c0001,c0002]
                                           [--requests N] [--seed S]

For each selected corpus case (chunked topology) at its stored rate, the replay's per-request marks
give two time-average occupancy laws over the measurement window (10% warm-up to the last arrival):

* slots: requests holding a slot (from admission, i.e. the first chunk, to the last token), the
  quantity the slot cap (KV, max_batch, budget) applies to in the replay;
* decode: requests decoding (first token to last token), the chain's n.

Both are counted over the whole pool (the marks carry no instance); the analytic law of the pool is
the c-fold convolution of one instance's law (independent instances, exact for random dispatch), or
for jsq the station's pooled slot chain. It
prints per case: mean and P(at the pool cap c cap) of each, analytic vs replay, and the mean wait before
the first chunk (analytic: backlog + slot wait; replay: admission minus arrival) with the analytic
slot wait's share.
"""

from __future__ import annotations

import argparse
import json
import sys

import numpy as np

from qmodel.solver import Solver
from qmodel.validation.corpus import generate
from qmodel.validation.corpus_run import keep_case
from qmodel.validation.replay import replay_requests, request_table


def time_hist(start: np.ndarray, end: np.ndarray, w0: float, w1: float, size: int) -> np.ndarray:
    """Time-average law of the number of open intervals [start, end) over [w0, w1], states 0..size-1
    (higher counts folded into the last)."""
    ok = np.isfinite(start)
    s, e = start[ok], np.where(np.isfinite(end[ok]), end[ok], np.inf)
    t = np.concatenate([s, e])
    d = np.concatenate([np.ones(len(s)), -np.ones(len(e))])
    order = np.argsort(t, kind="stable")
    t, d = t[order], d[order]
    n = np.cumsum(d)
    a = np.clip(t[:-1], w0, w1)
    b = np.clip(t[1:], w0, w1)
    dur = b - a
    h = np.bincount(np.minimum(n[:-1].astype(np.int64), size - 1), weights=dur, minlength=size)
    return h / h.sum()


def pool_law(pi: np.ndarray, c: int) -> np.ndarray:
    out = np.array([1.0])
    for _ in range(c):
        out = np.convolve(out, pi)
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("base")
    ap.add_argument("--where", action="append", default=[])
    ap.add_argument("--ids", default="")
    ap.add_argument("--requests", type=int, default=20000)
    ap.add_argument("--seed", type=int, default=0)
    a = ap.parse_args(argv)
    base = json.load(open(a.base))
    rows = {r["id"]: r for r in base["scenarios"]}
    ids = set(filter(None, a.ids.split(",")))
    corpus = generate(int(base["n"]), seed=int(base["seed"]), data=bool(base["data"]))
    where = ["topology=chunked", *a.where]
    print("| case | disp | c | cap | u | slots mean an/rep | slots P(cap) an/rep | decode mean an/rep | "
          "decode P(cap) an/rep | wait mean an/rep | an slot wait |")
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    for case in corpus.cases:
        if not keep_case(dict(case.features), where) or (ids and case.id not in ids):
            continue
        solver = Solver(case.scenario)
        rate = case.utilization * solver.max_stable_rate()[0]
        st = solver.station("pool")
        occ = st.occupancy(rate)
        c, cap = st.instances, int(occ["cap"])
        size = c * cap + 1
        _, req = replay_requests(case.scenario.with_rate(rate), n_requests=a.requests, seed=a.seed)
        tab = request_table(req)
        arr = tab["arrival_s"]
        w0, w1 = float(np.quantile(arr, 0.1)), float(arr.max())
        rep_slots = time_hist(tab["chunked_start_s"], tab["chunked_exit_s"], w0, w1, size + 8)
        rep_dec = time_hist(tab["first_token_s"], tab["chunked_exit_s"], w0, w1, size + 8)
        cells = []
        for key, rep in (("slots", rep_slots), ("decode", rep_dec)):
            an = np.asarray(occ["pooled"]) if "pooled" in occ else pool_law(np.asarray(occ.get(key, occ["decode"])), c)
            k = np.arange(len(an))
            kr = np.arange(len(rep))
            cells.append(f"{float(k @ an):.2f}/{float(kr @ rep):.2f}")
            cells.append(f"{float(an[c * cap:].sum()):.3f}/{float(rep[c * cap:].sum()):.3f}")
        sol = st.solve(rate)
        rw = (tab["chunked_start_s"] - tab["chunked_entry_s"])[(arr >= w0) & np.isfinite(tab["chunked_start_s"])]
        cells.append(f"{sol.wait.mean_s:.3g}/{float(rw.mean()):.3g}")
        cells.append(f"{sol.extra['mean_slot_wait_s']:.3g}")
        print(f"| {case.id} | {case.features['dispatch']} | {c} | {cap} | {case.utilization:.2f} | "
              + " | ".join(cells) + " |", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
