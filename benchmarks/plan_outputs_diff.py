"""``qmodel plan EXAMPLE --objective O --json`` in this tree against a git revision: the JSON compared
with its timing fields (``seconds``, ``search_seconds``, ``rank_seconds``) left out, and the CPU time
of each run (the process and its children) timed in alternating rounds (issue 20: planner work
removed must leave every ranking, goodput and printed number identical).

    QMODEL_DATA_DIR=/path/to/data OPENBLAS_NUM_THREADS=1 \\
        .venv/bin/python benchmarks/plan_outputs_diff.py --against main [--rounds 3] \\
        [--examples llama3-70b-disagg-h100,opt13b-disagg-a100,llama3-8b-colocated-h100] \\
        [--objectives min-gpus,max-goodput]

Each run is a fresh process in its tree (the console script's code, the tree on PYTHONPATH), run
serially (``--serial``). A shared machine's absolute times drift between runs, so the two trees
alternate, round by round, and the script prints both medians, their ratio and the ratio's spread
over the rounds. Exit status 1 when any output differs.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

_ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(Path(__file__).resolve().parent))
from tree_run import CLI_CODE as _CODE  # noqa: E402 - the tree on PYTHONPATH, its top-level packages too
_TIMING = ("seconds", "search_seconds", "rank_seconds")


def _strip(x: Any) -> Any:
    if isinstance(x, dict):
        return {k: _strip(v) for k, v in x.items() if k not in _TIMING}
    if isinstance(x, list):
        return [_strip(v) for v in x]
    return x


def _run(tree: Path, argv: list[str], env: dict[str, str]) -> tuple[Any, int, float]:
    """(stripped JSON or raw output, exit status, CPU seconds of the process)."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    proc = subprocess.run([sys.executable, "-c", _CODE, *argv], cwd=tree, capture_output=True,
                          env={**env, "PYTHONPATH": str(tree)}, timeout=1200)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime + after.ru_stime) - (before.ru_utime + before.ru_stime)
    try:
        out: Any = _strip(json.loads(proc.stdout))
    except json.JSONDecodeError:
        out = (proc.stdout, proc.stderr)
    return out, proc.returncode, cpu


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--against", required=True, metavar="REV", help="git revision to compare with")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--examples", default="llama3-70b-disagg-h100,opt13b-disagg-a100,llama3-8b-colocated-h100")
    ap.add_argument("--objectives", default="min-gpus,max-goodput")
    args = ap.parse_args(argv)
    env = dict(os.environ, OPENBLAS_NUM_THREADS="1", OMP_NUM_THREADS="1", MKL_NUM_THREADS="1")
    bad = 0
    with tempfile.TemporaryDirectory() as tmp:
        base = Path(tmp) / "baseline"
        subprocess.run(["git", "-C", str(_ROOT), "worktree", "add", "--detach", "-q", str(base), args.against], check=True)
        try:
            print(f"{'command':62s} {'output':9s} {args.against[:10]:>8s} {'this':>8s} {'ratio':>6s} (spread)"
                  "   CPU s, medians")
            for name in args.examples.split(","):
                (path,) = (_ROOT / "examples").glob(f"{name}.*")
                for objective in args.objectives.split(","):
                    cmd = ["plan", f"examples/{path.name}", "--objective", objective, "--json", "--serial"]
                    times: dict[str, list[float]] = {"base": [], "this": []}
                    same = True
                    for _ in range(args.rounds):
                        b_out, b_rc, b_cpu = _run(base, cmd, env)
                        t_out, t_rc, t_cpu = _run(_ROOT, cmd, env)
                        same = same and (b_out, b_rc) == (t_out, t_rc)
                        times["base"].append(b_cpu)
                        times["this"].append(t_cpu)
                    bad += not same
                    ratios = [b / t for b, t in zip(times["base"], times["this"])]
                    b, t = statistics.median(times["base"]), statistics.median(times["this"])
                    print(f"{' '.join(cmd[:4]):62s} {'same' if same else 'DIFFERENT':9s} {b:8.2f} {t:8.2f} "
                          f"{b / t:6.2f} ({min(ratios):.2f}-{max(ratios):.2f})", flush=True)
        finally:
            subprocess.run(["git", "-C", str(_ROOT), "worktree", "remove", "--force", str(base)], check=False)
    print(f"{bad} of the outputs differ" if bad else "every output identical (JSON less its timing fields, exit status)")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
