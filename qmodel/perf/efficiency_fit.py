"""Fit the roofline's shared efficiency curves (catalog/efficiency.toml) on AIConfigurator's kernel tables.

    .venv/bin/python -m qmodel.perf.efficiency_fit [--exclude h200_sxm] [--points aic_points.csv]

Needs the optional extra ``qmodel[aic]`` (the tables ship inside ``aiconfigurator_core``) and
pandas/scipy, imported only here. Every curve is fitted by least squares on the *log* of the
measured latency (relative error: the kernels span 5 us to 10 ms), per AIC system, and the
architecture's number is the median over its systems (hopper = H100 SXM + H200 SXM). The
curves, each a fraction of the catalog GPU's peak rate (see :mod:`qmodel.perf.efficiency` for
the formulas they plug into):

* GEMM (``gemm/vllm``; shapes with N, K >= 1024 and N K >= 4096^2, the transformer's projections):
  ``t = max(2 M N K / (F e(M, N)), (N K w + 2 M (N + K)) / (B h)) + t0`` with
  ``e(M, N) = e_peak * M / (M + m_half) / (1 + M / m_decline) * N / (N + n_half)``; fitted
  e_peak, m_half, n_half, m_decline, h (weight-streaming HBM efficiency) and t0 per dtype (bf16,
  fp8 per-tensor, nvfp4).
* prefill attention (``context_attention``, head_dim 128, no window, bf16 KV):
  ``t = b (4 H d s^2 / 2) / (F e_a(s)) + t0``, ``e_a(s) = e_peak * s / (s + s_half)``.
* decode attention (``generation_attention``, head_dim 128, no window): ``t = KV bytes / (B h_kv) + t0``.
* all-reduce (``comm/nccl``, latest version, fp16): ``t = lat + 2 (n - 1)/n * bytes / (link * eff)``
  with the catalog's intra-node link bandwidth (on a PCIe server at least ``2 (n-1) bytes / host``
  past its peer-to-peer group, the host fabric from :func:`fit_host_fabric`, ``--host-fabric``);
  ``lat`` from vLLM's CUDA-graph custom all-reduce at its smallest messages (the path vLLM takes
  below its size limit).
* MoE grouped GEMMs (``moe/vllm``, bf16, balanced routing, EP 1, expert TP 1-8): the GEMM form
  at the per-expert token count ``M_e = T k / E_touched`` and per-GPU width ``I / tp``, fitting a
  factor on e_peak, its own n_half (grouped GEMMs lose more to narrow experts) and its own h.
  ``E_touched`` is the table's own routing: ``min(E, T k)`` for its balanced round robin (a table
  without one, A100's, has power-law rows: the uniform-routing count), not the served-traffic count.
  The fixed time ``launch_s`` is measured, not fitted: the one-token rows (exactly ``k`` experts
  under any routing, no ramp) less streaming those experts at the free fit's ``h``, median over
  shapes and TP, floored at 0 (L40S's rows run from L2); the other three are then refitted. Fitted
  with the ramp it absorbed the ramp's error (hopper 31 us, 21 us measured; docs/step_times.md).

The per-step framework overhead (``--points``: AIC static step estimates from
``benchmarks/_aic_points.py``) is fitted per phase and architecture by non-negative least squares
on the relative error of the composed steps of every model (:func:`fit_overheads`), so a kernel
curve's refit moves them too.
"""

from __future__ import annotations

import argparse
import glob
import math
from pathlib import Path
from typing import Any

import numpy as np

from qmodel.perf.efficiency import AllReduceCurve, AttentionCurve, GemmCurve, MoECurve

__all__ = ["SYSTEM_GPU", "ARCH_SYSTEMS", "FALLBACKS", "latest_table", "fit_all", "fit_host_fabric", "fit_overheads",
           "pooled_allreduce", "unmeasured", "to_toml", "write_file"]

