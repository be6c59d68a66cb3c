"""``--explain``: the closed forms behind an answer, with this scenario's numbers substituted.

The symbolic forms live once in :mod:`qmodel.symbolic` (sympy, lambdified); this module only picks
the ones that apply to the solved scenario and feeds them the scenario's parameters. The closed
forms are the *first-order* story (means, stability limits, bandwidth); the reported percentiles
come from the full station solvers, which the text says beside each block.
"""

from __future__ import annotations

from qmodel.solver import Solver
from qmodel.units import dtype_bits

__all__ = ["explain_scenario"]


def explain_scenario(solver: Solver, rate: float) -> list[str]:
    from qmodel.symbolic import explain

    r = solver.resolved
    sc = solver.scenario
    m = r.pools[solver.topology.pool_roles[0]].model  # the KV dtype of the pool whose KV is sized and sent
    blocks: list[str] = []
    c = solver.compose(rate)
    ell = m.attention_layers  # a hybrid model's recurrent layers hold a constant state, not per-token KV
    bits = 8.0 * m.kv_bytes_per_token() / (ell * max(m.kv_elements_per_token_per_layer(), 1))
    if m.mla is None:
        blocks.append(explain("kv_bytes_per_token", layers=ell, kv_heads=m.num_kv_heads, head_dim=m.head_dim, bits=bits))
    else:
        blocks.append(f"KV-cache bytes per token (MLA: one latent of rank {m.mla.kv_lora_rank} plus a "
                      f"{m.mla.qk_rope_head_dim}-dim RoPE key per layer, no K/V factor 2)\n"
                      f"  kv = ell (r + d_rope) bits/8 = {ell} x ({m.mla.kv_lora_rank} + {m.mla.qk_rope_head_dim}) x "
                      f"{bits:g}/8 = {m.kv_bytes_per_token():.6g} B")
    if m.recurrent is not None:
        rc = m.recurrent
        blocks.append(f"Recurrent state per sequence ({rc.layers} {rc.kind} layers, constant in the context)\n"
                      f"  Z = L_rec (H p n b_state + (k-1)(H p + 2 G n) b) = {rc.layers} x ({rc.num_heads} x "
                      f"{rc.head_dim} x {rc.state_dim} x {dtype_bits(rc.state_dtype):g}/8 + {rc.conv_kernel - 1} x "
                      f"{rc.conv_dim} x {dtype_bits(m.dtype):g}/8) = {m.state_bytes_per_sequence():.6g} B")
    topo = solver.topology
    blocks += topo.explain_blocks(solver, rate, m)
    dec = c.stations[-1].extra  # the station that runs decode: the last role (decode, or the single pool)
    a, beta = dec.get("a_s"), dec.get("beta_s")
    if a is not None and beta is not None and beta > 0:
        el = float(r.lengths.output.mean())
        per_inst = rate / topo.decode_config(sc.deployment).instances
        blocks.append(explain("decode_max_rate", beta=beta, el=el)
                      + "\n  (per instance, uncapped; KV capacity can lower it: see the decode station's limit)")
        if per_inst * el * beta < 1:
            blocks.append(explain("decode_tpot", a=a, beta=beta, lam=per_inst, el=el)
                          + "\n  (GPS insensitivity: exact mean for affine step time without a slot cap)")
    return blocks
