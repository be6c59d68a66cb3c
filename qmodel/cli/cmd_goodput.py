"""``qmodel goodput SCENARIO``: the largest rate meeting the SLO attainment goal."""

from __future__ import annotations

import argparse

from qmodel.cli.common import add_scenario_args, scenario_from_args
from qmodel.cli.output import add_progress_option, print_json, print_table, progress_on, say

__all__ = ["register", "run"]


def register(sub) -> None:
    p = sub.add_parser("goodput", help="largest rate whose SLO attainment meets the goal",
                       description="Goodput by bisection below the smallest station stability limit.")
    add_scenario_args(p)
    p.add_argument("--json", action="store_true", help="print JSON (docs/output-schema.json)")
    add_progress_option(p)
    p.add_argument("--sensitivities", action="store_true",
                   help="elasticity of goodput to link bandwidth, instances, TP and SLO targets")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from qmodel.goodput import goodput

    from qmodel.progress import Progress

    with Progress(progress_on(args) and args.sensitivities, "goodput") as bar:
        g = goodput(scenario_from_args(args), with_sensitivities=args.sensitivities, progress=bar)
    if args.json:
        print_json(g)
        return 0
    say(f"{g.scenario}: {g.topology} on {g.gpus} GPUs")
    say(f"goodput {g.goodput_rps:.4g} req/s ({g.goodput_per_gpu:.4g} req/s per GPU"
        + (f", {g.goodput_per_usd_hour:.4g} req/s per $/h" if g.goodput_per_usd_hour else "") + ")")
    if g.closed_loop is not None:
        c = g.closed_loop
        say(f"closed loop: at most {c.concurrency} clients (think time {c.think_time_s:.4g} s) meet the goal; "
            f"their throughput is the goodput; latencies read at {c.seen_rate_per_s:.4g} req/s")
    say(f"attainment at goodput {g.attainment_at_goodput * 100:.2f}%; largest stable rate {g.max_stable_rate_per_s:.4g} req/s")
    if g.cost_per_hour_usd is not None and g.usd_per_million_tokens is not None:
        say(f"cost ${g.cost_per_hour_usd:.4g}/h: ${g.usd_per_million_input_tokens:.3g}/M input, "
            f"${g.usd_per_million_output_tokens:.3g}/M output, ${g.usd_per_million_tokens:.3g}/M tokens at goodput")
    elif g.cost_per_hour_usd is None:
        say("cost: no price for a GPU of this deployment (add prices: {GPU: USD per GPU-hour} to the scenario)")
    say(f"binding: {g.binding}")
    if g.validity is not None:
        say(f"validity at goodput: {g.validity.text}")
    if g.sensitivities:
        print()
        print_table(["input", "elasticity", "what changed"], [[s.input, "n/a" if s.elasticity is None else f"{s.elasticity:+.3f}", s.note] for s in g.sensitivities])
    return 0
