"""Roofline step times from catalog specs: measured per-architecture efficiency curves, or fixed factors."""

from __future__ import annotations

import hashlib
import json

import numpy as np

from typing import Literal, TYPE_CHECKING

from qmodel.errors import InputError
from qmodel.perf.base import ArrayOrFloat, ServiceTimeModel, SCALAR_TYPES
from qmodel.perf.efficiency import EfficiencyCurves, Overrides, allreduce_seconds_per_byte, load_curves
from qmodel.perf.efficiency_terms import CurveTerms
from qmodel.perf.parallel import Parallelism, check_parallelism
from qmodel.specs import GPUSpec, ModelSpec
from qmodel.units import dtype_bits

if TYPE_CHECKING:  # annotations only: numpy.typing stays unimported at run time (a cold CLI start)
    from numpy.typing import ArrayLike

__all__ = ["RooflineModel", "DEFAULT_ALLREDUCE_LATENCY_S", "expected_distinct_experts"]

# Inputs of these exact types take the scalar fast path (numpy arrays, lists and 0-d arrays do not).

#: Per-call latency of one NCCL all-reduce (or one pipeline send) inside a node. nccl-tests put
#: small-message all-reduce on 8 NVLink GPUs at 10-20 us; Vidur's profiles
#: (vidur/profiling/network/{a100,h100}_dgx/all_reduce.csv, 8 GPUs, 2 KiB) measure 62/37 us medians
#: including the host launch that CUDA graphs remove. 20 us sits between the two.
DEFAULT_ALLREDUCE_LATENCY_S: float = 20e-6


def expected_distinct_experts(num_experts: int, top_k: int, n_tokens: ArrayLike) -> np.ndarray:
    """Expected number of distinct experts hit in one MoE layer by ``n_tokens`` tokens.

    Each token picks ``top_k`` distinct experts out of ``E``; with uniform routing an expert is
    missed by one token with probability ``1 - k/E``, so ``E * (1 - (1 - k/E)**n)`` experts are
    touched (= k for one token, -> E for many).
    """
    n = np.maximum(np.asarray(n_tokens, dtype=float), 0.0)
    return num_experts * (1.0 - (1.0 - top_k / num_experts) ** n)


