"""Where the leave-one-GPU-out misses of the borrowed architectures come from (issue 17).

    .venv/bin/python benchmarks/loo_attribution.py --aic-points aic_points.csv

(the points file from ``benchmarks/_aic_points.py``; table 2 also reads the optional extra qmodel[aic]).

An architecture measured on one AIC system only (blackwell = B200, ampere = A100, ada = L40S) has
no curves of its own when that system is left out, so it borrows hopper's fractions of its own
peaks (``benchmarks/roofline_accuracy.py``, ``loo_curves``). Printed here, from the catalog file
(3-digit rounding: cells within 0.1 point of the full refit):

1. **Attribution.** Each held-out system's cells (MAPE per model / TP / phase) with the borrowed
   hopper curves, then with one of the architecture's own tables or parameters put back
   (``gemm``, ``gemm.launch_s``, ``attention``, ``moe.launch_s``, ``overhead``, ``launches`` = every
   fixed kernel time, ...): which term a cell's miss is in.
2. **MoE fixed time per kernel backend.** Every bf16 MoE row at one token (exactly ``k`` experts
   touched under any routing, so no routing model enters), EP 1: the time beyond streaming the
   ``k`` experts' weights at the architecture's fitted MoE weight-streaming efficiency, median per
   system, TP and the table's ``kernel_source``, split by expert count (E <= 16 / E >= 128).
3. **Clock scaling of borrowed fixed times.** The borrowed fixed kernel times (GEMM, attention and
   MoE launches, all-reduce latency, per-step and per-layer overheads) times hopper's boost clock /
   the held-out GPU's, the rule "fixed times are GPU cycles"; measured, not landed
   (docs/step_times.md, "Not modelled / open").
"""

from __future__ import annotations

import argparse
import copy
import sys
import tomllib
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from roofline_accuracy import aic_rows, aic_table  # noqa: E402

from qmodel.perf.efficiency import EfficiencyCurves  # noqa: E402
from qmodel.perf.efficiency_fit import SYSTEM_GPU, latest_table  # noqa: E402
from qmodel.registry import get_gpu  # noqa: E402

CATALOG = Path(__file__).resolve().parents[1] / "catalog" / "efficiency.toml"
#: held-out system -> its architecture (each the only system of its architecture in the fit)
SINGLE = {"b200_sxm": "blackwell", "a100_sxm": "ampere", "l40s": "ada"}
SWAPS = ("gemm", "gemm.launch_s", "gemm.m_half", "gemm.weight_hbm_efficiency", "attention",
         "attention.decode_hbm_efficiency", "attention.decode_launch_s", "moe", "moe.launch_s", "overhead",
         "allreduce", "launches")
#: boost clocks (MHz) from the vendors' spec sheets: A100 SXM4 1410 (A100 architecture whitepaper),
#: H100/H200 SXM 1980, L40S 2520 (L40S datasheet); B200 is left out (no vendor figure found)
BOOST_MHZ = {"hopper": 1980.0, "a100_sxm": 1410.0, "l40s": 2520.0}
FIXED = (("attention", "decode_launch_s"), ("attention", "prefill_launch_s"), ("moe", "launch_s"),
         ("allreduce", "latency_s"), ("overhead", "decode_s"), ("overhead", "prefill_s"),
         ("overhead", "prefill_per_layer_s"), ("overhead", "decode_per_layer_s"))


def catalog() -> dict[str, Any]:
    return tomllib.loads(CATALOG.read_text(encoding="utf-8"))["arch"]


def borrowed(raw: dict[str, Any], arch: str, swap: str = "", scale: float = 1.0) -> EfficiencyCurves:
    """The catalog with ``arch`` replaced by hopper's tables; ``swap`` of its own put back; fixed times x ``scale``."""
    own = raw[arch]
    new = {k: copy.deepcopy(v) for k, v in raw["hopper"].items() if k not in ("systems", "source")}
    for item in filter(None, swap.split("+")):
        if item == "launches":
            for tab, key in FIXED[:4]:
                new[tab][key] = own[tab][key]
            for dt, g in new["gemm"].items():
                if dt in own["gemm"]:
                    g["launch_s"] = own["gemm"][dt]["launch_s"]
        elif item.startswith("gemm."):
            for dt, g in new["gemm"].items():
                if dt in own["gemm"]:
                    g[item[5:]] = own["gemm"][dt][item[5:]]
        elif "." in item:
            tab, key = item.split(".")
            new[tab][key] = own[tab][key]
        else:
            new[item] = copy.deepcopy(own[item])
    if scale != 1.0:
        for g in new["gemm"].values():
            g["launch_s"] *= scale
        for tab, key in FIXED:
            new[tab][key] *= scale
    return EfficiencyCurves.from_mapping({**raw, arch: new}, origin=f"{arch} borrows hopper")


