"""AIConfigurator static step-time estimates on a fixed grid, cached as CSV (used by roofline_accuracy.py).

    .venv/bin/python benchmarks/_aic_points.py --out aic_points.csv

Each row: catalog model, catalog GPU, AIC model key and system, tp, phase, batch, length (prompt for
prefill, context for decode), compute dtype, and the AIC estimate in seconds (static_ctx ttft for
prefill; static_gen tpot at osl 2 = the one decode step at that context for decode); ``kv_dtype`` is
empty where the catalog model's own applies. Needs qmodel[aic]; about 5 minutes on one core.
"""

from __future__ import annotations

import argparse
import csv
import sys
from pathlib import Path

#: (catalog model, AIC model key, compute dtype, tps); the FP8 checkpoint also stores FP8 KV (AIC's
#: estimate reports ``kvcache fp8`` for it), see KV_DTYPE
MODELS = [("llama-3.1-8b", "meta-llama/Meta-Llama-3.1-8B", "bf16", (1, 2)),
          ("llama-3.1-70b", "meta-llama/Meta-Llama-3.1-70B", "bf16", (4, 8)),
          ("qwen3-30b-a3b", "Qwen/Qwen3-30B-A3B", "bf16", (1, 2)),
          ("llama-3.1-70b", "nvidia/Llama-3.1-70B-Instruct-FP8", "fp8", (1, 2))]
#: KV-cache dtype of each AIC model (as its estimate reports it); others keep the catalog's
KV_DTYPE = {"nvidia/Llama-3.1-70B-Instruct-FP8": "fp8"}
#: AIC system -> catalog GPU
SYSTEMS = {"h100_sxm": "h100-sxm", "h200_sxm": "h200-sxm", "b200_sxm": "b200", "a100_sxm": "a100-80gb-sxm", "l40s": "l40s"}
PREFILL = [(1, 128), (1, 512), (1, 2048), (1, 8192), (4, 512), (4, 2048), (2, 16384)]
DECODE = [(b, c) for b in (1, 8, 32, 128) for c in (512, 2048, 8192)]
FIELDS = ["model", "gpu", "aic_model", "system", "tp", "dtype", "kv_dtype", "phase", "batch", "length", "time_s"]


def collect(out: Path) -> None:
    from qmodel.errors import QmodelError
    from qmodel.perf.importers.aic import aic_static_ms

    done = set()
    if out.exists():
        with out.open() as fh:
            done = {(r["aic_model"], r["system"], r["tp"], r["phase"], r["batch"], r["length"]) for r in csv.DictReader(fh)}
    new = not out.exists()
    with out.open("a", newline="") as fh:
        w = csv.DictWriter(fh, FIELDS)
        if new:
            w.writeheader()
        for model, key, dtype, tps in MODELS:
            for system, gpu in SYSTEMS.items():
                for tp in tps:
                    for phase, pts in (("prefill", PREFILL), ("decode", DECODE)):
                        for b, n in pts:
                            k = (key, system, str(tp), phase, str(b), str(n))
                            if k in done:
                                continue
                            try:
                                if phase == "prefill":
                                    ms, _ = aic_static_ms(key, system, tp, mode="static_ctx", batch_size=b, isl=n, osl=1)
                                else:
                                    ms, _ = aic_static_ms(key, system, tp, mode="static_gen", batch_size=b, isl=n, osl=2)
                            except QmodelError as err:
                                print(f"skip {k}: {err}", file=sys.stderr)
                                continue
                            w.writerow({"model": model, "gpu": gpu, "aic_model": key, "system": system, "tp": tp,
                                        "dtype": dtype, "kv_dtype": KV_DTYPE.get(key, ""), "phase": phase, "batch": b, "length": n, "time_s": ms / 1e3})
                            fh.flush()


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, required=True)
    collect(ap.parse_args().out)
