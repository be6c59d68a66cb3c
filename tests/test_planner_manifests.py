"""The plan's Kubernetes manifests carry what Dynamo's and KServe's controllers require, with the same
engine flags as the ``vllm serve`` lines. A structural check of the fields those CRDs define
(Dynamo nvidia.com/v1alpha1 DynamoGraphDeployment as in its examples/backends/vllm/deploy/*.yaml;
KServe serving.kserve.io/v1alpha1 LLMInferenceService as in docs/samples/llmisvc), not a full CRD
validation: the CRDs are megabytes of OpenAPI and are not bundled."""

from __future__ import annotations

import re
import shlex
from pathlib import Path

import pytest
import yaml

from qmodel.cli.main import main
from qmodel.planner.export import role_flags, serving_config
from qmodel.planner.manifests import GPU_PRODUCT_LABELS, manifest_name
from qmodel.planner.plan_result import PlanRow
from qmodel.scenario import load_scenario

ROOT = Path(__file__).resolve().parent.parent
DNS1123 = re.compile(r"^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$")


def _row(topology: str, pre_gpu: str = "h100-sxm", dec_gpu: str = "h100-sxm", **kw) -> PlanRow:
    pool = lambda gpu, tp, n: {"gpu": gpu, "tp": tp, "instances": n, "gpus": tp * n}  # noqa: E731
    base = dict(rank=1, topology=topology, label="x", decode=pool(dec_gpu, 4, 1), gpus=16, power_w=1.0,
                cost_per_hour_usd=None, goodput_rps=1.0, goodput_per_gpu=0.1, rate_per_s=1.0, attainment=0.9,
                ttft_p90_s=0.1, tpot_p90_s=0.01, max_stable_rate_per_s=2.0, binding="", validity="",
                prefill=pool(pre_gpu, 2, 3) if topology == "disaggregated" else None,
                link="ib-ndr-400" if topology == "disaggregated" else None,
                transfer_mode="layerwise" if topology == "disaggregated" else None,
                chunk_tokens=1024 if topology == "chunked" else None)
    return PlanRow.model_validate({**base, **kw})


@pytest.fixture(scope="module")
def scenario():
    return load_scenario(ROOT / "examples" / "llama3-70b-disagg-h100.yaml")


def _check_dynamo(doc: dict, row: PlanRow) -> None:
    assert doc["apiVersion"] == "nvidia.com/v1alpha1" and doc["kind"] == "DynamoGraphDeployment"
    assert DNS1123.match(doc["metadata"]["name"])
    services = doc["spec"]["services"]
    assert doc["spec"]["backendFramework"] == "vllm"
    assert services["Frontend"]["componentType"] == "frontend"
    workers = {k: v for k, v in services.items() if k != "Frontend"}
    pools = {"prefill": row.prefill, "decode": row.decode} if row.topology == "disaggregated" else {"decode": row.decode}
    assert {v["subComponentType"] for v in workers.values()} == set(pools)
    for svc in workers.values():
        pool = pools[svc["subComponentType"]]
        assert svc["componentType"] == "worker" and isinstance(svc["replicas"], int)
        assert svc["replicas"] == pool.instances and svc["resources"]["limits"]["gpu"] == str(pool.tp)
        c = svc["extraPodSpec"]["mainContainer"]
        assert c["command"] == ["python3", "-m", "dynamo.vllm"] and all(isinstance(a, str) for a in c["args"])
        args = c["args"]
        assert args[args.index("--model") + 1] and args[args.index("--tensor-parallel-size") + 1] == str(pool.tp)
        if row.topology == "disaggregated":
            assert f"--is-{svc['subComponentType']}-worker" in args
        assert "--kv-transfer-config" not in args  # Dynamo wires NIXL itself


