"""Replay speed targets (run as a script; CI does not time tests).

1. The Azure 2023 conversation trace (19,366 requests) through a 4-prefill / 4-decode plan
   (examples/azure-conv-trace-disagg-a100.yaml): target <= 5 s on one core.
2. A 1,000,000-request synthetic trace (Poisson, sharegpt preset lengths) through a
   disaggregated plan sized to stay stable: target <= 60 s.

Usage: ``python benchmarks/bench_replay.py [--quick]`` (``--quick``: 100k synthetic requests).
Times are of ``replay_plan`` alone (trace loading and model building reported apart): wall clock and
process CPU time (the CPU figure is the one to compare with the targets on a shared machine).
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent


def _azure() -> None:
    from qmodel.scenario import load_scenario
    from qmodel.validation.replay import build_plan, load_replay_trace, replay_plan

    scn = load_scenario(REPO / "examples" / "azure-conv-trace-disagg-a100.yaml")
    t0 = time.perf_counter()
    plan = build_plan(scn)
    tr = load_replay_trace(scn)
    t1, c1 = time.perf_counter(), time.process_time()
    res = replay_plan(plan, tr)
    t2, c2 = time.perf_counter(), time.process_time()
    print(f"azure-conv 4P/4D: {len(tr)} requests, {res.events} events: replay {t2 - t1:.2f} s wall, {c2 - c1:.2f} s CPU "
          f"(+ {t1 - t0:.2f} s load/build); target <= 5 s; TTFT p90 {res.ttft.p90:.3f} s, TPOT p90 "
          f"{res.tpot.p90 * 1e3:.1f} ms")


def _synthetic(n: int) -> None:
    from qmodel.scenario import parse_scenario
    from qmodel.validation.replay import build_plan, load_replay_trace, replay_plan

    scn = parse_scenario({
        "name": "bench-1m", "model": "llama-3.1-8b",
        "workload": {"arrivals": {"kind": "poisson", "rate_per_s": 30}, "lengths": {"kind": "preset", "name": "sharegpt"}},
        "slo": {"ttft_s": 1.0, "tpot_s": 0.05},
        "deployment": {"topology": "disaggregated",
                       "prefill": {"gpu": "h100-sxm", "instances": 3, "dispatch": "least_loaded"},
                       "decode": {"gpu": "h100-sxm", "instances": 4},
                       "link": "ib-ndr-400", "link_sharing": "fair", "transfer_mode": "layerwise"},
    })
    t0 = time.perf_counter()
    plan = build_plan(scn)
    tr = load_replay_trace(scn, n_requests=n, seed=0)
    t1, c1 = time.perf_counter(), time.process_time()
    res = replay_plan(plan, tr)
    t2, c2 = time.perf_counter(), time.process_time()
    print(f"synthetic: {n} requests, {res.events} events: replay {t2 - t1:.2f} s wall, {c2 - c1:.2f} s CPU "
          f"(+ {t1 - t0:.2f} s generate); "
          f"target <= {60 * n / 1_000_000:.0f} s; TTFT p90 {res.ttft.p90:.3f} s, TPOT p90 {res.tpot.p90 * 1e3:.1f} ms, "
          f"utilization {[round(s.utilization, 3) for s in res.stations]}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="100k synthetic requests instead of 1M")
    args = ap.parse_args()
    _azure()
    _synthetic(100_000 if args.quick else 1_000_000)


if __name__ == "__main__":
    main()
