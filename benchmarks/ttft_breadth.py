"""Analytic vs replay TTFT/TPOT errors across the disaggregated examples and suite configs, both
``first_token_from`` values and several loads (issue 15 items 5 and 9; minutes: run on demand).

    .venv/bin/python benchmarks/ttft_breadth.py [--cache F] [--out F] [--requests N] [--single]

Replays are cached in ``--cache`` (JSON, keyed by case): the replay does not depend on the
analytic engine, so a before/after comparison of a solver change replays once. ``--single``
adds the colocated/chunked suite configs (Poisson). Prints one row per case (relative errors of
mean/p50/p90/p99) and the median |error| per metric; ``--out`` writes the rows as JSON.
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

DISAGG_EXAMPLES = ["azure-conv-trace-disagg-a100.yaml", "deepseek-v3-disagg-h200.json",
                   "llama2-70b-disagg-splitwise.toml", "llama3-70b-disagg-h100.yaml", "opt13b-disagg-a100.yaml"]
LOADS = (0.3, 0.6, 0.85)
METRICS = [f"{m}_{k}" for m in ("ttft", "tpot") for k in ("mean", "p50", "p90", "p99")]


def _with_first_token(sc, first: str):
    d = sc.model_dump(mode="json")
    d["deployment"]["first_token_from"] = first
    return parse_scenario(d, source=sc.name)


def scenarios(single: bool) -> list[tuple[str, object]]:
    out = []
    for ex in DISAGG_EXAMPLES:
        try:
            sc = load_scenario(REPO / "examples" / ex)
        except Exception as err:  # noqa: BLE001 -- an example needing the data folder is skipped
            print(f"skip {ex}: {err}", file=sys.stderr)
            continue
        out += [(f"{ex}/{f}", _with_first_token(sc, f)) for f in ("prefill", "decode")]
    for c in CONFIGS.values():
        if c.topology == "disaggregated":
            sc = c.scenario("poisson", 1.0, empirical=False)
            out += [(f"{c.name}/{f}", _with_first_token(sc, f)) for f in ("prefill", "decode")]
        elif single:
            out.append((c.name, c.scenario("poisson", 1.0, empirical=False)))
    return out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--cache", default="/tmp/ttft_breadth_replay.json")
    ap.add_argument("--out", default=None)
    ap.add_argument("--requests", type=int, default=20000)
    ap.add_argument("--single", action="store_true")
    a = ap.parse_args()
    cache_path = Path(a.cache)
    cache = json.loads(cache_path.read_text()) if cache_path.exists() else {}
    rows = []
    for name, sc in scenarios(a.single):
        solver = Solver(sc)
        lam = solver.max_stable_rate()[0]
        for u in LOADS:
            key = f"{name}/u{u}/n{a.requests}"
            rate = u * lam
            if key not in cache:
                cache[key] = latency_metrics(replay(sc.with_rate(rate), n_requests=a.requests, seed=0))
                cache_path.write_text(json.dumps(cache, indent=1, sort_keys=True))
            rep = cache[key]
            an = latency_metrics(solver.solve(rate))
            err = {k: (an[k] - rep[k]) / rep[k] if rep[k] else 0.0 for k in METRICS}
            rows.append({"case": f"{name}/u{u}", "analytic": an, "replay": rep, "error": err})
            print(f"{name + '/u' + str(u):58s} " + " ".join(f"{err[k] * 100:+6.1f}" for k in METRICS), flush=True)
    print(f"{'median |error| %':58s} " + " ".join(f"{np.median([abs(r['error'][k]) for r in rows]) * 100:6.1f}"
                                               for k in METRICS))
    print(f"{'columns':58s} " + " ".join(f"{k:>6s}"[-6:] for k in METRICS))
    if a.out:
        Path(a.out).write_text(json.dumps(rows, indent=1))


if __name__ == "__main__":
    main()