#: AIC system -> catalog GPU name (for peaks and link bandwidth)
SYSTEM_GPU: dict[str, str] = {"h100_sxm": "h100-sxm", "h200_sxm": "h200-sxm", "b200_sxm": "b200",
                              "a100_sxm": "a100-80gb-sxm", "l40s": "l40s"}
ARCH_SYSTEMS: dict[str, tuple[str, ...]] = {"hopper": ("h100_sxm", "h200_sxm"), "blackwell": ("b200_sxm",),
                                            "ampere": ("a100_sxm",), "ada": ("l40s",)}
#: GEMMs of at least a 4096 x 4096 weight, both sides >= 1024: the projections of the >= 7B models
#: the planner serves, TP-sharded up to 8 GPUs (a wider selection, >= 512 / 2048^2, fits the composed
#: AIC steps slightly worse: summed per-pair MAPE 464 vs 452 points over 64 pairs)
MIN_WEIGHT_ELEMENTS = 4096 * 4096
MIN_SIDE = 1024
_GEMM_DTYPES = {"bf16": ("bfloat16", 2.0), "fp8": ("fp8", 1.0), "fp4": ("nvfp4", 0.5625)}  # nvfp4: 4 bits + 1/16 scale byte


_USED: set[str] = set()  # the table files the fits read (recorded in each architecture's source)


def _root() -> Path:
    import aiconfigurator_core  # the optional extra

    return Path(aiconfigurator_core.__file__).parent / "systems" / "data"


def latest_table(system: str, op: str, backend: str = "vllm", name: str = "*.parquet") -> Any:
    import pandas as pd

    def key(p: str) -> tuple[int, ...]:
        return tuple(int(x) if x.isdigit() else 0 for x in Path(p).parent.name.replace("rc", ".").split("."))

    files = sorted(glob.glob(str(_root() / system / op / backend / "*" / name)), key=key)
    if not files:
        return None
    _USED.add(str(Path(files[-1]).relative_to(_root())))
    return pd.read_parquet(files[-1])


def _where(d: Any, **eq: Any) -> Any:
    """Rows of ``d`` with column == value for each given column the table has (older tables lack some)."""
    for col, val in eq.items():
        if col in d.columns:
            d = d[d[col] == val]
    return d


def _gpu(system: str) -> Any:
    from qmodel.registry import get_gpu

    return get_gpu(SYSTEM_GPU[system])


def _lsq(fun: Any, x0: list[float], lo: list[float], hi: list[float]) -> np.ndarray:
    from scipy.optimize import least_squares

    return least_squares(fun, x0, bounds=(lo, hi), method="trf", x_scale="jac", loss="soft_l1", f_scale=0.1).x


def fit_gemm(system: str, dtype: str) -> dict[str, float] | None:
    d = latest_table(system, "gemm")
    aic_dtype, wbytes = _GEMM_DTYPES[dtype]
    if d is None:
        return None
    d = d[(d.gemm_dtype == aic_dtype) & (d.n >= MIN_SIDE) & (d.k >= MIN_SIDE) & (d.n * d.k >= MIN_WEIGHT_ELEMENTS)]
    if d.empty:
        return None
    d = d.groupby(["m", "n", "k"], as_index=False).latency.min()  # the engine picks the fastest kernel
    gpu = _gpu(system)
    f, b = gpu.flops_per_s(dtype), gpu.memory_bandwidth_bytes_per_s
    m, n, k, t = (d[c].to_numpy(float) for c in ("m", "n", "k", "latency"))
    t = t * 1e-3

    def model(x: np.ndarray) -> np.ndarray:
        c = GemmCurve.model_construct(peak_efficiency=x[0], m_half=x[1], n_half=x[2], m_decline=x[3],
                                      weight_hbm_efficiency=x[4], launch_s=x[5])
        return c.time_s(m, n, k, flops_per_s=f, bandwidth_bytes_per_s=b, weight_byte=wbytes)

    x = _lsq(lambda x: np.log(model(x) / t), [0.8, 30.0, 500.0, 1e5, 0.8, 4e-6], [0.05, 0.0, 0.0, 1e3, 0.05, 0.0],
             [1.0, 4096.0, 1e5, 1e8, 1.0, 1e-4])
    res = np.abs(model(x) / t - 1)
    return {"peak_efficiency": x[0], "m_half": x[1], "n_half": x[2], "m_decline": x[3], "weight_hbm_efficiency": x[4],
            "launch_s": x[5], "mape": float(res.mean()), "points": int(len(t))}


