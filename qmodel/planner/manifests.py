"""Kubernetes manifests for a plan: an NVIDIA Dynamo ``DynamoGraphDeployment`` and a KServe
``LLMInferenceService`` (the llm-d stack inside KServe), each a plain dict ready for ``yaml.safe_dump``.

Both carry the same engine flags as the plan's ``vllm serve`` lines (:func:`qmodel.planner.export.role_flags`,
one definition): tensor parallelism, the prefill token budget, the decode batch cap and the
``--gpu-memory-utilization`` that gives the KV capacity qmodel assumed.

* Dynamo (``nvidia.com/v1alpha1``, the version its vLLM examples use): a ``Frontend`` service and one
  worker service per role (``componentType: worker``, ``subComponentType: prefill|decode``; an
  aggregated plan has one decode-type worker doing both), each ``replicas`` = the plan's instances and
  ``resources.limits.gpu`` = its TP, running ``python3 -m dynamo.vllm --model ID ...`` with
  ``--is-prefill-worker`` / ``--is-decode-worker`` for disaggregated roles; Dynamo wires the NIXL KV
  transfer itself, so no ``--kv-transfer-config`` is passed.
* KServe (``serving.kserve.io/v1alpha1``): ``spec`` is the decode (or aggregated) pool, ``spec.prefill``
  the prefill pool, each with ``replicas``, ``parallelism.tensor`` and a ``main`` container requesting
  ``nvidia.com/gpu`` = TP; the flags go in ``VLLM_ADDITIONAL_ARGS`` with a NixlConnector
  ``kv_both`` transfer config for disaggregated plans, as KServe's P/D samples do.

A heterogeneous plan (different GPU types per pool) pins each pool with a ``nodeSelector`` on the
``nvidia.com/gpu.product`` label that NVIDIA's GPU feature discovery sets, from
:data:`GPU_PRODUCT_LABELS`; a GPU without a known label gets no selector and a note says so.
"""

from __future__ import annotations

import re
from typing import Any

from qmodel.planner.plan_result import PlanRow
from qmodel.scenario import Scenario
from qmodel.topology import TOPOLOGIES

__all__ = ["GPU_PRODUCT_LABELS", "DYNAMO_IMAGE", "dynamo_graph_deployment", "llm_inference_service",
           "manifest_name"]

#: nvidia.com/gpu.product values published by NVIDIA GPU feature discovery (nvidia-smi's product name
#: with spaces as dashes), for the catalog GPUs a heterogeneous plan may mix
GPU_PRODUCT_LABELS: dict[str, str] = {
    "a100-40gb-sxm": "NVIDIA-A100-SXM4-40GB", "a100-80gb-sxm": "NVIDIA-A100-SXM4-80GB",
    "a100-80gb-pcie": "NVIDIA-A100-80GB-PCIe", "h100-sxm": "NVIDIA-H100-80GB-HBM3", "h100-pcie": "NVIDIA-H100-PCIe",
    "h200-sxm": "NVIDIA-H200", "b200": "NVIDIA-B200", "gh200": "NVIDIA-GH200-480GB", "l40s": "NVIDIA-L40S",
    "l4": "NVIDIA-L4", "a10g": "NVIDIA-A10G", "a30": "NVIDIA-A30",
}

#: the runtime image of Dynamo's vLLM examples; ${DYNAMO_VERSION} is left for the user to set
DYNAMO_IMAGE = "nvcr.io/nvidia/ai-dynamo/vllm-runtime:${DYNAMO_VERSION}"


def manifest_name(scenario: Scenario) -> str:
    """A DNS-1123 label from the scenario name (lowercase alphanumerics and '-', at most 63)."""
    name = re.sub(r"[^a-z0-9-]+", "-", scenario.name.lower()).strip("-")[:63].strip("-")
    return name or "qmodel-plan"


def _pools(row: PlanRow) -> list[tuple[str, Any]]:
    if TOPOLOGIES[row.topology].separate_prefill:
        assert row.prefill is not None
        return [("prefill", row.prefill), ("decode", row.decode)]
    return [("aggregated", row.decode)]


def _selector(row: PlanRow, gpu: str, notes: list[str]) -> dict[str, str]:
    gpus = {p.gpu for _, p in _pools(row)}
    if len(gpus) < 2:
        return {}
    label = GPU_PRODUCT_LABELS.get(gpu)
    if label is None:
        notes.append(f"no nvidia.com/gpu.product label known for {gpu}: add a nodeSelector for its nodes by hand")
        return {}
    return {"nvidia.com/gpu.product": label}


