"""``qmodel validate [--suite NAME] [--json [PATH]]``: analytic vs replay over a suite of scenarios.

Prints one row per scenario (relative errors of TTFT/TPOT p50/p90/p99, attainment difference,
the replay's own noise) and a summary (median and 90th-percentile |error| per metric, overall,
per topology and per utilization band; goodput within 5%). See docs/validation.md.

``--suite corpus [--n N] [--seed S]`` runs the generated corpus (:mod:`qmodel.validation.corpus`:
N stratified scenarios from seed S, data-folder strata when it is present) and prints the error
tables by topology, load band and feature value, and the issue-18 target check;
``--suite corpus-ci`` is the CI subset (:data:`CI_N` data-free scenarios, short replays).
``--suite corpus-rank [--n GROUPS] [--seed S]`` runs the ranking groups
(:mod:`qmodel.validation.corpus_rank`: per group 4-6 candidate deployments of one model on one GPU
budget, analytic vs replay goodput, Kendall tau, top-1 agreement and regret; data-free unless
``--data``).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from qmodel.cli.output import add_progress_option, add_width_option, print_json, print_table, progress_on

__all__ = ["register", "run", "CORPUS_SUITES", "CI_N", "CI_SEED", "RANK_N"]

#: the CI subset: 36 data-free scenarios from seed 18 (tests/test_corpus_ci.py holds its bands)
CI_N = 36
CI_SEED = 18
#: the corpus suites: name -> (run lengths in qmodel.validation.corpus_run.RUN_LENGTHS, default N)
CORPUS_SUITES = {"corpus": ("full", 300), "corpus-ci": ("ci", CI_N)}
#: the ranking groups' default count (corpus-rank)
RANK_N = 16


def register(sub) -> None:
    p = sub.add_parser("validate", help="analytic engine vs replay over a suite of scenarios (error table)",
                       description="Run a suite of scenarios through the analytical engine and the replay and "
                                   "report relative errors. Utilization = rate / the solver's max_stable_rate().")
    p.add_argument("--suite", default="quick", help="quick (default, ~15 s), snapshot, full (many minutes), "
                                                    "corpus (generated scenarios), corpus-ci (its CI subset) or "
                                                    "corpus-rank (ranking groups: goodput and Kendall tau)")
    p.add_argument("--json", nargs="?", const="-", default=None, metavar="PATH",
                   help="print JSON, or write it to PATH")
    p.add_argument("--jobs", type=int, default=1, help="worker processes (default 1)")
    p.add_argument("--n", type=int, default=None, help="corpus: number of scenarios (default 300); "
                                                       f"corpus-rank: number of groups (default {RANK_N})")
    p.add_argument("--seed", type=int, default=None, help="corpus: generator seed (default 0)")
    p.add_argument("--no-data", action="store_true", help="corpus: leave out the strata that need the data folder")
    p.add_argument("--data", action="store_true", help="corpus-rank: add the strata that need the data folder")
    p.add_argument("--no-goodput", action="store_true", help="skip the replay goodput bisections")
    add_progress_option(p)
    add_width_option(p)
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from qmodel.errors import InputError
    from qmodel.validation.harness import run_suite
    from qmodel.validation.suites import get_suite

    if args.jobs < 1:
        raise InputError("--jobs", args.jobs, "a positive number of worker processes")
    if args.json not in (None, "-"):
        parent = Path(args.json).expanduser().resolve().parent
        if not parent.is_dir():
            raise InputError("--json", args.json, f"a file in an existing folder ({parent} does not exist)")
    if args.data and args.suite != "corpus-rank":
        raise InputError("--data", True, "only with --suite corpus-rank")
    if args.suite == "corpus-rank":
        out = _run_rank(args)
    elif args.suite in CORPUS_SUITES:
        out = _run_corpus(args)
    else:
        for flag, val in (("--n", args.n), ("--seed", args.seed), ("--no-data", args.no_data or None)):
            if val is not None:
                raise InputError(flag, val, "only with --suite corpus or corpus-ci")
        from qmodel.progress import Progress

        suite = get_suite(args.suite)
        total = len(suite.cases) + (0 if args.no_goodput else len(suite.goodput))
        done = [0]
        with Progress(progress_on(args), "validate") as bar:
            def progress(rec: dict) -> None:
                done[0] += 1
                bar(done[0], total, "cases")
            out = run_suite(suite, jobs=args.jobs, goodput=not args.no_goodput, progress=progress)
    if args.json == "-":
        print_json(out)
        return 0
    if args.json is not None:
        with open(Path(args.json).expanduser(), "w", encoding="utf-8") as fh:
            print_json(out, fh)
    if args.suite == "corpus-rank":
        print_rank_text(out)
    elif args.suite in CORPUS_SUITES:
        print_corpus_text(out)
    else:
        print_text(out)
    return 0


def _run_corpus(args: argparse.Namespace) -> dict:
    from qmodel.errors import InputError
    from qmodel.validation.corpus import generate
    from qmodel.validation.corpus_run import RUN_LENGTHS, run_corpus

    lengths, default_n = CORPUS_SUITES[args.suite]
    ci = args.suite == "corpus-ci"
    if ci and (args.n is not None or args.seed is not None):
        raise InputError("--n" if args.n is not None else "--seed", args.n if args.n is not None else args.seed,
                         "not with --suite corpus-ci (a fixed subset: use --suite corpus)")
    n = default_n if args.n is None else args.n
    if n < 1:
        raise InputError("--n", n, "a positive number of scenarios")
    seed = (CI_SEED if ci else 0) if args.seed is None else args.seed
    if seed < 0:
        raise InputError("--seed", seed, "a non-negative integer")
    corpus = generate(n, seed, data=False if (ci or args.no_data) else None)
    from qmodel.progress import Progress

    done = [0]
    with Progress(progress_on(args), "validate") as bar:
        def progress(rec: dict) -> None:
            done[0] += 1
            bar(done[0], len(corpus.cases), "scenarios")
        out = run_corpus(corpus, RUN_LENGTHS[lengths], jobs=args.jobs, progress=progress)
    out["suite"] = args.suite
    return out


def _run_rank(args: argparse.Namespace) -> dict:
    from qmodel.errors import InputError
    from qmodel.validation.corpus_rank import generate_groups
    from qmodel.validation.corpus_rank_run import run_rank

    if args.no_data:
        raise InputError("--no-data", True, "not with --suite corpus-rank (data-free unless --data)")
    n = RANK_N if args.n is None else args.n
    corpus = generate_groups(n, 0 if args.seed is None else args.seed, data=args.data)
    from qmodel.progress import Progress

    total = sum(len(g.candidates) for g in corpus.groups)
    done = [0]
    with Progress(progress_on(args), "validate") as bar:
        def progress(rec: dict) -> None:
            done[0] += 1
            bar(done[0], total, "candidates")
        return run_rank(corpus, jobs=args.jobs, progress=progress)


def print_rank_text(out: dict) -> None:
    """The ranking groups' tables: per group, per candidate, and the summary."""
    from qmodel.validation.corpus_rank_run import CANDIDATE_HEADERS, GROUP_HEADERS, candidate_table, group_table, summary_lines

    w = sys.stdout.write
    w(f"suite corpus-rank: {out['n']} ranking groups (seed {out['seed']}); goodput error = (analytic - replay) / replay\n")
    for line in out["skipped_strata"]:
        w(f"skipped stratum {line}\n")
    w("\n")
    print_table(GROUP_HEADERS, group_table(out))
    w("\n")
    print_table(CANDIDATE_HEADERS, candidate_table(out))
    w("\n" + "\n".join(summary_lines(out)) + "\n")