def fit_attention(system: str) -> dict[str, float] | None:
    ctx = latest_table(system, "attention", name="context_attention_perf.parquet")
    gen = latest_table(system, "attention", name="generation_attention_perf.parquet")
    if ctx is None or gen is None:
        return None
    gpu = _gpu(system)
    f, bw = gpu.flops_per_s("bf16"), gpu.memory_bandwidth_bytes_per_s
    c = _where(ctx, head_dim=128, window_size=0, kv_cache_dtype="bfloat16")
    c = c[c.isl >= 16]
    c = c.groupby(["batch_size", "isl", "num_heads", "num_key_value_heads"], as_index=False).latency.min()
    bb, s, hh, t = (c[k].to_numpy(float) for k in ("batch_size", "isl", "num_heads", "latency"))
    t = t * 1e-3
    def pre(x: np.ndarray) -> np.ndarray:
        c = AttentionCurve.model_construct(prefill_peak_efficiency=x[0], prefill_s_half=x[1], prefill_launch_s=x[2])
        return c.prefill_time_s(bb, s, hh, 128, flops_per_s=f)

    xp = _lsq(lambda x: np.log(pre(x) / t), [0.5, 256.0, 1e-5], [0.02, 0.0, 0.0], [1.0, 1e5, 1e-3])
    g = _where(gen, head_dim=128, window_size=0, kv_cache_dtype="bfloat16")
    g = g.groupby(["batch_size", "step", "num_heads", "num_key_value_heads"], as_index=False).latency.min()
    gb, gs, gk, gt = (g[k].to_numpy(float) for k in ("batch_size", "step", "num_key_value_heads", "latency"))
    gt = gt * 1e-3
    kvb = gb * gs * 2 * gk * 128 * 2.0

    def dec(x: np.ndarray) -> np.ndarray:
        c = AttentionCurve.model_construct(decode_hbm_efficiency=x[0], decode_launch_s=x[1])
        return c.decode_time_s(kvb, bandwidth_bytes_per_s=bw)

    xd = _lsq(lambda x: np.log(dec(x) / gt), [0.6, 1e-5], [0.02, 0.0], [1.0, 1e-3])
    return {"prefill_peak_efficiency": xp[0], "prefill_s_half": xp[1], "prefill_launch_s": xp[2],
            "prefill_mape": float(np.abs(pre(xp) / t - 1).mean()),
            "decode_hbm_efficiency": xd[0], "decode_launch_s": xd[1],
            "decode_mape": float(np.abs(dec(xd) / gt - 1).mean())}


def fit_allreduce(system: str) -> dict[str, float] | None:
    d = latest_table(system, "comm", backend="nccl")
    v = latest_table(system, "comm", backend="vllm", name="custom_allreduce_perf.parquet")
    if d is None:
        return None
    d = d[(d.op_name == "all_reduce") & (d.nccl_dtype == "half") & (d.message_size >= 1 << 20)]
    gpu = _gpu(system)
    n, sz, t = (d[k].to_numpy(float) for k in ("num_gpus", "message_size", "latency"))
    t = t * 1e-3
    nbytes = sz * 2.0  # message_size counts fp16 elements

    def model(x: np.ndarray) -> np.ndarray:  # the catalog GPU's host fabric (PCIe servers) is part of the model
        return AllReduceCurve.model_construct(efficiency=x[0], latency_s=x[1]).gpu_time_s(nbytes, n, gpu)

    x = _lsq(lambda x: np.log(model(x) / t), [0.7, 2e-5], [0.05, 0.0], [1.5, 1e-3])
    lat = x[1]
    if v is not None:
        small = v[(v.op_name == "all_reduce") & (v.kernel_source.str.contains("graph")) & (v.message_size <= 4096)]
        if not small.empty:
            lat = float(small.latency.median() * 1e-3)
    return {"efficiency": x[0], "latency_s": lat, "mape": float(np.abs(model(x) / t - 1).mean())}


