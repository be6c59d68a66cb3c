"""Planner executors (process pool, Dask), CLI output (--json/--csv/text), serving-config export,
rate-curve schedule and --check plumbing, all on the closed-form fake evaluator."""

from __future__ import annotations

import csv
import io
import json
from concurrent.futures import ProcessPoolExecutor

import pytest

from qmodel.cli.main import main
from qmodel.errors import InputError
from qmodel.planner import plan, plan_schedule
from qmodel.planner.check import kendall, spec_of
from qmodel.planner.export import serving_config
from qmodel.scenario import load_scenario
from tests.planner_fakes import FakeEvaluator

KW = dict(gpus=["h100-sxm", "a100-80gb-sxm"], links=["ib-ndr-400"], tps=[1, 2, 4], max_instances=6, max_gpus=24,
          knee=False)
EXAMPLE = "examples/llama3-70b-disagg-h100.yaml"


@pytest.fixture(scope="module")
def scenario(repo_root):
    return load_scenario(repo_root / EXAMPLE)


def _sig(res):
    return [(p.label, round(p.goodput_rps, 9)) for p in res.plans]


def test_process_pool_matches_serial(scenario):
    serial = plan(scenario, "min-gpus", target_rate_per_s=9.0, evaluator=FakeEvaluator(scenario), executor="serial", **KW)
    with ProcessPoolExecutor(max_workers=2) as ex:
        pooled = plan(scenario, "min-gpus", target_rate_per_s=9.0, evaluator=FakeEvaluator(scenario), executor=ex, **KW)
    assert _sig(pooled) == _sig(serial)
    assert pooled.stats.pruned == serial.stats.pruned or sum(pooled.stats.pruned.values()) + pooled.stats.feasible == \
        pooled.stats.candidates


def test_dask_local_cluster(scenario):
    distributed = pytest.importorskip("distributed")
    with distributed.LocalCluster(n_workers=1, threads_per_worker=2, processes=False, dashboard_address=None) as cl, \
            distributed.Client(cl) as client:
        res = plan(scenario, "max-goodput", budget={"gpus": 12}, evaluator=FakeEvaluator(scenario),
                   executor=client.get_executor(), **KW)
    serial = plan(scenario, "max-goodput", budget={"gpus": 12}, evaluator=FakeEvaluator(scenario), executor="serial", **KW)
    # same plans and goodputs (to the 1e-3 search tolerance: tasks may run in another order)
    assert [p.goodput_rps for p in res.plans] == pytest.approx([p.goodput_rps for p in serial.plans], rel=2e-3)
    assert [p.gpus for p in res.plans] == [p.gpus for p in serial.plans]


@pytest.fixture
def fake_engine(monkeypatch):
    """Make the CLI's plan() use the fake evaluator (the CLI builds its own)."""
    import qmodel.planner.core as core

    monkeypatch.setattr(core, "EngineEvaluator", FakeEvaluator)


def _cli(capsys, *argv) -> tuple[int, str, str]:
    rc = main(["plan", EXAMPLE, "--serial", "--gpus", "h100-sxm,a100-80gb-sxm", "--tps", "1,2,4", "--max-instances", "6",
               *argv])
    out, err = capsys.readouterr()
    return rc, out, err


def test_cli_json(fake_engine, capsys, repo_root, monkeypatch):
    monkeypatch.chdir(repo_root)
    rc, out, _ = _cli(capsys, "--target-rate", "9", "--json", "--top", "4")
    assert rc == 0
    d = json.loads(out)
    assert len(d["plans"]) == 4
    for p in d["plans"]:
        for k in ("topology", "prefill", "decode", "link", "goodput_rps", "goodput_per_gpu", "gpus", "cost_per_hour_usd",
                  "binding", "validity", "ttft_p90_s", "tpot_p90_s", "headroom_to_knee", "usd_per_million_output_tokens"):
            assert k in p
        assert set(p["decode"]) >= {"instances", "tp", "gpu"}
        if p["topology"] == "disaggregated":
            assert set(p["prefill"]) >= {"instances", "tp", "gpu"}
    assert d["serving_config"]["vllm"]


def test_cli_csv_and_text(fake_engine, capsys, repo_root, monkeypatch):
    monkeypatch.chdir(repo_root)
    rc, out, _ = _cli(capsys, "--objective", "max-goodput", "--budget", "16 gpus", "--csv", "--top", "3")
    assert rc == 0
    rows = list(csv.DictReader(io.StringIO(out)))
    assert len(rows) == 3 and all(int(r["gpus"]) <= 16 for r in rows)
    rc, out, _ = _cli(capsys, "--objective", "min-cost", "--target-rate", "5")
    assert rc == 0
    assert "best:" in out and "vllm serve" in out and "searched" in out


