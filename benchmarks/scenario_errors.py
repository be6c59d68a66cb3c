"""Analytic-vs-replay errors of one scenario at several loads (the table behind docs/validation.md,
"Trace arrivals as a nonstationary process", the bundled trace example before/after).

    QMODEL_DATA_DIR=../shared/data python benchmarks/scenario_errors.py examples/azure-conv-trace-disagg-a100.yaml 0.5,0.8,0.9 [--requests 20000] [--seeds 0] [--json OUT]

For each load u (a fraction of the analytic stability limit) it runs
``qmodel.validation.harness.compare_scenario(scenario, u, requests, seeds)`` and prints the signed
relative errors (analytic - replay) / replay of TTFT/TPOT p50/p90/p99 and the attainment difference.
With ``PYTHONPATH`` pointing at another tree (``benchmarks/tree_run.py``) it measures that tree.
"""

from __future__ import annotations

import argparse
import json
import os
import sys

sys.path.insert(0, os.path.dirname(__file__))

METRICS = ("ttft_p50", "ttft_p90", "ttft_p99", "tpot_p50", "tpot_p90", "tpot_p99")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("scenario")
    ap.add_argument("loads", help="comma-separated fractions of the stability limit, e.g. 0.5,0.8,0.9")
    ap.add_argument("--requests", type=int, default=20000)
    ap.add_argument("--seeds", default="0", help="comma-separated replay seeds")
    ap.add_argument("--json", default=None, help="write {u: error_rel} to this file")
    a = ap.parse_args(argv)
    if os.environ.get("PYTHONPATH"):
        from tree_run import pin

        pin()
    from qmodel.source import as_scenario
    from qmodel.validation.harness import compare_scenario

    sc = as_scenario(a.scenario)
    seeds = tuple(int(s) for s in a.seeds.split(","))
    out: dict[str, dict] = {}
    print("| u | " + " | ".join(m.replace("_", " ").upper() for m in METRICS) + " | attainment (diff) |")
    print("|---" * (len(METRICS) + 2) + "|")
    for u in (float(x) for x in a.loads.split(",")):
        e = compare_scenario(sc, u, a.requests, seeds)["error_rel"]
        out[str(u)] = e
        cells = " | ".join(f"{100 * e[m]:+.1f}%" for m in METRICS)
        print(f"| {u:g} | {cells} | {e['attainment']:+.3f} |", flush=True)
    if a.json:
        with open(a.json, "w", encoding="utf-8") as fh:
            json.dump(out, fh, indent=1, sort_keys=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
