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
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from qmodel.scenario import load_scenario, parse_scenario  # noqa: E402
from qmodel.validation.suites import CONFIGS  # noqa: E402

from _breadth import default_cache, error_table  # noqa: E402  (beside this script)

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
    ap.add_argument("--cache", default=default_cache("ttft_breadth"))
    ap.add_argument("--out", default=None)
    ap.add_argument("--requests", type=int, default=20000)
    ap.add_argument("--single", action="store_true")
    a = ap.parse_args()
    error_table(scenarios(a.single), LOADS, METRICS, a.requests, a.cache, a.out, 58)


if __name__ == "__main__":
    main()
