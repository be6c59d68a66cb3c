"""Per-pool KV-cache dtype and weight/activation precision (issue 17 item 4).

``deployment.<pool>.kv_dtype`` and ``deployment.<pool>.compute_dtype`` are applied once, in
:func:`qmodel.build.resolve_pool`; every consumer must see them: KV capacity, the roofline's KV
reads and GEMM rate, the link's bytes, and the replay's plan. Exact relations (FP8 = 8 of 16 bits)
are asserted exactly or to the rounding of a floor.
"""

from __future__ import annotations

import json

import pytest

from qmodel.build import resolve
from qmodel.cli.main import main
from qmodel.solver import Solver
from qmodel.errors import InputError
from qmodel.perf.roofline import RooflineModel
from qmodel.registry import load_catalog
from qmodel.scenario import load_scenario
from qmodel.validation.replay import build_plan
from tests.data_needs import EXAMPLES

DISAGG = EXAMPLES / "llama3-70b-disagg-h100.yaml"
COLOC = EXAMPLES / "llama3-8b-colocated-h100.yaml"


def _resolved(path, sets):
    return resolve(load_scenario(path, sets))


def test_fp8_kv_on_decode_only_halves_its_kv_and_doubles_its_capacity():
    base = _resolved(DISAGG, [])
    fp8 = _resolved(DISAGG, ["deployment.decode.kv_dtype=fp8"])
    b, f = base.pools["decode"], fp8.pools["decode"]
    assert f.model.kv_dtype == "fp8" and b.model.kv_dtype == "bf16"
    assert f.model.kv_bytes_per_token() == b.model.kv_bytes_per_token() / 2
    # Same bytes for KV, half the bytes per token: twice the tokens, up to the floor of each.
    assert 2 * b.kv_capacity_tokens <= f.kv_capacity_tokens <= 2 * b.kv_capacity_tokens + 1
    # The prefill pool keeps BF16 KV, and KV moves as the prefill pool stores it.
    assert fp8.pools["prefill"].kv_capacity_tokens == base.pools["prefill"].kv_capacity_tokens
    assert fp8.kv_bytes_per_token == base.kv_bytes_per_token
    # The roofline's decode step reads half the KV bytes.
    kb = b.service.kv_bytes_read(64.0, 64 * 2000.0)
    kf = f.service.kv_bytes_read(64.0, 64 * 2000.0)
    assert kf == pytest.approx(kb / 2, rel=1e-12)
    assert f.service.decode_step_time_s(64.0, 64 * 2000.0) < b.service.decode_step_time_s(64.0, 64 * 2000.0)


def test_fp8_kv_on_prefill_halves_the_link_bytes():
    base = _resolved(DISAGG, [])
    fp8 = _resolved(DISAGG, ["deployment.prefill.kv_dtype=fp8", "deployment.decode.kv_dtype=fp8"])
    assert fp8.kv_bytes_per_token == base.kv_bytes_per_token / 2 == 163_840  # Llama-3.1-70B: 320 KiB -> 160 KiB
    sb, sf = Solver(base.scenario, base).transfer_station, Solver(fp8.scenario, fp8).transfer_station
    assert sf.bytes_per_request == pytest.approx(sb.bytes_per_request / 2, rel=1e-12)


@pytest.mark.parametrize("sets", [["deployment.decode.kv_dtype=fp8"],
                                  ["deployment.prefill.kv_dtype=fp8", "deployment.prefill.compute_dtype=fp8"],
                                  ["deployment.decode.compute_dtype=fp8", "deployment.decode.kv_dtype=fp8_e5m2"]])
def test_replay_sees_the_pool_dtypes(sets):
    scn = load_scenario(DISAGG, sets)
    r, plan = resolve(scn), build_plan(scn)
    assert plan.kv_bytes_per_token == r.kv_bytes_per_token
    assert plan.decode_kv_capacity_tokens == r.pools["decode"].kv_capacity_tokens
    assert plan.prefill_model.fingerprint == r.pools["prefill"].service.fingerprint
    assert plan.decode_model.fingerprint == r.pools["decode"].service.fingerprint


def test_colocated_pool_kv_dtype_reaches_replay():
    base, fp8 = _resolved(COLOC, []), load_scenario(COLOC, ["deployment.pool.kv_dtype=fp8"])
    r, plan = resolve(fp8), build_plan(fp8)
    assert plan.decode_kv_capacity_tokens == r.pools["pool"].kv_capacity_tokens
    assert 2 * base.pools["pool"].kv_capacity_tokens <= r.pools["pool"].kv_capacity_tokens
    assert plan.decode_model.fingerprint == r.pools["pool"].service.fingerprint != base.pools["pool"].service.fingerprint


