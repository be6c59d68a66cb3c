"""Fitting the validity bands (:mod:`qmodel.validity`) on a corpus run, and their held-out coverage.

    qmodel validate --suite corpus --n 600 --seed 0 --json corpus.json
    python -m qmodel.validation.band_fit corpus.json --out catalog/validity_bands.toml

**Rows.** The corpus is regenerated from the run's (n, seed, data) and each scenario resolved, so a
row's cell features (topology, load band of its u, arrival burstiness from the resolved SCV) and
envelope values are computed by the same functions the solver uses (:func:`qmodel.validity.cell_features`,
:func:`~qmodel.validity.envelope_values`). A case whose analytic side failed has no errors: it
counts towards the envelope (it was drawn) but not towards any band.

**Fit** (:func:`fit_table`). For every prefix of the levels (topology; topology/load;
topology/load/arrivals) each group of rows with at least ``min_cases`` rows becomes a cell whose
band per metric is the equal-tailed split-conformal interval of its signed errors
(:func:`conformal_interval`); the topology cells are kept whatever their size (the fallback of
last resort). The envelope is every kind seen and every number's [min, max] over all rows, the
load's widened outward to two decimals (the corpus draws u up to 0.97).

**Held-out coverage** (:func:`holdout_coverage`): rows split into k folds by the number in their
id (id mod k, deterministic); each fold's errors are checked against the table fitted on the
others; the fraction inside their band, per topology and metric and overall, and the median band
width (high - low).
"""

from __future__ import annotations

import argparse
import json
import math
import subprocess
import sys
from pathlib import Path
from typing import Any, Sequence

import numpy as np

from qmodel.toml_out import toml_value
from qmodel.validity import BAND_METRICS, cell_features, cell_of, envelope_values

__all__ = ["LEVEL", "MIN_CASES", "LEVELS", "FOLDS", "SIGNED", "conformal_interval", "band_rows", "fit_table",
           "holdout_coverage", "table_toml", "main"]

LEVEL = 0.9
#: a cell needs this many cases: an equal-tailed 90% interval needs n >= 19 to be a guarantee
MIN_CASES = 20
LEVELS: tuple[str, ...] = ("topology", "load", "arrivals")
FOLDS = 5
SIGNED = True


def conformal_interval(errors: Sequence[float], level: float = LEVEL, signed: bool = True) -> tuple[float, float]:
    """Signed: the floor((n+1)a)-th and ceil((n+1)(1-a))-th smallest of n errors, a = (1 - level)/2,
    clamped to 1..n; a new exchangeable error lies inside with probability >= level once both
    ranks are inside 1..n (n >= 19 for 0.9). Unsigned: (-B, B) with B the ceil((n+1) level)-th
    smallest |error| (n >= 9 for 0.9)."""
    n = len(errors)
    if not signed:
        b = sorted(abs(float(e)) for e in errors)[min(math.ceil(round((n + 1) * level, 9)), n) - 1]
        return -b, b
    x = sorted(float(e) for e in errors)
    a = (1.0 - level) / 2.0
    lo = math.floor(round((n + 1) * a, 9))
    hi = math.ceil(round((n + 1) * (1.0 - a), 9))
    return x[min(max(lo, 1), n) - 1], x[min(max(hi, 1), n) - 1]


def band_rows(out: dict[str, Any]) -> list[dict[str, Any]]:
    """One row per scenario of a corpus run's JSON (module docstring): id, cell features,
    envelope kinds and numbers, and the signed errors (None where the analytic side failed)."""
    from qmodel.build import resolve
    from qmodel.validation.corpus import generate

    ids = {r["id"]: r for r in out["scenarios"]}
    corpus = generate(int(out["n"]), int(out["seed"]), data=bool(out["data"]))
    rows = []
    for case in corpus.cases:
        r = ids.get(case.id)
        if r is None:
            continue
        res = resolve(case.scenario)
        kinds, numbers = envelope_values(res)
        numbers["load"] = float(case.utilization)
        err = r.get("error_rel")
        rows.append({"id": case.id, "cell": cell_features(res, case.features["topology"], case.utilization),
                     "kinds": kinds, "numbers": numbers,
                     "errors": None if not err else {m: float(err[m]) for m in BAND_METRICS}})
    return rows


