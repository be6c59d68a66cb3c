"""``qmodel sweep SCENARIO --rate LO:HI:STEP``: attainment and percentiles per rate (analytic or replay);
``--concurrency 1,2,4,...``: the same per closed-loop concurrency, with its throughput X(N)."""

from __future__ import annotations

import argparse
import csv
import sys

from qmodel.cli.common import add_scenario_args, parse_rate_range, scenario_from_args
from qmodel.cli.output import add_progress_option, print_json, print_table, progress_on
from qmodel.result import ConcurrencyRow, ConcurrencySweep, Sweep, SweepRow
from qmodel.units import format_duration

__all__ = ["register", "run", "sweep_rows", "concurrency_rows"]

FIELDS = list(SweepRow.model_fields)
CLOSED_FIELDS = list(ConcurrencyRow.model_fields)


def register(sub) -> None:
    p = sub.add_parser("sweep", help="attainment and TTFT/TPOT percentiles over a range of rates")
    add_scenario_args(p)
    what = p.add_mutually_exclusive_group(required=True)
    what.add_argument("--rate", help="LO:HI:STEP (req/s) or a comma list")
    what.add_argument("--concurrency", help="closed-loop clients, a comma list (e.g. 1,2,4,8,16,32,64): the "
                                            "throughput X(N) and latencies of each closed loop")
    p.add_argument("--think-time", help="with --concurrency: mean pause between a reply and the next request (default 0)")
    p.add_argument("--scale", action="store_true",
                   help="treat --rate values as multipliers of the scenario's own rate (e.g. 0.2:2.0:0.1)")
    p.add_argument("--mode", choices=["analytic", "replay"], default="analytic")
    p.add_argument("--requests", type=int, default=20000, help="requests per replay point")
    p.add_argument("--seed", type=int, default=0)
    g = p.add_mutually_exclusive_group()
    g.add_argument("--json", action="store_true", help="print JSON (docs/output-schema.json)")
    g.add_argument("--csv", action="store_true", help="print CSV, one row per rate")
    add_progress_option(p)
    p.set_defaults(func=run)


def sweep_rows(scenario, rates: list[float], mode: str = "analytic", n_requests: int = 20000,
               seed: int = 0, progress=None) -> list[SweepRow]:
    """One row per rate; unstable rates are rows with stable=False and zero attainment, never NaN.
    A rate so near saturation that a chain cannot be truncated (NumericalError) is a row with zero
    attainment (as a goodput search counts it) and the reason in its note."""
    from qmodel.errors import NumericalError, UnstableError

    rows: list[SweepRow] = []
    if mode == "analytic":
        from qmodel.solver import Solver

        solver = Solver(scenario)
        for i, r in enumerate(rates):
            if progress is not None:
                progress(i, len(rates), "rates")
            try:
                res = solver.solve(r)
            except UnstableError as err:
                rows.append(_unstable_row(r, err))
                continue
            except NumericalError as err:
                rows.append(_unsolved_row(r, err))
                continue
            rows.append(_row(r, res, ""))
    else:
        from qmodel.validation.replay import replay

        for i, r in enumerate(rates):
            if progress is not None:
                progress(i, len(rates), "rates")
            res = replay(scenario.with_rate(r), n_requests=n_requests, seed=seed)
            rows.append(_row(r, res, ""))
    return rows


def concurrency_rows(scenario, concurrencies: list[int], think_time_s: float | None = None, mode: str = "analytic",
                     n_requests: int = 20000, seed: int = 0, progress=None) -> list[ConcurrencyRow]:
    """One row per closed-loop concurrency (:mod:`qmodel.closed`; the replay runs the loop itself).
    The analytic rows share one solver: the stations do not depend on the concurrency."""
    from qmodel.closed import solve_closed, with_concurrency

    rows: list[ConcurrencyRow] = []
    solver = None
    for i, n in enumerate(concurrencies):
        if progress is not None:
            progress(i, len(concurrencies), "concurrencies")
        sc = with_concurrency(scenario, n, think_time_s)
        z = sc.workload.arrivals.think_time_s
        if mode == "analytic":
            from qmodel.solver import Solver

            solver = Solver(sc) if solver is None else solver
            sol = solve_closed(sc, solver)
            extra = {"concurrency": n, "think_time_s": z, "throughput_per_s": sol.loop.throughput_per_s,
                     "saturated": sol.loop.saturated}
            rows.append(ConcurrencyRow(**_row(sol.loop.seen_rate_per_s, sol.result, "").model_dump(), **extra))
        else:
            from qmodel.validation.replay import replay

            res = replay(sc, n_requests=n_requests, seed=seed)
            extra = {"concurrency": n, "think_time_s": z, "throughput_per_s": res.throughput_rps}
            rows.append(ConcurrencyRow(**_row(res.rate_per_s, res, "").model_dump(), **extra))
    return rows


