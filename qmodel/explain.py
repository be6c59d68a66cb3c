"""``--explain``: the closed forms behind an answer, with this scenario's numbers substituted.

The symbolic forms live once in :mod:`qmodel.symbolic` (sympy, lambdified); this module only picks
the ones that apply to the solved scenario and feeds them the scenario's parameters. The closed
forms are the *first-order* story (means, stability limits, bandwidth); the reported percentiles
come from the full station solvers, which the text says beside each block.
"""

from __future__ import annotations

from qmodel.engine import Solver

__all__ = ["explain_scenario"]


def explain_scenario(solver: Solver, rate: float) -> list[str]:
    from qmodel.symbolic import explain

    r = solver.resolved
    sc = solver.scenario
    m = (r.pools.get("prefill") or r.pools["pool"]).model  # the KV dtype of the pool whose KV is sized and sent
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
    if sc.deployment.topology == "disaggregated":
        dep = sc.deployment
        pre = r.pools["prefill"].service
        d = float(pre.prefill_one_s(r.uncached_prompt).mean())
        lam_i = rate / dep.prefill.instances
        if lam_i * d < 1:
            blocks.append(explain("distserve_ttft", lam=lam_i, d=d)
                          + "\n  (one-at-a-time M/D/1 per prefill instance at the mean prompt; the reported TTFT "
                            "uses the exact batched M/G^[1,b]/1 chain, which batching makes lower near the knee)"
                          + (f"\n  (pp = {dep.prefill.pp}: D is one pipeline stage, the engine's service time; the prompt "
                             f"leaves after {dep.prefill.pp} stages, so its TTFT adds (pp - 1) D = "
                             f"{(dep.prefill.pp - 1) * d:.6g} s: docs/methods.md, Pipeline parallelism)"
                             if dep.prefill.pp > 1 else ""))
        blocks.append(explain("link_bandwidth", kv_bytes_per_token=r.kv_bytes_per_token,
                              mean_prompt=float(r.lengths.prompt.mean()), lam=rate)
                      + f"\n  available: {r.link_bandwidth_bytes_per_s * dep.prefill.instances:.6g} B/s aggregate = "
                        f"{dep.prefill.instances} path(s) of {r.link.name} x {r.link_bandwidth_bytes_per_s:.6g} B/s "
                        f"effective ({r.link.bandwidth_bytes_per_s:.6g} nominal x {r.link.efficiency:g})")
        if dep.transfer_mode == "layerwise":
            x = r.kv_bytes_per_token * float(r.lengths.prompt.mean())  # the whole prompt's KV moves
            # the transfer hides behind the prefill until the batch leaves the instance (pp stages)
            blocks.append(explain("layerwise_exposed", x=x, c=r.link_bandwidth_bytes_per_s, layers=m.layers,
                                  tp=float(pre.prefill_exit_s(d))))
        dec = c.stations[2].extra
    else:
        dec = c.stations[0].extra
    a, beta = dec.get("a_s"), dec.get("beta_s")
    if a is not None and beta is not None and beta > 0:
        el = float(r.lengths.output.mean())
        per_inst = rate / (sc.deployment.decode.instances if sc.deployment.topology == "disaggregated"
                           else sc.deployment.pool.instances)
        blocks.append(explain("decode_max_rate", beta=beta, el=el)
                      + "\n  (per instance, uncapped; KV capacity can lower it: see the decode station's limit)")
        if per_inst * el * beta < 1:
            blocks.append(explain("decode_tpot", a=a, beta=beta, lam=per_inst, el=el)
                          + "\n  (GPS insensitivity: exact mean for affine step time without a slot cap)")
    return blocks
