"""Solver and replay see identical resolved inputs (issue 15 item 6).

For every bundled example, and for every ``--set`` field that changes what a scenario resolves to
(link bandwidth, link name or an anonymous link, gpu, tp, pp, instances, KV fraction, batch limits,
chunk budget, prefix hits, perf efficiencies and dtype), the replay's plan carries exactly the
inputs the analytic solver reads: the same service-time models (by fingerprint), KV capacity,
per-path link bandwidth and latency, instance counts and limits. Exact equality: both must come
from the one resolution path (qmodel.build.resolve), so any difference is a second path.
On the main branch before the fix, the link override failed here: the replay took the catalog
link's 45 GB/s where the solver took 2 GB/s x 0.8.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from hypothesis import given, settings, strategies as st

from qmodel.build import Resolved, resolve
from qmodel.solver import Solver
from qmodel.errors import InputError
from qmodel.scenario import DisaggregatedDeployment, load_scenario
from qmodel.validation.replay import ReplayPlan, build_plan
from tests.data_needs import EXAMPLES, example_param

NAMES = sorted(p.stem for p in EXAMPLES.iterdir() if p.suffix in (".yaml", ".json", ".toml"))

DISAGG_SETS = [
    [], ["deployment.link_bandwidth_bytes_per_s=2 GB/s"], ["deployment.link=ib-hdr-200"],
    ["deployment.link=100 Gbps"], ["deployment.link=100 Gbps", "deployment.link_bandwidth_bytes_per_s=25 GB/s"],
    ["deployment.prefill.gpu=h200-sxm", "deployment.decode.gpu=h200-sxm"], ["deployment.decode.tp=8"],
    ["deployment.prefill.pp=2"], ["deployment.prefill.instances=5", "deployment.decode.instances=3"],
    ["deployment.decode.kv_memory_fraction=0.3"], ["deployment.decode.max_batch=32"],
    ["deployment.prefill.max_batch_tokens=1024"], ["workload.prefix_hit_ratio=0.6"],
    ["deployment.first_token_from=decode", "deployment.link_sharing=fair", "deployment.transfer_mode=layerwise"],
    ["deployment.decode.kv_dtype=fp8"], ["deployment.prefill.kv_dtype=fp8", "deployment.prefill.compute_dtype=fp8"],
    ["deployment.decode.memory_reserve_bytes=12 GiB", "deployment.prefill.memory_reserve_bytes=2 GiB"],
]
POOL_SETS = [
    [], ["deployment.pool.gpu=h200-sxm"], ["deployment.pool.tp=2"], ["deployment.pool.pp=2"],
    ["deployment.pool.instances=3"], ["deployment.pool.kv_memory_fraction=0.3"], ["deployment.pool.max_batch=32"],
    ["workload.prefix_hit_ratio=0.6"], ["deployment.pool.kv_dtype=fp8", "deployment.pool.compute_dtype=fp8"],
    ["deployment.pool.memory_reserve_bytes=12 GiB"],
]
ROOFLINE_SETS = [["perf.mfu=0.3"], ["perf.mbu=0.5"], ["perf.compute_dtype=fp8"]]


def _cases():
    for name in NAMES:
        (path,) = EXAMPLES.glob(f"{name}.*")
        text = path.read_text(encoding="utf-8")
        disagg = re.search(r"topology\W+disaggregated", text) is not None
        sets = list(DISAGG_SETS if disagg else POOL_SETS)
        if re.search(r"topology\W+chunked", text):
            sets.append(["deployment.chunk_tokens=2048"])
        elif not disagg:
            sets.append(["deployment.max_batch_tokens=1024"])
        if "roofline" in text:
            sets += ROOFLINE_SETS
        for s in sets:
            yield example_param(name, s)


def _solver_view(r: Resolved) -> dict:
    """The inputs the analytic stations read, from the solver's Resolved."""
    dep = r.scenario.deployment
    out = {"gpus": r.gpus, "prefix_hit_ratio": float(r.scenario.workload.prefix_hit_ratio)}
    if isinstance(dep, DisaggregatedDeployment):
        pre, dec, cfg = r.pools["prefill"], r.pools["decode"], dep.decode
        out |= {"prefill_model": pre.service.fingerprint, "prefill_instances": pre.config.instances,
                "max_batch_tokens": dep.prefill.max_batch_tokens, "prefill_dispatch": dep.prefill.dispatch,
                "path_bandwidth_bytes_per_s": r.link_bandwidth_bytes_per_s, "link_latency_s": r.link.latency_s,
                "link_sharing": dep.link_sharing, "transfer_mode": dep.transfer_mode,
                "first_token_from": dep.first_token_from, "kv_bytes_per_token": r.kv_bytes_per_token,
                "layers": r.model.layers}
    else:
        dec, cfg = r.pools["pool"], dep.pool
        out |= ({"chunk_tokens": dep.chunk_tokens} if dep.topology == "chunked"
                else {"max_batch_tokens": dep.max_batch_tokens})
    out |= {"topology": dep.topology, "decode_model": dec.service.fingerprint, "decode_instances": dec.config.instances,
            "decode_kv_capacity_tokens": dec.kv_capacity_tokens, "decode_max_batch": cfg.max_batch,
            "decode_dispatch": cfg.dispatch}
    return out


