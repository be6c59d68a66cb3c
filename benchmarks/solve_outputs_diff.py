"""``qmodel solve F`` and ``qmodel solve F --json`` for every file in examples/, this tree against a
git revision: stdout, stderr and exit status compared byte for byte (issue 20: start-up work must
leave every output identical).

    QMODEL_DATA_DIR=/path/to/data .venv/bin/python benchmarks/solve_outputs_diff.py --against main

Each command runs as a fresh process in its tree (the console script's code, the tree on
PYTHONPATH). ``--cache-home DIR`` sets ``XDG_CACHE_HOME`` for this tree's runs (an empty folder: cold
caches; a path to a file: an unwritable cache). Exit status 1 when any output differs.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
from pathlib import Path

_ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(Path(__file__).resolve().parent))
from tree_run import CLI_CODE as _CODE  # noqa: E402 - the tree on PYTHONPATH, its top-level packages too


def _run(tree: Path, argv: list[str], env: dict[str, str]) -> tuple[bytes, bytes, int]:
    proc = subprocess.run([sys.executable, "-c", _CODE, *argv], cwd=tree, capture_output=True,
                          env={**env, "PYTHONPATH": str(tree)}, timeout=600)
    return proc.stdout, proc.stderr, proc.returncode


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--against", required=True, metavar="REV", help="git revision to compare with")
    ap.add_argument("--cache-home", metavar="DIR", help="XDG_CACHE_HOME for this tree's runs")
    args = ap.parse_args(argv)
    env = dict(os.environ)
    mine = env
    if args.cache_home:
        mine = {k: v for k, v in env.items() if k != "QMODEL_CACHE_DIR"} | {"XDG_CACHE_HOME": args.cache_home}
    bad = 0
    with tempfile.TemporaryDirectory() as tmp:
        base = Path(tmp) / "baseline"
        subprocess.run(["git", "-C", str(_ROOT), "worktree", "add", "--detach", "-q", str(base), args.against], check=True)
        try:
            for f in sorted((_ROOT / "examples").iterdir()):
                for extra in ([], ["--json"]):
                    cmd = ["solve", f"examples/{f.name}", *extra]
                    same = _run(base, cmd, env) == _run(_ROOT, cmd, mine)
                    bad += not same
                    print(f"{'same' if same else 'DIFFERENT':9s} qmodel {' '.join(cmd)}", flush=True)
        finally:
            subprocess.run(["git", "-C", str(_ROOT), "worktree", "remove", "--force", str(base)], check=False)
    print(f"{bad} of the outputs differ" if bad else "every output identical (stdout, stderr, exit status)")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
