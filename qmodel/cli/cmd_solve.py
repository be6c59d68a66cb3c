"""``qmodel solve SCENARIO``: TTFT/TPOT distributions, attainment, stations and the binding constraint."""

from __future__ import annotations

import argparse
import sys
from typing import TYPE_CHECKING

from qmodel.cli.common import add_scenario_args, gc_paused, resolved_scenario_from_args
from qmodel.cli.output import print_json, print_table, say, to_plain
from qmodel.errors import InputError
from qmodel.units import format_bandwidth, format_duration, parse_duration, parse_rate

if TYPE_CHECKING:
    from qmodel.scenario import Scenario

__all__ = ["register", "run", "closed_from_args"]


def register(sub) -> None:
    p = sub.add_parser("solve", help="solve a scenario analytically (milliseconds)",
                       description="Solve a scenario: TTFT/TPOT mean/p50/p90/p99, SLO attainment, per-station load, binding constraint.")
    add_scenario_args(p)
    p.add_argument("--rate", help="arrival rate to solve at (req/s), overriding the scenario's")
    p.add_argument("--concurrency", help="solve as a closed loop of N clients, each sending its next request when "
                                         "its last one finishes (overrides the scenario's arrivals)")
    p.add_argument("--think-time", help="with --concurrency: mean pause between a reply and the next request "
                                        "(e.g. '2 s'; default 0, or the scenario's closed loop's)")
    p.add_argument("--json", action="store_true", help="print JSON (docs/output-schema.json)")
    p.add_argument("--explain", action="store_true", help="print the closed forms with this scenario's numbers")
    p.add_argument("--check", action="store_true", help="also run the replay and print analytic-vs-replay differences")
    p.add_argument("--requests", type=int, default=20000, help="requests to replay with --check (default 20000)")
    p.add_argument("--seed", type=int, default=0, help="replay seed with --check")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from qmodel.scenario import ClosedArrivals
    from qmodel.solver import Solver

    with gc_paused():  # one load and one solve: bounded work
        sc0, resolved = resolved_scenario_from_args(args, warn=False)  # its output lists the warnings
        sc = closed_from_args(sc0, args)
        loop = None
        solver = Solver(sc, resolved=resolved) if sc is sc0 else Solver(sc)  # --concurrency: its own arrivals
        if isinstance(sc.workload.arrivals, ClosedArrivals):
            if args.rate:
                raise InputError("--rate", args.rate, "no rate with a closed loop (--concurrency or arrivals kind closed): "
                                 "its throughput follows from its concurrency")
            from qmodel.closed import solve_closed

            loop, res = (lambda s: (s.loop, s.result))(solve_closed(sc, solver))
        else:
            res = solver.solve(parse_rate(args.rate, "--rate") if args.rate else None)
        out = to_plain(res)
        if loop is not None:
            out["closed_loop"] = to_plain(loop)
    check = None
    if args.check:
        from qmodel.validation.replay_check import compare_with_replay

        check = compare_with_replay(sc, res, n_requests=args.requests, seed=args.seed,
                                    throughput_per_s=None if loop is None else loop.throughput_per_s)
        out["check"] = to_plain(check)
    explain = None
    if args.explain:
        from qmodel.explain import explain_scenario

        explain = explain_scenario(solver, res.rate_per_s)
        out["explain"] = explain
    if args.json:
        print_json(out)
        return 0
    if loop is not None:
        _print_loop(loop)
    _print_text(res, sc.slo.attainment_goal)
    if check is not None:
        _print_check(check)
    if explain:
        print()
        for block in explain:
            print(block)
            print()
    return 0


def closed_from_args(sc: Scenario, args: argparse.Namespace) -> Scenario:
    """The scenario as the closed loop ``--concurrency N [--think-time S]`` asks for (unchanged without them)."""
    from qmodel.closed import parse_concurrency, with_concurrency
    from qmodel.scenario import ClosedArrivals

    if args.concurrency is None:
        if args.think_time is not None and not isinstance(sc.workload.arrivals, ClosedArrivals):
            raise InputError("--think-time", args.think_time, "needs --concurrency (or a scenario whose arrivals are closed)")
        if args.think_time is None:
            return sc
        return with_concurrency(sc, sc.workload.arrivals.concurrency, parse_duration(args.think_time, "--think-time"))
    n = parse_concurrency(args.concurrency, "--concurrency")
    z = parse_duration(args.think_time, "--think-time") if args.think_time is not None else None
    return with_concurrency(sc, n, z)


