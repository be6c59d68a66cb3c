"""``qmodel compare SCENARIO``: colocated, chunked and disaggregated on the same GPUs, side by side."""

from __future__ import annotations

import argparse

from qmodel.cli.common import add_scenario_args, scenario_from_args
from qmodel.cli.output import add_progress_option, print_json, print_table, progress_on, say

__all__ = ["register", "run"]


def register(sub) -> None:
    p = sub.add_parser("compare", help="colocated vs chunked vs disaggregated on the same GPUs")
    add_scenario_args(p)
    g = p.add_mutually_exclusive_group()
    g.add_argument("--json", action="store_true", help="print JSON (docs/output-schema.json)")
    g.add_argument("--csv", action="store_true", help="print CSV, one row per topology")
    add_progress_option(p)
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from qmodel.compare import compare_topologies

    from qmodel.progress import Progress

    with Progress(progress_on(args), "compare") as bar:
        out = compare_topologies(scenario_from_args(args), progress=bar)
    if args.json:
        print_json(out)
        return 0
    if args.csv:
        import csv
        import sys

        rows = [c.model_dump() for c in out.candidates]
        w = csv.DictWriter(sys.stdout, fieldnames=list(rows[0]), lineterminator="\n")
        w.writeheader()
        w.writerows({k: f"{v:.6g}" if isinstance(v, float) else v for k, v in r.items()} for r in rows)
        return 0
    say(f"{out.scenario}: {out.gpus} x {out.gpu} (TP{out.tp}) — the same GPUs three ways\n")
    print_table(["topology", "layout", "goodput req/s", "per GPU", "knee req/s", "max stable", "binds"],
                [[c.topology, c.layout, c.goodput_rps, c.goodput_per_gpu, c.knee_rps, c.max_stable_rate_per_s,
                  c.binding.split(":", 1)[0].removesuffix(" binds")] for c in out.candidates])
    say(f"\nverdict: {out.verdict}\n")
    for c in out.candidates:
        say(f"{c.topology}: {c.binding}")
    priced = [c for c in out.candidates if c.usd_per_million_tokens is not None]
    if priced:
        say(f"\ncost ${priced[0].cost_per_hour_usd:.4g}/h; $ per million tokens at goodput:")
        for c in priced:
            say(f"  {c.topology:<14} ${c.usd_per_million_input_tokens:.3g} input, "
                f"${c.usd_per_million_output_tokens:.3g} output, ${c.usd_per_million_tokens:.3g} all")
    return 0
