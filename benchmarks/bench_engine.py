"""Speed of the analytical engine on the shipped examples: one ``solve`` and one ``goodput``.

Targets (issue): a disaggregated solve with p50/p90/p99 <= 1 ms median; one goodput <= 20 ms.

    .venv/bin/python -m pytest benchmarks/bench_engine.py --benchmark-enable -q
    .venv/bin/python benchmarks/bench_engine.py [--repeat 15] [--examples a,b]

What is timed:

* ``solve``: ``Solver.solve()`` at the scenario's own rate on a solver built once, i.e. the
  per-rate work (stations, composition, quantiles, the Result); the rate-independent resolution
  (catalog, length sample, service-time model, batch-time law) is paid once and reported apart
  as ``cold`` (``qmodel.engine.solve(scenario)`` from a parsed scenario, resolution included).
* ``goodput``: ``qmodel.goodput.goodput(scenario)`` from a parsed scenario: resolution, the
  bracketed search and the binding explanation, everything a CLI call does after parsing.

The script prints medians of CPU time (``time.process_time``) with one BLAS thread, since wall
time on a shared machine says little; it sets OPENBLAS/OMP/MKL_NUM_THREADS=1 before numpy loads.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from pathlib import Path

EXAMPLES = ["llama3-70b-disagg-h100", "opt13b-disagg-a100", "llama3-8b-chunked-h100", "opt13b-colocated-a100"]
_ROOT = Path(__file__).resolve().parent.parent


def _scenario(name: str):
    from qmodel.scenario import load_scenario

    return load_scenario(_ROOT / "examples" / f"{name}.yaml")


def case_solve(name: str):
    from qmodel.engine import Solver

    solver = Solver(_scenario(name))
    solver.solve()  # resolution and rate-independent station parts
    return solver.solve


def case_cold_solve(name: str):
    from qmodel.engine import solve

    sc = _scenario(name)
    return lambda: solve(sc)


def case_goodput(name: str):
    from qmodel.goodput import goodput

    sc = _scenario(name)
    return lambda: goodput(sc)


def _bench(benchmark, fn) -> None:
    fn()  # imports and first-use caches
    benchmark(fn)


def test_bench_solve_llama3_70b_disagg(benchmark) -> None:
    _bench(benchmark, case_solve("llama3-70b-disagg-h100"))


def test_bench_solve_opt13b_disagg(benchmark) -> None:
    _bench(benchmark, case_solve("opt13b-disagg-a100"))


def test_bench_solve_llama3_8b_chunked(benchmark) -> None:
    _bench(benchmark, case_solve("llama3-8b-chunked-h100"))


def test_bench_solve_opt13b_colocated(benchmark) -> None:
    _bench(benchmark, case_solve("opt13b-colocated-a100"))


def test_bench_goodput_llama3_70b_disagg(benchmark) -> None:
    _bench(benchmark, case_goodput("llama3-70b-disagg-h100"))


def test_bench_goodput_opt13b_disagg(benchmark) -> None:
    _bench(benchmark, case_goodput("opt13b-disagg-a100"))


def test_bench_goodput_llama3_8b_chunked(benchmark) -> None:
    _bench(benchmark, case_goodput("llama3-8b-chunked-h100"))


def test_bench_goodput_opt13b_colocated(benchmark) -> None:
    _bench(benchmark, case_goodput("opt13b-colocated-a100"))


def _median_cpu_ms(fn, repeat: int) -> float:
    fn()
    times = []
    for _ in range(repeat):
        c = time.process_time()
        fn()
        times.append(time.process_time() - c)
    return 1e3 * statistics.median(times)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeat", type=int, default=15, help="timed calls per case (goodput: a third of it, at least 3)")
    ap.add_argument("--examples", default=",".join(EXAMPLES), help="comma-separated example names (examples/<name>.yaml)")
    args = ap.parse_args()
    print(f"{'example':26s} {'solve':>10s} {'cold':>10s} {'goodput':>10s}   (median CPU ms, 1 BLAS thread; "
          "targets: solve <= 1, goodput <= 20)")
    for name in args.examples.split(","):
        s = _median_cpu_ms(case_solve(name), args.repeat)
        c = _median_cpu_ms(case_cold_solve(name), max(3, args.repeat // 3))
        g = _median_cpu_ms(case_goodput(name), max(3, args.repeat // 3))
        print(f"{name:26s} {s:10.2f} {c:10.2f} {g:10.2f}", flush=True)


if __name__ == "__main__":
    if "numpy" not in sys.modules:
        for k in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
            os.environ.setdefault(k, "1")
    main()
