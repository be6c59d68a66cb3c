r"""Step times from the shared efficiency curves (:mod:`qmodel.perf.efficiency`): the roofline's curve mode.

Per pipeline stage (fraction ``f`` of the layers, ``L_s`` layers), on ``tp`` GPUs, each kernel at
its own roofline (kernels run one after another, so their times add)::

    prefill(T, Q, k) = gemm(T) + head(k) + moe(T) + c_att (Q/2 + s_half T/2) + launches
                       + comm(T) + overhead_prefill + k * prefill_per_request_s
    decode(n, S)     = gemm(n) + head(n) + moe(n) + max(c_att S_w, KV(S_w) / (B h_kv)) + launches
                       + comm(n) + overhead_decode
    gemm(M) = max(f 2 (P_body / tp + n_half K_sum) r(M) / (F e_peak), f W_body / (tp B h_w))
    r(M)    = (M + m_half) (1 + M / m_decline)       (the ramp: M / r(M) = e(M) / e_peak)
    head(M) = the same for the LM head (vocab x hidden), computed for the last token of each
              prompt in prefill (M = k requests) and for every sequence in decode
    moe(M)  = max(f_E 2 (P_e / tp + n_half_E K_e) E(M) r(M k_top / E(M)) / (F e_peak x), f_E E(M) W_e / (tp B h_e))

``P_body`` are the per-token matmul parameters outside the LM head and the routed experts,
``K_sum`` the inner dimensions of those GEMMs on one GPU (:func:`_body_k_sum`),
``W_body`` their bytes; ``E(M) = E (1 - (1 - k_top/E)^M)`` experts touched per MoE layer, each
computing ``M k_top / E(M)`` tokens, ``K_e = hidden + I / tp`` the inner dimensions of its two
GEMMs; ``c_att = f A / (tp F_bf16 e_att)`` with ``A`` the attention FLOPs per token pair;
``launches`` = GEMM, attention and MoE kernel launch times per layer plus the elementwise
kernels (``passes x act_bytes x (hidden + FFN width / tp)`` bytes per token and layer at the
weight-streaming bandwidth); ``comm`` = 2 all-reduces
per layer of ``M hidden act_bytes`` at ``latency + bytes x allreduce_seconds_per_byte(tp)`` (the ring
``2 (tp-1)/tp / (link eff)``, on a PCIe server past its peer-to-peer group at least ``2 (tp-1) / host``) plus one
pipeline send when ``pp > 1``. ``F`` is the dense rate at the compute dtype and ``B`` the HBM
bandwidth (catalog GPU). Attention runs at the BF16 rate (FlashAttention keeps BF16 math).

Hybrid models (:mod:`qmodel.recurrent`): ``A`` and ``KV`` cover the attention layers only; the
recurrent layers add ``c_rec T`` to prefill attention and ``max(c_rec, k_state) n`` to decode, with
``c_rec = f R / (tp F_bf16 e_att)`` for the update's ``R`` FLOPs per token and ``k_state = f 2 Z /
(tp B h_kv)`` for the ``Z`` state bytes each sequence reads and writes per step (no measured
kernel curve: the attention curve's peak and decode HBM efficiency stand in).
"""

from __future__ import annotations

import numpy as np

from qmodel.perf.efficiency import ResolvedCurves, allreduce_seconds_per_byte
from qmodel.perf.parallel import Parallelism
from qmodel.specs import GPUSpec, ModelSpec

__all__ = ["CurveTerms"]


def _body_k_sum(model: ModelSpec, tp: int, moe_layers: int) -> float:
    """Sum over the model's non-expert GEMMs of their inner dimension K on one GPU (the ``n_half`` term).

    Column-parallel GEMMs (QKV, gate/up) keep K = hidden; row-parallel ones (attention output,
    down) have K = width / tp. MLA's low-rank projections are counted as two hidden-K GEMMs.
    """
    h = float(model.hidden_size)
    attn = h + model.num_heads * model.head_dim / tp
    if model.mla is not None:
        attn = 2.0 * h + model.num_heads * model.mla.v_head_dim / tp
    rec = model.recurrent
    mixers = model.attention_layers * attn
    if rec is not None:  # in_proj (K = hidden), out_proj (K = H p / tp)
        mixers += rec.layers * (h + rec.num_heads * rec.head_dim / tp)
    dense = model.ffn_layer_count - moe_layers
    ffn = dense * (h + model.ffn_size / tp)
    if model.moe is not None and model.moe.shared_experts:
        ffn += moe_layers * (h + model.moe.shared_experts * model.moe.expert_ffn_size / tp)
    return mixers + ffn


