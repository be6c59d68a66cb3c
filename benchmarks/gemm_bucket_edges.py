"""The vLLM GEMM tables' step at M bucket edges, and the shared GEMM curve on either side of it.

    .venv/bin/python benchmarks/gemm_bucket_edges.py        # needs the optional extra qmodel[aic]

AIConfigurator's GEMM tables sample each M bucket at both edges (M = 2^k and 2^k + 1; above 512
every multiple of 256 and the next integer). Printed per AIC system and GEMM dtype: the median
over shapes (N, K >= 1024, N K >= 4096^2, the fit's selection) of t(2^k + 1) / t(2^k), and for the
Llama-3.1-70B TP1 shapes the catalog curve's error against the table at M = 2^k and at 2^k + 1.
On Hopper FP8 the step is 1.3-2.2x while BF16 has none; AIC's composed step estimates sit at the
edges (power-of-two prompts), so a smooth curve fitted to the whole table reads them high
(docs/step_times.md, "FP8 Llama-3.1-70B prefill on H200 TP1").

Also printed: t(e + 1) / t(next sampled M) for the bucket edges e in :data:`WITHIN` (the next
sampled M is 256 rows or more further), the median over shapes and the share of shapes above 1.
A tile or bucket quantisation of M (time of ceil(M / tile) tiles) is non-decreasing in M, so that
ratio is at most 1; above 1 the time *falls* as rows are added within a bucket, which no
quantisation of M reproduces.
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from qmodel.perf.efficiency import load_curves  # noqa: E402
from qmodel.perf.efficiency_fit import MIN_SIDE, MIN_WEIGHT_ELEMENTS, SYSTEM_GPU, latest_table  # noqa: E402
from qmodel.registry import get_gpu  # noqa: E402

AIC_DTYPE = {"bf16": ("bfloat16", 2.0), "fp8": ("fp8", 1.0), "fp4": ("nvfp4", 0.5625)}
EDGES = (128, 256, 512, 1024, 2048)
#: Llama-3.1-70B at TP1: QKV, attention output, FFN gate/up (closest table width), FFN down (closest depth)
SHAPES_70B = ((10240, 8192), (8192, 8192), (51200, 8192), (8192, 16384))
#: (just past an edge, the next M the table samples)
WITHIN = ((129, 256), (257, 512), (513, 768), (769, 1024), (1025, 1280), (2049, 2304))


def main() -> None:
    for system, gpu_name in SYSTEM_GPU.items():
        table = latest_table(system, "gemm")
        if table is None:
            continue
        gpu = get_gpu(gpu_name)
        for dtype, (aic, wbytes) in AIC_DTYPE.items():
            d = table[(table.gemm_dtype == aic) & (table.n >= MIN_SIDE) & (table.k >= MIN_SIDE)
                      & (table.n * table.k >= MIN_WEIGHT_ELEMENTS)]
            if d.empty:
                continue
            t = d.groupby(["m", "n", "k"]).latency.min()
            ratios = []
            for m in EDGES:
                if m in t.index.levels[0] and m + 1 in t.index.levels[0]:
                    ratios.append(f"{m}: {float((t.xs(m + 1, level='m') / t.xs(m, level='m')).median()):.2f}")
            print(f"{system} {dtype}: t(2^k+1)/t(2^k) median over shapes  " + "  ".join(ratios))
            within = []
            for a, b in WITHIN:
                if a not in t.index.levels[0] or b not in t.index.levels[0]:
                    continue  # A100's table has no rows just past the edges
                r = t.xs(a, level="m") / t.xs(b, level="m")
                within.append(f"{a}/{b}: {float(r.median()):.2f} ({100 * float((r > 1).mean()):.0f}% > 1)")
            if within:
                print("    t(e+1)/t(next M) median over shapes (share > 1)  " + "  ".join(within))
            curve = load_curves().resolve(gpu, dtype).gemm
            for n, k in SHAPES_70B:
                if (n, k) not in {(a, b) for _, a, b in t.index}:
                    continue
                ms = np.array([m + j for m in EDGES for j in (0, 1)], dtype=float)
                pred = curve.time_s(ms, n, k, flops_per_s=gpu.flops_per_s(dtype),
                                    bandwidth_bytes_per_s=gpu.memory_bandwidth_bytes_per_s, weight_byte=wbytes)
                meas = np.array([float(t.get((int(m), n, k), np.nan)) for m in ms]) * 1e-3
                err = pred / meas - 1.0
                cells = [f"{int(ms[2 * i])}: " + "/".join("n/a" if np.isnan(e) else f"{e:+.2f}" for e in err[2 * i:2 * i + 2])
                         for i in range(len(EDGES))]
                print(f"    N {n} K {k}: curve error at 2^k / 2^k+1  " + "  ".join(cells))


if __name__ == "__main__":
    main()