def print_corpus_text(out: dict) -> None:
    """The corpus tables (median / 90th percentile of |error| per group) and the target check."""
    from qmodel.validation.corpus_run import TABLE_HEADERS, sections, table_rows

    w = sys.stdout.write
    s = out["summary"]
    w(f"suite {out['suite']}: {out['n']} generated scenarios (seed {out['seed']}); error = (analytic - replay) / replay; "
      f"cells: median/90th percentile of |error| in %, attainment: of |analytic - replay|\n")
    for line in out["skipped_strata"]:
        w(f"skipped stratum {line}\n")
    for title, groups in sections(out):
        w(f"\n{title}\n")
        print_table(TABLE_HEADERS, table_rows(groups))
    t = s["targets"]
    noise = s["replay_noise"]
    w(f"\nreplay noise (relative std. error over seeds): median per metric "
      + ", ".join(f"{m} {v * 100:.1f}%" for m, v in noise["median_by_metric"].items())
      + f"; {noise['fraction_below_2pct'] * 100:.0f}% of scenarios below 2% on every metric\n")
    w(f"targets (median <= 5%, p90 <= 15%, attainment p90 |diff| <= 0.03, per topology and band up to u 0.95): "
      f"met in {t['met']} of {t['of']} cells\n")
    for name, c in t["cells"].items():
        if not c["met"]:
            w(f"  missed {name}: " + "; ".join(c["misses"] + ([f"{c['failures']} failed"] if c["failures"] else [])) + "\n")
    for f in s["failures"]:
        w(f"failed: {f}\n")


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
