"""Fitting the validity bands (:mod:`qmodel.validity`) on a corpus run, and their held-out coverage.

    qmodel validate --suite corpus --n 600 --seed 0 --json corpus.json
    python -m qmodel.validation.band_fit corpus.json --out catalog/validity_bands.toml
    python -m qmodel.validation.band_fit corpus.json --rescore --replays-at C --out catalog/validity_bands.toml

**Refit after a modelling change** (``--rescore``): the run's cases are solved again with this
code and each stored replay is reused where its rate is unchanged, replayed again otherwise
(:func:`qmodel.validation.corpus_run.rescore_corpus`, what ``benchmarks/corpus_rescore.py``
runs); the bands are then fitted on the new errors. ``measured_at`` in the table is the commit
of the code that solved the analytic side (this tree's HEAD, ``+dirty`` when its qmodel/ or
validation/ differ from it); ``replays_at`` the commit of the corpus run whose replays were kept
(``--replays-at``), and the table counts the replays reused and re-run.

**Rows.** The corpus is regenerated from the run's (n, seed, data) and each scenario resolved, so a
row's cell features (topology, load band of its u, arrival burstiness from the resolved SCV) and
envelope values are computed by the same functions the solver uses (:func:`qmodel.validity.cell_features`,
:func:`~qmodel.validity.envelope_values`). A closed loop's u is the one the solver reads its band at,
the analytic X(N) / lambda_max of the row (``rate_per_s`` / ``max_stable_rate_per_s``), not the
corpus's placement load (its fluid load, :mod:`qmodel.validation.corpus_closed`). A case whose analytic side failed has no errors: it
counts towards the envelope (it was drawn) but not towards any band.

**Fit** (:func:`fit_table`). For every prefix of the levels (topology; topology/load;
topology/load/arrivals) each group of rows becomes a cell when it is large enough for the band's
guarantee, whose band per metric is the equal-tailed interval of its signed errors
(:func:`conformal_interval`): the k-th smallest and k-th largest of its n errors, k the largest
rank (:func:`tail_rank`) for which the interval covers at least 90% of new exchangeable errors
with probability >= 0.9 over the draw of the n (the interval's coverage is Beta(n+1-2k, 2k)
distributed: the training-conditional conformal guarantee, Vovk, "Conditional validity of
inductive conformal predictors", ACML 2012). A group needs n >= 38 for k = 1 (``min_cases``);
the plain marginal rank floor((n+1) 0.05) would be right only on average over fits, and with
errors this heavy-tailed a 20-case cell's band fell short on fresh scenarios (docs/validation.md).
The topology cells are kept whatever their size (the fallback of last resort). ``--levels``
fits on other levels; ``--try-levels`` tables the held-out coverage and widths of
:data:`CANDIDATE_LEVELS`, the alternatives named before looking (a level is kept only where its
coverage stays >= 90% in every topology x metric on the folds and the fresh half and the median
width falls; docs/validation.md, "Validity band"). The envelope is every kind seen and every number's [min, max] over all rows, the
load's widened outward to two decimals (the corpus draws u up to 0.97).

**Held-out coverage** (:func:`holdout_coverage`): rows split into k folds by the number in their
id (id mod k, deterministic); each fold's errors are checked against the table fitted on the
others; the fraction inside their band, per topology and metric and overall, and the median band
width (high - low). ``--fresh-from N`` checks a table fitted on the first N ids against the rest
instead (the corpus's later draws: a check on scenarios no choice of the model has seen).
"""

from __future__ import annotations

import argparse
import json
import math
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, Sequence

import numpy as np

from qmodel.errors import InputError
from qmodel.toml_out import toml_value
from qmodel.validity import BAND_METRICS, LEVEL_FEATURES, cell_features, cell_of, envelope_values

__all__ = ["LEVEL", "DELTA", "LEVELS", "FOLDS", "CANDIDATE_LEVELS", "tail_rank", "conformal_interval", "band_rows",
           "fit_table", "holdout_coverage", "coverage_markdown", "compare_levels", "levels_markdown", "table_toml", "tree_commit",
           "main"]