def _check_kserve(doc: dict, row: PlanRow) -> None:
    assert doc["apiVersion"] == "serving.kserve.io/v1alpha1" and doc["kind"] == "LLMInferenceService"
    assert DNS1123.match(doc["metadata"]["name"])
    spec = doc["spec"]
    assert spec["model"]["uri"].startswith("hf://") and set(spec["router"]) == {"route", "gateway", "scheduler"}
    pools = [(spec, row.decode)] + ([(spec["prefill"], row.prefill)] if row.topology == "disaggregated" else [])
    assert ("prefill" in spec) == (row.topology == "disaggregated")
    for s, pool in pools:
        assert s["replicas"] == pool.instances and s["parallelism"] == {"tensor": pool.tp}
        (c,) = s["template"]["containers"]
        assert c["name"] == "main" and c["resources"]["limits"]["nvidia.com/gpu"] == str(pool.tp)
        env = {e["name"]: e for e in c["env"]}
        extra = shlex.split(env["VLLM_ADDITIONAL_ARGS"]["value"])
        assert "--tensor-parallel-size" not in extra  # set by KServe from parallelism.tensor
        if row.topology == "disaggregated":
            assert "NixlConnector" in extra[extra.index("--kv_transfer_config") + 1]


@pytest.mark.parametrize("topology", ["disaggregated", "colocated", "chunked"])
def test_manifests_have_the_required_fields(scenario, topology):
    row = _row(topology)
    cfg = serving_config(scenario, row)
    _check_dynamo(cfg["dynamo"], row)
    _check_kserve(cfg["kserve"], row)
    # one definition of the engine flags: every vllm serve line carries its role's flags verbatim
    for item, (role, flags) in zip(cfg["vllm"], role_flags(scenario, row).items()):
        assert " ".join(flags[2:]) in item["command"] and item["role"] == role
    for doc in (cfg["dynamo"], cfg["kserve"]):
        assert yaml.safe_load(yaml.safe_dump(doc, sort_keys=False)) == doc


def test_chunked_flags_reach_the_manifests(scenario):
    cfg = serving_config(scenario, _row("chunked"))
    args = cfg["dynamo"]["spec"]["services"]["VllmDecodeWorker"]["extraPodSpec"]["mainContainer"]["args"]
    assert "--enable-chunked-prefill" in args and args[args.index("--max-num-batched-tokens") + 1] == "1024"


def test_heterogeneous_pools_are_pinned_to_their_gpus(scenario):
    row = _row("disaggregated", pre_gpu="h200-sxm", dec_gpu="a100-80gb-sxm")
    cfg = serving_config(scenario, row)
    svc = cfg["dynamo"]["spec"]["services"]
    assert svc["VllmPrefillWorker"]["extraPodSpec"]["nodeSelector"] == {"nvidia.com/gpu.product": GPU_PRODUCT_LABELS["h200-sxm"]}
    assert svc["VllmDecodeWorker"]["extraPodSpec"]["nodeSelector"] == {"nvidia.com/gpu.product": GPU_PRODUCT_LABELS["a100-80gb-sxm"]}
    ks = cfg["kserve"]["spec"]
    assert ks["prefill"]["template"]["nodeSelector"]["nvidia.com/gpu.product"] == "NVIDIA-H200"
    assert ks["template"]["nodeSelector"]["nvidia.com/gpu.product"] == "NVIDIA-A100-SXM4-80GB"
    # one GPU type: no selector (the scheduler may use any node with the GPUs)
    homo = serving_config(scenario, _row("disaggregated"))["dynamo"]["spec"]["services"]
    assert "nodeSelector" not in homo["VllmPrefillWorker"]["extraPodSpec"]
    # an unknown label is a note, not a guess
    cfg = serving_config(scenario, _row("disaggregated", pre_gpu="mi300x", dec_gpu="h100-sxm"))
    assert any("mi300x" in n for n in cfg["notes"])


EXPRESSIVE = ROOT / "examples" / "llama3-70b-disagg-h100.yaml"