def fit_host_fabric(system: str) -> dict[str, float] | None:
    """A PCIe server's shared host-fabric bandwidth (``GPUSpec.intra_node_host_bandwidth_bytes_per_s``).

    From vLLM's CUDA-graph custom all-reduce (the kernel vLLM runs, as ``latency_s`` above) at
    messages >= 1 MiB among more GPUs than the catalog's ``intra_node_p2p_gpus``: each point gives
    ``2 (n-1) bytes / t``; the figure is their geometric mean (least squares on log time). None for
    a GPU without a peer-to-peer group (NVLink/NVSwitch) or without the table.
    """
    gpu = _gpu(system)
    v = latest_table(system, "comm", backend="vllm", name="custom_allreduce_perf.parquet")
    if gpu.intra_node_p2p_gpus is None or v is None:
        return None
    v = v[(v.op_name == "all_reduce") & v.kernel_source.str.contains("graph") & (v.message_size * 2 >= 1 << 20)
          & (v.num_gpus > gpu.intra_node_p2p_gpus)]
    n, nbytes, t = v.num_gpus.to_numpy(float), v.message_size.to_numpy(float) * 2.0, v.latency.to_numpy(float) * 1e-3
    host = float(np.exp(np.mean(np.log(2.0 * (n - 1.0) * nbytes / t))))
    return {"host_bytes_per_s": host, "mape": float(np.abs(2.0 * (n - 1.0) * nbytes / host / t - 1).mean()),
            "points": int(len(t))}


def fit_moe(system: str, gemm: dict[str, float]) -> dict[str, float] | None:
    """The MoE curve; its fixed time ``launch_s`` is measured on the one-token rows (module docstring)."""
    d = latest_table(system, "moe")
    if d is None:
        return None
    dist = "balanced" if (d.distribution == "balanced").any() else "power_law_1.01"
    d = d[(d.moe_dtype == "bfloat16") & (d.moe_ep_size == 1) & (d.moe_tp_size <= 8)]
    shape = ["hidden_size", "inter_size", "topk", "num_experts", "moe_tp_size"]
    one = d[d.num_tokens == 1].groupby(shape, as_index=False).latency.min()  # any routing: k experts, one row each
    d = d[d.distribution == dist].groupby(["num_tokens", *shape], as_index=False).latency.min()
    if d.empty:
        return None
    gpu = _gpu(system)
    f, bw = gpu.flops_per_s("bf16"), gpu.memory_bandwidth_bytes_per_s
    tok, h, i, k, e, tp, t = (d[c].to_numpy(float) for c in ("num_tokens", *shape, "latency"))
    t = t * 1e-3
    g = GemmCurve.model_construct(**{k_: gemm[k_] for k_ in ("peak_efficiency", "m_half", "n_half", "m_decline",
                                                             "weight_hbm_efficiency", "launch_s")})

    def model(x: np.ndarray) -> np.ndarray:
        c = MoECurve.model_construct(efficiency_factor=x[0], n_half=x[1], weight_hbm_efficiency=x[2], launch_s=x[3])
        return c.time_s(g, tok, h, i, k, e, tp, flops_per_s=f, bandwidth_bytes_per_s=bw, weight_byte=2.0,
                        routing="balanced" if dist == "balanced" else "uniform")

    x = _lsq(lambda x: np.log(model(x) / t), [0.7, 100.0, 0.6, 2e-5], [0.05, 0.0, 0.02, 0.0], [1.5, 1e5, 1.0, 1e-3])
    stream = one.topk * 3.0 * one.hidden_size * one.inter_size / one.moe_tp_size * 2.0 / (bw * x[2])
    x[3] = max(float(np.median(one.latency * 1e-3 - stream)), 0.0) if len(one) else 0.0  # measured, then refit:
    x[:3] = _lsq(lambda y: np.log(model(np.append(y, x[3])) / t), list(x[:3]), [0.05, 0.0, 0.02], [1.5, 1e5, 1.0])
    return {"efficiency_factor": x[0], "n_half": x[1], "weight_hbm_efficiency": x[2], "launch_s": x[3],
            "mape": float(np.abs(model(x) / t - 1).mean()), "routing": dist}