LEVEL = 0.9
#: the band covers LEVEL of new errors with probability >= 1 - DELTA over the corpus draw
DELTA = 0.1
LEVELS: tuple[str, ...] = ("topology", "load", "arrivals")
FOLDS = 5
#: alternative levels named before any fit on the 93f83bd corpus, each with its reason: a fourth
#: level split on what the corpus's largest residual groups and issue 18 §3's approximations name
#: (pooled least_loaded/jsq chains vs split round-robin/random; KV-bound stations; measured step-time
#: tables vs the roofline); and the two coarser tables (fewer, larger cells give a larger tail rank)
CANDIDATE_LEVELS: tuple[tuple[str, ...], ...] = (
    LEVELS, LEVELS + ("pool",), LEVELS + ("kv",), LEVELS + ("perf",), ("topology", "load"), ("topology",))


def tail_rank(n: int, level: float = LEVEL, delta: float = DELTA) -> int:
    """The largest k >= 1 whose interval [x_(k), x_(n+1-k)] of n exchangeable errors covers at least
    ``level`` of new ones with probability >= 1 - ``delta`` over the fit (its coverage is
    Beta(n+1-2k, 2k)); 0 when even the extremes cannot (n < 38 for 0.9 / 0.1)."""
    from scipy.special import betainc

    k = 0
    while 2 * (k + 1) <= n and betainc(n + 1 - 2 * (k + 1), 2 * (k + 1), level) <= delta:
        k += 1
    return k


def conformal_interval(errors: Sequence[float], level: float = LEVEL, delta: float = DELTA) -> tuple[float, float]:
    """The equal-tailed band of ``errors``: their k-th smallest and k-th largest, k = :func:`tail_rank`
    (clamped to the extremes when k is 0: a topology's cell that small still answers)."""
    x = sorted(float(e) for e in errors)
    k = max(tail_rank(len(x), level, delta), 1)
    return x[k - 1], x[len(x) - k]


def band_rows(out: dict[str, Any], corpus: Any = None) -> list[dict[str, Any]]:
    """One row per scenario of a corpus run's JSON (module docstring): id, cell features,
    envelope kinds and numbers, and the signed errors (None where the analytic side failed).
    ``corpus``: the run's corpus, already regenerated."""
    from qmodel.build import resolve
    from qmodel.validation.corpus import generate

    ids = {r["id"]: r for r in out["scenarios"]}
    if corpus is None:
        corpus = generate(int(out["n"]), int(out["seed"]), data=bool(out["data"]))
    rows = []
    for case in corpus.cases:
        r = ids.get(case.id)
        if r is None:
            continue
        if r.get("features", case.features) != case.features:  # a JSON of an older generator's draws
            raise InputError("corpus JSON", case.id, "rows of the current generator's draws (this case was drawn "
                                                     "differently: re-run the corpus)")
        res = resolve(case.scenario)
        kinds, numbers = envelope_values(res)
        u = float(case.utilization)
        if case.features["arrivals"] == "closed" and r.get("analytic"):  # the loop's X(N)/lambda_max (module doc)
            u = float(r["rate_per_s"]) / float(r["max_stable_rate_per_s"])
        numbers["load"] = u
        err = r.get("error_rel")
        rows.append({"id": case.id, "cell": cell_features(res, case.features["topology"], u),
                     "kinds": kinds, "numbers": numbers,
                     "errors": None if not err else {m: float(err[m]) for m in BAND_METRICS}})
    return rows


