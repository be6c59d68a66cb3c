"""Chunked TTFT/TPOT vs the replay over the budget sweep and the suite's chunked configs (minutes).

    .venv/bin/python benchmarks/chunked_ttft_breadth.py [--cache F] [--out F] [--requests N]

Budgets 256..8192 on examples/llama3-8b-chunked-h100.yaml (Gamma CV 2) and the suite's chunked
configs (Poisson and Gamma CV 2, synthetic lengths), each at 0.5 / 0.8 / 0.95 of the analytic
limit. Replays (seed 0) are cached in ``--cache``: they do not depend on the analytic engine.
Prints the relative error per case and the median |error| per metric (docs/validation.md).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from qmodel.engine import Solver  # noqa: E402
from qmodel.scenario import load_scenario, parse_scenario  # noqa: E402
from qmodel.validation.engine import replay  # noqa: E402
from qmodel.validation.harness import latency_metrics  # noqa: E402
from qmodel.validation.suites import CONFIGS  # noqa: E402

BUDGETS = (256, 512, 1024, 2048, 4096, 8192)
LOADS = (0.5, 0.8, 0.95)
METRICS = [f"{m}_{k}" for m in ("ttft", "tpot") for k in ("p50", "p90", "p99")]


def scenarios() -> list[tuple[str, object]]:
    base = load_scenario(REPO / "examples" / "llama3-8b-chunked-h100.yaml")
    out = []
    for b in BUDGETS:
        d = base.model_dump(mode="json")
        d["deployment"]["chunk_tokens"] = b
        out.append((f"llama3-8b-chunked/B{b}", parse_scenario(d, source=f"B{b}")))
    for c in CONFIGS.values():
        if c.topology == "chunked":
            out += [(f"{c.name}/{a}", c.scenario(a, 1.0, empirical=False)) for a in ("poisson", "gamma-cv2")]
    return out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--cache", default="/tmp/chunked_ttft_breadth_replay.json")
    ap.add_argument("--out", default=None)
    ap.add_argument("--requests", type=int, default=20000)
    a = ap.parse_args()
    cache_path = Path(a.cache)
    cache = json.loads(cache_path.read_text()) if cache_path.exists() else {}
    rows = []
    for name, sc in scenarios():
        solver = Solver(sc)
        lam = solver.max_stable_rate()[0]
        for u in LOADS:
            key = f"{name}/u{u}/n{a.requests}/lam{lam:.6g}"
            rate = u * lam
            if key not in cache:
                cache[key] = latency_metrics(replay(sc.with_rate(rate), n_requests=a.requests, seed=0))
                cache_path.write_text(json.dumps(cache, indent=1, sort_keys=True))
            rep = cache[key]
            an = latency_metrics(solver.solve(rate))
            err = {k: (an[k] - rep[k]) / rep[k] if rep[k] else 0.0 for k in METRICS}
            rows.append({"case": f"{name}/u{u}", "analytic": an, "replay": rep, "error": err})
            print(f"{name + '/u' + str(u):44s} " + " ".join(f"{err[k] * 100:+6.1f}" for k in METRICS), flush=True)
    print(f"{'median |error| %':44s} " + " ".join(f"{np.median([abs(r['error'][k]) for r in rows]) * 100:6.1f}"
                                               for k in METRICS))
    print(f"{'columns':44s} " + " ".join(f"{k:>6s}"[-6:] for k in METRICS))
    if a.out:
        Path(a.out).write_text(json.dumps(rows, indent=1))


if __name__ == "__main__":
    main()
