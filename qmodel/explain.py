"""``--explain``: the closed forms behind an answer, with this scenario's numbers substituted.

The symbolic forms live once in :mod:`qmodel.symbolic` (sympy, lambdified); this module only picks
the ones that apply to the solved scenario and feeds them the scenario's parameters. The closed
forms are the *first-order* story (means, stability limits, bandwidth); the reported percentiles
come from the full station solvers, which the text says beside each block.
"""

from __future__ import annotations

from qmodel.solver import Solver

__all__ = ["explain_scenario"]


def explain_scenario(solver: Solver, rate: float) -> list[str]:
    from qmodel.symbolic import explain

    r = solver.resolved
    sc = solver.scenario
    m = r.pools[solver.topology.pool_roles[0]].model  # the KV dtype of the pool whose KV is sized and sent
    blocks: list[str] = []
    c = solver.compose(rate)
    bits = 8.0 * m.kv_bytes_per_token() / (m.layers * max(m.kv_elements_per_token_per_layer(), 1))
    if m.mla is None:
        blocks.append(explain("kv_bytes_per_token", layers=m.layers, kv_heads=m.num_kv_heads, head_dim=m.head_dim, bits=bits))
    else:
        blocks.append(f"KV-cache bytes per token (MLA: one latent of rank {m.mla.kv_lora_rank} plus a "
                      f"{m.mla.qk_rope_head_dim}-dim RoPE key per layer, no K/V factor 2)\n"
                      f"  kv = ell (r + d_rope) bits/8 = {m.layers} x ({m.mla.kv_lora_rank} + {m.mla.qk_rope_head_dim}) x "
                      f"{bits:g}/8 = {m.kv_bytes_per_token():.6g} B")
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
