"""The serving configuration for a plan: ``vllm serve`` commands and Kubernetes manifests (Dynamo, KServe).

Disaggregated plans get one ``vllm serve`` command per role with ``--tensor-parallel-size`` and a
``--kv-transfer-config`` JSON naming the KV connector and the instance's role (``kv_producer`` on
prefill, ``kv_consumer`` on decode). NixlConnector (RDMA/UCX) is chosen for RDMA fabrics
(InfiniBand, RoCE, NVLink), P2pNcclConnector otherwise. Colocated plans run plain continuous
batching with chunked prefill disabled; chunked plans enable it with the chunk as
``--max-num-batched-tokens``. Every instance of a role runs the same command on its own GPUs
(``CUDA_VISIBLE_DEVICES``) and port; a router in front spreads requests.

The scenario's request-shape fields (docs/methods.md, "KV reservation, context window, TPOT and
TBT"): ``deployment.max_context_tokens`` is vLLM's ``--max-model-len`` on every role (a
disaggregated pair must agree on the window), emitted only when the scenario sets it (else vLLM
reads the model's own window, as qmodel does). The others have no ``vllm serve`` flag and become a
note each (:func:`unmapped_notes`): ``kv_reservation: max_tokens`` (vLLM allocates KV blocks on
demand, which is ``actual``), ``workload.max_output_tokens`` (the request's ``max_tokens``, sent by
the client), ``workload.context_overflow`` (vLLM refuses a request beyond the window, which is
``reject``; ``truncate`` is the request's ``truncate_prompt_tokens``) and ``slo.tpot_definition``
(a measurement, not an engine setting).
"""

from __future__ import annotations

import json
import shlex
from typing import Any

from qmodel.planner.plan_result import PlanRow
from qmodel.scenario import PoolConfig, Scenario
from qmodel.topology import Topology, topology_named

__all__ = ["serving_config", "role_flags", "connector_for", "gpu_memory_utilization", "unmapped_notes"]

_RDMA_KINDS = {"infiniband", "roce", "nvlink"}


def connector_for(link: str | None) -> str:
    if link is None:
        return "NixlConnector"
    from qmodel.registry import load_catalog

    kind = load_catalog().link(link).kind
    return "NixlConnector" if kind in _RDMA_KINDS else "P2pNcclConnector"


def _model_id(scenario: Scenario) -> str:
    from qmodel.registry import load_catalog

    m = load_catalog().model(scenario.model)
    return m.hf_id or f"<hf-repo-id-of-{m.name}>"


def _shape(scenario: Scenario) -> Topology:
    return topology_named(scenario.deployment.topology)


def _kept(scenario: Scenario) -> dict[str, Any]:
    """The scenario's decode batch cap, KV memory fraction and prefill token budget (kept by every plan)."""
    dep, topo = scenario.deployment, _shape(scenario)
    dec = topo.decode_config(dep)
    return {"max_num_seqs": dec.max_batch, "mem": dec.kv_memory_fraction, "prefill_tokens": topo.prefill_token_budget(dep)}


CUDA_CONTEXT_BYTES = 2**30  # outside vLLM's --gpu-memory-utilization budget (CUDA context, NCCL)


def gpu_memory_utilization(scenario: Scenario, gpu: str, tp: int, kv_fraction: float) -> float | None:
    """vLLM's --gpu-memory-utilization that gives the KV capacity qmodel assumed.

    qmodel gives KV ``kv_fraction`` of what is left after weights W and the reserve R
    (:mod:`qmodel.perf.memory`); vLLM budgets weights, activations and KV inside util x M and
    leaves the CUDA context outside, so util = (W + R - context + KV) / M.
    """
    from qmodel.build import pool_compute_dtype, pool_model, pool_reserve_bytes
    from qmodel.perf.memory import memory_budget, weight_dtype_for
    from qmodel.registry import load_catalog

    from qmodel.errors import QmodelError

    cat = load_catalog()
    cfg = _decode_cfg(scenario)
    model, spec = pool_model(cat.model(scenario.model), cfg), cat.gpu(gpu)
    try:
        b = memory_budget(model, spec, tp, 1, kv_fraction, pool_reserve_bytes(cfg),
                          dtype=weight_dtype_for(model, pool_compute_dtype(scenario.perf, cfg)))
    except QmodelError:  # the model does not fit: leave the flag to vLLM's default
        return None
    util = (b.weights_per_gpu_bytes + b.reserve_bytes - CUDA_CONTEXT_BYTES + b.kv_bytes_per_gpu) / b.gpu_memory_bytes
    return round(min(0.98, max(0.05, util)), 2)