def fit_table(rows: list[dict[str, Any]], levels: Sequence[str] = LEVELS, level: float = LEVEL,
              delta: float = DELTA) -> dict[str, Any]:
    """The band table of ``rows`` (module docstring), without its provenance fields."""
    ok = [r for r in rows if r["errors"] is not None]
    groups: dict[str, list[dict]] = {}
    for r in ok:
        for depth in range(1, len(levels) + 1):
            groups.setdefault("/".join(r["cell"][k] for k in levels[:depth]), []).append(r)
    cells = {}
    for key in sorted(groups):
        g = groups[key]
        if tail_rank(len(g), level, delta) >= 1 or "/" not in key:
            cells[key] = {"cases": len(g)} | {m: list(conformal_interval([r["errors"][m] for r in g], level, delta))
                                              for m in BAND_METRICS}
    kinds: dict[str, set[str]] = {}
    ranges: dict[str, list[float]] = {}
    for r in rows:
        for k, vs in r["kinds"].items():
            kinds.setdefault(k, set()).update(vs)
        for k, v in r["numbers"].items():
            lo, hi = ranges.get(k, [v, v])
            ranges[k] = [min(lo, v), max(hi, v)]
    if "load" in ranges:
        ranges["load"] = [math.floor(ranges["load"][0] * 100) / 100, math.ceil(ranges["load"][1] * 100) / 100]
    return {"level": level, "delta": delta, "min_cases": next(n for n in range(2, 10**6) if tail_rank(n, level, delta)),
            "levels": list(levels), "corpus_cases": len(ok),
            "envelope": {"kinds": {k: sorted(v) for k, v in sorted(kinds.items())}, "ranges": dict(sorted(ranges.items()))},
            "cells": cells}


def _number(row: dict[str, Any]) -> int:
    return int(row["id"].lstrip("c"))


def holdout_coverage(rows: list[dict[str, Any]], folds: int = FOLDS, fresh_from: int | None = None,
                     by: Sequence[str] = ("topology",), **fit: Any) -> dict[str, Any]:
    """k-fold held-out coverage of the bands (module docstring), overall and per value of each cell
    feature in ``by``; ``fresh_from`` N instead fits once on the ids below N and checks the ids from
    N on (scenarios drawn after the fit's)."""
    ok = [r for r in rows if r["errors"] is not None]
    splits = ([(lambda r: _number(r) < fresh_from, lambda r: _number(r) >= fresh_from)] if fresh_from is not None else
              [(lambda r, f=f: _number(r) % folds != f, lambda r, f=f: _number(r) % folds == f) for f in range(folds)])
    hits: dict[str, dict[str, list[float]]] = {}
    widths: dict[str, list[float]] = {m: [] for m in BAND_METRICS}
    for in_fit, in_test in splits:
        table = fit_table([r for r in rows if in_fit(r)], **fit)
        for r in filter(in_test, ok):
            key = cell_of(table, r["cell"])
            for m in BAND_METRICS:
                lo, hi = table["cells"][key][m] if key else (math.inf, -math.inf)
                inside = float(lo <= r["errors"][m] <= hi)
                for group in ("all", *(r["cell"][b] for b in by)):
                    hits.setdefault(group, {}).setdefault(m, []).append(inside)
                widths[m].append(hi - lo)
    cov = {g: {m: float(np.mean(v)) for m, v in ms.items()} | {"n": len(ms[BAND_METRICS[0]])}
           for g, ms in sorted(hits.items(), key=lambda kv: (kv[0] != "all", kv[0]))}
    split = f"fit on ids below {fresh_from}, checked on the rest" if fresh_from is not None else f"{folds} folds by id"
    return {"folds": folds, "split": split, "coverage": cov,
            "median_width": {m: float(np.median(v)) for m, v in widths.items()}}


def coverage_markdown(cov: dict[str, Any]) -> str:
    """The held-out coverage as the Markdown table docs/validation.md quotes (per group: n, then the
    share of errors inside their band per metric, %), and the median band widths."""
    lines = ["| group | n | TTFT p50 | TTFT p90 | TTFT p99 | TPOT p50 | TPOT p90 | TPOT p99 |", "|" + "---|" * 8]
    lines += [f"| {g} | {c['n']} | " + " | ".join(f"{c[m] * 100:.1f}%" for m in BAND_METRICS) + " |"
              for g, c in cov["coverage"].items()]
    lines += ["", f"Median band width (high - low) over the held-out answers ({cov['split']}): "
              + ", ".join(f"{m} {w * 100:.0f}%" for m, w in cov["median_width"].items())]
    return "\n".join(lines) + "\n"


