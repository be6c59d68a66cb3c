"""Would an "older engine" input transfer? Calibrations of one older engine's table applied to the other's.

    QMODEL_DATA_DIR=../shared/data .venv/bin/python benchmarks/engine_transfer.py

Issue 17 item 3 asks for a user-facing input for the serving-engine generation (per-step framework
overhead without CUDA graphs, older attention kernels), fitted on data other than the table it is
tested on. The two older engines reachable here are DistServe's vLLM-engine fits (vLLM of 2023,
A100) and splitwise-sim's table (A100/H100). Each row prints the default curves' MAPE (signed bias)
on one table, then with the overrides calibrated on the *other* engine's table
(docs/step_times.md, "Other sources"):

* DistServe-vLLM: per-step overheads 6.5 ms (prefill) / 6.1 ms (decode), attention at 0.16 of the curve;
* splitwise-sim: weight streaming at 18% of HBM bandwidth (``mbu`` 0.18), 12.4 ms per prompt in a batch.

Neither transfers (the printed table; docs/step_times.md has the last run), so no engine input was added.
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from qmodel.perf.service_time import table_model  # noqa: E402
from qmodel.perf.roofline import RooflineModel  # noqa: E402
from qmodel.registry import get_gpu, get_model  # noqa: E402
from qmodel.settings import data_dir  # noqa: E402

DISTSERVE_VLLM = {"prefill_overhead_s": 6.5e-3, "decode_overhead_s": 6.1e-3, "attention_efficiency": 0.16}
SPLITWISE = {"mbu": 0.18, "prefill_per_request_s": 12.4e-3}
CASES = [("splitwise_sim/perf_model.csv", "llama-2-70b", "h100-sxm", 8, DISTSERVE_VLLM, "DistServe-vLLM"),
         ("splitwise_sim/perf_model.csv", "llama-2-70b", "a100-80gb-sxm", 8, DISTSERVE_VLLM, "DistServe-vLLM"),
         ("splitwise_sim/perf_model.csv", "bloom-176b", "a100-80gb-sxm", 8, DISTSERVE_VLLM, "DistServe-vLLM"),
         ("distserve/profiler-a100-80g.vllm.json", "opt-13b", "a100-80gb-sxm", 1, SPLITWISE, "splitwise-sim"),
         ("distserve/profiler-a100-80g.vllm.json", "opt-66b", "a100-80gb-sxm", 4, SPLITWISE, "splitwise-sim")]


def errors(path: Path, model: str, gpu: str, tp: int, overrides: dict[str, float]) -> dict[str, str]:
    spec, g = get_model(model), get_gpu(gpu)
    pts = table_model(str(path), spec, g, tp).points()  # type: ignore[attr-defined]
    m = RooflineModel(spec, g, tp, **overrides)
    out = {}
    for phase in ("prefill", "decode"):
        p = [x for x in pts if x.phase == phase]
        meas, n = np.array([x.time_s for x in p]), np.array([float(x.n) for x in p])
        if phase == "prefill":
            pred = m.prefill_time_s(np.array([x.sum_tokens for x in p]), np.array([x.sum_sq_tokens for x in p]), n)
        else:
            pred = m.decode_step_time_s(n, np.array([x.sum_context_tokens for x in p]))
        e = np.asarray(pred, dtype=float) / meas - 1.0
        out[phase] = f"{100 * np.abs(e).mean():.1f}% ({100 * e.mean():+.1f}%)"
    return out


def main() -> None:
    d = data_dir()
    if d is None:
        print("note: set QMODEL_DATA_DIR to ../shared/data (splitwise-sim and DistServe tables)")
        return
    print("| table | model | GPU | tp | phase | default curves | with the other engine's calibration |")
    print("|---|---|---|---|---|---|---|")
    for rel, model, gpu, tp, ov, other in CASES:
        path = Path(d) / rel
        if not path.exists():
            print(f"note: {path} missing")
            continue
        base, moved = errors(path, model, gpu, tp, {}), errors(path, model, gpu, tp, ov)
        for phase in ("prefill", "decode"):
            print(f"| {rel.split('/')[0]} | {model} | {gpu} | {tp} | {phase} | {base[phase]} | {moved[phase]} ({other}) |")


if __name__ == "__main__":
    main()