def fit_all(exclude: tuple[str, ...] = ()) -> dict[str, Any]:
    """Per-architecture curves: the median over the architecture's systems not in ``exclude``."""
    out: dict[str, Any] = {}
    for arch, systems in ARCH_SYSTEMS.items():
        systems = tuple(s for s in systems if s not in exclude)
        if not systems:
            continue
        per: dict[str, list[dict[str, float]]] = {}
        _USED.clear()
        for s in systems:
            for dt in _GEMM_DTYPES:
                g = fit_gemm(s, dt)
                if g:
                    per.setdefault(f"gemm.{dt}", []).append(g)
            for name, r in (("attention", fit_attention(s)), ("allreduce", fit_allreduce(s))):
                if r:
                    per.setdefault(name, []).append(r)
            if per.get("gemm.bf16"):
                r = fit_moe(s, per["gemm.bf16"][-1])
                if r:
                    per.setdefault("moe", []).append(r)
        from importlib.metadata import version

        arch_out: dict[str, Any] = {"systems": list(systems), "source": (
            f"aiconfigurator-core {version('aiconfigurator-core')} systems/data/: " + ", ".join(sorted(_USED)))}
        for name, rs in per.items():
            vals = {k: (rs[0][k] if isinstance(rs[0][k], str) else
                        int(sum(r[k] for r in rs)) if k == "points" else float(np.median([r[k] for r in rs])))
                    for k in rs[0]}
            if name.startswith("gemm."):
                arch_out.setdefault("gemm", {})[name[5:]] = vals
            else:
                arch_out[name] = vals
        out[arch] = arch_out
    return out


