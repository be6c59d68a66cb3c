"""Warm ``Solver.solve()`` over the validation corpus (issue 20: median scenario <= 1 ms, worst <= 10 ms),
and which station's solve dominates each case.

    QMODEL_DATA_DIR=... OPENBLAS_NUM_THREADS=1 .venv/bin/python benchmarks/bench_corpus_solve.py \
        BASE.json [--repeat 3] [--where axis=value ...] [--top 10]

BASE.json is a ``qmodel validate --suite corpus --json`` result: the corpus is regenerated from its
seed, n and data flag and each open-loop case solved at its stored rate (closed loops are left out:
their solve is a search over rates). Per case: one untimed solve (resolution and rate-independent
parts), then the median CPU time (``time.process_time``) of ``--repeat`` solves on the same solver,
and of each station's own ``solve`` at that rate. Prints the median, p90 and worst by topology and
the slowest cases with their dominant station.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from collections import defaultdict
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _timing import median_cpu_ms  # noqa: E402
from tree_run import pin  # noqa: E402

pin()




def _pct(xs: list[float], q: float) -> float:
    s = sorted(xs)
    return s[min(len(s) - 1, int(q * len(s)))]


def main(argv: list[str] | None = None) -> int:
    from qmodel.solver import Solver
    from qmodel.validation.corpus import generate

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("base")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--where", action="append", default=[])
    ap.add_argument("--top", type=int, default=10)
    a = ap.parse_args(argv)
    base = json.load(open(a.base))
    rates = {r["id"]: r["rate_per_s"] for r in base["scenarios"]}
    corpus = generate(base["n"], base["seed"], base["data"])
    rows = []
    for case in corpus.cases:
        f = case.features
        if f.get("arrivals") == "closed" or case.id not in rates:
            continue
        if any(f.get(w.split("=")[0]) != w.split("=")[1] for w in a.where):
            continue
        solver = Solver(case.scenario)
        rate = rates[case.id]
        try:
            solver.solve(rate)
        except Exception as err:  # noqa: BLE001 - reported, not timed
            print(f"{case.id}: {type(err).__name__}: {err}", file=sys.stderr)
            continue
        total = median_cpu_ms(lambda: solver.solve(rate), a.repeat, warm=False)
        per = {role: median_cpu_ms(lambda r=role: solver.station(r).solve(rate), a.repeat, warm=False) for role in solver.topology.roles}
        top = max(per, key=per.get)
        rows.append((total, case.id, f.get("topology", "?"), f.get("arrivals", "?"), top, per[top]))
    by: dict[str, list[float]] = defaultdict(list)
    for total, _, topo, *_ in rows:
        by[topo].append(total)
        by["all"].append(total)
    print(f"{len(rows)} open cases; warm solve CPU ms (median of {a.repeat})")
    print(f"{'topology':15s} {'n':>4s} {'median':>8s} {'p90':>8s} {'worst':>8s}")
    for k in sorted(by):
        xs = by[k]
        print(f"{k:15s} {len(xs):4d} {statistics.median(xs):8.2f} {_pct(xs, 0.9):8.2f} {max(xs):8.2f}")
    dom: dict[str, list[float]] = defaultdict(list)
    for total, _, _, _, top, t in rows:
        dom[top].append(t / total if total > 0 else 0.0)
    print("\ndominant station: cases, median share of the solve")
    for k, v in sorted(dom.items(), key=lambda kv: -len(kv[1])):
        print(f"  {k:15s} {len(v):4d} {statistics.median(v):6.0%}")
    print(f"\nslowest {a.top}:")
    for total, cid, topo, arr, top, t in sorted(rows, reverse=True)[: a.top]:
        print(f"  {cid} {topo:14s} {arr:8s} {total:8.2f} ms  {top} {t:.2f} ms")
    return 0


if __name__ == "__main__":
    sys.exit(main())