def test_cli_bad_budget_is_exit_2(fake_engine, capsys, repo_root, monkeypatch):
    monkeypatch.chdir(repo_root)
    rc, _, err = _cli(capsys, "--objective", "max-goodput", "--budget", "lots")
    assert rc == 2 and "--budget" in err and "\n" == err[-1] and err.count("\n") == 1


def test_cli_rates(fake_engine, capsys, repo_root, monkeypatch):
    monkeypatch.chdir(repo_root)
    rc, out, _ = _cli(capsys, "--rates", "2,4,9,4", "--json")
    assert rc == 0
    d = json.loads(out)
    assert len(d["periods"]) == 4


def test_budget_parser():
    from qmodel.cli.cmd_plan import parse_budget

    assert parse_budget(["16 gpus", "10 kW", "$40/h"]) == {"gpus": 16, "power_w": 10000.0, "cost_per_hour": 40.0}
    assert parse_budget(["8"]) == {"gpus": 8}
    with pytest.raises(InputError):
        parse_budget(["-3 gpus"])


def test_serving_config_disaggregated(scenario):
    res = plan(scenario, "min-gpus", target_rate_per_s=9.0, evaluator=FakeEvaluator(scenario), executor="serial",
               topologies=["disaggregated"], **KW)
    row = res.plans[0]
    cfg = serving_config(scenario, row)
    pre, dec = cfg["vllm"]
    assert f"--tensor-parallel-size {row.prefill.tp}" in pre["command"]
    assert f"--tensor-parallel-size {row.decode.tp}" in dec["command"]
    kp = json.loads(pre["command"].split("--kv-transfer-config ")[1].strip("'"))
    kc = json.loads(dec["command"].split("--kv-transfer-config ")[1].strip("'"))
    assert kp == {"kv_connector": "NixlConnector", "kv_role": "kv_producer"}
    assert kc == {"kv_connector": "NixlConnector", "kv_role": "kv_consumer"}
    services = cfg["dynamo"]["spec"]["services"]
    assert services["VllmPrefillWorker"]["replicas"] == row.prefill.instances
    assert services["VllmDecodeWorker"]["replicas"] == row.decode.instances
    assert cfg["kserve"]["spec"]["prefill"]["replicas"] == row.prefill.instances
    assert pre["command"].startswith("vllm serve meta-llama/")


def test_serving_config_tcp_and_chunked(scenario):
    res = plan(scenario, "min-gpus", target_rate_per_s=3.0, evaluator=FakeEvaluator(scenario), executor="serial",
               topologies=["disaggregated"], **{**KW, "links": ["eth-100g-tcp"]})
    cfg = serving_config(scenario, res.plans[0])
    assert '"kv_connector":"P2pNcclConnector"' in cfg["vllm"][0]["command"]
    res = plan(scenario, "min-gpus", target_rate_per_s=3.0, evaluator=FakeEvaluator(scenario), executor="serial",
               topologies=["chunked"], chunk_tokens=[1024], **KW)
    cmd = serving_config(scenario, res.plans[0])["vllm"][0]["command"]
    assert "--enable-chunked-prefill --max-num-batched-tokens 1024" in cmd


def test_schedule_gpu_hours(scenario):
    rates = [2.0, 2.0, 9.0, 4.0]
    sched = plan_schedule(scenario, rates, evaluator=FakeEvaluator(scenario), executor="serial", **KW)
    per_rate = {r: plan(scenario, "min-gpus", target_rate_per_s=r, evaluator=FakeEvaluator(scenario), executor="serial",
                        top_k=1, **KW).plans[0].gpus for r in set(rates)}
    assert [p.gpus for p in sched.periods] == [per_rate[r] for r in rates]
    assert sched.peak_gpu_hours == per_rate[9.0] * 4
    assert sched.gpu_hours_saved == pytest.approx(per_rate[9.0] * 4 - sum(per_rate[r] for r in rates))
    assert sched.gpu_hours_saved > 0
    with pytest.raises(InputError):
        plan_schedule(scenario, [], evaluator=FakeEvaluator(scenario))


def test_spec_roundtrip_and_kendall(scenario):
    res = plan(scenario, "min-gpus", target_rate_per_s=9.0, evaluator=FakeEvaluator(scenario), executor="serial", **KW)
    for row in res.plans:
        assert spec_of(row).label == row.label
    # scipy's tau-b on a known pair: one discordant pair out of three -> tau = 1/3
    tau, _ = kendall([1, 2, 3], [1, 3, 2])
    assert tau == pytest.approx(1 / 3)
    assert kendall([1.0], [2.0]) == (None, None)
    assert kendall([1, 1, 1], [1, 2, 3]) == (None, None)


