"""Run fuzz cases in-process through ``qmodel.cli.main.main`` and classify contract violations.

A case fails (one or more of): ``traceback`` (an exception escapes ``main``), ``exit`` (an exit code
outside {0, 2, 3, 4} or not the one its category expects), ``nonfinite`` (NaN/inf in stdout or
stderr, the injected text removed), ``hang`` (longer than ``HANG_S``), ``multiline`` (an error
message over one line), ``field`` (an exit-2 message that does not name the field) and ``long``
(an error line echoing more than ~80 characters of a value: lines over ``MAX_LINE`` characters).
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import re
import signal
import time
import traceback
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

from tests.fuzz.cases import Case

__all__ = ["Outcome", "run_case", "run_all", "HANG_S", "FAILURE_KINDS"]

HANG_S = float(os.environ.get("QMODEL_FUZZ_HANG_S", "30"))  # lower it to measure old code with many hangs
MAX_LINE = 400
FAILURE_KINDS = ("traceback", "exit", "nonfinite", "hang", "multiline", "field", "long")
_NONFINITE = re.compile(r"(?<![A-Za-z])(nan|-?inf|-?infinity)(?![A-Za-z])", re.IGNORECASE)
_ALLOWED = {0, 2, 3, 4}


class _Hang(BaseException):
    pass


@dataclass
class Outcome:
    case: Case
    rc: int | None
    stdout: str
    stderr: str
    seconds: float
    failures: list[str] = field(default_factory=list)
    error: str = ""


def _write(case: Case, tmp: Path, i: int) -> Path:
    p = tmp / f"case{i}{case.suffix}"
    if case.raw is not None:
        p.write_bytes(case.raw)
    elif case.suffix == ".json":
        p.write_text(json.dumps(case.data))
    elif case.suffix == ".toml":
        p.write_text(_toml(case.data))
    else:
        import yaml

        p.write_text(yaml.safe_dump(case.data, sort_keys=False))
    return p


def _toml(d: dict, prefix: str = "") -> str:
    flat, tables = [], []
    for k, v in d.items():
        if isinstance(v, dict):
            tables.append(_toml(v, f"{prefix}{k}."))
        else:
            flat.append(f"{k} = {json.dumps(v)}")
    head = f"[{prefix[:-1]}]\n" if prefix and flat else ""
    return head + "".join(f"{ln}\n" for ln in flat) + "".join(tables)


def run_case(case: Case, tmp: Path, i: int = 0) -> Outcome:
    from qmodel.cli.main import main

    path = _write(case, tmp, i)
    argv = [case.verb, str(path), *case.extra]
    for ov in case.overrides:
        argv += ["--set", ov]
    out, err = io.StringIO(), io.StringIO()
    rc: int | None = None
    error = ""

    def on_alarm(signum, frame):
        raise _Hang()

    old = signal.signal(signal.SIGALRM, on_alarm)
    signal.setitimer(signal.ITIMER_REAL, HANG_S)
    t0 = time.perf_counter()
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            rc = main(argv)
    except _Hang:
        error = "hang"
    except SystemExit as e:  # argparse
        rc = e.code if isinstance(e.code, int) else 2
    except BaseException:  # noqa: BLE001 - a traceback is what the fuzz suite looks for
        error = traceback.format_exc(limit=-3)
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, old)
    o = Outcome(case, rc, out.getvalue(), err.getvalue(), time.perf_counter() - t0, error=error)
    o.failures = _classify(o, path)
    return o


def _classify(o: Outcome, path: Path) -> list[str]:
    c = o.case
    f: list[str] = []
    if o.error == "hang":
        return ["hang"]
    if o.error:
        return ["traceback"]
    if o.rc not in _ALLOWED or o.rc not in c.expect:
        f.append("exit")
    scan = o.stdout + o.stderr
    if c.injected:
        scan = scan.replace(c.injected, "")
    for ov in c.overrides:
        scan = scan.replace(ov.split("=", 1)[1], "")
    if _NONFINITE.search(scan):
        f.append("nonfinite")
    if o.rc and o.rc != 0:
        lines = [ln for ln in o.stderr.splitlines() if ln.strip() and not ln.startswith("qmodel: warning: ")]
        if len(lines) != 1:
            f.append("multiline")
        if any(len(ln) > MAX_LINE for ln in lines):
            f.append("long")
        if o.rc == 2 and c.field:
            want = str(path) if c.field == "<file>" else c.field
            if not lines or want not in lines[0]:
                f.append("field")
    return f


def run_all(cases: list[Case], tmp: Path) -> tuple[list[Outcome], dict[str, Counter]]:
    """Run every case; counts[category][failure kind] (plus 'cases' and 'xfail') per category."""
    outcomes = []
    counts: dict[str, Counter] = {}
    for i, case in enumerate(cases):
        o = run_case(case, tmp, i)
        outcomes.append(o)
        cnt = counts.setdefault(case.category, Counter())
        cnt["cases"] += 1
        for kind in o.failures:
            cnt[kind + (" (xfail)" if case.xfail else "")] += 1
    return outcomes, counts


def report(counts: dict[str, Counter]) -> str:
    kinds = FAILURE_KINDS
    rows = [f"{'category':<10} {'cases':>6} " + " ".join(f"{k:>9}" for k in kinds)]
    for cat, cnt in sorted(counts.items()):
        cells = []
        for k in kinds:
            n, nx = cnt.get(k, 0), cnt.get(k + " (xfail)", 0)
            cells.append(f"{n}+{nx}x" if nx else str(n))
        rows.append(f"{cat:<10} {cnt['cases']:>6} " + " ".join(f"{c:>9}" for c in cells))
    return "\n".join(rows)


if __name__ == "__main__":  # python -m tests.fuzz.runner N SEED: counts by category, and the first failures
    import sys
    import tempfile

    from tests.fuzz.cases import generate

    n = int(sys.argv[1]) if len(sys.argv) > 1 else 2000
    seed = int(sys.argv[2]) if len(sys.argv) > 2 else 0
    t0 = time.perf_counter()
    with tempfile.TemporaryDirectory() as d:
        outs, counts = run_all(generate(n, seed), Path(d))
    print(report(counts))
    print(f"{n} cases in {time.perf_counter() - t0:.1f} s")
    shown = Counter()
    for o in outs:
        for k in o.failures:
            key = (o.case.category, k)
            if shown[key] < int(sys.argv[3] if len(sys.argv) > 3 else 2):
                shown[key] += 1
                msg = (o.error.strip().splitlines() or [""])[-1] if o.error else o.stderr.strip()[-300:]
                print(f"--- {k}: {o.case.describe()} rc={o.rc} {o.seconds:.2f}s :: {msg[:300]}")
