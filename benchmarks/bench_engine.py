"""Speed of the analytical engine on the shipped examples: one ``solve`` and one ``goodput``.

Targets (issue): a disaggregated solve with p50/p90/p99 <= 1 ms median; one goodput <= 20 ms.

    .venv/bin/python -m pytest benchmarks/bench_engine.py --benchmark-enable -q
    .venv/bin/python benchmarks/bench_engine.py [--repeat 15] [--examples a,b]
    .venv/bin/python benchmarks/bench_engine.py --against e051a84 [--rounds 3]   # speedup vs a revision
    .venv/bin/python benchmarks/bench_engine.py --breakdown   # where one disaggregated solve's time goes

What is timed:

* ``solve``: ``Solver.solve()`` at the scenario's own rate on a solver built once, i.e. the
  per-rate work (stations, composition, quantiles, the Result); the rate-independent resolution
  (catalog, length sample, service-time model, batch-time law) is paid once and reported apart
  as ``cold`` (``qmodel.solver.solve(scenario)`` from a parsed scenario, resolution included).
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

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _timing import median_cpu_ms  # noqa: E402
from tree_run import pin  # noqa: E402

pin()  # a baseline tree on PYTHONPATH runs its own qmodel.validation/catalog (benchmarks/tree_run.py)

EXAMPLES = ["llama3-70b-disagg-h100", "opt13b-disagg-a100", "llama3-8b-chunked-h100", "opt13b-colocated-a100"]
_ROOT = Path(__file__).resolve().parent.parent


def _scenario(name: str):
    from qmodel.scenario import load_scenario

    # any of the example formats (yaml, toml, json): the first file named <name>.*
    return load_scenario(sorted((_ROOT / "examples").glob(f"{name}.*"))[0])


def case_solve(name: str):
    from qmodel.solver import Solver

    solver = Solver(_scenario(name))
    solver.solve()  # resolution and rate-independent station parts
    return solver.solve


def case_cold_solve(name: str):
    from qmodel.solver import solve

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




def _measure(names: list[str], repeat: int) -> dict[str, dict[str, float]]:
    return {name: {"solve": median_cpu_ms(case_solve(name), repeat),
                   "cold": median_cpu_ms(case_cold_solve(name), max(3, repeat // 3)),
                   "goodput": median_cpu_ms(case_goodput(name), max(3, repeat // 3))} for name in names}


def _breakdown(names: list[str], repeat: int) -> None:
    """Median CPU ms of each part of one disaggregated solve at the scenario's rate: the three
    stations alone (each from the same inputs the composition gives it), the composition around
    them (``compose(laws=True)`` minus the stations: the TTFT and TPOT laws included), and the
    Result (summaries, station reports, binding)."""
    from qmodel.solver import Solver

    print(f"{'example':26s} {'prefill':>8s} {'kv':>8s} {'decode':>8s} {'compose':>8s} {'result':>8s} {'solve':>8s}"
          "   (median CPU ms; compose and result exclude the stations)")
    for name in names:
        solver = Solver(_scenario(name))
        if solver.topology.name != "disaggregated":
            continue
        rate = solver.resolved.base_rate_per_s
        solver.solve(rate)
        sp = solver._prefill.solve(rate)
        sd = solver.compose(rate).stations[2]
        reserved = solver._transfer.in_flight(rate)[1] / solver.resolved.kv_bytes_per_token \
            / solver.scenario.deployment.decode.instances
        parts = {
            "prefill": lambda: solver._prefill.solve(rate),
            # the KV station's report reads its wait law: counted with the station
            "kv": lambda: solver.topology.solve_link(solver, rate, sp, sd, wait_law=True).report(),
            # (with the KV reserved for transfers in flight at this rate, as compose solves it)
            "decode": lambda: solver._decode.with_reserved_kv(reserved).solve(rate),
            "compose": lambda: solver.compose(rate, laws=True),
            "solve": lambda: solver.solve(rate),
        }
        # round-robin: one call of each part per round, so a noisy phase of a shared machine
        # touches every part alike and the differences stay meaningful
        times: dict[str, list[float]] = {k: [] for k in parts}
        for fn in parts.values():
            fn()
        for _ in range(repeat):
            for k, fn in parts.items():
                c = time.process_time()
                fn()
                times[k].append(time.process_time() - c)
        t_p, t_k, t_d, t_c, t_s = (1e3 * statistics.median(times[k]) for k in parts)
        print(f"{name:26s} {t_p:8.3f} {t_k:8.3f} {t_d:8.3f} {t_c - t_p - t_k - t_d:8.3f} "
              f"{t_s - t_c:8.3f} {t_s:8.3f}", flush=True)


def _against(rev: str, names: list[str], repeat: int, rounds: int) -> None:
    """Time ``rev`` (a git worktree of it, on PYTHONPATH) and this tree in alternating subprocesses on
    the same machine, and print both medians and their ratio: on a shared machine absolute CPU
    times drift by tens of percent between runs, the ratio much less."""
    import json
    import subprocess
    import tempfile

    from qmodel.settings import data_dir

    env = dict(os.environ, OPENBLAS_NUM_THREADS="1", OMP_NUM_THREADS="1", MKL_NUM_THREADS="1")
    if data_dir() is not None:
        env["QMODEL_DATA_DIR"] = str(data_dir())  # the old tree looks for data beside itself
    args = [sys.executable, str(Path(__file__).resolve()), "--json", "--repeat", str(repeat), "--examples", ",".join(names)]
    with tempfile.TemporaryDirectory() as tmp:
        tree = Path(tmp) / "baseline"
        subprocess.run(["git", "-C", str(_ROOT), "worktree", "add", "--detach", "-q", str(tree), rev], check=True)
        try:
            runs: dict[str, list[dict]] = {"baseline": [], "current": []}
            for _ in range(rounds):
                for label, extra in (("baseline", {"PYTHONPATH": str(tree)}), ("current", {})):
                    out = subprocess.run(args, env={**env, **extra}, check=True, capture_output=True, text=True).stdout
                    runs[label].append(json.loads(out))
        finally:
            subprocess.run(["git", "-C", str(_ROOT), "worktree", "remove", "--force", str(tree)], check=False)
    print(f"{'example':26s} {'case':8s} {rev[:10]:>10s} {'current':>10s} {'speedup':>8s}   (median CPU ms over {rounds} rounds)")
    for name in names:
        for case in ("solve", "cold", "goodput"):
            b = statistics.median(r[name][case] for r in runs["baseline"])
            c = statistics.median(r[name][case] for r in runs["current"])
            print(f"{name:26s} {case:8s} {b:10.2f} {c:10.2f} {b / c:7.2f}x", flush=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeat", type=int, default=15, help="timed calls per case (goodput: a third of it, at least 3)")
    ap.add_argument("--examples", default=",".join(EXAMPLES), help="comma-separated example names (examples/<name>.yaml)")
    ap.add_argument("--json", action="store_true", help="print the medians as JSON")
    ap.add_argument("--against", metavar="REV", help="also time git revision REV, alternating, and print the ratio")
    ap.add_argument("--rounds", type=int, default=3, help="alternating rounds with --against")
    ap.add_argument("--breakdown", action="store_true", help="time the parts of one disaggregated solve")
    args = ap.parse_args()
    names = args.examples.split(",")
    if args.breakdown:
        _breakdown(names, args.repeat)
        return
    if args.against:
        _against(args.against, names, args.repeat, args.rounds)
        return
    if args.json:
        import json

        print(json.dumps(_measure(names, args.repeat)))
        return
    print(f"{'example':26s} {'solve':>10s} {'cold':>10s} {'goodput':>10s}   (median CPU ms, 1 BLAS thread; "
          "targets: solve <= 1, goodput <= 20)")
    for name in names:
        m = _measure([name], args.repeat)[name]
        print(f"{name:26s} {m['solve']:10.2f} {m['cold']:10.2f} {m['goodput']:10.2f}", flush=True)


if __name__ == "__main__":
    if "numpy" not in sys.modules:
        for k in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
            os.environ.setdefault(k, "1")
    main()
