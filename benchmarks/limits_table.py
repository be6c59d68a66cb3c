"""Analytic stability limit vs the replay's sustained rate over the bundled examples (docs/validation.md,
"Sustained rate"), plus the chunked budget sweep of llama3-8b-chunked-h100.

    .venv/bin/python benchmarks/limits_table.py [n_requests]     # default 20000, ~30 s

Examples that read the data folder are skipped with a note when it is absent.
"""

from __future__ import annotations

import sys
from pathlib import Path

from qmodel.solver import Solver
from qmodel.errors import QmodelError
from qmodel.scenario import load_scenario
from qmodel.validation.sustained import sustained_rate

EX = Path(__file__).resolve().parent.parent / "examples"


def main(n: int = 20000) -> None:
    cases: list[tuple[Path, list[str]]] = [(p, []) for p in sorted(EX.iterdir())]
    cases += [(EX / "llama3-8b-chunked-h100.yaml", [f"deployment.chunk_tokens={b}"])
              for b in (256, 1024, 2048, 4096, 8192, 16384)]
    print(f"{'scenario':36s} {'override':28s} {'binding':10s} {'analytic':>9s} {'sustained':>9s} {'error':>7s}")
    for path, over in cases:
        try:
            scn = load_scenario(path, over)
            lim, station = Solver(scn).max_stable_rate()
            sus = sustained_rate(scn, n, 0, guess_per_s=lim).rate_per_s
        except QmodelError as e:
            print(f"{path.stem:36s} {' '.join(over):28s} skipped: {e}")
            continue
        print(f"{path.stem:36s} {' '.join(over):28s} {station:10s} {lim:9.4g} {sus:9.4g} {100 * (lim / sus - 1):+6.1f}%",
              flush=True)


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 20000)