def fit_overheads(curves: dict[str, Any], points_csv: Path, exclude: tuple[str, ...] = ()) -> dict[str, dict[str, float]]:
    """Non-negative least squares on relative error of the composed step estimates, per architecture.

    The step time is linear in the overhead terms, so each term's column is the difference of two
    model evaluations: per phase a constant and a per-layer constant, and elementwise passes
    (fitted on prefill, where tokens are many; decode uses the same number).
    """
    import csv

    from scipy.optimize import nnls

    from qmodel.perf.efficiency import EfficiencyCurves
    from qmodel.perf.roofline import RooflineModel
    from qmodel.registry import get_gpu, get_model

    zero = {"prefill_s": 0.0, "decode_s": 0.0, "prefill_per_layer_s": 0.0, "decode_per_layer_s": 0.0,
            "elementwise_passes": 0.0}
    probes = {"prefill": ("prefill_s", "prefill_per_layer_s", "elementwise_passes"),
              "decode": ("decode_s", "decode_per_layer_s")}
    archs = {a: c for a, c in curves.items() if "gemm" in c}
    variants = {name: EfficiencyCurves.from_mapping({a: {**c, "overhead": {**zero, **({name: 1e-3} if name else {})}}
                                                     for a, c in archs.items()})
                for name in ("", *probes["prefill"], *probes["decode"])}
    rows: dict[tuple[str, str], list[tuple[float, float, list[float]]]] = {}
    with points_csv.open() as fh:
        for r in csv.DictReader(fh):
            gpu = get_gpu(r["gpu"])
            if r["system"] in exclude or gpu.architecture not in archs:
                continue
            b, n, ph = float(r["batch"]), float(r["length"]), r["phase"]
            spec = get_model(r["model"])
            if r.get("kv_dtype"):
                spec = spec.model_copy(update={"kv_dtype": r["kv_dtype"]})

            def step(cur: EfficiencyCurves) -> float:
                rm = RooflineModel(spec, gpu, int(r["tp"]), compute_dtype=r["dtype"], curves=cur)
                return float(rm.prefill_time_s(b * n, b * n * n, b) if ph == "prefill" else rm.decode_step_time_s(b, b * n))

            base = step(variants[""])
            cols = [(step(variants[k]) - base) / 1e-3 for k in probes[ph]]
            rows.setdefault((gpu.architecture, ph), []).append((float(r["time_s"]), base, cols))
    out: dict[str, dict[str, float]] = {}
    for (arch, ph), pts in sorted(rows.items()):
        t = np.array([p[0] for p in pts])
        base = np.array([p[1] for p in pts])
        a = np.array([p[2] for p in pts]) / t[:, None]
        x, _ = nnls(a, 1.0 - base / t)  # columns are d(step)/d(term): x is each term's value
        out.setdefault(arch, {}).update({k: float(v) for k, v in zip(probes[ph], x)})
    return out


def to_toml(curves: dict[str, Any]) -> str:
    """The fitted numbers as TOML tables (rounded to 3 significant digits; sources stay in the hand-written file)."""
    def fmt(v: Any) -> str:
        if isinstance(v, str):
            return f'"{v}"'
        if isinstance(v, list):
            return "[" + ", ".join(fmt(x) for x in v) + "]"
        if isinstance(v, int):
            return str(v)
        if abs(v) < 1e-9:  # a fitted launch time on its lower bound (solver round-off)
            return "0.0"
        return f"{float(f'{v:.3g}'):g}" if abs(math.log10(abs(v))) < 4 else f"{v:.3g}"

    lines: list[str] = []

    def table(path: str, vals: dict[str, Any]) -> None:
        lines.append(f"[{path}]")
        lines.extend(f"{k} = {fmt(v)}" for k, v in vals.items() if not isinstance(v, dict))
        for k, v in vals.items():
            if isinstance(v, dict):
                table(f"{path}.{k}", v)

    for arch, c in curves.items():
        table(f"arch.{arch}", c)
        lines.append("")
    return "\n".join(lines)


HEADER = """\
# Shared kernel-efficiency curves of the roofline (qmodel.perf.efficiency; formulas and overrides there,
# method, sources and residuals in docs/step_times.md). Each number is a fraction of the catalog GPU's
# own peak (dense tensor rate at the GEMM's dtype, HBM bandwidth, intra-node link), so one curve serves
# every GPU of an architecture; times are seconds.
#
# Generated -- do not edit by hand; reproduce with (needs the optional extra qmodel[aic]):
#   .venv/bin/python benchmarks/_aic_points.py --out aic_points.csv
#   .venv/bin/python -m qmodel.perf.efficiency_fit --points aic_points.csv --write catalog/efficiency.toml
#
# Sources: the AIConfigurator silicon database (aiconfigurator-core, Apache-2.0, NVIDIA): per-kernel
# measurements for vLLM (gemm, context/generation attention, moe) and NCCL/vLLM all-reduce, per system
# listed in each architecture's `source`; the overhead tables are fitted on AIC's composed static
# step estimates (benchmarks/_aic_points.py: Llama-3.1-8B/70B, Qwen3-30B-A3B, Llama-3.1-70B FP8 on
# H100/H200/B200). `mape` / `points`: the fit's residual on its own table (information only).
"""