def _row(r: float, res, note: str) -> SweepRow:
    return SweepRow(rate_per_s=r, attainment=res.attainment, ttft_attainment=res.ttft_attainment,
                    tpot_attainment=res.tpot_attainment,
                    ttft_p50_s=res.ttft.p50, ttft_p90_s=res.ttft.p90, ttft_p99_s=res.ttft.p99,
                    tpot_p50_s=res.tpot.p50, tpot_p90_s=res.tpot.p90, tpot_p99_s=res.tpot.p99, note=note)


def _unstable_row(r: float, err) -> SweepRow:
    return SweepRow(rate_per_s=r, attainment=0.0, ttft_attainment=0.0, tpot_attainment=0.0, stable=False,
                    note=f"unstable: {err.station} (largest stable rate {err.max_stable_rate_per_s:.4g} req/s)")


def _unsolved_row(r: float, err) -> SweepRow:
    """Stable, but not solvable this near saturation: zero attainment, latencies unknown."""
    return SweepRow(rate_per_s=r, attainment=0.0, ttft_attainment=0.0, tpot_attainment=0.0,
                    note=f"near the limit, not solved: {err}")


def _write_csv(fields: list[str], rows: list) -> None:
    """The rows as CSV on stdout, one column per model field."""
    w = csv.DictWriter(sys.stdout, fieldnames=fields, lineterminator="\n")
    w.writeheader()
    w.writerows({k: _csv_value(v) for k, v in r.model_dump().items()} for r in rows)


def _latency_cells(row) -> list[str]:
    """TTFT and TPOT p50/p90/p99 of a sweep row as table cells ('-' where the row has none)."""
    return [("-" if getattr(row, k) is None else format_duration(getattr(row, k))) for k in FIELDS[4:10]]


def _csv_value(v: object) -> object:
    """Six significant digits: the solver's percentiles sit on a grid and are good to ~4."""
    return f"{v:.6g}" if isinstance(v, float) else v


def run(args: argparse.Namespace) -> int:
    sc = scenario_from_args(args)
    if args.concurrency is not None:
        return _run_closed(sc, args)
    if args.think_time is not None:
        from qmodel.errors import InputError

        raise InputError("--think-time", args.think_time, "needs --concurrency")
    rates = parse_rate_range(args.rate)
    if args.scale:
        from qmodel.errors import InputError
        from qmodel.workload import arrival_stats

        base, _ = arrival_stats(sc.workload)
        if base is None:
            raise InputError("--scale", args.rate, "needs the scenario to have an arrival rate")
        rates = [round(m * base, 10) for m in rates]
    from qmodel.progress import Progress

    with Progress(progress_on(args), "sweep") as bar:
        rows = sweep_rows(sc, rates, args.mode, args.requests, args.seed, progress=bar)
        bar(len(rates), len(rates), "rates")
    if args.json:
        print_json(Sweep(scenario=sc.name, mode=args.mode, rows=rows))
    elif args.csv:
        _write_csv(FIELDS, rows)
    else:
        print_table(["req/s", "attain.", "TTFT p50", "p90", "p99", "TPOT p50", "p90", "p99", "note"],
                    [[r.rate_per_s, f"{r.attainment * 100:.1f}%"] +
                     _latency_cells(r)
                     + [r.note] for r in rows])
    return 0


def _run_closed(sc, args: argparse.Namespace) -> int:
    """``--concurrency``: one closed loop per value."""
    from qmodel.closed import parse_concurrency
    from qmodel.errors import InputError
    from qmodel.progress import Progress
    from qmodel.units import parse_duration

    if args.scale:
        raise InputError("--scale", True, "applies to --rate, not --concurrency")
    ns = [parse_concurrency(v.strip(), "--concurrency") for v in str(args.concurrency).split(",")]
    z = parse_duration(args.think_time, "--think-time") if args.think_time is not None else None
    with Progress(progress_on(args), "sweep") as bar:
        rows = concurrency_rows(sc, ns, z, args.mode, args.requests, args.seed, progress=bar)
        bar(len(ns), len(ns), "concurrencies")
    if args.json:
        print_json(ConcurrencySweep(scenario=sc.name, mode=args.mode, rows=rows))
    elif args.csv:
        _write_csv(CLOSED_FIELDS, rows)
    else:
        print_table(["clients", "X req/s", "attain.", "TTFT p50", "p90", "p99", "TPOT p50", "p90", "p99", "note"],
                    [[r.concurrency, f"{r.throughput_per_s:.4g}", f"{r.attainment * 100:.1f}%"] +
                     _latency_cells(r)
                     + ["saturated" if r.saturated else ""] for r in rows])
    return 0
