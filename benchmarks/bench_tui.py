"""How fast the TUI answers an edit: the "recompute <= 100 ms after an input change" target.

    .venv/bin/python benchmarks/bench_tui.py            # table for every example, plus the app end to end
    .venv/bin/python -m pytest benchmarks/bench_tui.py --benchmark-enable -q

Two measurements:

* engine: form values -> validated scenario -> first-stage Analysis (the solve at the scenario's
  rate, TTFT/TPOT distributions, stations, binding), for three kinds of edit: the arrival rate,
  an SLO target (both reuse the stations already built) and an instance count (new stations);
* app: Textual's Pilot sets a field in the running app and the clock stops when the results panel
  shows the answer for it (``QmodelApp.latencies_s``): validation, the 25 ms debounce, the worker
  thread and the redraw, i.e. what a user waits for.

Later stages (goodput, curves, sensitivities, P:D heatmap) run after this and are reported
separately: they refine the view and never block typing.
"""

from __future__ import annotations

import asyncio
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
EXAMPLES = sorted((ROOT / "examples").glob("*.*"))


def _edits(values: dict[str, str]) -> list[tuple[str, str, str]]:
    """(kind, field, new value): rate x0.9, TTFT target x1.1, one more decode instance."""
    from qmodel.units import parse_duration, parse_rate

    out: list[tuple[str, str, str]] = []
    rate = values.get("workload.arrivals.rate_per_s", "")
    if rate:
        out.append(("rate", "workload.arrivals.rate_per_s", f"{parse_rate(rate) * 0.9:.6g}"))
    out.append(("slo", "slo.ttft_s", f"{parse_duration(values['slo.ttft_s']) * 1.1:.6g} s"))
    key = "deployment.decode.instances" if values["deployment.topology"] == "disaggregated" else "deployment.pool.instances"
    out.append(("instances", key, str(int(values[key]) + 1)))
    return out


def engine_latencies(path: Path, repeats: int = 3) -> dict[str, float]:
    """Median seconds from an edited form to the first-stage Analysis, per kind of edit."""
    from qmodel.tui.compute import WhatIfSession
    from qmodel.tui.files import read_raw
    from qmodel.tui.form import build, values_from_raw

    raw = read_raw(path)
    values = values_from_raw(raw)
    res: dict[str, list[float]] = {}
    for _ in range(repeats):
        eng = WhatIfSession()
        eng.solve(build(values, raw, path.parent).scenario)  # the file as opened
        for kind, key, new in _edits(values):
            v = dict(values)
            v[key] = new
            t0 = time.perf_counter()
            fb = build(v, raw, path.parent)
            eng.solve(fb.scenario)
            res.setdefault(kind, []).append(time.perf_counter() - t0)
    return {k: statistics.median(x) for k, x in res.items()}


def stage_times(path: Path) -> dict[str, float]:
    """Seconds of each later stage for the file as opened (one run)."""
    from qmodel.tui.compute import STAGES, WhatIfSession
    from qmodel.tui.files import read_raw
    from qmodel.tui.form import build, values_from_raw

    raw = read_raw(path)
    eng = WhatIfSession()
    a = eng.solve(build(values_from_raw(raw), raw, path.parent).scenario)
    out = {"solve": a.timings_s.get("solve", 0.0)}
    for name, method in STAGES:
        t0 = time.perf_counter()
        a = getattr(eng, method)(a, lambda: False)
        out[name] = time.perf_counter() - t0
    return out


async def _app_latencies(path: Path, edits: int) -> list[float]:
    from qmodel.tui.app import QmodelApp

    sys.path.insert(0, str(ROOT / "tests"))
    from tui_fakes import settle

    app = QmodelApp(str(path))
    async with app.run_test(size=(120, 40)) as pilot:
        await settle(app, pilot)
        app.latencies_s.clear()
        base = float(app.values["workload.arrivals.rate_per_s"].split()[0])
        for i in range(edits):
            # alternate between two rates so every edit is a real change (and a cache miss on the first pass)
            app.set_field("workload.arrivals.rate_per_s", f"{base * (0.9 if i % 2 else 0.8) + 1e-3 * i:.6g}")
            for _ in range(500):
                await pilot.pause(0.002)
                if len(app.latencies_s) > i:
                    break
    return list(app.latencies_s)


def app_latencies(path: Path, edits: int = 10) -> list[float]:
    return asyncio.run(_app_latencies(path, edits))


def test_bench_engine_rate_edit(benchmark) -> None:
    from qmodel.tui.compute import WhatIfSession
    from qmodel.tui.files import read_raw
    from qmodel.tui.form import build, values_from_raw

    path = ROOT / "examples" / "llama3-70b-disagg-h100.yaml"
    raw = read_raw(path)
    values = values_from_raw(raw)
    eng = WhatIfSession()
    eng.solve(build(values, raw, path.parent).scenario)
    rates = iter(range(10**9))

    def edit() -> None:
        v = dict(values)
        v["workload.arrivals.rate_per_s"] = f"{5 + next(rates) % 1000 * 1e-3:.4f}"
        eng.solve(build(v, raw, path.parent).scenario)

    benchmark(edit)


def main() -> None:
    print("engine: form edit -> first-stage results (median of 3), seconds")
    print(f"{'example':40} {'rate':>7} {'slo':>7} {'inst.':>7}")
    for p in EXAMPLES:
        try:
            r = engine_latencies(p)
        except Exception as err:  # report and go on: one broken example must not hide the others
            print(f"{p.name:40} error: {err}")
            continue
        print(f"{p.name:40} {r.get('rate', float('nan')):7.3f} {r['slo']:7.3f} {r['instances']:7.3f}")
    for name in ("llama3-70b-disagg-h100.yaml", "opt13b-disagg-a100.yaml"):
        lat = sorted(app_latencies(ROOT / "examples" / name))
        print(f"app end to end ({name}, {len(lat)} rate edits): median {statistics.median(lat) * 1000:.0f} ms, "
              f"max {lat[-1] * 1000:.0f} ms")
    print("later stages for the example as opened, seconds:")
    for name in ("opt13b-disagg-a100.yaml", "llama3-70b-disagg-h100.yaml"):
        st = stage_times(ROOT / "examples" / name)
        print(f"  {name}: " + ", ".join(f"{k} {v:.2f}" for k, v in st.items()))


if __name__ == "__main__":
    main()