class CurveTerms:
    """The folded coefficients of the curve-mode formulas and their scalar and array evaluation."""

    def __init__(self, model: ModelSpec, gpu: GPUSpec, layout: Parallelism, curves: ResolvedCurves, *,
                 flops_per_s: float, weight_byte: float, expert_byte: float, kv_byte: float, act_bytes: float,
                 base_params: float, expert_params_per_layer_expert: float, moe_layers: int,
                 prefill_per_request_s: float = 0.0) -> None:
        self.curves = curves
        g, a, m = curves.gemm, curves.attention, curves.moe
        f, tp, ls = layout.stage_fraction, layout.tp, layout.layers_per_stage
        bw = gpu.memory_bandwidth_bytes_per_s
        head = float(model.vocab_size * model.hidden_size)
        moe = model.moe
        routed_active = moe_layers * moe.active_experts * expert_params_per_layer_expert if moe else 0.0
        body = max(model.matmul_params_per_token - head - routed_active, 0.0)
        body_w = max(base_params - head, 0.0)
        ce = flops_per_s * g.peak_efficiency
        nh = g.n_half
        self.mh, self.md = g.m_half, g.m_decline
        fe = f * moe_layers
        self.c_body = f * 2.0 * (body / tp + nh * _body_k_sum(model, tp, moe_layers)) / ce
        self.w_body = f * body_w * weight_byte / (tp * bw * g.weight_hbm_efficiency)
        self.c_head = 2.0 * (head / tp + nh * model.hidden_size) / ce
        self.w_head = head * weight_byte / (tp * bw * g.weight_hbm_efficiency)
        self.c_att = f * model.attention_flops_per_token_pair() / (tp * gpu.flops_per_s("bf16")
                                                                   * a.prefill_peak_efficiency)
        self.s_half = a.prefill_s_half
        self.k_kv = f * model.kv_elements_per_token_per_layer() * kv_byte * model.attention_layers / (
            layout.kv_shards_tp * bw * a.decode_hbm_efficiency)
        # recurrent layers: the update at the attention kernels' peak, the state read + written per decode step
        self.c_rec = f * model.recurrent_flops_per_token() / (tp * gpu.flops_per_s("bf16") * a.prefill_peak_efficiency)
        self.k_state = f * 2.0 * model.state_bytes_per_sequence() / (tp * bw * a.decode_hbm_efficiency)
        self.moe_e = float(moe.num_experts) if moe else 0.0
        self.moe_k = float(moe.active_experts) if moe else 0.0
        self.moe_miss = 1.0 - self.moe_k / self.moe_e if moe else 1.0
        self.c_moe = (fe * 2.0 * (expert_params_per_layer_expert / tp + m.n_half * (model.hidden_size + moe.expert_ffn_size / tp))
                      / (ce * m.efficiency_factor) if moe else 0.0)
        self.w_moe = fe * expert_params_per_layer_expert * expert_byte / (tp * bw * m.weight_hbm_efficiency) if moe else 0.0
        dense_layers = ls - fe
        gemm_launches = 4.0 * dense_layers + 2.0 * fe + 1.0  # qkv, o, gate_up, down; MoE layers: qkv, o; LM head
        self.launch_pre = gemm_launches * g.launch_s + ls * a.prefill_launch_s + fe * m.launch_s
        self.launch_dec = gemm_launches * g.launch_s + ls * a.decode_launch_s + fe * m.launch_s
        ar = curves.allreduce
        link = gpu.intra_node_bandwidth_bytes_per_s * ar.efficiency
        per_tok = model.hidden_size * act_bytes / link
        self.comm_tok = self.comm_0 = 0.0
        if tp > 1:
            self.comm_tok += 2.0 * ls * model.hidden_size * act_bytes * float(allreduce_seconds_per_byte(
                tp, link_bytes_per_s=gpu.intra_node_bandwidth_bytes_per_s, efficiency=ar.efficiency,
                host_bytes_per_s=gpu.intra_node_host_bandwidth_bytes_per_s, p2p_gpus=gpu.intra_node_p2p_gpus))
            self.comm_0 += 2.0 * ls * ar.latency_s
        if layout.pp > 1:
            self.comm_tok += per_tok
            self.comm_0 += ar.latency_s
        o = curves.overhead
        self.ovh_pre = o.prefill_s + o.prefill_per_layer_s * ls
        self.ovh_dec = o.decode_s + o.decode_per_layer_s * ls
        ffn = (moe.active_experts + moe.shared_experts) * moe.expert_ffn_size if moe else model.ffn_size
        width = model.hidden_size + ffn / tp
        self.k_elem = f * model.layers * o.elementwise_passes * act_bytes * width / (bw * g.weight_hbm_efficiency)
        self.per_req = prefill_per_request_s
        sw = model.sliding_window_layers if (model.sliding_window_layers and model.sliding_window_tokens) else 0
        self.win = float(model.sliding_window_tokens or 0)
        self.win_full, self.win_part = (model.attention_layers - sw) / model.attention_layers, sw / model.attention_layers

    # ---- arrays --------------------------------------------------------------------------
    def _ramp(self, m: np.ndarray) -> np.ndarray:
        """``M / e(M) * e_peak``: the GEMM compute time's dependence on its token count M."""
        return (m + self.mh) * (1.0 + m / self.md)

    def _moe(self, m: np.ndarray) -> np.ndarray:
        if not self.moe_e:
            return np.zeros_like(m)
        e = self.moe_e * (1.0 - self.moe_miss ** np.maximum(m, 0.0))
        per = np.divide(self.moe_k * m, e, out=np.zeros_like(e), where=e > 0)  # tokens per touched expert
        return np.maximum(self.c_moe * e * self._ramp(per), self.w_moe * e)

    def _gemms(self, m: np.ndarray, head_m: np.ndarray) -> np.ndarray:
        return (np.maximum(self.c_body * self._ramp(m), self.w_body)
                + np.maximum(self.c_head * self._ramp(head_m), self.w_head) + self._moe(m))

    def prefill_breakdown(self, t: np.ndarray, q: np.ndarray, k: np.ndarray) -> dict[str, np.ndarray]:
        """Seconds per term: gemm (incl. LM head and experts), attention, launch, comm, overhead."""
        return {"gemm_s": self._gemms(t, k),
                "attention_s": self.c_att * (q / 2.0 + self.s_half * t / 2.0) + self.c_rec * t,
                "launch_s": self.launch_pre + self.k_elem * t, "comm_s": self.comm_tok * t + self.comm_0,
                "overhead_s": self.ovh_pre + self.per_req * k}

    def decode_breakdown(self, n: np.ndarray, sw: np.ndarray) -> dict[str, np.ndarray]:
        """Seconds per term; ``sw`` is the window-capped context sum."""
        return {"gemm_s": self._gemms(n, n),
                "attention_s": np.maximum(self.c_att, self.k_kv) * sw + max(self.c_rec, self.k_state) * n,
                "launch_s": self.launch_dec + self.k_elem * n, "comm_s": self.comm_tok * n + self.comm_0,
                "overhead_s": np.full_like(n, self.ovh_dec)}

    # ---- scalars: the same expressions on Python floats (the replay's hot path) ------------
    def _ramp_scalar(self, m: float) -> float:
        return (m + self.mh) * (1.0 + m / self.md)

    def _gemms_scalar(self, m: float, head_m: float) -> float:
        out = (max(self.c_body * self._ramp_scalar(m), self.w_body)
               + max(self.c_head * self._ramp_scalar(head_m), self.w_head))
        if self.moe_e:
            e = self.moe_e * (1.0 - self.moe_miss ** max(m, 0.0))
            per = self.moe_k * m / e if e > 0 else 0.0
            out += max(self.c_moe * e * self._ramp_scalar(per), self.w_moe * e)
        return out

    def prefill_scalar(self, t: float, q: float, k: float) -> float:
        return (self._gemms_scalar(t, k) + (self.c_att * (q / 2.0 + self.s_half * t / 2.0) + self.c_rec * t)
                + (self.launch_pre + self.k_elem * t)
                + (self.comm_tok * t + self.comm_0) + (self.ovh_pre + self.per_req * k))

    def decode_scalar(self, n: float, sw: float) -> float:
        return (self._gemms_scalar(n, n) + (max(self.c_att, self.k_kv) * sw + max(self.c_rec, self.k_state) * n)
                + (self.launch_dec + self.k_elem * n)
                + (self.comm_tok * n + self.comm_0) + self.ovh_dec)
