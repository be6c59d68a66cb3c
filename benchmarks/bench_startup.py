"""Wall time of a fresh ``qmodel`` process: ``qmodel solve EXAMPLE`` on three examples and ``qmodel --help``.

Target (issue 20): ``qmodel solve EXAMPLE`` as a fresh process <= 0.3 s wall (median).

    .venv/bin/python benchmarks/bench_startup.py [--runs 7] [--examples a,b,c|all]
    .venv/bin/python benchmarks/bench_startup.py --against main [--runs 7]   # side by side with a revision
    .venv/bin/python benchmarks/bench_startup.py --pyc        # with a warm bytecode cache (see below)

Each command runs as its own process, exactly what the console script does
(``python -c "from qmodel.cli.main import main; ..."`` with the tree on PYTHONPATH, run from the
tree's root), after one unmeasured warm-up run (catalog JSON cache, OS file cache). The table gives
the median wall time and the median CPU time (user + system of the child, steadier than wall on a
shared machine). With ``--against REV`` a git worktree of REV in a temporary folder is timed too,
its runs alternating with this tree's so both see the same load, and the ratio REV / this tree is
printed; the two trees' stdout is compared byte for byte and the column ``same`` says whether it
matched.

``PYTHONDONTWRITEBYTECODE=1`` (set on some machines) makes every run compile qmodel's sources
anew; an installed qmodel has its bytecode cached. ``--pyc`` points ``PYTHONPYCACHEPREFIX`` at a
temporary folder and clears ``PYTHONDONTWRITEBYTECODE``, so the warm-up run writes the bytecode
and the measured runs read it, as an installed copy would. The header says which mode ran.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

_ROOT = Path(__file__).resolve().parent.parent
EXAMPLES = ["opt13b-disagg-a100.yaml", "llama3-8b-colocated-h100.yaml", "llama3-70b-disagg-h100.yaml"]
sys.path.insert(0, str(Path(__file__).resolve().parent))
from tree_run import CLI_CODE as _CODE  # noqa: E402 - the tree on PYTHONPATH, its top-level packages too


def _commands(examples: list[str]) -> list[tuple[str, list[str]]]:
    return [(f"solve {e}", ["solve", f"examples/{e}"]) for e in examples] + [("--help", ["--help"])]


def _run(tree: Path, argv: list[str], env: dict[str, str]) -> tuple[float, float, bytes]:
    """(wall s, child CPU s, stdout) of one fresh process in ``tree``."""
    t0 = time.perf_counter()
    proc = subprocess.Popen([sys.executable, "-c", _CODE, *argv], cwd=tree, env={**env, "PYTHONPATH": str(tree)},
                            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
    out = proc.stdout.read()
    _, status, usage = os.wait4(proc.pid, 0)
    wall = time.perf_counter() - t0
    proc.returncode = os.waitstatus_to_exitcode(status)
    if proc.returncode != 0:
        raise SystemExit(f"{tree}: qmodel {' '.join(argv)} exited {proc.returncode}")
    return wall, usage.ru_utime + usage.ru_stime, out


def _env(pyc_dir: str | None) -> dict[str, str]:
    env = dict(os.environ)
    try:
        from qmodel.settings import data_dir

        if data_dir() is not None:
            env["QMODEL_DATA_DIR"] = str(data_dir())  # another tree looks for data beside itself
    except ImportError:  # pragma: no cover - run outside the venv
        pass
    if pyc_dir is not None:
        env.pop("PYTHONDONTWRITEBYTECODE", None)
        env["PYTHONPYCACHEPREFIX"] = pyc_dir
    return env


def measure(trees: dict[str, Path], examples: list[str], runs: int, pyc: bool) -> dict[str, dict[str, dict]]:
    """{tree label: {command: {"wall": [...], "cpu": [...], "out": bytes}}}, runs alternating between trees."""
    res: dict[str, dict[str, dict]] = {label: {} for label in trees}
    with tempfile.TemporaryDirectory() as tmp:
        for name, argv in _commands(examples):
            envs = {label: _env(str(Path(tmp) / label) if pyc else None) for label in trees}
            for label, tree in trees.items():
                _, _, out = _run(tree, argv, envs[label])  # warm-up: caches, bytecode with --pyc
                res[label][name] = {"wall": [], "cpu": [], "out": out}
            for _ in range(runs):
                for label, tree in trees.items():
                    wall, cpu, _ = _run(tree, argv, envs[label])
                    res[label][name]["wall"].append(wall)
                    res[label][name]["cpu"].append(cpu)
    return res


def _mode(pyc: bool) -> str:
    if pyc:
        return "bytecode cached (--pyc)"
    return "bytecode not cached (PYTHONDONTWRITEBYTECODE)" if os.environ.get("PYTHONDONTWRITEBYTECODE") else "ambient bytecode cache"


def _met(name: str, wall: float) -> str:
    """Whether a ``solve`` command meets the 0.3 s target (median wall); ``-`` for ``--help``."""
    return "-" if not name.startswith("solve") else ("met" if wall <= 0.3 else "missed")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=7, help="measured runs per command and tree (default 7)")
    ap.add_argument("--examples", default=",".join(EXAMPLES),
                    help="comma-separated example files, or 'all' for every bundled example")
    ap.add_argument("--against", metavar="REV", help="also time git revision REV, alternating, and print the ratio")
    ap.add_argument("--pyc", action="store_true", help="measure with a warm bytecode cache (module doc)")
    args = ap.parse_args(argv)
    examples = (sorted(p.name for p in (_ROOT / "examples").iterdir() if p.suffix in (".yaml", ".toml", ".json"))
                if args.examples == "all" else args.examples.split(","))
    print(f"fresh-process wall time, median of {args.runs} runs after one warm-up; {_mode(args.pyc)}; "
          f"load average {os.getloadavg()[0]:.2f} on {os.cpu_count()} CPUs", flush=True)
    if not args.against:
        res = measure({"current": _ROOT}, examples, args.runs, args.pyc)["current"]
        print(f"{'command':42s} {'wall s':>8s} {'cpu s':>8s} {'min wall':>9s} {'<= 0.3 s':>9s}")
        for name, r in res.items():
            w = statistics.median(r['wall'])
            print(f"{name:42s} {w:8.3f} {statistics.median(r['cpu']):8.3f} {min(r['wall']):9.3f} {_met(name, w):>9s}")
        return 0
    with tempfile.TemporaryDirectory() as tmp:
        tree = Path(tmp) / "baseline"
        subprocess.run(["git", "-C", str(_ROOT), "worktree", "add", "--detach", "-q", str(tree), args.against], check=True)
        try:
            res = measure({"baseline": tree, "current": _ROOT}, examples, args.runs, args.pyc)
        finally:
            subprocess.run(["git", "-C", str(_ROOT), "worktree", "remove", "--force", str(tree)], check=False)
    rev = args.against[:10]
    print(f"{'command':42s} {rev + ' wall':>14s} {'current wall':>13s} {'ratio':>6s} {rev + ' cpu':>14s} "
          f"{'current cpu':>12s} {'ratio':>6s} {'same':>5s} {'<= 0.3 s':>9s}")
    for name in res["current"]:
        b, c = res["baseline"][name], res["current"][name]
        bw, cw = statistics.median(b["wall"]), statistics.median(c["wall"])
        bc, cc = statistics.median(b["cpu"]), statistics.median(c["cpu"])
        same = "yes" if b["out"] == c["out"] else "NO"
        print(f"{name:42s} {bw:14.3f} {cw:13.3f} {bw / cw:5.2f}x {bc:14.3f} {cc:12.3f} {bc / cc:5.2f}x {same:>5s} {_met(name, cw):>9s}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
