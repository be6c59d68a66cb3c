"""What compressing the length mix to K equal-probability strata would buy and cost (issue 20).

The experiment behind docs/speed.md "Warm solve on empirical length mixes": every example is solved
with its own length mix and with the mix cut to K strata (the (prompt, output) pair at the middle
order statistic of prompt in each 1/K quantile cell, equally weighted), everything downstream
unchanged. Printed: the warm ``Solver.solve()`` median CPU ms, the largest relative move of TTFT
and TPOT p50/p90/p99, and the move of the stability limit.

    QMODEL_DATA_DIR=/path/to/data OPENBLAS_NUM_THREADS=1 .venv/bin/python benchmarks/length_strata.py \
        [--examples a,b] [--strata 1024,256,64] [--repeat 9]

Each (example, K) runs in a fresh process (the length mix is swapped by replacing
``qmodel.build.length_mix`` there before the solver is built).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

_ROOT = Path(__file__).resolve().parent.parent
EXAMPLES = ["llama3-70b-disagg-h100", "azure-conv-trace-disagg-a100", "llama2-70b-disagg-splitwise",
            "deepseek-v3-disagg-h200", "llama3-8b-colocated-h100", "llama3-8b-chunked-h100"]
_METRICS = [f"{m}_{p}" for m in ("ttft", "tpot") for p in ("p50", "p90", "p99")]


def one(name: str, strata: int, repeat: int) -> dict[str, float]:
    """Warm solve time, percentiles and limit of ``name`` with its mix cut to ``strata`` (0: as it is)."""
    import numpy as np

    import qmodel.build
    from qmodel.scenario import load_scenario
    from qmodel.solver import Solver
    from qmodel.workload import LengthMix, length_mix

    def cut(*args: object, **kwargs: object) -> LengthMix:
        mix = length_mix(*args, **kwargs)  # type: ignore[arg-type]
        if strata <= 0 or len(mix) <= strata:
            return mix
        order = np.argsort(mix.prompt, kind="stable")
        pick = order[((np.arange(strata) + 0.5) * len(mix) / strata).astype(np.int64)]
        return LengthMix(mix.prompt[pick], mix.output[pick], f"{mix.sha256}/{strata}")

    qmodel.build.length_mix = cut  # type: ignore[assignment]
    solver = Solver(load_scenario(sorted((_ROOT / "examples").glob(f"{name}.*"))[0]))
    result = solver.solve()
    times = []
    for _ in range(repeat):
        c = time.process_time()
        solver.solve()
        times.append(time.process_time() - c)
    out = {"warm_ms": 1e3 * statistics.median(times), "limit": solver.max_stable_rate()[0]}
    for key in _METRICS:
        metric, p = key.split("_")
        out[key] = getattr(getattr(result, metric), p)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--examples", default=",".join(EXAMPLES))
    ap.add_argument("--strata", default="1024,256,64", help="comma-separated K")
    ap.add_argument("--repeat", type=int, default=9)
    ap.add_argument("--one", nargs=2, metavar=("NAME", "K"), help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.one:
        print(json.dumps(one(a.one[0], int(a.one[1]), a.repeat)))
        return
    env = dict(os.environ, OPENBLAS_NUM_THREADS="1", OMP_NUM_THREADS="1", MKL_NUM_THREADS="1")

    def run(name: str, k: int) -> dict[str, float]:
        cmd = [sys.executable, __file__, "--one", name, str(k), "--repeat", str(a.repeat)]
        return json.loads(subprocess.run(cmd, env=env, check=True, capture_output=True, text=True).stdout)

    print(f"{'example':30s} {'K':>5s} {'warm ms all -> K':>17s} {'max |move|':>11s} {'(which)':10s} {'limit':>7s}")
    for name in a.examples.split(","):
        base = run(name, 0)
        for k in (int(x) for x in a.strata.split(",")):
            r = run(name, k)
            moves = {m: abs(r[m] / base[m] - 1.0) for m in _METRICS}
            worst = max(moves, key=lambda m: moves[m])
            print(f"{name:30s} {k:5d} {base['warm_ms']:7.1f} -> {r['warm_ms']:6.1f} {100 * moves[worst]:10.2f}% "
                  f"{worst:10s} {100 * (r['limit'] / base['limit'] - 1.0):+6.2f}%", flush=True)


if __name__ == "__main__":
    main()
