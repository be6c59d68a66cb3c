"""Service-time model speed targets (run as a script; CI does not time tests).

Targets (one core):
1. scalar calls (the replay's one-at-a-time use): <= 5 us per call for the roofline, the
   splitwise/qmodel sweep table, DistServe and fixed models;
2. a 256 x 400 decode grid (the analytical engine's use): <= 20 ms per evaluation;
3. ``calibrate_table`` on one splitwise-sim group: <= 2 s.

Usage: ``python benchmarks/bench_perf.py`` (needs the data folder for the table models).
"""

from __future__ import annotations

import time
import timeit

import numpy as np


def _models() -> dict[str, object]:
    from qmodel.perf.service_time import service_model
    from qmodel.registry import get_gpu, get_model
    from qmodel.scenario import FixedPerf, RooflinePerf, TablePerf
    from qmodel.settings import data_dir

    a100, h100 = get_gpu("a100-80gb-sxm"), get_gpu("h100-sxm")
    out: dict[str, object] = {
        "roofline llama-3.1-70b tp4": service_model(RooflinePerf(), get_model("llama-3.1-70b"), h100, 4),
        "roofline mixtral-8x7b tp2": service_model(RooflinePerf(), get_model("mixtral-8x7b"), h100, 2),
        "roofline mistral-7b (window)": service_model(RooflinePerf(), get_model("mistral-7b"), h100, 1),
        "fixed": service_model(FixedPerf(prefill_s=0.1, decode_step_s=0.02), get_model("opt-13b"), a100, 1),
    }
    if data_dir() is not None:
        out["table splitwise llama-2-70b tp8"] = service_model(
            TablePerf(path="data:splitwise_sim/perf_model.csv"), get_model("llama-2-70b"), a100, 8)
        out["table distserve opt-13b tp1"] = service_model(
            TablePerf(path="data:distserve/profiler-a100-80g.distserve.json"), get_model("opt-13b"), a100, 1)
    return out


def main() -> None:
    n = np.arange(1, 257, dtype=float)
    grid_n, grid_c = np.meshgrid(n, np.linspace(100, 4000, 400))
    grid_s = grid_n * grid_c
    for name, m in _models().items():
        dec = timeit.timeit(lambda: m.decode_step_time_s(17, 17 * 900), number=20000) / 20000
        pre = timeit.timeit(lambda: m.prefill_time_s(2048, 2048**2 / 2, 2), number=20000) / 20000
        grid = timeit.timeit(lambda: m.decode_step_time_s(grid_n, grid_s), number=20) / 20
        print(f"{name:34s} scalar decode {dec * 1e6:6.2f} us  scalar prefill {pre * 1e6:6.2f} us  "
              f"(target <= 5 us)  decode grid {grid_n.size} pts {grid * 1e3:6.2f} ms (target <= 20 ms)")

    from qmodel.settings import data_dir

    d = data_dir()
    if d is None:
        print("calibration: skipped (no data folder)")
        return
    from qmodel.perf.calibrate import calibrate_table
    from qmodel.registry import get_gpu, get_model

    t0 = time.perf_counter()
    rep = calibrate_table(str(d / "splitwise_sim" / "perf_model.csv"), get_model("llama-2-70b"),
                          get_gpu("a100-80gb-sxm"), 8)
    print(f"calibrate llama-2-70b a100 tp8: {time.perf_counter() - t0:.2f} s (target <= 2 s); "
          f"MAPE after prefill {rep['mape_after']['prefill']:.3f} decode {rep['mape_after']['decode']:.3f}")


if __name__ == "__main__":
    main()