def dynamo_graph_deployment(scenario: Scenario, row: PlanRow, model_id: str,
                            flags: dict[str, list[str]]) -> tuple[dict[str, Any], list[str]]:
    """(the DynamoGraphDeployment, notes) for ``row``; ``flags`` maps each role to its engine flags."""
    notes: list[str] = []
    name = manifest_name(scenario)
    services: dict[str, Any] = {"Frontend": {"componentType": "frontend", "replicas": 1,
                                             "extraPodSpec": {"mainContainer": {"image": DYNAMO_IMAGE}}}}
    for role, pool in _pools(row):
        args = ["--model", model_id, *flags[role]]
        if TOPOLOGIES[row.topology].separate_prefill:
            args.append(f"--is-{role}-worker")
        pod: dict[str, Any] = {"mainContainer": {"image": DYNAMO_IMAGE, "workingDir": "/workspace/examples/backends/vllm",
                                                 "command": ["python3", "-m", "dynamo.vllm"], "args": args}}
        sel = _selector(row, pool.gpu, notes)
        if sel:
            pod["nodeSelector"] = sel
        key = {"prefill": "VllmPrefillWorker", "decode": "VllmDecodeWorker", "aggregated": "VllmDecodeWorker"}[role]
        services[key] = {"envFromSecret": "hf-token-secret", "componentType": "worker",
                         "subComponentType": "prefill" if role == "prefill" else "decode",
                         "replicas": pool.instances, "resources": {"limits": {"gpu": str(pool.tp)}},
                         "extraPodSpec": pod}
    doc = {"apiVersion": "nvidia.com/v1alpha1", "kind": "DynamoGraphDeployment",
           "metadata": {"name": name}, "spec": {"backendFramework": "vllm", "services": services}}
    return doc, notes


def _container(pool: Any, extra_args: list[str], disaggregated: bool) -> dict[str, Any]:
    env: list[dict[str, Any]] = [{"name": "VLLM_ADDITIONAL_ARGS", "value": " ".join(extra_args)}]
    limits: dict[str, Any] = {"nvidia.com/gpu": str(pool.tp)}
    if disaggregated:
        env.append({"name": "VLLM_NIXL_SIDE_CHANNEL_HOST", "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}})
    return {"name": "main", "env": env, "resources": {"limits": limits, "requests": dict(limits)}}


def llm_inference_service(scenario: Scenario, row: PlanRow, model_id: str,
                          flags: dict[str, list[str]]) -> tuple[dict[str, Any], list[str]]:
    """(the KServe LLMInferenceService, notes) for ``row``."""
    notes: list[str] = []
    disagg = TOPOLOGIES[row.topology].has_link  # KV moves between the pools
    kv = ["--kv_transfer_config", "'{\"kv_connector\":\"NixlConnector\",\"kv_role\":\"kv_both\"}'"] if disagg else []

    def pool_spec(role: str, pool: Any) -> dict[str, Any]:
        # KServe sets --tensor-parallel-size from parallelism.tensor; the rest of the flags pass through
        rest = _without(flags[role], "--tensor-parallel-size")
        template: dict[str, Any] = {"containers": [_container(pool, rest + kv, disagg)]}
        sel = _selector(row, pool.gpu, notes)
        if sel:
            template["nodeSelector"] = sel
        return {"replicas": pool.instances, "parallelism": {"tensor": pool.tp}, "template": template}

    pools = dict(_pools(row))
    main_role = "decode" if disagg else "aggregated"
    spec: dict[str, Any] = {"model": {"uri": f"hf://{model_id}", "name": model_id},
                            **pool_spec(main_role, pools[main_role]),
                            "router": {"route": {}, "gateway": {}, "scheduler": {}}}
    if disagg:
        spec["prefill"] = pool_spec("prefill", pools["prefill"])
    doc = {"apiVersion": "serving.kserve.io/v1alpha1", "kind": "LLMInferenceService",
           "metadata": {"name": manifest_name(scenario)}, "spec": spec}
    return doc, notes


def _without(flags: list[str], name: str) -> list[str]:
    """``flags`` less the option ``name`` and its value."""
    out, skip = [], False
    for f in flags:
        if skip:
            skip = False
            continue
        if f == name:
            skip = True
            continue
        out.append(f)
    return out
