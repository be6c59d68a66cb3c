r"""Shared kernel-efficiency curves for the roofline, per GPU architecture and dtype (catalog/efficiency.toml).

A roofline with one ``mfu`` and one ``mbu`` is wrong in two directions at once: small batches run
GEMMs far below the peak rate but near full bandwidth, long prompts run attention at a different
efficiency than GEMMs, and a 10 ms flat overhead swamps a 12 ms prefill. Measured kernels (the
AIConfigurator silicon database, docs/step_times.md) are described well by a few curves, each a
fraction of the catalog GPU's own peak so one curve serves every GPU of an architecture:

* GEMM of ``M`` tokens against an ``N x K`` weight (per GPU):
  ``t = max(2 M N K / (F e(M, N)), weight bytes / (B h_w)) + t_launch`` with the ramp
  ``e(M, N) = e_peak M / (M + m_half) / (1 + M / m_decline) N / (N + n_half)`` (so the compute
  time ``2 K (N + n_half) (M + m_half) (1 + M / m_decline) / (F e_peak)`` is a cheap polynomial);
  ``F`` the GPU's dense rate at the GEMM's dtype, ``B`` its HBM bandwidth.
* prefill attention over a causal prompt of ``s`` tokens: ``A s^2 / 2`` FLOPs at
  ``e_a(s) = e_peak s / (s + s_half)`` of the BF16 rate, i.e. ``A (s^2 + s_half s) / 2 / (F e_peak)``.
* decode attention: the KV bytes read at ``h_kv`` of HBM bandwidth, plus a launch per layer.
* TP all-reduce of ``b`` bytes over ``n`` GPUs: ``latency + 2 (n-1)/n b / (link bw * eff)``, on a
  PCIe server at least ``2 (n-1) b / host fabric bw`` past its peer-to-peer group
  (:func:`allreduce_seconds_per_byte`).
* MoE experts: the GEMM form at the per-expert token count ``T k / E_touched``, with its own
  efficiency factor on ``e_peak`` (grouped GEMM) and weight-streaming efficiency.
* what those kernels leave out, fitted on composed step times: a per-step constant and a
  per-layer constant per phase (sampling, scheduling; norm/rotary/activation kernels), and
  ``elementwise_passes`` activation passes per token and layer over ``hidden + FFN width / tp``
  elements at the weight-streaming bandwidth.

Lookup: ``curves.resolve(gpu, compute_dtype)``. An architecture without measured data names a
``fallback`` architecture in the file (its fractions of peak are used on this GPU's own peaks);
``other`` falls back to ``default``. A dtype is keyed by the rate the GPU runs it at (as
:meth:`GPUSpec.flops_per_s`): ``fp4`` -> ``fp8`` -> ``bf16`` along the chain when the
architecture has no curve for it.

Overrides (the ``perf:`` fields of a roofline scenario, :class:`Overrides`) replace a curve's
number: ``mfu`` replaces the GEMM ``e_peak`` (the ramp ``m_half`` stays), ``mbu`` replaces
both HBM efficiencies (weights and KV), ``attention_efficiency`` multiplies the attention
``e_peak``, ``comm_efficiency`` replaces the all-reduce efficiency, ``prefill_overhead_s`` /
``decode_overhead_s`` replace that phase's per-step constant *and* its per-layer constant (the
override is the whole non-kernel overhead, as in the constants roofline).
"""

from __future__ import annotations

from functools import lru_cache
from importlib import resources
from typing import Any, TYPE_CHECKING

import numpy as np
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from qmodel.errors import DataError, InputError
from qmodel.specs import GPUSpec
from qmodel.units import dtype_bits

if TYPE_CHECKING:  # annotations only: numpy.typing stays unimported at run time (a cold CLI start)
    from numpy.typing import ArrayLike