def compare_levels(rows: list[dict[str, Any]], candidates: Sequence[Sequence[str]] = CANDIDATE_LEVELS,
                   fresh_from: int | None = None) -> list[dict[str, Any]]:
    """Per candidate levels: the smallest held-out coverage over topology x metric on the folds and on
    the fresh half (``fresh_from``, default half the largest id + 1), the smallest over load band x
    metric on the folds, the median widths on the folds, and the number of cells."""
    if fresh_from is None:
        fresh_from = (max(_number(r) for r in rows) + 1) // 2
    out = []
    for levels in candidates:
        folds = holdout_coverage(rows, by=("topology", "load"), levels=tuple(levels))
        fresh = holdout_coverage(rows, fresh_from=fresh_from, levels=tuple(levels))
        tops = {r["cell"]["topology"] for r in rows}
        bands = {r["cell"]["load"] for r in rows}

        def low(cov: dict[str, Any], groups: set[str]) -> float:
            return min(cov["coverage"][g][m] for g in groups if g in cov["coverage"] for m in BAND_METRICS)

        out.append({"levels": list(levels), "cells": len(fit_table(rows, levels=tuple(levels))["cells"]),
                    "folds_min": low(folds, tops), "fresh_min": low(fresh, tops), "band_min": low(folds, bands),
                    "median_width": folds["median_width"], "fresh_from": fresh_from})
    return out


def levels_markdown(results: list[dict[str, Any]]) -> str:
    """:func:`compare_levels` as a Markdown table (median widths in %)."""
    lines = ["| levels | cells | min cov. folds (topology x metric) | fresh half | folds, load band x metric | "
             + " | ".join(f"width {m}" for m in BAND_METRICS) + " |", "|" + "---|" * (5 + len(BAND_METRICS))]
    lines += [f"| {'/'.join(c['levels'])} | {c['cells']} | {c['folds_min'] * 100:.1f}% | {c['fresh_min'] * 100:.1f}% | "
              f"{c['band_min'] * 100:.1f}% | " + " | ".join(f"{c['median_width'][m] * 100:.0f}%" for m in BAND_METRICS)
              + " |" for c in results]
    return "\n".join(lines) + "\n"


def table_toml(table: dict[str, Any], header: Sequence[str]) -> str:
    """The table as TOML, ``header`` as leading comments."""
    lines = [f"# {h}" for h in header] + [""]
    for k in ("measured_at", "replays_at", "replays_reused", "replays_rerun", "command", "corpus_seed", "corpus_n",
              "corpus_cases", "level", "delta", "min_cases", "levels", "folds"):
        if k in table:
            lines.append(f"{k} = {toml_value(table[k], k)}")
    for k in ("kinds", "ranges"):
        lines += ["", f"[envelope.{k}]"] + [f"{json.dumps(n)} = {toml_value(v, n)}" for n, v in table["envelope"][k].items()]
    for group, c in table["coverage"].items():  # held-out: share of errors inside their band, n
        lines += ["", f"[coverage.{json.dumps(group)}]"] + [f"{k} = {toml_value(round(v, 4), k)}" for k, v in c.items()]
    for key, c in table["cells"].items():
        lines += ["", f"[cells.{json.dumps(key)}]", f"cases = {c['cases']}"]
        lines += [f"{m} = {toml_value([round(x, 4) for x in c[m]], m)}" for m in BAND_METRICS]
    return "\n".join(lines) + "\n"


