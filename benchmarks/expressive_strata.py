"""Analytic vs replay on the expressiveness strata (issue 18 §3: KV reservation, context window,
TPOT definition), next to the same corpus cases without them.

    OPENBLAS_NUM_THREADS=1 .venv/bin/python benchmarks/expressive_strata.py [N] [SEED] [OUT.json]

Draws the data-free corpus ``generate(N, SEED, data=False)`` (default 24, 0), derives one variant per
open-arrival case (:func:`qmodel.validation.corpus_expressive.expressive_cases`) and runs each variant
and its base case through :func:`qmodel.validation.corpus_run.run_corpus_case` at the corpus-ci replay
lengths. Prints, per value of each new axis, the median |relative error| of TTFT/TPOT p50/p90/p99
and the median |attainment difference| over the variants, and over the same cases' base rows
(``base``), with n. Rows go to OUT.json (default: none). Figures: docs/validation.md,
"Expressiveness strata".
"""
from __future__ import annotations

import json
import pathlib
import sys

import numpy as np

REPO = pathlib.Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
from qmodel.validation.corpus import generate  # noqa: E402
from qmodel.validation.corpus_expressive import EXPRESSIVE_AXES, expressive_cases  # noqa: E402
from qmodel.validation.corpus_run import RUN_LENGTHS, run_corpus_case  # noqa: E402

METRICS = ("ttft_p50", "ttft_p90", "ttft_p99", "tpot_p50", "tpot_p90", "tpot_p99", "attainment")


def _medians(rows: list[dict]) -> str:
    ok = [r for r in rows if r.get("error_rel")]
    cells = []
    for m in METRICS:
        v = [abs(r["error_rel"][m]) for r in ok if m in r["error_rel"]]
        cells.append(f"{np.median(v) * (1 if m == 'attainment' else 100):.3g}" if v else "-")
    return " | ".join(cells) + f" | {len(ok)}/{len(rows)}"


def main() -> None:
    n = int(sys.argv[1]) if len(sys.argv) > 1 else 24
    seed = int(sys.argv[2]) if len(sys.argv) > 2 else 0
    out = sys.argv[3] if len(sys.argv) > 3 else None
    corpus = generate(n, seed, data=False)
    by_id = {c.id: c for c in corpus.cases}
    lengths = RUN_LENGTHS["ci"]
    rows = []
    for v in expressive_cases(corpus):
        rows.append((run_corpus_case(v, lengths), run_corpus_case(by_id[v.id[:-1]], lengths)))
        r = rows[-1][0]
        print(v.id, {a: v.features[a] for a in EXPRESSIVE_AXES}, r.get("error") or
              {m: round(r["error_rel"][m], 3) for m in METRICS if m in r.get("error_rel", {})}, flush=True)
    print("\naxis=value | TTFT p50/p90/p99, TPOT p50/p90/p99 median |err| % | attainment | n ok/n")
    for axis, values in EXPRESSIVE_AXES.items():
        for val in values:
            sel = [(x, b) for x, b in rows if x["features"][axis] == val]
            print(f"{axis}={val} | {_medians([x for x, _ in sel])}")
            print(f"  base | {_medians([b for _, b in sel])}")
    if out:
        pathlib.Path(out).write_text(json.dumps([{"variant": x, "base": b} for x, b in rows], default=str))


if __name__ == "__main__":
    main()
