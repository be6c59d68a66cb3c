"""``qmodel sweep SCENARIO --rate LO:HI:STEP``: attainment and percentiles per rate (analytic or replay)."""

from __future__ import annotations

import argparse
import csv
import sys

from qmodel.cli.common import add_scenario_args, parse_rate_range, scenario_from_args
from qmodel.cli.output import add_progress_option, print_json, print_table, progress_on
from qmodel.result import Sweep, SweepRow
from qmodel.units import format_duration

__all__ = ["register", "run", "sweep_rows"]

FIELDS = list(SweepRow.model_fields)


def register(sub) -> None:
    p = sub.add_parser("sweep", help="attainment and TTFT/TPOT percentiles over a range of rates")
    add_scenario_args(p)
    p.add_argument("--rate", required=True, help="LO:HI:STEP (req/s) or a comma list")
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


def _csv_value(v: object) -> object:
    """Six significant digits: the solver's percentiles sit on a grid and are good to ~4."""
    return f"{v:.6g}" if isinstance(v, float) else v


def run(args: argparse.Namespace) -> int:
    sc = scenario_from_args(args)
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
        w = csv.DictWriter(sys.stdout, fieldnames=FIELDS, lineterminator="\n")
        w.writeheader()
        w.writerows({k: _csv_value(v) for k, v in r.model_dump().items()} for r in rows)
    else:
        print_table(["req/s", "attain.", "TTFT p50", "p90", "p99", "TPOT p50", "p90", "p99", "note"],
                    [[r.rate_per_s, f"{r.attainment * 100:.1f}%"] +
                     [("-" if getattr(r, k) is None else format_duration(getattr(r, k))) for k in FIELDS[4:10]]
                     + [r.note] for r in rows])
    return 0