__all__ = ["GemmCurve", "AttentionCurve", "AllReduceCurve", "allreduce_seconds_per_byte", "MoECurve", "OverheadCurve",
           "ArchCurves", "EfficiencyCurves", "ResolvedCurves", "Overrides", "load_curves", "gemm_dtype_key", "CURVES_FILE"]

CURVES_FILE = "efficiency.toml"
Frac = Field(gt=0, le=1.5)  # all-reduce can exceed the nominal per-direction link figure (NVLS, bidirectional)


class _Frozen(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid", defer_build=True)


class GemmCurve(_Frozen):
    peak_efficiency: float = Field(gt=0, le=1, description="e_peak: saturated fraction of the dtype's dense rate")
    m_half: float = Field(ge=0, le=1e5, description="tokens at which the ramp reaches half of e_peak")
    n_half: float = Field(default=0.0, ge=0, le=1e5, description="output columns (per GPU) at which efficiency is "
                          "half of e_peak: narrow TP-sharded GEMMs run slower")
    m_decline: float = Field(default=1e9, gt=0, description="tokens over which efficiency falls as 1/(1 + M/m_decline) "
                             "(wave quantisation and clocks at very large M)")
    weight_hbm_efficiency: float = Field(gt=0, le=1, description="h_w: fraction of HBM bandwidth streaming weights")
    launch_s: float = Field(ge=0, le=1e-3, description="fixed time per GEMM kernel")
    mape: float | None = Field(default=None, ge=0, description="fit residual on the source table (information)")
    points: int | None = None

    def time_s(self, m: ArrayLike, n: ArrayLike, k: ArrayLike, *, flops_per_s: float, bandwidth_bytes_per_s: float,
               weight_byte: float) -> np.ndarray:
        """One GEMM of ``m`` tokens by an ``n x k`` weight (``n`` outputs) on one GPU, in seconds."""
        m, n, k = (np.asarray(x, dtype=float) for x in (m, n, k))
        compute = 2.0 * k * (n + self.n_half) * (m + self.m_half) * (1.0 + m / self.m_decline) / (
            flops_per_s * self.peak_efficiency)
        memory = (n * k * weight_byte + 2.0 * m * (n + k)) / (bandwidth_bytes_per_s * self.weight_hbm_efficiency)
        return np.maximum(compute, memory) + self.launch_s


class AttentionCurve(_Frozen):
    prefill_peak_efficiency: float = Field(gt=0, le=1)
    prefill_s_half: float = Field(ge=0, le=1e6, description="prompt tokens at which prefill attention reaches half of its peak")
    prefill_launch_s: float = Field(ge=0, le=1e-3)
    prefill_mape: float | None = None
    decode_hbm_efficiency: float = Field(gt=0, le=1)
    decode_launch_s: float = Field(ge=0, le=1e-3)
    decode_mape: float | None = None

    def prefill_time_s(self, batch: ArrayLike, prompt: ArrayLike, heads: ArrayLike, head_dim: ArrayLike, *,
                       flops_per_s: float) -> np.ndarray:
        """One layer's causal attention over ``batch`` prompts of ``prompt`` tokens (``heads`` on this GPU)."""
        b, s, h, d = (np.asarray(x, dtype=float) for x in (batch, prompt, heads, head_dim))
        return b * 4.0 * h * d * (s * s + self.prefill_s_half * s) / 2.0 / (
            flops_per_s * self.prefill_peak_efficiency) + self.prefill_launch_s

    def decode_time_s(self, kv_bytes: ArrayLike, *, bandwidth_bytes_per_s: float) -> np.ndarray:
        """One layer's decode attention reading ``kv_bytes`` of KV cache on this GPU."""
        return np.asarray(kv_bytes, dtype=float) / (bandwidth_bytes_per_s * self.decode_hbm_efficiency) + self.decode_launch_s


def allreduce_seconds_per_byte(n_gpus: ArrayLike, *, link_bytes_per_s: float, efficiency: float,
                               host_bytes_per_s: float | None = None, p2p_gpus: int | None = None) -> np.ndarray:
    """Seconds per all-reduced byte among ``n_gpus`` (the bandwidth part of one all-reduce).

    Ring over each GPU's own link: every GPU sends and receives ``2 (n-1)/n`` of the message, at
    ``link * efficiency``. A PCIe server without peer-to-peer between all its GPUs
    (``GPUSpec.intra_node_p2p_gpus`` < n) routes that traffic through one host fabric (CPU root
    complex, inter-socket link) that all n GPUs share: ``n x 2 (n-1)/n = 2 (n-1)`` message bytes
    cross it, at ``host_bytes_per_s``, so the all-reduce takes the larger of the two. On AIC's
    L40S server the measured all-reduce bus bandwidth is 19-20 GB/s at 2 GPUs (one PCIe switch)
    and falls as 1/n beyond (3.7 / 1.95 GB/s at 4 / 8 GPUs, i.e. 15 / 16 GB/s of shared fabric;
    docs/step_times.md), which a single link efficiency cannot follow.
    """
    n = np.asarray(n_gpus, dtype=float)
    ring = 2.0 * (n - 1.0) / n / (link_bytes_per_s * efficiency)
    if host_bytes_per_s is None or p2p_gpus is None:
        return ring
    return np.maximum(ring, np.where(n > p2p_gpus, 2.0 * (n - 1.0) / host_bytes_per_s, 0.0))


class AllReduceCurve(_Frozen):
    efficiency: float = Frac
    latency_s: float = Field(ge=0, le=1e-3)
    mape: float | None = None

    def time_s(self, nbytes: ArrayLike, n_gpus: ArrayLike, *, link_bytes_per_s: float,
               host_bytes_per_s: float | None = None, p2p_gpus: int | None = None) -> np.ndarray:
        """All-reduce of ``nbytes`` among ``n_gpus``: latency + bytes x :func:`allreduce_seconds_per_byte`."""
        return self.latency_s + np.asarray(nbytes, dtype=float) * allreduce_seconds_per_byte(
            n_gpus, link_bytes_per_s=link_bytes_per_s, efficiency=self.efficiency, host_bytes_per_s=host_bytes_per_s,
            p2p_gpus=p2p_gpus)

    def gpu_time_s(self, nbytes: ArrayLike, n_gpus: ArrayLike, gpu: GPUSpec) -> np.ndarray:
        """:meth:`time_s` over ``gpu``'s intra-node link and (PCIe servers) its host fabric."""
        return self.time_s(nbytes, n_gpus, link_bytes_per_s=gpu.intra_node_bandwidth_bytes_per_s,
                           host_bytes_per_s=gpu.intra_node_host_bandwidth_bytes_per_s, p2p_gpus=gpu.intra_node_p2p_gpus)


class MoECurve(_Frozen):
    efficiency_factor: float = Frac
    n_half: float = Field(default=0.0, ge=0, le=1e5, description="as GemmCurve.n_half, for the grouped expert GEMMs")
    weight_hbm_efficiency: float = Field(gt=0, le=1)
    launch_s: float = Field(ge=0, le=1e-3)
    mape: float | None = None
    routing: str | None = None

    def time_s(self, gemm: GemmCurve, tokens: ArrayLike, hidden: ArrayLike, inter: ArrayLike, topk: ArrayLike,
               experts: ArrayLike, tp: ArrayLike, *, flops_per_s: float, bandwidth_bytes_per_s: float,
               weight_byte: float, routing: str = "uniform") -> np.ndarray:
        """One MoE layer's expert GEMMs (gate/up and down) for ``tokens``, experts TP-sharded.

        ``routing``: ``uniform`` (each token picks ``k`` of ``E`` experts at random, the model of
        served traffic: ``E (1 - (1 - k/E)^T)`` experts touched) or ``balanced`` (a kernel
        benchmark's round robin: ``min(E, T k)`` touched, every one with ``T k / touched`` tokens;
        the fit uses it on such tables, which at 16 tokens x top-8 of 128 touch all 128 experts
        where uniform routing touches 82).
        """
        t, h, i, k, e, tp_ = (np.asarray(x, dtype=float) for x in (tokens, hidden, inter, topk, experts, tp))
        if routing == "balanced":
            touched = np.minimum(e, np.maximum(t, 0.0) * k)
        else:
            touched = e * (1.0 - (1.0 - k / e) ** np.maximum(t, 0.0))
        per = np.divide(t * k, touched, out=np.zeros_like(touched), where=touched > 0)
        pe = 3.0 * h * i / tp_
        compute = (2.0 * (pe + self.n_half * (h + i / tp_)) * touched * (per + gemm.m_half) * (1.0 + per / gemm.m_decline)
                   / (flops_per_s * gemm.peak_efficiency * self.efficiency_factor))
        memory = touched * pe * weight_byte / (bandwidth_bytes_per_s * self.weight_hbm_efficiency)
        return np.maximum(compute, memory) + self.launch_s


class OverheadCurve(_Frozen):
    """What the kernels above leave out, fitted on composed step times (docs/step_times.md)."""

    prefill_s: float = Field(ge=0, le=1.0, description="per prefill step (scheduling, sampling, launch gaps)")
    decode_s: float = Field(ge=0, le=1.0, description="per decode step")
    prefill_per_layer_s: float = Field(default=0.0, ge=0, le=1e-2, description="per layer per prefill step "
                                       "(norm, rotary, activation, KV-write kernels)")
    decode_per_layer_s: float = Field(default=0.0, ge=0, le=1e-2, description="per layer per decode step")
    elementwise_passes: float = Field(default=0.0, ge=0, le=100, description="activation passes per token per layer "
                                      "over (hidden + FFN width / tp) elements, at the weight-streaming efficiency")


class ArchCurves(_Frozen):
    systems: list[str] = Field(default_factory=list, description="AIC systems the numbers were fitted on")
    source: str | None = None
    fallback: str | None = Field(default=None, description="architecture whose curves apply when this has none")
    note: str | None = None
    gemm: dict[str, GemmCurve] = Field(default_factory=dict)
    attention: AttentionCurve | None = None
    allreduce: AllReduceCurve | None = None
    moe: MoECurve | None = None
    overhead: OverheadCurve | None = None


class Overrides(_Frozen):
    """Explicit ``perf:`` factors that replace (or, for attention, scale) a curve's number; None = the curve's."""

    mfu: float | None = None
    mbu: float | None = None
    attention_efficiency: float | None = None
    comm_efficiency: float | None = None
    prefill_overhead_s: float | None = None
    decode_overhead_s: float | None = None


class ResolvedCurves(_Frozen):
    """The numbers one (GPU architecture, compute dtype) uses, overrides applied."""

    architecture: str
    gemm_dtype: str
    gemm: GemmCurve
    attention: AttentionCurve
    allreduce: AllReduceCurve
    moe: MoECurve
    overhead: OverheadCurve


def gemm_dtype_key(gpu: GPUSpec, dtype: str) -> str:
    """The GEMM curve a dtype runs on this GPU: the tensor-core rate it gets (as GPUSpec.flops_per_s)."""
    bits = dtype_bits(dtype, "perf.compute_dtype")
    if bits <= 4.5 and gpu.fp4_flops_per_s:
        return "fp4"
    if bits <= 8 and gpu.fp8_flops_per_s:
        return "fp8"
    return "bf16"


_DTYPE_CHAIN = {"fp4": ("fp4", "fp8", "bf16"), "fp8": ("fp8", "bf16"), "bf16": ("bf16",)}


class EfficiencyCurves(_Frozen):
    """Every architecture's curves, as read from catalog/efficiency.toml."""

    arch: dict[str, ArchCurves]
    origin: str = "(mapping)"

    @classmethod
    def from_mapping(cls, data: dict[str, Any], origin: str = "(mapping)") -> "EfficiencyCurves":
        try:
            return cls.model_validate({"arch": data, "origin": origin})
        except ValidationError as err:
            e = err.errors()[0]
            raise DataError(origin, f"{'.'.join(str(p) for p in e['loc'])}: {e['msg']}") from None

    def _chain(self, architecture: str) -> list[ArchCurves]:
        out, seen, name = [], set(), architecture if architecture in self.arch else "default"
        while name is not None and name not in seen:
            if name not in self.arch:
                raise DataError(self.origin, f"architecture {architecture!r} falls back to unknown {name!r}")
            seen.add(name)
            out.append(self.arch[name])
            name = self.arch[name].fallback
        return out

    def resolve(self, gpu: GPUSpec, compute_dtype: str, overrides: Overrides | None = None) -> ResolvedCurves:
        """The curves for ``gpu`` running GEMMs at ``compute_dtype``, with ``overrides`` applied."""
        chain = self._chain(gpu.architecture)
        key = gemm_dtype_key(gpu, compute_dtype)

        def first(attr: str) -> Any:
            for a in chain:
                if getattr(a, attr) is not None:
                    return getattr(a, attr)
            raise DataError(self.origin, f"no {attr} curve for architecture {gpu.architecture!r} or its fallbacks")

        gemm = next((a.gemm[k] for k in _DTYPE_CHAIN[key] for a in chain if k in a.gemm), None)
        if gemm is None:
            raise DataError(self.origin, f"no gemm curve for architecture {gpu.architecture!r} or its fallbacks")
        att, ar, moe, ovh = first("attention"), first("allreduce"), first("moe"), first("overhead")
        o = overrides or Overrides()
        for name in ("mfu", "mbu", "attention_efficiency", "comm_efficiency"):
            v = getattr(o, name)
            if v is not None and not 0.0 < v <= 1.0:
                raise InputError(f"perf.{name}", v, "a fraction in (0, 1]")
        if o.mfu is not None:
            gemm = gemm.model_copy(update={"peak_efficiency": o.mfu})
        if o.mbu is not None:
            gemm = gemm.model_copy(update={"weight_hbm_efficiency": o.mbu})
            moe = moe.model_copy(update={"weight_hbm_efficiency": o.mbu})
            att = att.model_copy(update={"decode_hbm_efficiency": o.mbu})
        if o.attention_efficiency is not None:
            att = att.model_copy(update={"prefill_peak_efficiency": att.prefill_peak_efficiency * o.attention_efficiency})
        if o.comm_efficiency is not None:
            ar = ar.model_copy(update={"efficiency": o.comm_efficiency})
        if o.prefill_overhead_s is not None:  # an explicit overhead is the whole per-step constant
            ovh = ovh.model_copy(update={"prefill_s": o.prefill_overhead_s, "prefill_per_layer_s": 0.0})
        if o.decode_overhead_s is not None:
            ovh = ovh.model_copy(update={"decode_s": o.decode_overhead_s, "decode_per_layer_s": 0.0})
        return ResolvedCurves(architecture=gpu.architecture, gemm_dtype=key, gemm=gemm, attention=att, allreduce=ar,
                              moe=moe, overhead=ovh)


@lru_cache(maxsize=1)
def load_curves() -> EfficiencyCurves:
    """The bundled catalog/efficiency.toml (installed as qmodel.catalog), parsed and validated once."""
    origin = f"qmodel.catalog/{CURVES_FILE}"
    from qmodel.registry import parse_toml_cached  # the catalog's TOML reader, with its JSON cache

    text = resources.files("qmodel.catalog").joinpath(CURVES_FILE).read_text(encoding="utf-8")
    data = parse_toml_cached(text, origin)
    if set(data) - {"arch"}:
        raise DataError(origin, f"unknown top-level tables {sorted(set(data) - {'arch'})}; allowed: ['arch']")
    return EfficiencyCurves.from_mapping(data.get("arch", {}), origin)