class RooflineModel(ServiceTimeModel):
    r"""Roofline step times for one instance of ``tp x pp`` GPUs.

    Two modes. **Curves** (``curves="catalog"``, the default; or an :class:`EfficiencyCurves`):
    every kernel at its GPU architecture's measured efficiency, formulas in
    :mod:`qmodel.perf.efficiency_terms`, curves and the override rule in
    :mod:`qmodel.perf.efficiency` (a factor passed here replaces the curve's number: ``mfu`` the
    saturated GEMM efficiency, ``mbu`` the HBM efficiencies, ``attention_efficiency`` scales the
    attention peak, ``comm_efficiency`` the all-reduce, an overhead the per-step constant).
    Accuracy against measured step times: docs/step_times.md.

    **Constants** (``curves=None``), the roofline before the curves, below. Per pipeline stage (the busiest one, holding ``f = ceil(layers/pp)/layers`` of the layers)::

        prefill(T, Q, k) = max(compute, memory) + allreduce(T) + send(T) + prefill_overhead_s
                           + k * prefill_per_request_s
            compute = f * (2 * P_mm * T / mfu + A * Q / 2 / (mfu * attention_efficiency)) / (tp * F)
            memory  = f * W(T) / tp / (B * mbu)
        decode(n, S)  = max(compute, memory) + allreduce(n) + send(n) + decode_overhead_s
            compute = f * (2 * P_mm * n / mfu + A * S_w / (mfu * attention_efficiency)) / (tp * F)
            memory  = f * (W(n) / tp + KV(n, S) / kv_shards) / (B * mbu)

    with ``k`` requests and ``T`` prompt tokens computed in the batch, ``Q`` = sum of n_i^2 + 2 n_i c_i (causal
    attention does half of the T x T score matrix, hence Q/2), ``n`` sequences whose contexts total
    ``S``; ``F`` the GPU's dense tensor rate at ``compute_dtype``, ``B`` its memory bandwidth, ``A``
    = :meth:`ModelSpec.attention_flops_per_token_pair`, ``P_mm`` the active parameters a token
    multiplies (:attr:`ModelSpec.matmul_params_per_token`: active params less the input-embedding
    lookup). ``W(x)`` is the weight bytes read: every weight except the input-embedding table (one row
    per token) for a dense model; for MoE the non-routed weights plus the routed experts touched by
    ``x`` tokens, ``E (1 - (1 - k/E)^x)`` per layer (:func:`expected_distinct_experts`), experts at
    ``expert_dtype`` when the model has one. ``KV(n, S)``
    is the KV bytes of the context (GQA heads, MLA latent, and sliding-window layers capped at the
    window using the mean context ``S/n``); ``kv_shards = min(tp, kv_heads)`` (1 for MLA, whose
    latent is replicated). ``S_w`` is ``S`` with the same window cap. Hybrid models (recurrent
    layers, :mod:`qmodel.recurrent`): attention terms cover the attention layers only; each token
    adds the recurrent update's ``R`` FLOPs to compute (``+ f R T / (mfu * attention_efficiency *
    tp * F)``, likewise ``n`` in decode) and each decoding sequence reads and writes its constant
    state, ``+ f 2 Z n / tp / (B * mbu)`` memory with ``Z`` the state bytes per sequence.

    Tensor parallel: 2 all-reduces per layer (after attention and after the FFN) of
    ``tokens * hidden * act_bytes`` each, ring cost ``2 (tp-1)/tp * bytes / (link_bw *
    comm_efficiency) + allreduce_latency_s`` (on a PCIe server past its peer-to-peer group at least
    ``2 (tp-1) bytes / host fabric bw``: :func:`~qmodel.perf.efficiency.allreduce_seconds_per_byte`),
    not overlapped with compute. Pipeline parallel:
    the returned time is the *stage* time (the pipeline accepts a new batch every stage time, the
    throughput-equivalent service time DistServe also uses), plus one inter-stage send of the
    activations ``tokens * hidden * act_bytes`` over the intra-node link. A single batch's latency
    through the whole pipeline is ``pp`` stage times; stations that need it must add it.

    Factors, defaults (constants mode; a factor not given) and their sources:

    * ``mfu`` = 0.55: achieved fraction of dense tensor FLOP/s in large GEMMs, the middle of the
      0.4-0.6 usually quoted for vLLM/TensorRT-LLM prefill on A100/H100 (a rule of thumb, not
      checked here). Fitted values: 0.69 (A100) / 0.59 (H100) for splitwise-sim's Llama2-70B TP8,
      0.73 for DistServe's OPT-13B fit (``qmodel calibrate``).
    * ``mbu`` = 0.75: achieved fraction of HBM bandwidth when streaming weights/KV in decode, the
      upper half of the 0.6-0.8 usually quoted for tuned decode kernels (rule of thumb). Engines
      vary widely: splitwise-sim's measured decode calibrates to 0.18-0.46, DistServe's fit to 0.63.
    * ``prefill_overhead_s`` = 10 ms, ``decode_overhead_s`` = 4 ms: per-step scheduler, sampling
      and kernel-launch time not captured by the roofline (DistServe's fitted intercepts for
      OPT-13B on A100 are 18 ms prefill and 20 ms decode with their engine; CUDA-graph engines are lower).
    * ``comm_efficiency`` = 0.7: achieved fraction of the GPU's intra-node bandwidth in ring
      all-reduce; Vidur's 64 MiB 8-GPU all-reduce profiles give 0.64 on A100 (NVLink 3) and 0.92
      on H100 (NVLink 4).
    * ``prefill_per_request_s`` = 0: time per request in a prefill batch beyond its tokens
      (per-sequence attention launches and padding in engines without variable-length kernels,
      sampling and bookkeeping). Zero for a modern varlen engine; splitwise-sim's measurements need
      it: a batch of 16 x 512 tokens takes 2.08 s there against 1.55 s for one 8192-token prompt.
    * ``attention_efficiency`` = 1.0: attention FLOPs run at ``mfu * attention_efficiency``
      (FlashAttention is near GEMM efficiency on long prompts); calibration may lower it.
    * ``allreduce_latency_s`` = 20 us: see :data:`DEFAULT_ALLREDUCE_LATENCY_S`.
    * ``compute_dtype`` = the model's weight dtype. A narrower compute dtype (``fp8`` on a bf16
      checkpoint) means a quantised deployment: weights are streamed at that width and GEMMs run
      at the GPU's rate for it; weights already narrower (W4A16, mxfp4 experts) stay narrower.
      Activations move in 16 bits unless the compute dtype is wider.

    Not modelled: overlap of communication with compute, KV reads of a cached prefix during prefill,
    the sliding-window cap on prefill attention (a long-prompt overestimate for windowed models),
    expert parallelism (experts are TP-sharded), and instances spanning nodes (every collective and
    pipeline send uses the GPU's intra-node link).
    """

    kind = "roofline"

    def __init__(self, model: ModelSpec, gpu: GPUSpec, tp: int = 1, pp: int = 1, *, mfu: float | None = None,
                 mbu: float | None = None, prefill_overhead_s: float | None = None,
                 decode_overhead_s: float | None = None, comm_efficiency: float | None = None,
                 attention_efficiency: float | None = None, prefill_per_request_s: float = 0.0,
                 allreduce_latency_s: float | None = None, compute_dtype: str | None = None,
                 curves: EfficiencyCurves | Literal["catalog"] | None = "catalog",
                 field_prefix: str = "deployment") -> None:
        given = {"mfu": mfu, "mbu": mbu, "prefill_overhead_s": prefill_overhead_s,
                 "decode_overhead_s": decode_overhead_s, "comm_efficiency": comm_efficiency,
                 "attention_efficiency": attention_efficiency}
        self.curves = load_curves() if curves == "catalog" else curves
        # Constants mode: every factor not given takes its documented constant (see the class docstring).
        mfu = 0.55 if mfu is None else mfu
        mbu = 0.75 if mbu is None else mbu
        prefill_overhead_s = 0.010 if prefill_overhead_s is None else prefill_overhead_s
        decode_overhead_s = 0.004 if decode_overhead_s is None else decode_overhead_s
        comm_efficiency = 0.7 if comm_efficiency is None else comm_efficiency
        attention_efficiency = 1.0 if attention_efficiency is None else attention_efficiency
        allreduce_latency_s = DEFAULT_ALLREDUCE_LATENCY_S if allreduce_latency_s is None else allreduce_latency_s
        for name, v, hi in (("mfu", mfu, 1.0), ("mbu", mbu, 1.0), ("comm_efficiency", comm_efficiency, 1.0),
                            ("attention_efficiency", attention_efficiency, 1.0)):
            if not (0.0 < v <= hi):
                raise InputError(f"perf.{name}", v, "a fraction in (0, 1]")
        for name, v in (("prefill_overhead_s", prefill_overhead_s), ("decode_overhead_s", decode_overhead_s),
                        ("allreduce_latency_s", allreduce_latency_s), ("prefill_per_request_s", prefill_per_request_s)):
            if not (v >= 0.0 and np.isfinite(v)):
                raise InputError(f"perf.{name}", v, "a non-negative finite time in seconds")
        self.model, self.gpu = model, gpu
        self.layout: Parallelism = check_parallelism(model, tp, pp, field_prefix)
        self.tp, self.pp = tp, pp
        self.mfu, self.mbu = float(mfu), float(mbu)
        self.prefill_overhead_s, self.decode_overhead_s = float(prefill_overhead_s), float(decode_overhead_s)
        self.comm_efficiency = float(comm_efficiency)
        self.attention_efficiency = float(attention_efficiency)
        self.allreduce_latency_s = float(allreduce_latency_s)
        self.prefill_per_request_s = float(prefill_per_request_s)
        self.compute_dtype = compute_dtype or model.dtype
        self.flops_per_s = gpu.flops_per_s(self.compute_dtype)
        self.act_bytes = max(dtype_bits(self.compute_dtype, "perf.compute_dtype"), 16.0) / 8.0
        # Weights are stored no wider than the compute dtype: an FP8 (W8A8) deployment of a bf16
        # checkpoint streams FP8 weights. Narrower stored weights (W4A16, mxfp4 experts) are kept.
        cbits = dtype_bits(self.compute_dtype, "perf.compute_dtype")
        self._weight_byte = min(dtype_bits(model.dtype), cbits) / 8.0
        self._expert_byte = min(dtype_bits(model.expert_dtype or model.dtype), cbits) / 8.0
        self._kv_byte = dtype_bits(model.kv_dtype, "kv_dtype") / 8.0
        self._init_weights()
        self._init_coefficients()
        self._terms: CurveTerms | None = None
        if self.curves is not None:
            res = self.curves.resolve(gpu, self.compute_dtype, Overrides(**given))
            self._terms = CurveTerms(model, gpu, self.layout, res, flops_per_s=self.flops_per_s,
                                     weight_byte=self._weight_byte, expert_byte=self._expert_byte,
                                     kv_byte=self._kv_byte, act_bytes=self.act_bytes, base_params=self._base_params,
                                     expert_params_per_layer_expert=self._expert_params_per_layer_expert,
                                     moe_layers=self._moe_layers, prefill_per_request_s=self.prefill_per_request_s)
            # The factors this model now runs at (reported by params(); calibration starts from them).
            self.mfu, self.mbu = res.gemm.peak_efficiency, res.gemm.weight_hbm_efficiency
            # per-step constants including the per-layer part for this stage (an override replaces both)
            self.prefill_overhead_s, self.decode_overhead_s = self._terms.ovh_pre, self._terms.ovh_dec
            self.comm_efficiency, self.allreduce_latency_s = res.allreduce.efficiency, res.allreduce.latency_s

    # ---- weights read per step -----------------------------------------------------------
    def _init_weights(self) -> None:
        m = self.model
        counts = m.param_counts()
        # The input-embedding table is read one row per token, not streamed (unless tied to the LM head).
        emb = 0.0 if m.tie_word_embeddings else counts.embedding
        if m.moe is None:
            self._expert_params_per_layer_expert = 0.0
            self._moe_layers = 0
            self._base_params = max(m.total_params - emb, 0.0)
            return
        self._moe_layers = m.ffn_layer_count - m.moe.dense_layers
        self._expert_params_per_layer_expert = counts.routed_experts / (self._moe_layers * m.moe.num_experts)
        # Shared experts, attention, dense layers, router and LM head are read every step.
        self._base_params = max(m.total_params - counts.routed_experts - emb, 0.0)

    def weight_bytes_read(self, n_tokens: ArrayLike) -> np.ndarray:
        """Weight bytes of the whole model read by a step over ``n_tokens`` tokens (all GPUs together)."""
        n = np.asarray(n_tokens, dtype=float)
        base = self._base_params * self._weight_byte
        if self.model.moe is None:
            return np.full_like(n, base)
        e = expected_distinct_experts(self.model.moe.num_experts, self.model.moe.active_experts, n)
        return base + self._moe_layers * self._expert_params_per_layer_expert * e * self._expert_byte

    def _init_coefficients(self) -> None:
        """Fold every constant of the formulas into a few per-token coefficients (seconds).

        Both the array path and the scalar fast path (the replay calls with scalars, ~10x faster
        without numpy's per-call overhead) evaluate the same expressions on these numbers.
        """
        m, lay = self.model, self.layout
        f, tp = lay.stage_fraction, lay.tp
        flops = tp * self.flops_per_s
        bw = self.gpu.memory_bandwidth_bytes_per_s * self.mbu
        self._k_lin = f * m.linear_flops_per_token() / (self.mfu * flops)
        self._k_att = f * m.attention_flops_per_token_pair() / (self.mfu * self.attention_efficiency * flops)
        self._k_wbase = f * self._base_params * self._weight_byte / tp / bw
        self._k_wexp = f * self._moe_layers * self._expert_params_per_layer_expert * self._expert_byte / tp / bw
        self._k_kv = f * m.kv_elements_per_token_per_layer() * self._kv_byte * m.attention_layers / lay.kv_shards_tp / bw
        # recurrent layers (hybrid models): update FLOPs per token, state read + written per sequence and step,
        # both split over the TP ranks by head
        self._k_rec = f * m.recurrent_flops_per_token() / (self.mfu * self.attention_efficiency * flops)
        self._k_state = f * 2.0 * m.state_bytes_per_sequence() / tp / bw
        link = self.gpu.intra_node_bandwidth_bytes_per_s * self.comm_efficiency
        per_tok = m.hidden_size * self.act_bytes / link
        self._k_comm_tok = 0.0
        self._k_comm_0 = 0.0
        if lay.tp > 1:
            self._k_comm_tok += 2.0 * lay.layers_per_stage * m.hidden_size * self.act_bytes * float(
                allreduce_seconds_per_byte(lay.tp, link_bytes_per_s=self.gpu.intra_node_bandwidth_bytes_per_s,
                                           efficiency=self.comm_efficiency,
                                           host_bytes_per_s=self.gpu.intra_node_host_bandwidth_bytes_per_s,
                                           p2p_gpus=self.gpu.intra_node_p2p_gpus))
            self._k_comm_0 += 2.0 * lay.layers_per_stage * self.allreduce_latency_s
        if lay.pp > 1:
            self._k_comm_tok += per_tok
            self._k_comm_0 += self.allreduce_latency_s
        moe = m.moe
        self._moe_e = float(moe.num_experts) if moe else 0.0
        self._moe_miss = 1.0 - moe.active_experts / moe.num_experts if moe else 1.0
        sw = m.sliding_window_layers if (m.sliding_window_layers and m.sliding_window_tokens) else 0
        self._win = float(m.sliding_window_tokens or 0)
        self._win_full = (m.attention_layers - sw) / m.attention_layers
        self._win_part = sw / m.attention_layers

    # ---- array helpers -------------------------------------------------------------------
    def _windowed_context(self, n: np.ndarray, s: np.ndarray) -> np.ndarray:
        """Context summed over sequences, averaged over layers, window layers capped at the window (mean-context approximation)."""
        if not self._win_part:
            return s
        mean_ctx = np.divide(s, n, out=np.zeros_like(s), where=n > 0)
        return self._win_full * s + self._win_part * (n * np.minimum(mean_ctx, self._win))

    def _experts_s(self, tokens: np.ndarray) -> np.ndarray:
        if not self._moe_e:
            return np.zeros_like(tokens)
        return self._k_wexp * (self._moe_e * (1.0 - self._moe_miss ** np.maximum(tokens, 0.0)))

    def kv_bytes_read(self, n_seqs: ArrayLike, sum_context_tokens: ArrayLike) -> np.ndarray:
        """KV bytes of the context read by one decode step (whole model, before sharding), with each
        sequence's recurrent state (hybrid models; it is also written back, see decode_breakdown)."""
        n = np.asarray(n_seqs, dtype=float)
        s = np.asarray(sum_context_tokens, dtype=float)
        per_token = self.model.kv_elements_per_token_per_layer() * self._kv_byte * self.model.attention_layers
        return per_token * self._windowed_context(n, s) + self.model.state_bytes_per_sequence() * n

    def prefill_breakdown(self, sum_tokens: ArrayLike, sum_sq_tokens: ArrayLike) -> dict[str, np.ndarray]:
        """The terms of one prefill batch time: compute, memory, comm, overhead (seconds)."""
        t, q = np.broadcast_arrays(np.asarray(sum_tokens, dtype=float), np.asarray(sum_sq_tokens, dtype=float))
        if self._terms is not None:
            return self._terms.prefill_breakdown(t, q, np.ones_like(t))
        return {"compute_s": self._k_lin * t + self._k_att * (q / 2.0) + self._k_rec * t,
                "memory_s": self._k_wbase + self._experts_s(t),
                "comm_s": self._k_comm_tok * t + self._k_comm_0,
                "overhead_s": np.full_like(t, self.prefill_overhead_s)}

    def decode_breakdown(self, n_seqs: ArrayLike, sum_context_tokens: ArrayLike) -> dict[str, np.ndarray]:
        """The terms of one decode step time: compute, memory, comm, overhead (seconds)."""
        n, s = np.broadcast_arrays(np.asarray(n_seqs, dtype=float), np.asarray(sum_context_tokens, dtype=float))
        sw = self._windowed_context(n, s)
        if self._terms is not None:
            return self._terms.decode_breakdown(n, sw)
        return {"compute_s": self._k_lin * n + self._k_att * sw + self._k_rec * n,
                "memory_s": self._k_wbase + self._experts_s(n) + self._k_kv * sw + self._k_state * n,
                "comm_s": self._k_comm_tok * n + self._k_comm_0,
                "overhead_s": np.full_like(n, self.decode_overhead_s)}

    # ---- the two step times --------------------------------------------------------------
    def prefill_time_s(self, sum_tokens: ArrayLike, sum_sq_tokens: ArrayLike, n_requests: ArrayLike) -> ArrayOrFloat:
        if type(sum_tokens) in SCALAR_TYPES and type(sum_sq_tokens) in SCALAR_TYPES and type(n_requests) in SCALAR_TYPES:
            return self._prefill_scalar(float(sum_tokens), float(sum_sq_tokens), float(n_requests))
        t, q, k = np.broadcast_arrays(np.asarray(sum_tokens, dtype=float), np.asarray(sum_sq_tokens, dtype=float),
                                      np.asarray(n_requests, dtype=float))
        if self._terms is not None:
            p = self._terms.prefill_breakdown(t, q, k)
            out = p["gemm_s"] + p["attention_s"] + p["launch_s"] + p["comm_s"] + p["overhead_s"]
            out = np.where(t > 0, out, 0.0)
            return float(out) if out.ndim == 0 else out
        p = self.prefill_breakdown(t, q)
        out = (np.maximum(p["compute_s"], p["memory_s"]) + p["comm_s"]
               + (self.prefill_overhead_s + self.prefill_per_request_s * k))
        out = np.where(t > 0, out, 0.0)  # an empty batch takes no time
        return float(out) if out.ndim == 0 else out

    def decode_step_time_s(self, n_seqs: ArrayLike, sum_context_tokens: ArrayLike) -> ArrayOrFloat:
        if type(n_seqs) in SCALAR_TYPES and type(sum_context_tokens) in SCALAR_TYPES:
            return self._decode_scalar(float(n_seqs), float(sum_context_tokens))
        n, s = np.broadcast_arrays(np.asarray(n_seqs, dtype=float), np.asarray(sum_context_tokens, dtype=float))
        p = self.decode_breakdown(n, s)
        if self._terms is not None:
            out = p["gemm_s"] + p["attention_s"] + p["launch_s"] + p["comm_s"] + p["overhead_s"]
            out = np.where(n > 0, out, 0.0)
            return float(out) if out.ndim == 0 else out
        out = np.maximum(p["compute_s"], p["memory_s"]) + p["comm_s"] + self.decode_overhead_s
        out = np.where(n > 0, out, 0.0)  # an empty batch takes no time
        return float(out) if out.ndim == 0 else out

    # ---- scalar fast path: the same expressions, in the same order, on Python floats ------
    def _prefill_scalar(self, t: float, q: float, k: float) -> float:
        if not t > 0:
            return 0.0
        if self._terms is not None:
            return self._terms.prefill_scalar(t, q, k)
        experts = self._k_wexp * (self._moe_e * (1.0 - self._moe_miss ** max(t, 0.0))) if self._moe_e else 0.0
        compute = self._k_lin * t + self._k_att * (q / 2.0) + self._k_rec * t
        memory = self._k_wbase + experts
        comm = self._k_comm_tok * t + self._k_comm_0
        return max(compute, memory) + comm + (self.prefill_overhead_s + self.prefill_per_request_s * k)

    def _decode_scalar(self, n: float, s: float) -> float:
        if not n > 0:
            return 0.0
        sw = s
        if self._win_part:
            sw = self._win_full * s + self._win_part * (n * min(s / n, self._win))
        if self._terms is not None:
            return self._terms.decode_scalar(n, sw)
        experts = self._k_wexp * (self._moe_e * (1.0 - self._moe_miss ** max(n, 0.0))) if self._moe_e else 0.0
        compute = self._k_lin * n + self._k_att * sw + self._k_rec * n
        memory = self._k_wbase + experts + self._k_kv * sw + self._k_state * n
        comm = self._k_comm_tok * n + self._k_comm_0
        return max(compute, memory) + comm + self.decode_overhead_s

    # ---- identity ------------------------------------------------------------------------
    def params(self) -> dict[str, float | str | int]:
        return {"mfu": self.mfu, "mbu": self.mbu, "prefill_overhead_s": self.prefill_overhead_s,
                "decode_overhead_s": self.decode_overhead_s, "comm_efficiency": self.comm_efficiency,
                "attention_efficiency": self.attention_efficiency, "allreduce_latency_s": self.allreduce_latency_s,
                "prefill_per_request_s": self.prefill_per_request_s,
                "compute_dtype": self.compute_dtype, "tp": self.tp, "pp": self.pp,
                **({"efficiency": f"curves {self._terms.curves.architecture}/{self._terms.curves.gemm_dtype}"}
                   if self._terms is not None else {})}

    @property
    def fingerprint(self) -> str:
        ident: dict[str, object] = {"kind": self.kind, "model": self.model.model_dump(mode="json"),
                                    "gpu": self.gpu.model_dump(mode="json"), "params": self.params()}
        if self._terms is not None:
            ident["curves"] = self._terms.curves.model_dump(mode="json")
        blob = json.dumps(ident,
                          sort_keys=True, separators=(",", ":"))
        return hashlib.sha256(blob.encode()).hexdigest()

    def describe(self) -> dict[str, object]:
        return {"kind": self.kind, "model": self.model.name, "gpu": self.gpu.name, **self.params(),
                "sha256": self.fingerprint}