def _decode_cfg(scenario: Scenario) -> PoolConfig:
    return _shape(scenario).decode_config(scenario.deployment)


def _kv_flag(cfg: PoolConfig, scenario: Scenario | None = None) -> list[str]:
    """vLLM's --kv-cache-dtype for a pool that sets ``kv_dtype`` (vLLM's names: fp8, fp8_e4m3, fp8_e5m2), and
    --quantization fp8 for a pool whose ``compute_dtype`` is fp8 on a wider checkpoint (vLLM's dynamic FP8)."""
    flags = [] if cfg.kv_dtype is None else ["--kv-cache-dtype", cfg.kv_dtype]
    if scenario is not None and cfg.compute_dtype in ("fp8", "fp8_e4m3"):
        from qmodel.registry import load_catalog
        from qmodel.units import dtype_bits

        if dtype_bits(load_catalog().model(scenario.model).dtype) > 8:
            flags += ["--quantization", "fp8"]
    return flags


def _mem_flag(scenario: Scenario, gpu: str, tp: int, kv_fraction: float) -> list[str]:
    util = gpu_memory_utilization(scenario, gpu, tp, kv_fraction)
    return [] if util is None else ["--gpu-memory-utilization", f"{util:.2f}"]


def _window_flag(scenario: Scenario) -> list[str]:
    """vLLM's --max-model-len for a scenario that sets ``deployment.max_context_tokens`` (else none)."""
    n = scenario.deployment.max_context_tokens
    return [] if n is None else ["--max-model-len", str(n)]


def unmapped_notes(scenario: Scenario) -> list[str]:
    """One note per request-shape field the scenario sets that no ``vllm serve`` flag carries."""
    dec, w = _decode_cfg(scenario), scenario.workload
    notes = []
    if dec.kv_reservation == "max_tokens":
        notes.append("kv_reservation max_tokens has no vLLM flag: vLLM allocates KV blocks on demand (kv_reservation "
                     "actual), so it holds more requests than this plan assumed")
    if w.max_output_tokens is not None:
        notes.append(f"max_output_tokens {w.max_output_tokens} is not a server flag: clients send it as each "
                     "request's max_tokens")
    if w.context_overflow == "truncate":
        notes.append("context_overflow truncate is not a server flag (vLLM refuses a request beyond --max-model-len): "
                     "clients truncate, or send truncate_prompt_tokens with each request")
    if scenario.slo.tpot_definition is not None:
        notes.append(f"tpot_definition {scenario.slo.tpot_definition} is how the SLO is measured, not an engine "
                     "setting (vLLM's bench reports TPOT per interval)")
    return notes


