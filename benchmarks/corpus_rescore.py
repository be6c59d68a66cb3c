"""Re-score the generated corpus after an analytic change, without re-running unchanged replays.

    python benchmarks/corpus_rescore.py BASE.json [--out NEW.json] [--where axis=value ...] [--jobs J]

BASE.json is a ``qmodel validate --suite corpus --json`` result. The corpus is regenerated from its
seed, n and data flag (byte-identical per seed); each selected case is solved with the code in the
working tree, and its stored replay is reused when the case's rate (u x the new analytic limit) is
unchanged (:func:`qmodel.validation.corpus_run.rescore_corpus`), otherwise replayed again. Prints the
grouped median / p90 |error| tables of the selected cases, before (BASE) and after, and how many
replays were reused. ``--where`` filters on the case's feature values (``topology=colocated``,
``arrivals=trace``; repeat to AND, ``axis!=value`` to exclude). The validity bands are refitted on
such a re-score by ``python -m qmodel.validation.band_fit BASE.json --rescore`` (docs/validation.md).
"""

from __future__ import annotations

import argparse
import json
import sys

from qmodel.validation.corpus_run import UTILIZATION_DEFINITION, markdown_tables, rescore_corpus, summarize_corpus


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("base")
    ap.add_argument("--out", default=None)
    ap.add_argument("--where", action="append", default=[])
    ap.add_argument("--jobs", type=int, default=1)
    a = ap.parse_args(argv)
    for w in a.where:
        if "=" not in w:
            print(f"--where: {w!r}: expected axis=value or axis!=value", file=sys.stderr)
            return 2
    base = json.load(open(a.base))
    old, new = rescore_corpus(base, a.where, a.jobs)
    reused = sum(bool(r.get("replay_reused")) for r in new)
    print(f"{len(new)} cases selected ({' and '.join(a.where) or 'all'}); {reused} replays reused, "
          f"{len(new) - reused} re-run")
    for title, rs in (("BEFORE (" + a.base + ")", old), ("AFTER (working tree)", new)):
        print(f"\n## {title}\n")
        print(markdown_tables({"summary": summarize_corpus(rs)}).split("**by load band**")[0])
    if a.out:
        with open(a.out, "w") as f:
            keep = ("schema_version", "suite", "seed", "n", "data", "skipped_strata", "definition")
            out = {k: base[k] for k in keep if k in base}
            if "definition" in out:  # corpus_report reads it; the load's definition is this tree's
                out["definition"] = dict(out["definition"], utilization=UTILIZATION_DEFINITION)
            json.dump({**out, "where": a.where, "summary": summarize_corpus(new), "scenarios": new}, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
