"""``qmodel validate [--suite NAME] [--json]``: analytic vs replay over a suite of scenarios.

Prints one row per scenario (relative errors of TTFT/TPOT p50/p90/p99, attainment difference,
the replay's own noise) and a summary (median and 90th-percentile |error| per metric, overall,
per topology and per utilization band; goodput within 5%). See docs/validation.md.
"""

from __future__ import annotations

import argparse
import sys

from qmodel.cli.output import print_json, print_table

__all__ = ["register", "run"]


def register(sub) -> None:
    p = sub.add_parser("validate", help="analytic engine vs replay over a suite of scenarios (error table)",
                       description="Run a suite of scenarios through the analytical engine and the replay and "
                                   "report relative errors. Utilization = rate / the solver's max_stable_rate().")
    p.add_argument("--suite", default="full", help="quick (CI, ~15 s), snapshot, or full (default; many minutes)")
    p.add_argument("--json", action="store_true", help="print JSON")
    p.add_argument("--jobs", type=int, default=1, help="worker processes (default 1)")
    p.add_argument("--no-goodput", action="store_true", help="skip the replay goodput bisections")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from qmodel.errors import InputError
    from qmodel.validation.harness import run_suite
    from qmodel.validation.suites import get_suite

    suite = get_suite(args.suite)
    if args.jobs < 1:
        raise InputError("--jobs", args.jobs, "a positive number of worker processes")
    progress = None
    if not args.json and sys.stderr.isatty():
        def progress(rec: dict) -> None:
            sys.stderr.write(f"  done {rec['name']}\n")
    out = run_suite(suite, jobs=args.jobs, goodput=not args.no_goodput, progress=progress)
    if args.json:
        print_json(out)
    else:
        print_text(out)
    return 0


def _pct(x: float | None) -> str:
    return "-" if x is None else f"{x * 100:+.1f}%"


def print_text(out: dict) -> None:
    from qmodel.validation.harness import LATENCY_METRICS, SUMMARY_METRICS

    w = sys.stdout.write
    w(f"suite {out['suite']}: {len(out['scenarios'])} scenarios; error = (analytic - replay) / replay; "
      f"attainment: analytic - replay; ± = replay noise (rel. std. error over seeds)\n\n")
    rows = []
    for c in out["scenarios"]:
        e = c.get("error_rel")
        if e is None:
            rows.append([c["name"], "-"] + ["-"] * len(LATENCY_METRICS) + ["-", c.get("error", "")])
            continue
        noise = max(c["replay_noise"][m] for m in LATENCY_METRICS)
        rows.append([c["name"], f"{c['rate_per_s']:.3g}"] + [_pct(e[m]) for m in LATENCY_METRICS]
                    + [_pct(e["attainment"]), f"±{noise * 100:.1f}%"])
    print_table(["scenario", "req/s", "TTFT p50", "p90", "p99", "TPOT p50", "p90", "p99", "attain.", "noise"], rows)
    if out["goodput"]:
        w("\n")
        print_table(["goodput", "analytic req/s", "replay req/s", "error"],
                    [[g["name"], "-" if g["analytic"] is None else f"{g['analytic']['goodput']:.4g}",
                      "-" if g["replay"] is None else f"{g['replay']['goodput']:.4g}", _pct(g.get("error_rel", {}).get("goodput"))]
                     for g in out["goodput"]])
    s = out["summary"]
    w("\nsummary: median / 90th percentile of |error| (n)\n")
    groups = [("all", s)] + [(t, v) for t, v in s["by_topology"].items()] + [(b, v) for b, v in s["by_band"].items()]
    metrics = [m for m in SUMMARY_METRICS if any(g.get(m, {}).get("n") for _, g in groups)]
    print_table(["group"] + metrics,
                [[name] + [(f"{g[m]['median_abs_rel_error'] * 100:.1f}/{g[m]['p90_abs_rel_error'] * 100:.1f}% ({g[m]['n']})"
                            if m in g and g[m]["n"] else "-") for m in metrics] for name, g in groups])
    if "goodput" in s and s["goodput"]["n"]:
        w(f"\ngoodput within 5%: {s['goodput']['within_5pct_fraction'] * 100:.0f}% of {s['goodput']['n']} comparisons\n")
    for f in s["failures"]:
        w(f"failed: {f}\n")