def role_flags(scenario: Scenario, row: PlanRow) -> dict[str, list[str]]:
    """The engine flags of each role of ``row`` ('prefill'/'decode', or 'aggregated'), shared by the
    ``vllm serve`` lines and the Kubernetes manifests: TP, the prefill token budget, the decode batch
    cap, the memory fraction that gives qmodel's KV capacity and, where the scenario sets one, the
    context window (--max-model-len, last). No port, no KV connector."""
    k = _kept(scenario)
    row_shape = topology_named(row.topology)
    if row_shape.separate_prefill:
        assert row.prefill is not None
        pre_cfg = _shape(scenario).prefill_config(scenario.deployment)
        return {"prefill": ["--tensor-parallel-size", str(row.prefill.tp),
                            "--max-num-batched-tokens", str(k["prefill_tokens"])] + _kv_flag(pre_cfg, scenario)
                           + _window_flag(scenario),
                "decode": ["--tensor-parallel-size", str(row.decode.tp), "--max-num-seqs", str(k["max_num_seqs"])]
                          + _mem_flag(scenario, row.decode.gpu, row.decode.tp, k["mem"])
                          + _kv_flag(_decode_cfg(scenario), scenario) + _window_flag(scenario)}
    flags = ["--tensor-parallel-size", str(row.decode.tp), "--max-num-seqs", str(k["max_num_seqs"])]
    flags += _mem_flag(scenario, row.decode.gpu, row.decode.tp, k["mem"]) + _kv_flag(_decode_cfg(scenario), scenario)
    if row_shape.chunked_prefill:
        flags += ["--enable-chunked-prefill", "--max-num-batched-tokens", str(row.chunk_tokens)]
    else:
        flags += ["--no-enable-chunked-prefill", "--max-num-batched-tokens", str(k["prefill_tokens"])]
    return {"aggregated": flags + _window_flag(scenario)}


def _cmd(model: str, flags: list[str], port: int, extra: list[str]) -> str:
    tp = flags[:2]  # --tensor-parallel-size N leads, then the port, then the rest (the order users read)
    return " ".join(["vllm", "serve", shlex.quote(model), *tp, "--port", str(port), *flags[2:], *extra])


def serving_config(scenario: Scenario, row: PlanRow) -> dict[str, Any]:
    """{'vllm': [{role, instances, gpus_per_instance, gpu, command}], 'dynamo': a DynamoGraphDeployment,
    'kserve': an LLMInferenceService, 'notes': [...]} for ``row``."""
    from qmodel.planner.manifests import dynamo_graph_deployment, llm_inference_service

    model = _model_id(scenario)
    flags = role_flags(scenario, row)
    out: dict[str, Any] = {"model": model, "vllm": [], "dynamo": {}, "kserve": {}, "notes": []}
    if topology_named(row.topology).has_link:
        assert row.prefill is not None
        conn = connector_for(row.link)

        def ktc(role: str) -> str:
            cfg: dict[str, Any] = {"kv_connector": conn, "kv_role": role}
            if conn == "P2pNcclConnector":
                cfg["kv_buffer_size"] = "1e9"
                cfg["kv_port"] = "21001" if role == "kv_producer" else "22001"
            return shlex.quote(json.dumps(cfg, separators=(",", ":")))

        out["vllm"] = [
            {"role": "prefill", "instances": row.prefill.instances, "gpus_per_instance": row.prefill.tp, "gpu": row.prefill.gpu,
             "command": _cmd(model, flags["prefill"], 8100, ["--kv-transfer-config", ktc("kv_producer")])},
            {"role": "decode", "instances": row.decode.instances, "gpus_per_instance": row.decode.tp, "gpu": row.decode.gpu,
             "command": _cmd(model, flags["decode"], 8200, ["--kv-transfer-config", ktc("kv_consumer")])},
        ]
        out["notes"].append(f"KV moves over {row.link} ({row.transfer_mode}); run a P/D proxy or router in front "
                            "(e.g. vLLM's disaggregated proxy example, or Dynamo's frontend)")
    else:
        out["vllm"] = [{"role": "aggregated", "instances": row.decode.instances, "gpus_per_instance": row.decode.tp,
                        "gpu": row.decode.gpu, "command": _cmd(model, flags["aggregated"], 8000, [])}]
        out["notes"].append("run one copy per instance on its own GPUs behind a load balancer")
    out["dynamo"], notes_d = dynamo_graph_deployment(scenario, row, model, flags)
    out["kserve"], notes_k = llm_inference_service(scenario, row, model, flags)
    out["notes"] += sorted(set(notes_d + notes_k)) + unmapped_notes(scenario)
    if model.startswith("<"):
        out["notes"].append(f"the catalog entry {scenario.model!r} has no hf_id: replace {model} by the model's "
                            "Hugging Face repo id (or re-import it with `qmodel catalog import-hf --hf-id ID`)")
    return out
