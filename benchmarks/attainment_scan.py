"""Is SLO attainment non-increasing in the rate? A scan over a grid of rates, not a sample of pairs.

The property tests (tests/test_prop_attainment.py) draw pairs of rates; a rise that shows only on a
fine grid or near the limit is found here, with every rise listed. For one example (and ``--set``
overrides) it evaluates, at rates ``f·λmax`` for f on ``--grid lo:hi:step``:

* ``Solver.attainment`` and the TTFT / TPOT attainments of ``Solver.compose`` at the scenario's SLO;
* with ``--targets N``, also the CDF of the pool station's TTFT law (colocated/chunked) at N
  targets between its 0.3 and 0.999 quantiles at the middle rate (rises at any target, not only the
  SLO's).

A rise is an increase of more than 1e-6 (the goodput search's own tolerance) from one rate to the
next. Examples (docs/methods.md, Grids and "The colocated burst increment"):

    .venv/bin/python benchmarks/attainment_scan.py llama2-70b-disagg-splitwise.toml --grid 0.99:0.999:0.0002
    .venv/bin/python benchmarks/attainment_scan.py azure-conv-trace-disagg-a100.yaml --grid 0.3:0.6:0.0025 \\
        --set deployment.prefill.instances=3 --set deployment.decode.instances=3 \\
        --set "deployment.link_bandwidth_bytes_per_s=62.5 MB/s" --set deployment.transfer_mode=layerwise
    .venv/bin/python benchmarks/attainment_scan.py llama3-8b-colocated-h100.yaml --grid 0.5:0.9:0.005 \\
        --set workload.arrivals.cv=1.5 --set perf.efficiency=constants --targets 400

Needs ``QMODEL_DATA_DIR`` for the examples that read public tables or traces.
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

import numpy as np

from qmodel.solver import Solver
from qmodel.scenario import load_scenario

TOL = 1e-6
EXAMPLES = Path(__file__).resolve().parent.parent / "examples"


def _grid(text: str) -> np.ndarray:
    lo, hi, step = (float(x) for x in text.split(":"))
    return np.arange(lo, hi + step / 2, step)


def _rises(name: str, fs: np.ndarray, values: np.ndarray) -> list[str]:
    d = np.diff(values)
    return [f"  {name}: f {fs[i]:.5f} -> {fs[i + 1]:.5f}: {values[i]:.9f} -> {values[i + 1]:.9f} (+{d[i]:.2e})"
            for i in np.flatnonzero(d > TOL)]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("example", help="a file in examples/ (or a path)")
    ap.add_argument("--grid", default="0.3:0.99:0.01", help="lo:hi:step, fractions of the stability limit")
    ap.add_argument("--set", action="append", default=[], help="a scenario override, as on the CLI")
    ap.add_argument("--targets", type=int, default=0, help="also scan the pool TTFT law's CDF at N targets")
    args = ap.parse_args()
    path = Path(args.example) if Path(args.example).exists() else EXAMPLES / args.example
    s = Solver(load_scenario(path, args.set))
    lam, station = s.max_stable_rate()
    fs = _grid(args.grid)
    t = time.process_time()
    comps = [s.compose(f * lam) for f in fs]
    att = np.array([s.attainment(f * lam) for f in fs])
    out = []
    for name, vals in (("attainment", att), ("TTFT attainment", np.array([c.ttft_attainment for c in comps])),
                       ("TPOT attainment", np.array([c.tpot_attainment for c in comps]))):
        out += _rises(name, fs, vals)
    n_cdf = 0
    if args.targets:
        laws = [c.ttft for c in comps]
        mid = laws[len(laws) // 2]
        xs = np.linspace(mid.quantile(0.3), mid.quantile(0.999), args.targets)
        F = np.array([np.asarray(d.cdf(xs)) for d in laws])
        dF = np.diff(F, axis=0)
        n_cdf = int((dF > TOL).sum())
        if n_cdf:
            i, j = np.unravel_index(dF.argmax(), dF.shape)
            out.append(f"  TTFT CDF: {n_cdf} rises of {dF.size}; largest +{dF[i, j]:.2e} at {xs[j]:.4f} s, "
                       f"f {fs[i]:.4f} -> {fs[i + 1]:.4f}")
    print(f"{path.name} {' '.join(args.set)}: λmax {lam:.6g} ({station}), {fs.size} rates {fs[0]:.4f}..{fs[-1]:.4f}, "
          f"{time.process_time() - t:.1f} s CPU; attainment {att[0]:.6f} -> {att[-1]:.6f}")
    print(f"rises > {TOL:g}: {len(out) - (1 if n_cdf else 0)} at the SLO" + (f", {n_cdf} in the TTFT CDF" if args.targets else ""))
    print("\n".join(out))


if __name__ == "__main__":
    main()