def cells(rows: list[dict[str, str]], curves: EfficiencyCurves, system: str) -> list[tuple[str, float]]:
    out = []
    for line, mape in aic_table(rows, curves, "x", system):
        f = [c.strip() for c in line.split("|")]
        out.append((f"{f[2].replace('Meta-Llama-', '').replace('-Instruct', '')} tp{f[4]} {f[5]}", mape))
    return out


def attribution(rows: list[dict[str, str]], raw: dict[str, Any], system: str) -> None:
    arch = SINGLE[system]
    base = cells(rows, borrowed(raw, arch), system)
    own = cells(rows, EfficiencyCurves.from_mapping(raw), system)
    print(f"\n### {system}: LOO cells (hopper borrowed) with one own table put back (MAPE %)\n")
    print("| put back | " + " | ".join(c for c, _ in base) + " | above 20% |")
    print("|---" * (len(base) + 2) + "|")
    for label, cs in [("(none: LOO)", base)] + [(s, cells(rows, borrowed(raw, arch, s), system)) for s in SWAPS] + [
            ("(all: in-sample)", own)]:
        print(f"| {label} | " + " | ".join(f"{100 * m:.1f}" for _, m in cs) + f" | {sum(m > 0.2 for _, m in cs)} |")


def clock_rule(rows: list[dict[str, str]], raw: dict[str, Any], system: str) -> None:
    scale = BOOST_MHZ["hopper"] / BOOST_MHZ[system]
    base = cells(rows, borrowed(raw, SINGLE[system]), system)
    new = cells(rows, borrowed(raw, SINGLE[system], scale=scale), system)
    worse = [(c, a, b) for (c, a), (_, b) in zip(base, new) if b > a + 1e-3]
    print(f"\n{system}: borrowed fixed times x {scale:.3f}: {len(base) - len(worse)} cells better or equal, "
          f"{len(worse)} worse; worst {100 * max(m for _, m in base):.1f} -> {100 * max(m for _, m in new):.1f}%")
    for (c, a), (_, b) in zip(base, new):
        print(f"  {c}: {100 * a:.1f} -> {100 * b:.1f}%")


def moe_fixed(raw: dict[str, Any]) -> None:
    try:
        import aiconfigurator_core  # noqa: F401  (the kernel tables ship inside the optional extra)
    except ImportError:
        print("\nnote: MoE fixed-time table skipped: it reads the kernel tables of the optional extra qmodel[aic]")
        return
    print("\n### bf16 MoE at one token: time beyond streaming k experts (us, median; E <= 16 / E >= 128)\n")
    print("| system | kernel_source | tp | rows | fixed E <= 16 | fixed E >= 128 |")
    print("|---|---|---|---|---|---|")
    for system, gname in SYSTEM_GPU.items():
        d = latest_table(system, "moe")
        gpu = get_gpu(gname)
        h = raw[gpu.architecture]["moe"]["weight_hbm_efficiency"]
        d = d[(d.moe_dtype == "bfloat16") & (d.moe_ep_size == 1) & (d.num_tokens == 1) & (d.moe_tp_size <= 8)]
        for (src, tp), g in d.groupby(["kernel_source", "moe_tp_size"]):
            g = g.groupby(["hidden_size", "inter_size", "num_experts", "topk"], as_index=False).latency.min()
            stream = g.topk * 3 * g.hidden_size * g.inter_size / tp * 2.0 / (gpu.memory_bandwidth_bytes_per_s * h)
            fixed = (g.latency * 1e-3 - stream).to_numpy() * 1e6
            e = g.num_experts.to_numpy()
            lo = f"{np.median(fixed[e <= 16]):.1f}" if (e <= 16).any() else "-"
            hi = f"{np.median(fixed[e >= 128]):.1f}" if (e >= 128).any() else "-"
            print(f"| {system} | {src} | {tp} | {len(g)} | {lo} | {hi} |")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--aic-points", type=Path, required=True, help="AIC static estimates (benchmarks/_aic_points.py)")
    ap.add_argument("--systems", nargs="*", default=list(SINGLE))
    a = ap.parse_args()
    rows, raw = aic_rows(a.aic_points), catalog()
    for system in a.systems:
        attribution(rows, raw, system)
    moe_fixed(raw)
    print("\n### Clock scaling of the borrowed fixed times (measured, not landed)")
    for system in a.systems:
        if system in BOOST_MHZ:
            clock_rule(rows, raw, system)


if __name__ == "__main__":
    main()