def fit_table(rows: list[dict[str, Any]], levels: Sequence[str] = LEVELS, min_cases: int = MIN_CASES,
              level: float = LEVEL, signed: bool = SIGNED) -> dict[str, Any]:
    """The band table of ``rows`` (module docstring), without its provenance fields."""
    ok = [r for r in rows if r["errors"] is not None]
    groups: dict[str, list[dict]] = {}
    for r in ok:
        for depth in range(1, len(levels) + 1):
            groups.setdefault("/".join(r["cell"][k] for k in levels[:depth]), []).append(r)
    cells = {}
    for key in sorted(groups):
        g = groups[key]
        if len(g) >= min_cases or "/" not in key:
            cells[key] = {"cases": len(g)} | {m: list(conformal_interval([r["errors"][m] for r in g], level, signed))
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
    return {"level": level, "signed": signed, "min_cases": min_cases, "levels": list(levels), "corpus_cases": len(ok),
            "envelope": {"kinds": {k: sorted(v) for k, v in sorted(kinds.items())}, "ranges": dict(sorted(ranges.items()))},
            "cells": cells}


def holdout_coverage(rows: list[dict[str, Any]], folds: int = FOLDS, **fit: Any) -> dict[str, Any]:
    """k-fold held-out coverage of the bands (module docstring)."""
    ok = [r for r in rows if r["errors"] is not None]
    hits: dict[str, dict[str, list[float]]] = {}
    widths: dict[str, list[float]] = {m: [] for m in BAND_METRICS}
    for f in range(folds):
        test = [r for r in ok if int(r["id"].lstrip("c")) % folds == f]
        table = fit_table([r for r in rows if int(r["id"].lstrip("c")) % folds != f], **fit)
        for r in test:
            key = cell_of(table, r["cell"])
            for m in BAND_METRICS:
                lo, hi = table["cells"][key][m] if key else (math.inf, -math.inf)
                inside = float(lo <= r["errors"][m] <= hi)
                for group in (r["cell"]["topology"], "all"):
                    hits.setdefault(group, {}).setdefault(m, []).append(inside)
                widths[m].append(hi - lo)
    cov = {g: {m: float(np.mean(v)) for m, v in ms.items()} | {"n": len(ms[BAND_METRICS[0]])}
           for g, ms in sorted(hits.items())}
    return {"folds": folds, "coverage": cov, "median_width": {m: float(np.median(v)) for m, v in widths.items()}}


def table_toml(table: dict[str, Any], header: Sequence[str]) -> str:
    """The table as TOML, ``header`` as leading comments."""
    lines = [f"# {h}" for h in header] + [""]
    for k in ("measured_at", "command", "corpus_seed", "corpus_n", "corpus_cases", "level", "signed", "min_cases",
              "levels", "folds"):
        lines.append(f"{k} = {toml_value(table[k], k)}")
    for k in ("kinds", "ranges"):
        lines += ["", f"[envelope.{k}]"] + [f"{json.dumps(n)} = {toml_value(v, n)}" for n, v in table["envelope"][k].items()]
    for group, c in table["coverage"].items():  # held-out: share of errors inside their band, n
        lines += ["", f"[coverage.{json.dumps(group)}]"] + [f"{k} = {toml_value(round(v, 4), k)}" for k, v in c.items()]
    for key, c in table["cells"].items():
        lines += ["", f"[cells.{json.dumps(key)}]", f"cases = {c['cases']}"]
        lines += [f"{m} = {toml_value([round(x, 4) for x in c[m]], m)}" for m in BAND_METRICS]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m qmodel.validation.band_fit", description=__doc__.splitlines()[0])
    ap.add_argument("corpus_json", help="JSON of `qmodel validate --suite corpus --json F`")
    ap.add_argument("--out", help="write the table here (catalog/validity_bands.toml)")
    ap.add_argument("--measured-at", help="commit of the corpus run (default: this tree's HEAD)")
    args = ap.parse_args(argv)
    try:
        out = json.loads(Path(args.corpus_json).read_text(encoding="utf-8"))
        rows = band_rows(out)
    except (OSError, ValueError, KeyError) as err:
        sys.stderr.write(f"error: {args.corpus_json}: cannot read a corpus run ({type(err).__name__}: {err})\n")
        return 2
    cov = holdout_coverage(rows)
    sys.stdout.write(json.dumps(cov, indent=1) + "\n")
    if args.out:
        commit = args.measured_at or subprocess.run(["git", "rev-parse", "--short=7", "HEAD"], capture_output=True,
                                                    text=True, check=False).stdout.strip()
        table = fit_table(rows) | {"measured_at": commit, "folds": cov["folds"], "coverage": cov["coverage"], "corpus_seed": int(out["seed"]), "corpus_n": int(out["n"]),
                                   "command": f"qmodel validate --suite corpus --n {out['n']} --seed {out['seed']} "
                                              f"--json F; python -m qmodel.validation.band_fit F --out PATH"}
        header = ["Validity bands of the analytic engine against the replay (qmodel/validity.py reads this).",
                  "Made by qmodel.validation.band_fit from a corpus run; do not edit by hand (docs/validation.md)."]
        Path(args.out).write_text(table_toml(table, header), encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