def test_prefill_fp8_decode_bf16_step_times():
    """Each pool's roofline equals the one built directly at its precision; on H100 FP8 GEMMs run at
    1979/989 of the BF16 rate, so a compute-bound prefill's GEMM term halves, and decode is untouched."""
    r = _resolved(DISAGG, ["deployment.prefill.compute_dtype=fp8"])
    base = _resolved(DISAGG, [])
    m, g = load_catalog().model("llama-3.1-70b"), load_catalog().gpu("h100-sxm")
    want_p, want_d = RooflineModel(m, g, 4, compute_dtype="fp8"), RooflineModel(m, g, 4)
    t, q = 8192.0, 2 * 4096.0**2
    pre, dec = r.pools["prefill"].service, r.pools["decode"].service
    assert pre.prefill_time_s(t, q, 2.0) == want_p.prefill_time_s(t, q, 2.0)
    assert dec.decode_step_time_s(64.0, 64 * 2000.0) == want_d.decode_step_time_s(64.0, 64 * 2000.0)
    assert dec.fingerprint == base.pools["decode"].service.fingerprint
    # the compute term runs at the pool's dtype peak: exactly 989/1979 with fixed efficiency factors
    # (under the default curves FP8 and BF16 GEMMs also differ in measured efficiency)
    const = ["perf.efficiency=constants"]
    c8 = _resolved(DISAGG, ["deployment.prefill.compute_dtype=fp8", *const]).pools["prefill"].service
    c16 = _resolved(DISAGG, const).pools["prefill"].service
    assert float(c8.prefill_breakdown(t, q)["compute_s"]) == pytest.approx(
        float(c16.prefill_breakdown(t, q)["compute_s"]) * g.bf16_flops_per_s / g.fp8_flops_per_s, rel=1e-12)
    # FP8 weights take half the memory: more room for KV on the prefill pool only.
    assert r.pools["prefill"].kv_capacity_tokens > base.pools["prefill"].kv_capacity_tokens
    assert r.pools["decode"].kv_capacity_tokens == base.pools["decode"].kv_capacity_tokens


def test_pool_compute_dtype_replaces_perf_compute_dtype():
    r = _resolved(DISAGG, ["perf.compute_dtype=fp8", "deployment.decode.compute_dtype=bf16"])
    assert r.pools["prefill"].service.compute_dtype == "fp8"
    assert r.pools["decode"].service.compute_dtype == "bf16"


@pytest.mark.parametrize(("key", "value"), [("deployment.decode.kv_dtype", "fp9"),
                                            ("deployment.prefill.compute_dtype", "bf17"),
                                            ("deployment.decode.kv_dtype", "")])
def test_unknown_dtype_is_one_line_naming_the_field(key, value):
    with pytest.raises(InputError) as err:
        load_scenario(DISAGG, [f"{key}={value}"])
    text = str(err.value)
    assert text.startswith(key) and "\n" not in text and "known dtypes" in text


def test_cli_set_kv_dtype(capsys):
    args = ["solve", str(DISAGG), "--json"]
    assert main(args) == 0
    base = json.loads(capsys.readouterr().out)
    assert main(args + ["--set", "deployment.decode.kv_dtype=fp8"]) == 0
    fp8 = json.loads(capsys.readouterr().out)
    assert fp8 != base
    assert main(args + ["--set", "deployment.decode.kv_dtype=fp9"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and "deployment.decode.kv_dtype" in err


def test_planner_candidates_keep_the_pool_dtypes():
    """A planned deployment keeps the user's per-pool dtypes, and the planner's cached pools are
    the ones resolve builds for that deployment (same fingerprints and capacities)."""
    from qmodel.planner.evaluate import EngineEvaluator, scenario_for
    from qmodel.planner.space import Family

    scn = load_scenario(DISAGG, ["deployment.decode.kv_dtype=fp8", "deployment.prefill.compute_dtype=fp8"])
    plan = Family("disaggregated", "h100-sxm", 4, "h100-sxm", 4, "roce-4x200", "layerwise").plan(2, 2)
    sc = scenario_for(scn, plan)
    assert sc.deployment.decode.kv_dtype == "fp8" and sc.deployment.prefill.compute_dtype == "fp8"
    colo = Family("colocated", "h100-sxm", 4).plan(3)
    assert scenario_for(load_scenario(COLOC, ["deployment.pool.kv_dtype=fp8"]), colo).deployment.pool.kv_dtype == "fp8"
    want, got = resolve(sc), EngineEvaluator(scn).solver(plan).resolved
    for role in ("prefill", "decode"):
        assert got.pools[role].service.fingerprint == want.pools[role].service.fingerprint
        assert got.pools[role].kv_capacity_tokens == want.pools[role].kv_capacity_tokens
    assert got.kv_bytes_per_token == want.kv_bytes_per_token


def test_serving_commands_carry_the_pool_dtypes():
    from qmodel.planner.evaluate import scenario_for
    from qmodel.planner.export import serving_config
    from qmodel.planner.space import Family

    scn = load_scenario(DISAGG, ["deployment.decode.kv_dtype=fp8", "deployment.prefill.compute_dtype=fp8"])
    p = Family("disaggregated", "h100-sxm", 4, "h100-sxm", 4, "roce-4x200", "layerwise").plan(2, 2)
    from types import SimpleNamespace

    row = SimpleNamespace(topology="disaggregated", prefill=p.prefill, decode=p.decode, link="roce-4x200",
                          transfer_mode="layerwise", chunk_tokens=None)  # the PlanRow fields serving_config reads
    cmds = {c["role"]: c["command"] for c in serving_config(scenario_for(scn, p), row)["vllm"]}
    assert "--quantization fp8" in cmds["prefill"] and "--kv-cache-dtype" not in cmds["prefill"]
    assert "--kv-cache-dtype fp8" in cmds["decode"] and "--quantization" not in cmds["decode"]
