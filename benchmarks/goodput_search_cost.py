"""The goodput search's cost: attainment evaluations per search on every bundled example.

For each example: cold, warm from the root itself (an unchanged answer) and warm from 10 % below
and above it (a sensitivity's perturbation), as tests/test_goodput_warm.py runs them; the root is
read from a bisection of the same attainment to 1e-6 relative. Attainments are memoised in
``--cache`` (a JSON file keyed by example and rate), so comparing two versions of the search
re-solves only the rates the other did not probe.

    QMODEL_DATA_DIR=../shared/data python benchmarks/goodput_search_cost.py [--cache F]
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from qmodel.goodput import REL_TOL, goodput_search
from qmodel.solver import Solver
from qmodel.source import as_scenario

EXAMPLES = sorted(p for p in (Path(__file__).resolve().parent.parent / "examples").iterdir()
                  if p.suffix in (".yaml", ".json", ".toml"))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--cache", type=Path, default=None, help="JSON memo of attainments")
    args = ap.parse_args()
    memo: dict[str, dict[str, float]] = (json.loads(args.cache.read_text())
                                         if args.cache and args.cache.exists() else {})
    total = [0, 0, 0, 0]
    print(f"{'example':36s} {'cold':>4s} {'same':>4s} {'-10%':>4s} {'+10%':>4s}  goodput (cold)   rel. to root")
    for path in EXAMPLES:
        sc = as_scenario(path)
        solver = Solver(sc)
        lam_max, _ = solver.max_stable_rate()
        goal = sc.slo.attainment_goal
        table = memo.setdefault(path.stem, {})
        calls: list[float] = []

        def att(x: float) -> float:
            calls.append(x)
            key = repr(x)
            if key not in table:
                table[key] = solver.attainment(x)
            return table[key]

        lo, hi = 1e-4 * lam_max, 0.999 * lam_max
        while hi - lo > 1e-6 * hi:
            mid = 0.5 * (lo + hi)
            lo, hi = (mid, hi) if att(mid) >= goal else (lo, mid)
        row = []
        for i, guess in enumerate((None, lo, 0.9 * lo, 1.1 * lo)):
            calls.clear()
            g, a = goodput_search(att, lam_max, goal, guess=guess)
            assert lo * (1 - REL_TOL) * (1 - 1e-12) <= g <= hi and a >= goal, (path.stem, guess, g, lo)
            row.append(len(calls))
            total[i] += len(calls)
            if guess is None:
                g_cold = g
        print(f"{path.stem:36s} {row[0]:4d} {row[1]:4d} {row[2]:4d} {row[3]:4d}  {g_cold:.9g}  {g_cold / lo - 1:+.2e}")
        if args.cache:
            args.cache.write_text(json.dumps(memo))
    print(f"{'total':36s} {total[0]:4d} {total[1]:4d} {total[2]:4d} {total[3]:4d}")


if __name__ == "__main__":
    main()
