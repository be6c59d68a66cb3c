"""The analytic-vs-replay error table the breadth benchmarks print (beside them: imported as
``from _breadth import ...``, sys.path[0] when a script runs).

Replays are cached in a JSON file keyed by case: the replay does not depend on the analytic engine,
so a before/after comparison of a solver change replays once.
"""

from __future__ import annotations

import json
import tempfile
from pathlib import Path
from typing import Any, Iterable

import numpy as np

from qmodel.solver import Solver
from qmodel.validation.replay import replay
from qmodel.validation.harness import latency_metrics

__all__ = ["default_cache", "error_table"]


def default_cache(name: str) -> str:
    """The default replay cache of benchmark ``name``, in the system's temporary folder."""
    return str(Path(tempfile.gettempdir()) / f"{name}_replay.json")


def error_table(cases: Iterable[tuple[str, Any]], loads: Iterable[float], metrics: list[str], requests: int,
                cache: str, out: str | None, width: int, key_limit: bool = False) -> list[dict]:
    """For each (name, scenario) at each load (fraction of the analytic limit): analytic vs replay
    (seed 0) relative errors of ``metrics``; one printed row per case, then the median |error|.
    ``key_limit`` adds the limit to the cache key (for cases whose limit a change may move)."""
    cache_path = Path(cache)
    replays = json.loads(cache_path.read_text()) if cache_path.exists() else {}
    rows = []
    for name, sc in cases:
        solver = Solver(sc)
        lam = solver.max_stable_rate()[0]
        for u in loads:
            key = f"{name}/u{u}/n{requests}" + (f"/lam{lam:.6g}" if key_limit else "")
            rate = u * lam
            if key not in replays:
                replays[key] = latency_metrics(replay(sc.with_rate(rate), n_requests=requests, seed=0))
                cache_path.write_text(json.dumps(replays, indent=1, sort_keys=True))
            rep = replays[key]
            an = latency_metrics(solver.solve(rate))
            err = {k: (an[k] - rep[k]) / rep[k] if rep[k] else 0.0 for k in metrics}
            rows.append({"case": f"{name}/u{u}", "analytic": an, "replay": rep, "error": err})
            print(f"{name + '/u' + str(u):{width}s} " + " ".join(f"{err[k] * 100:+6.1f}" for k in metrics), flush=True)
    print(f"{'median |error| %':{width}s} " + " ".join(f"{np.median([abs(r['error'][k]) for r in rows]) * 100:6.1f}"
                                                    for k in metrics))
    print(f"{'columns':{width}s} " + " ".join(f"{k:>6s}"[-6:] for k in metrics))
    if out:
        Path(out).write_text(json.dumps(rows, indent=1))
    return rows
