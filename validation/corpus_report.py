"""The "Generated corpus" section of docs/validation.md from a corpus run's JSON.

    qmodel validate --suite corpus --n 300 --seed 0 --json corpus.json
    python -m qmodel.validation.corpus_report corpus.json > section.md

Prints the grouped tables (:func:`qmodel.validation.corpus_run.markdown_tables`), the target
check per topology x load band and the worst feature groups (n >= 10, by the larger median |error|
of TTFT p90 and TPOT p90, with their signed medians). The validity bands fitted on a corpus run, and their held-out coverage,
come from ``python -m qmodel.validation.band_fit corpus.json`` (:mod:`qmodel.validation.band_fit`).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np

from qmodel.validation.corpus_run import METRICS, markdown_tables, summarize_corpus

__all__ = ["worst_groups", "signed_medians", "report", "main"]


def worst_groups(out: dict, k: int = 12, min_n: int = 10) -> list[tuple[str, str, dict]]:
    """(axis, value, stats) of the ``k`` feature groups with the largest max(median |err| TTFT p90, TPOT p90)."""
    cand = []
    for axis, groups in out["summary"]["by_feature"].items():
        for v, g in groups.items():
            if g["n"] >= min_n and g["ttft_p90"]["n"]:
                cand.append((max(g["ttft_p90"]["median_abs_rel_error"], g["tpot_p90"]["median_abs_rel_error"]), axis, v, g))
    cand.sort(key=lambda c: -c[0])
    return [(a, v, g) for _, a, v, g in cand[:k]]


def signed_medians(rows: list[dict]) -> dict[str, float]:
    """The median signed error (analytic - replay) / replay per metric (attainment: the difference)
    over the answered rows; 0 where none has the metric."""
    ok = [r["error_rel"] for r in rows if r.get("error_rel")]
    return {m: float(np.median(v)) if (v := [e[m] for e in ok if m in e]) else 0.0 for m in METRICS}


def report(out: dict) -> str:
    """The Markdown section; the summary is recomputed from the rows (a JSON written before a
    summary field was added still renders)."""
    out = dict(out, summary=summarize_corpus(out["scenarios"]))
    s = out["summary"]
    lines = [f"{out['n']} scenarios, seed {out['seed']}, data folder {'used' if out['data'] else 'absent'}; "
             f"replay {out['definition']['replay_requests']}.", ""]
    lines += [f"- skipped stratum {x}" for x in out["skipped_strata"]]
    noise = s["replay_noise"]
    lines += ["", "Replay noise (relative standard error over the two seeds), median per metric: "
              + ", ".join(f"{m} {v * 100:.1f}%" for m, v in noise["median_by_metric"].items())
              + f"; {noise['fraction_below_2pct'] * 100:.0f}% of scenarios below 2% on all six.", ""]
    lines.append(markdown_tables(out))
    t = s["targets"]
    lines += [f"**Targets** (median |err| <= 5%, p90 <= 15%, attainment p90 |diff| <= 0.03, per topology x band up to "
              f"u 0.95): met in {t['met']} of {t['of']} cells.", ""]
    lines += [f"- {name}: " + "; ".join(c["misses"][:6]) + (" ..." if len(c["misses"]) > 6 else "")
              + (f"; {c['failures']} failed" if c["failures"] else "") for name, c in t["cells"].items() if not c["met"]]
    lines += ["", "**Worst feature groups** (n >= 10; median / p90 |err| %; signed: the median of the signed error, "
              "+ analytic high)", "",
              "| axis = value | n | TTFT p90 | signed | TPOT p90 | signed | attain. | signed |", "|---|---|---|---|---|---|---|---|"]
    for axis, v, g in worst_groups(out):
        cell = lambda m: f"{g[m]['median_abs_rel_error'] * 100:.1f}/{g[m]['p90_abs_rel_error'] * 100:.1f}"  # noqa: E731
        sgn = signed_medians([r for r in out["scenarios"] if r["features"].get(axis) == v])
        lines.append(f"| {axis} = {v} | {g['n']} | {cell('ttft_p90')} | {sgn['ttft_p90'] * 100:+.1f} | "
                     f"{cell('tpot_p90')} | {sgn['tpot_p90'] * 100:+.1f} | {g['attainment']['median_abs_rel_error']:.3f} | "
                     f"{sgn['attainment']:+.3f} |")
    lines += ["", f"**Failures** ({len(s['failures'])}):", ""] + [f"- {f}" for f in s["failures"]]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    """Print the report of one corpus JSON; a missing, unreadable or non-corpus file is one line, exit 2."""
    parser = argparse.ArgumentParser(prog="python -m qmodel.validation.corpus_report",
                                     description="Tables of a corpus run's JSON (qmodel validate --suite corpus --json F).")
    parser.add_argument("corpus", help="the corpus run's JSON file")
    try:
        args = parser.parse_args(argv)
    except SystemExit as exc:  # --help exits 0; a usage error exits 2 after argparse's one line
        return int(exc.code or 0)
    try:
        out = json.loads(Path(args.corpus).read_text(encoding="utf-8"))
        text = report(out)
    except OSError as exc:
        sys.stderr.write(f"error: corpus: cannot read {args.corpus!r}: {exc.strerror or exc}\n")
        return 2
    except (ValueError, KeyError, TypeError) as exc:
        sys.stderr.write(f"error: corpus: {args.corpus!r} is not a corpus run's JSON "
                         f"(qmodel validate --suite corpus --json F): {type(exc).__name__} {exc}\n")
        return 2
    sys.stdout.write(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