def tree_commit() -> str:
    """This tree's HEAD (7 digits), ``+dirty`` when the analytic code (qmodel/, validation/) differs
    from it; 'unknown' outside a git checkout."""
    root = Path(__file__).resolve().parent.parent

    def git(*a: str) -> subprocess.CompletedProcess:
        return subprocess.run(["git", *a], capture_output=True, text=True, check=False, cwd=root)

    head = git("rev-parse", "--short=7", "HEAD")
    if head.returncode != 0:
        return "unknown"
    dirty = git("diff", "--quiet", "HEAD", "--", "qmodel", "validation").returncode != 0
    return head.stdout.strip() + ("+dirty" if dirty else "")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m qmodel.validation.band_fit", description=__doc__.splitlines()[0])
    ap.add_argument("corpus_json", help="JSON of `qmodel validate --suite corpus --json F`")
    ap.add_argument("--out", help="write the table here (catalog/validity_bands.toml)")
    ap.add_argument("--measured-at", help="commit of the analytic code (default: the corpus run's, given by "
                    "--replays-at, or with --rescore this tree's HEAD)")
    ap.add_argument("--rescore", action="store_true", help="solve the cases again with this code first, reusing each "
                    "stored replay whose rate is unchanged (module docstring)")
    ap.add_argument("--replays-at", help="commit of the corpus run (its replays); default: the JSON's replays_at, "
                    "else --measured-at / HEAD")
    ap.add_argument("--rescored-json", metavar="F", help="with --rescore: write the re-scored corpus run here")
    ap.add_argument("--jobs", type=int, default=1, help="with --rescore: processes")
    ap.add_argument("--levels", help="comma-separated cell levels to fit (default: " + ",".join(LEVELS) + ")")
    ap.add_argument("--try-levels", action="store_true", help="table the held-out coverage and widths of the candidate "
                    "levels (CANDIDATE_LEVELS) and exit")
    ap.add_argument("--fresh-from", type=int, metavar="N", help="coverage of a table fitted on the ids below N, "
                    "checked on the ids from N on (instead of the k folds)")
    args = ap.parse_args(argv)
    levels = tuple(args.levels.split(",")) if args.levels else LEVELS
    if bad := [lv for lv in levels if lv not in LEVEL_FEATURES]:
        sys.stderr.write(f"error: --levels: {', '.join(bad)}: not a cell feature (one of {', '.join(LEVEL_FEATURES)})\n")
        return 2
    t0 = time.perf_counter()
    try:
        out = json.loads(Path(args.corpus_json).read_text(encoding="utf-8"))
        replays_at = args.replays_at or out.get("replays_at")
        reused, corpus = None, None
        if args.rescore:
            from qmodel.validation.corpus import generate
            from qmodel.validation.corpus_run import rescore_corpus, summarize_corpus

            corpus = generate(int(out["n"]), int(out["seed"]), data=bool(out["data"]))
            new = rescore_corpus(out, jobs=args.jobs, corpus=corpus)[1]
            reused = sum(bool(r.get("replay_reused")) for r in new)
            out = out | {"scenarios": new, "summary": summarize_corpus(new), "replays_at": replays_at}
            if args.rescored_json:
                Path(args.rescored_json).write_text(json.dumps(out, indent=1), encoding="utf-8")
        rows = band_rows(out, corpus)
    except (OSError, ValueError, KeyError) as err:
        sys.stderr.write(f"error: {args.corpus_json}: cannot read a corpus run ({type(err).__name__}: {err})\n")
        return 2
    if reused is not None:
        sys.stderr.write(f"re-scored {len(rows)} cases: {reused} replays reused, {len(rows) - reused} re-run "
                         f"({time.perf_counter() - t0:.0f} s)\n")
    if args.try_levels:
        sys.stdout.write(levels_markdown(compare_levels(rows)))
        return 0
    sys.stdout.write(coverage_markdown(holdout_coverage(rows, fresh_from=args.fresh_from, levels=levels)))
    cov = holdout_coverage(rows, levels=levels)
    if args.out:
        commit = args.measured_at or (tree_commit() if args.rescore else replays_at or tree_commit())
        prov = {"measured_at": commit, "replays_at": replays_at or commit}
        if reused is not None:
            prov |= {"replays_reused": reused, "replays_rerun": len(rows) - reused}
        rescore = " --rescore --replays-at C" if args.rescore else ""
        table = fit_table(rows, levels=levels) | prov | {
            "folds": cov["folds"], "coverage": cov["coverage"], "corpus_seed": int(out["seed"]),
            "corpus_n": int(out["n"]), "command": f"qmodel validate --suite corpus --n {out['n']} --seed {out['seed']} "
                                                  f"--json F (at C); python -m qmodel.validation.band_fit F{rescore} "
                                                  f"--out PATH"}
        header = ["Validity bands of the analytic engine against the replay (qmodel/validity.py reads this).",
                  "Made by qmodel.validation.band_fit from a corpus run; do not edit by hand (docs/validation.md)."]
        Path(args.out).write_text(table_toml(table, header), encoding="utf-8")
    sys.stderr.write(f"band_fit: {time.perf_counter() - t0:.0f} s\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