def test_context_window_is_max_model_len_on_every_role():
    """deployment.max_context_tokens -> --max-model-len, last, on each role (a P/D pair must agree on
    the window) and so in the manifests; left out while the scenario does not set it (vLLM then reads
    the model's window, as qmodel does)."""
    sc = load_scenario(EXPRESSIVE, ["deployment.max_context_tokens=8192"])
    assert role_flags(sc, _row("disaggregated")) == {
        "prefill": ["--tensor-parallel-size", "2", "--max-num-batched-tokens", "8192", "--max-model-len", "8192"],
        "decode": ["--tensor-parallel-size", "4", "--max-num-seqs", "256", "--gpu-memory-utilization", "0.94",
                   "--max-model-len", "8192"]}
    assert role_flags(sc, _row("chunked"))["aggregated"][-5:] == [
        "--enable-chunked-prefill", "--max-num-batched-tokens", "1024", "--max-model-len", "8192"]
    cfg = serving_config(sc, _row("disaggregated"))
    assert cfg["vllm"][1]["command"] == (
        "vllm serve meta-llama/Llama-3.1-70B --tensor-parallel-size 4 --port 8200 --max-num-seqs 256 "
        "--gpu-memory-utilization 0.94 --max-model-len 8192 "
        "--kv-transfer-config '{\"kv_connector\":\"NixlConnector\",\"kv_role\":\"kv_consumer\"}'")
    args = cfg["dynamo"]["spec"]["services"]["VllmPrefillWorker"]["extraPodSpec"]["mainContainer"]["args"]
    assert args[args.index("--max-model-len") + 1] == "8192"
    plain = load_scenario(EXPRESSIVE)
    for row in (_row("disaggregated"), _row("colocated"), _row("chunked")):
        assert all("--max-model-len" not in f for f in role_flags(plain, row).values())


def test_fields_without_a_vllm_flag_are_notes():
    """kv_reservation max_tokens, max_output_tokens, context_overflow truncate and tpot_definition have
    no vllm serve flag: each set one is one note, and no flag; reject (vLLM's own behaviour) needs none."""
    sets = ["deployment.decode.kv_reservation=max_tokens", "workload.max_output_tokens=512",
            "workload.context_overflow=truncate", "slo.tpot_definition=per_token"]
    sc = load_scenario(EXPRESSIVE, sets)
    assert role_flags(sc, _row("disaggregated")) == role_flags(load_scenario(EXPRESSIVE), _row("disaggregated"))
    assert serving_config(sc, _row("disaggregated"))["notes"][1:] == [
        "kv_reservation max_tokens has no vLLM flag: vLLM allocates KV blocks on demand (kv_reservation actual), "
        "so it holds more requests than this plan assumed",
        "max_output_tokens 512 is not a server flag: clients send it as each request's max_tokens",
        "context_overflow truncate is not a server flag (vLLM refuses a request beyond --max-model-len): clients "
        "truncate, or send truncate_prompt_tokens with each request",
        "tpot_definition per_token is how the SLO is measured, not an engine setting (vLLM's bench reports TPOT "
        "per interval)"]
    quiet = load_scenario(EXPRESSIVE, ["deployment.decode.kv_reservation=actual", "workload.context_overflow=reject"])
    assert serving_config(quiet, _row("disaggregated"))["notes"] == \
        serving_config(load_scenario(EXPRESSIVE), _row("disaggregated"))["notes"]


def test_manifest_name_is_a_dns_label(scenario):
    assert manifest_name(scenario.model_copy(update={"name": "My Plan_v2 (70B)"})) == "my-plan-v2-70b"
    assert manifest_name(scenario.model_copy(update={"name": "___"})) == "qmodel-plan"
    assert len(manifest_name(scenario.model_copy(update={"name": "a" * 100}))) == 63


def test_plan_writes_the_files(tmp_path, capsys):
    out = tmp_path / "deploy"
    assert main(["plan", str(ROOT / "examples" / "opt13b-disagg-a100.yaml"), "--top", "1", "--manifests", str(out)]) == 0
    text = capsys.readouterr().out
    files = sorted(p.name for p in out.iterdir())
    assert files == ["dynamo.yaml", "kserve.yaml", "vllm-serve.sh"]
    assert str(out) in text
    dgd = yaml.safe_load((out / "dynamo.yaml").read_text())
    assert dgd["kind"] == "DynamoGraphDeployment"
    sh = (out / "vllm-serve.sh").read_text()
    assert sh.startswith("#!/usr/bin/env bash") and sh.rstrip().endswith("wait")
    launches = [ln for ln in sh.splitlines() if ln.startswith("CUDA_VISIBLE_DEVICES=")]
    assert launches and all(ln.endswith(" &") and "vllm serve facebook/opt-13b" in ln for ln in launches)
    ports = [shlex.split(ln)[shlex.split(ln).index("--port") + 1] for ln in launches]
    devices = [ln.split()[0].split("=")[1] for ln in launches]
    assert len(set(ports)) == len(ports) and len(set(devices)) == len(devices)  # no two instances share either
    import subprocess

    assert subprocess.run(["bash", "-n", str(out / "vllm-serve.sh")]).returncode == 0  # it parses
