"""``qmodel replay SCENARIO``: run the deterministic event-driven replay (the referee of ``solve``)."""

from __future__ import annotations

import argparse
import sys

from qmodel.cli.common import add_scenario_args, scenario_from_args
from qmodel.cli.output import add_progress_option, print_json, print_table, progress_on, say
from qmodel.errors import InputError
from qmodel.units import format_duration

__all__ = ["register", "run"]


def register(sub) -> None:
    p = sub.add_parser("replay", help="replay a scenario with the event-driven simulator (seconds)",
                       description="Replay a scenario request by request: TTFT/TPOT mean/p50/p90/p99, joint SLO "
                                   "attainment, per-station utilization, Little's-law and conservation checks. "
                                   "Same inputs and seed give byte-identical JSON.")
    add_scenario_args(p)
    p.add_argument("--trace", metavar="FILE", help="replay this trace file (arrivals and lengths) instead of the scenario's workload")
    p.add_argument("--format", default="auto", help="format of --trace (default: auto-detect)")
    p.add_argument("--requests", type=int, default=20000, help="requests to generate or take from the trace (default 20000)")
    p.add_argument("--seed", type=int, default=0, help="seed of the synthetic trace and random dispatch (default 0)")
    p.add_argument("--warmup", type=float, default=0.1, help="fraction of the trace's time span left out of statistics (default 0.1)")
    p.add_argument("--json", action="store_true", help="print JSON (docs/output-schema.json)")
    add_progress_option(p)
    p.add_argument("--requests-csv", metavar="FILE", help="also write one CSV row per request (times, tokens, "
                                                          "per-station entry/start/exit)")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from qmodel.validation.replay import replay_requests

    if args.requests < 1:
        raise InputError("--requests", args.requests, "a positive number of requests")
    if args.seed < 0:
        raise InputError("--seed", args.seed, "a non-negative integer")
    sc = scenario_from_args(args, warn=False)  # its output lists the warnings
    trace = None
    if args.trace:
        from qmodel.validation.traces import load_trace

        trace = load_trace(args.trace, args.format)
        if len(trace) > args.requests:
            from qmodel.validation.trace_types import Trace

            n = args.requests
            trace = Trace(trace.arrival_s[:n], trace.prompt_tokens[:n], trace.output_tokens[:n], trace.source,
                          trace.format, trace.sha256, None if trace.hash_ids is None else trace.hash_ids[:n],
                          trace.block_tokens, {**trace.meta, "head": n})
    from qmodel.progress import Progress

    with Progress(progress_on(args), "replay") as bar:
        res, req = replay_requests(sc, trace, n_requests=args.requests, seed=args.seed, warmup_fraction=args.warmup,
                                   progress=bar)
    if args.requests_csv:
        _write_csv(args.requests_csv, req)
    if args.json:
        print_json(res)
        return 0
    _print_text(res)
    return 0


def _write_csv(path: str, req) -> None:
    import csv
    import math

    from qmodel.errors import DataError
    from qmodel.validation.replay import request_table

    cols = request_table(req)
    names = list(cols)
    try:
        with open(path, "w", newline="", encoding="utf-8") as fh:
            w = csv.writer(fh)
            w.writerow(names)
            for row in zip(*(cols[k].tolist() for k in names)):
                w.writerow(["" if isinstance(v, float) and math.isnan(v) else repr(v) if isinstance(v, float) else v
                            for v in row])
    except OSError as err:
        raise DataError(path, f"cannot write ({err.strerror})") from None


def _print_text(res) -> None:
    c = res.conservation
    say(f"{res.scenario}: replay of {res.topology} on {res.gpus} GPUs, {res.header.n_requests} requests at "
        f"{res.rate_per_s:.4g} req/s (seed {res.header.seed}, trace {res.header.trace_sha256[:12]})\n")
    dists = [("TTFT", res.ttft), ("TPOT", res.tpot)] + ([("TBT", res.tbt)] if res.tbt is not None else [])
    print_table(["metric", "mean", "p50", "p90", "p99"],
                [[name] + [format_duration(getattr(d, k)) for k in ("mean", "p50", "p90", "p99")]
                 for name, d in (*dists, ("end-to-end", res.e2e))])
    if res.rejected_fraction:
        say(f"rejected: {res.rejected_fraction:.2%} of requests exceed the context window (counted as SLO misses)")
    say(f"\nSLO attainment {res.attainment * 100:.2f}% (TTFT {res.ttft_attainment * 100:.2f}%, "
        f"TPOT {res.tpot_attainment * 100:.2f}%), measured on {c.measured} requests")
    pr = res.precision
    say(f"replay precision (batch means): TTFT mean +-{format_duration(pr.ttft_mean_se_s)}, TPOT mean +-{format_duration(pr.tpot_mean_se_s)}, "
        f"attainment +-{pr.attainment_se * 100:.2f} points (1 SE)")
    say(f"throughput {res.throughput_rps:.4g} req/s, {res.output_tokens_per_s:.4g} output tokens/s\n")
    print_table(["station", "utilization", "mean in station", "mean wait", "p99 wait", "Little err"],
                [[s.name, f"{s.utilization:.3f}", f"{s.mean_in_system:.3g}", format_duration(s.mean_wait_s), format_duration(s.p99_wait_s),
                  f"{s.little_rel_error * 100:.2f}%"] for s in res.stations])
    say(f"\nrequests: {c.arrived} arrived, {c.completed} completed, {c.dropped} dropped, {c.unfinished} unfinished")
    for line in res.warnings:
        say(f"warning: {line}")