def _replay_view(plan: ReplayPlan, keys) -> dict:
    out = {k: getattr(plan, k) for k in keys}
    for k in ("prefill_model", "decode_model"):
        if k in out:
            out[k] = out[k].fingerprint
    return out


def _resolve_both(scn):
    """(Resolved, ReplayPlan), or the two one-line errors when the variant cannot run."""
    try:
        r = resolve(scn)
    except InputError as err:
        with pytest.raises(InputError) as rerr:
            build_plan(scn)
        assert str(rerr.value) == str(err), "the replay refuses a variant for another reason than the solver"
        return None, None
    return r, build_plan(scn)


@pytest.mark.parametrize(("name", "sets"), list(_cases()))
def test_replay_plan_equals_solver_inputs(name: str, sets: list[str]):
    (path,) = EXAMPLES.glob(f"{name}.*")
    scn = load_scenario(path, sets)
    r, plan = _resolve_both(scn)
    if r is None:
        return
    want = _solver_view(r)
    assert _replay_view(plan, want) == want
    if isinstance(scn.deployment, DisaggregatedDeployment):
        tr = Solver(scn, r).transfer_station  # what the analytic link station is built with
        assert (tr.bandwidth_bytes_per_s, tr.latency_s, tr.paths) == \
            (plan.path_bandwidth_bytes_per_s, plan.link_latency_s, plan.prefill_instances)


def test_link_override_reaches_the_replay(repo_root: Path):
    """The case the issue found: opt13b-disagg-a100 at 2 GB/s per path over nvlink-3 (efficiency
    0.8) is 1.6 GB/s effective per path in both; main's replay used nvlink-3's 240 GB/s."""
    scn = load_scenario(repo_root / "examples" / "opt13b-disagg-a100.yaml",
                        ["deployment.link_bandwidth_bytes_per_s=2 GB/s"])
    plan = build_plan(scn)
    assert plan.path_bandwidth_bytes_per_s == pytest.approx(1.6e9, rel=1e-12)
    assert resolve(scn).link_bandwidth_bytes_per_s == plan.path_bandwidth_bytes_per_s


def test_service_model_override_still_wins(repo_root: Path):
    """build_plan's ``service_models`` (tests, the harness) replaces the resolved models by role."""
    scn = load_scenario(repo_root / "examples" / "llama3-8b-colocated-h100.yaml")
    other = resolve(load_scenario(repo_root / "examples" / "llama3-8b-colocated-h100.yaml",
                                  ["perf.mbu=0.4"])).pools["pool"].service
    plan = build_plan(scn, {"decode": other})
    assert plan.decode_model is other


_NO_DATA = [n for n in NAMES if not any(getattr(m, "name", "") == "needs_data" for m in
                                        example_param(n).marks)]


@settings(max_examples=40, deadline=None, derandomize=True)
@given(st.data())
def test_property_random_override_mixes(data):
    """Property: any mix of the overrides above, on any example that runs without the data
    folder, resolves to the same inputs in the solver and the replay (deterministic draws)."""
    name = data.draw(st.sampled_from(_NO_DATA), label="example")
    (path,) = EXAMPLES.glob(f"{name}.*")
    text = path.read_text(encoding="utf-8")
    pool = DISAGG_SETS[1:] if re.search(r"topology\W+disaggregated", text) else POOL_SETS[1:]
    if "roofline" in text:
        pool = pool + ROOFLINE_SETS
    picks = data.draw(st.lists(st.sampled_from(pool), min_size=1, max_size=4), label="overrides")
    sets: dict[str, str] = {}
    for group in picks:  # a later pick of the same field wins, as repeated --set does
        sets.update(dict(s.split("=", 1) for s in group))
    try:
        scn = load_scenario(path, [f"{k}={v}" for k, v in sets.items()])
    except InputError:
        return  # a mix the schema refuses (both sides would never see it)
    r, plan = _resolve_both(scn)
    if r is not None:
        want = _solver_view(r)
        assert _replay_view(plan, want) == want
