"""A pool's ``memory_reserve_bytes`` (issue 18 §3: KV capacity parameters a user configures).

The reserve is the per-GPU memory that holds neither weights nor KV (qmodel/perf/memory.py):
kv_capacity = floor(f (M - W - R) / kv_per_token). Checked exactly against that formula from the
catalog's numbers, as a default that changes nothing, through the CLI's error contract, and
through the planner (a re-targeted plan keeps it) and the vLLM flag export.
"""

from __future__ import annotations

import math

import pytest

from qmodel.build import resolve
from qmodel.perf.memory import DEFAULT_RESERVE_BYTES
from qmodel.registry import load_catalog
from qmodel.scenario import load_scenario
from tests.data_needs import EXAMPLES

DISAGG = EXAMPLES / "llama3-70b-disagg-h100.yaml"
COLOC = EXAMPLES / "llama3-8b-colocated-h100.yaml"
GIB = 2.0**30


def _capacity_by_hand(sc, role: str) -> int:
    """floor(f (M - W - R) / kv) from the catalog's numbers (pp = 1, full attention, tp <= KV heads)."""
    cat = load_catalog()
    dep = sc.deployment
    cfg = {"decode": getattr(dep, "decode", None), "pool": getattr(dep, "pool", None)}[role]
    model, gpu = cat.model(sc.model), cat.gpu(cfg.gpu)
    assert cfg.pp == 1 and cfg.tp <= model.num_kv_heads and not model.sliding_window_layers
    w = model.weight_bytes() / cfg.tp
    kv = model.kv_bytes_per_token() / cfg.tp
    reserve = DEFAULT_RESERVE_BYTES if cfg.memory_reserve_bytes is None else cfg.memory_reserve_bytes
    return math.floor(cfg.kv_memory_fraction * (gpu.memory_bytes - w - reserve) / kv)


@pytest.mark.parametrize("path, role, field", [(DISAGG, "decode", "deployment.decode"),
                                               (COLOC, "pool", "deployment.pool")])
@pytest.mark.parametrize("reserve", [None, "0 GiB", "6 GiB", "12.5 GiB"])
def test_capacity_follows_the_reserve_exactly(path, role, field, reserve):
    sets = [] if reserve is None else [f"{field}.memory_reserve_bytes={reserve}"]
    sc = load_scenario(path, sets)
    assert resolve(sc).pools[role].kv_capacity_tokens == _capacity_by_hand(sc, role)


def test_default_is_six_gib_and_changes_nothing():
    base = resolve(load_scenario(DISAGG))
    six = resolve(load_scenario(DISAGG, ["deployment.decode.memory_reserve_bytes=6 GiB"]))
    assert DEFAULT_RESERVE_BYTES == 6 * GIB
    assert six.pools["decode"].kv_capacity_tokens == base.pools["decode"].kv_capacity_tokens


def test_more_reserve_less_capacity_by_the_freed_bytes():
    """Each extra GiB of reserve removes f x 1 GiB / kv_per_token tokens (within the floor's 1 token)."""
    sc0 = load_scenario(DISAGG)
    sc4 = load_scenario(DISAGG, ["deployment.decode.memory_reserve_bytes=10 GiB"])
    model = load_catalog().model(sc0.model)
    dec = sc0.deployment.decode
    per_token = model.kv_bytes_per_token() / dec.tp
    drop = resolve(sc0).pools["decode"].kv_capacity_tokens - resolve(sc4).pools["decode"].kv_capacity_tokens
    assert abs(drop - dec.kv_memory_fraction * 4 * GIB / per_token) <= 1.0


def _cli(capsys, *argv: str) -> tuple[int, str]:
    from qmodel.cli.main import main

    rc = main(list(argv))
    return rc, capsys.readouterr().err


@pytest.mark.parametrize("value, allowed", [("100 GiB", "a size from 0 up to"),
                                            ("-1 GiB", "deployment.decode.memory_reserve_bytes")])
def test_bad_reserve_is_one_line_exit_2(capsys, value, allowed):
    rc, err = _cli(capsys, "solve", str(DISAGG), "--set", f"deployment.decode.memory_reserve_bytes={value}")
    lines = err.strip().splitlines()
    assert rc == 2 and len(lines) == 1, err
    assert lines[0].startswith("qmodel: error: deployment.decode.memory_reserve_bytes") and allowed in lines[0]


def test_planner_keeps_the_reserve_and_the_export_reads_it():
    """A re-targeted plan keeps both pools' reserves, the planner's cached pools answer as a direct
    solve of the plan's scenario does, and vLLM's --gpu-memory-utilization moves with the reserve."""
    from qmodel.planner.evaluate import EngineEvaluator, scenario_for
    from qmodel.planner.export import gpu_memory_utilization
    from qmodel.planner.space import Family
    from qmodel.solver import Solver

    sc = load_scenario(DISAGG, ["deployment.decode.memory_reserve_bytes=30 GiB",
                                "deployment.prefill.memory_reserve_bytes=3 GiB"])
    dec, pre = sc.deployment.decode, sc.deployment.prefill
    plan = Family("disaggregated", dec.gpu, dec.tp, pre.gpu, pre.tp, sc.deployment.link).plan(1, 4)
    planned = scenario_for(sc, plan)
    assert planned.deployment.decode.memory_reserve_bytes == 30 * GIB
    assert planned.deployment.prefill.memory_reserve_bytes == 3 * GIB
    direct = Solver(planned).max_stable_rate()
    assert EngineEvaluator(sc).capacity(plan) == pytest.approx(direct, rel=1e-12)
    # 30 GiB of 80 leaves the decode KV binding: the plan's limit is below the default reserve's
    assert direct[0] < Solver(scenario_for(load_scenario(DISAGG), plan)).max_stable_rate()[0]
    gpu_bytes = load_catalog().gpu(dec.gpu).memory_bytes
    u0 = gpu_memory_utilization(load_scenario(DISAGG), dec.gpu, dec.tp, 0.9)
    u1 = gpu_memory_utilization(sc, dec.gpu, dec.tp, 0.9)
    # util x M = W + R - context + 0.9 (M - W - R): +24 GiB of reserve adds 0.1 x 24 GiB / M
    assert u0 is not None and u1 is not None
    assert u1 == pytest.approx(u0 + 0.1 * 24 * GIB / gpu_bytes, abs=0.011)