def test_gpu_memory_utilization_reproduces_kv_capacity(scenario):
    """vLLM's budget util x M = W + (R - context) + KV must give back qmodel's KV bytes: invert it
    (to the 0.01 the flag is printed with, i.e. 1% of the GPU's memory)."""
    from qmodel.perf.memory import memory_budget
    from qmodel.planner.export import CUDA_CONTEXT_BYTES, gpu_memory_utilization
    from qmodel.registry import load_catalog

    cat = load_catalog()
    for gpu, tp in (("h100-sxm", 2), ("h100-sxm", 8), ("a100-80gb-sxm", 4)):
        util = gpu_memory_utilization(scenario, gpu, tp, 0.9)
        b = memory_budget(cat.model(scenario.model), cat.gpu(gpu), tp, 1, 0.9)
        kv = util * b.gpu_memory_bytes - b.weights_per_gpu_bytes - (b.reserve_bytes - CUDA_CONTEXT_BYTES)
        assert kv == pytest.approx(b.kv_bytes_per_gpu, abs=0.005 * b.gpu_memory_bytes)


def test_progress_bar_only_when_asked(scenario, capsys):
    plan(scenario, "min-gpus", target_rate_per_s=9.0, evaluator=FakeEvaluator(scenario), executor="serial", **KW)
    assert capsys.readouterr().err == ""
    plan(scenario, "min-gpus", target_rate_per_s=9.0, evaluator=FakeEvaluator(scenario), executor="serial",
         progress=True, **KW)
    err = capsys.readouterr().err
    assert "configurations" in err and err.endswith("\n")


def test_cli_scheduler_runs_on_a_dask_cluster(fake_engine, capsys, repo_root, monkeypatch):
    distributed = pytest.importorskip("distributed")
    monkeypatch.chdir(repo_root)
    with distributed.LocalCluster(n_workers=1, threads_per_worker=2, processes=False, dashboard_address=None) as cl:
        rc, out, _ = _cli(capsys, "--target-rate", "9", "--json", "--top", "2", "--scheduler", cl.scheduler_address)
    assert rc == 0
    d = json.loads(out)
    assert len(d["plans"]) == 2 and "Executor" in d["stats"]["executor"]


def test_knee_and_headroom(scenario):
    """The fake's knee is 0.8 x the stability limit, so headroom = 0.8 cap / rate - 1 exactly; without
    the knee both fields are null (never a stand-in number)."""
    on = plan(scenario, "min-gpus", target_rate_per_s=9.0, evaluator=FakeEvaluator(scenario), executor="serial",
              **{**KW, "knee": True})
    for p in on.plans:
        assert p.knee_rps == pytest.approx(0.8 * p.max_stable_rate_per_s, rel=1e-12)
        assert p.headroom_to_knee == pytest.approx(0.8 * p.max_stable_rate_per_s / 9.0 - 1.0, rel=1e-12)
    off = plan(scenario, "min-gpus", target_rate_per_s=9.0, evaluator=FakeEvaluator(scenario), executor="serial", **KW)
    assert all(p.knee_rps is None and p.headroom_to_knee is None for p in off.plans)


class _FailingMetrics(FakeEvaluator):
    """The fake with one plan whose metrics raise a NumericalError (as a chain refusing to truncate)."""

    def metrics(self, plan, rate):
        from qmodel.errors import NumericalError

        if plan.topology == "colocated":
            raise NumericalError("chain needs too many states")
        return super().metrics(plan, rate)


def test_a_failing_plan_is_left_out_with_a_note(scenario):
    res = plan(scenario, "min-gpus", target_rate_per_s=9.0, evaluator=_FailingMetrics(scenario), executor="serial",
               **KW)
    assert res.plans and all(p.topology != "colocated" for p in res.plans)
    assert any(n.startswith("left out") and "too many states" in n for n in res.notes)
    assert [p.rank for p in res.plans] == list(range(1, len(res.plans) + 1))


def test_cli_requests_is_one_flag_name_across_verbs(fake_engine, capsys, repo_root, monkeypatch):
    """``--requests`` means requests per replay in solve, sweep, replay and plan; plan's old
    ``--check-requests`` stays as an alias. Non-positive values are bad input (exit 2, one line)."""
    monkeypatch.chdir(repo_root)
    rc, _, err = _cli(capsys, "--objective", "min-gpus", "--target-rate", "5", "--requests", "0")
    assert rc == 2 and err.strip() == "qmodel: error: --requests: 0 is not valid; a positive number of requests per replay" and err.count("\n") == 1
    rc, _, err = _cli(capsys, "--objective", "min-gpus", "--target-rate", "5", "--check-requests", "-3")
    assert rc == 2 and "--requests: -3 is not valid" in err