#: architectures without public per-kernel data: whose fractions of peak they borrow, and why
FALLBACKS: dict[str, dict[str, str]] = {
    "cdna3": {"fallback": "hopper", "note": "no public per-kernel measurements of MI300X/MI325X; uses hopper's "
                                            "fractions of this GPU's own peaks (same HBM3 and tensor-core generation class), "
                                            "all-reduce: the median of the measured architectures"},
    "cdna4": {"fallback": "blackwell", "note": "no public per-kernel measurements of MI355X; uses blackwell's fractions, "
                                               "all-reduce: the median of the measured architectures"},
    "default": {"fallback": "hopper", "note": "GPUs of architecture 'other' (or one this file lacks): hopper's fractions, "
                                              "all-reduce: the median of the measured architectures"},
}


def pooled_allreduce(curves: dict[str, Any]) -> dict[str, float]:
    """All-reduce curve of an architecture without measured data: the median over every fitted one.

    The all-reduce's fraction of the link is the collective's protocol efficiency (NCCL, vLLM's
    custom all-reduce) over point-to-point links more than one GPU's property: blackwell, ampere and
    ada run at 0.636-0.66 of their catalog links, hopper at 0.746, so the median of all measured
    architectures is closer to each of them than hopper's number (leave-one-GPU-out,
    docs/step_times.md). GEMM, attention, MoE and overhead tables are per-architecture kernels
    (borrowing their median instead measured worse) and come whole from ``fallback``.
    """
    rs = [c["allreduce"] for c in curves.values() if "allreduce" in c and "gemm" in c]
    return {k: float(np.median([r[k] for r in rs])) for k in ("efficiency", "latency_s")}


def unmeasured(curves: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """The :data:`FALLBACKS` architectures ``curves`` lacks: their fallback, with :func:`pooled_allreduce`."""
    ar = pooled_allreduce(curves)
    return {a: {**v, "allreduce": ar} for a, v in FALLBACKS.items() if a not in curves}


def write_file(curves: dict[str, Any], path: Path) -> None:
    """The whole catalog file: header, fitted tables, then the fallback architectures."""
    out = {}
    for arch, c in curves.items():
        missing = [t for t in ("attention", "allreduce", "moe", "overhead") if t not in c]
        if missing and arch != "hopper":  # a table this architecture's data could not fit: hopper's
            c = {**c, "fallback": "hopper", "note": f"{', '.join(missing)} from hopper (not fitted for {arch})"}
        out[arch] = c
    body = to_toml({**out, **unmeasured(curves)})
    path.write_text(HEADER + "\n" + body, encoding="utf-8")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--exclude", nargs="*", default=[])
    ap.add_argument("--points", type=Path, default=None, help="AIC static step estimates (benchmarks/_aic_points.py)")
    ap.add_argument("--write", type=Path, default=None, help="write the catalog file here instead of printing")
    ap.add_argument("--host-fabric", action="store_true", help="print the PCIe servers' host-fabric bandwidth "
                    "(catalog/gpus.toml intra_node_host_bandwidth_bytes_per_s) and exit")
    a = ap.parse_args()
    if a.host_fabric:
        for system in SYSTEM_GPU:
            r = fit_host_fabric(system)
            if r:
                print(f"{SYSTEM_GPU[system]}: {r['host_bytes_per_s'] / 1e9:.1f} GB/s "
                      f"(mape {r['mape']:.3f}, {r['points']} points)")
        return
    curves = fit_all(tuple(a.exclude))
    if a.points:
        for arch, o in fit_overheads(curves, a.points, tuple(a.exclude)).items():
            curves[arch]["overhead"] = o
    if a.write:
        write_file(curves, a.write)
    else:
        print(to_toml(curves))


if __name__ == "__main__":
    main()