def _print_loop(loop) -> None:
    sat = " (saturated: the deployment's stability limit)" if loop.saturated else ""
    say(f"closed loop: {loop.concurrency} client{'s' if loop.concurrency != 1 else ''}, think time "
        f"{loop.think_time_s:g} s ({loop.think_time_dist}): throughput X(N) = "
        f"{loop.throughput_per_s:.4g} req/s{sat}; mean end-to-end latency {format_duration(loop.mean_latency_s)}; "
        f"latencies below are the open solve at {loop.seen_rate_per_s:.4g} req/s, what a request sees "
        "(docs/methods.md, \"Closed-loop workloads\")\n")


def _print_text(res, goal: float) -> None:
    w = sys.stdout.write
    # the stations' limits are in the rate they see: the offered rate less the requests refused
    limit = min(s.max_stable_rate_per_s for s in res.stations) / (1.0 - (res.rejected_fraction or 0.0))
    say(f"{res.scenario}: {res.topology} on {res.gpus} GPUs at {res.rate_per_s:.4g} req/s "
        f"({res.rate_per_s / limit:.2f} of the largest stable rate, {limit:.4g} req/s)\n")
    rows = [["TTFT"] + [format_duration(getattr(res.ttft, k)) for k in ("mean", "p50", "p90", "p99")],
            ["TPOT"] + [format_duration(getattr(res.tpot, k)) for k in ("mean", "p50", "p90", "p99")]]
    if res.tbt is not None:  # TBT = (e2e - TTFT)/L, shown when the scenario names a TPOT definition
        rows.append(["TBT"] + [format_duration(getattr(res.tbt, k)) for k in ("mean", "p50", "p90", "p99")])
    print_table(["metric", "mean", "p50", "p90", "p99"], rows)
    if res.rejected_fraction:
        say(f"rejected: {res.rejected_fraction:.2%} of requests exceed the context window (counted as SLO misses)")
    lo, hi = res.attainment_bounds
    verdict = f">= goal {goal:.0%}: met" if res.attainment >= goal else f"< goal {goal:.0%}: not met"
    say(f"\nSLO attainment {res.attainment * 100:.2f}% {verdict} (TTFT alone {res.ttft_attainment * 100:.2f}%, "
        f"TPOT alone {res.tpot_attainment * 100:.2f}%; both together lie in {lo * 100:.2f}%..{hi * 100:.2f}% "
        "whatever their dependence)")
    say(f"binding: {res.binding}\n")
    print_table(["station", "utilization", "max stable req/s", "mean wait", "p99 wait", "method"],
                [[s.name, f"{s.utilization:.3f}", s.max_stable_rate_per_s, format_duration(s.mean_wait_s),
                  format_duration(s.p99_wait_s), s.method + ("" if s.exact else " (approx.)")] for s in res.stations])
    if res.link is not None:
        lk = res.link
        share = (f" to add at most {lk.share_of_target:.0%} of each target to the SLO percentile"
                 if lk.share_of_target is not None else "")
        need = format_bandwidth(lk.bandwidth_needed_bytes_per_s, bits=True)
        say(f"\nKV link: has {lk.capacity_text()}\n"
            f"  needs {need if lk.reachable else 'more than ' + need} aggregate{share} "
            f"({'sufficient' if lk.sufficient else 'INSUFFICIENT'})"
            + (f"; mean byte rate {format_bandwidth(lk.mean_byte_rate_bytes_per_s, bits=True)}"
               if lk.mean_byte_rate_bytes_per_s is not None else "")
            + f"; mean exposed transfer {format_duration(lk.mean_exposed_s)}")
    if res.validity is not None:
        say(f"validity: {res.validity.text}")
    for warn in res.warnings:
        say(warn)


def _print_check(check) -> None:
    print()
    rows = []
    for m in check.metrics:
        if m.metric == "throughput_per_s":
            rows.append(["throughput", f"{m.analytic:.4g} req/s", f"{m.replay:.4g} req/s", f"{m.rel_error * 100:+.1f}%"])
        elif m.metric.endswith("attainment"):  # an absolute difference of probabilities, in points
            rows.append([m.metric, f"{m.analytic * 100:.2f}%", f"{m.replay * 100:.2f}%", f"{m.rel_error * 100:+.2f} points"])
        else:
            rows.append([m.metric, format_duration(m.analytic), format_duration(m.replay), f"{m.rel_error * 100:+.1f}%"])
    print_table(["metric", "analytic", "replay", "error"], rows)
