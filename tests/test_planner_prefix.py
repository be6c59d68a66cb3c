"""``plan --top K`` is a prefix of ``--top K+1``: the ranking is one total order over the whole
feasible set (qmodel/planner/rank.py), so neither the best plan nor any rank depends on K.

On the closed-form fake evaluator (many random hardware variants, every objective), on the engine
over the bundled examples (small search spaces, one shared evaluator so each K reuses the solves),
and through the CLI. Labels are compared exactly and goodputs to 1e-12 relative: the same plan's
goodput must be the same number whatever K is (it is refined from a bracket that depends on the
plan alone), so only round-off may differ.
"""

from __future__ import annotations

import json

import pytest
from hypothesis import given, settings, strategies as st

from qmodel.cli.main import main
from qmodel.planner import plan
from qmodel.planner.evaluate import EngineEvaluator
from qmodel.scenario import load_scenario
from tests.planner_fakes import FakeEvaluator

EXAMPLE = "examples/llama3-70b-disagg-h100.yaml"
FAKE_SPACE = dict(gpus=["h100-sxm", "a100-80gb-sxm"], links=["ib-ndr-400", "eth-25g-tcp"], tps=[1, 2, 4],
                  max_instances=5, max_gpus=16)


def _rows(res) -> list[tuple[str, float]]:
    return [(p.label, p.goodput_rps) for p in res.plans]


def _assert_prefixes(by_k: dict[int, list[tuple[str, float]]]) -> None:
    kmax = max(by_k)
    full = by_k[kmax]
    for k, rows in by_k.items():
        assert [lab for lab, _ in rows] == [lab for lab, _ in full[:k]], f"top {k} is not a prefix of top {kmax}"
        for (_, g), (_, g_full) in zip(rows, full):
            assert g == pytest.approx(g_full, rel=1e-12)


def _objective_kw(objective: str, rate: float, gpus: int) -> dict:
    if objective == "max-goodput":
        return {"budget": {"gpus": gpus}}
    return {"target_rate_per_s": rate}


@settings(max_examples=25, deadline=None)
@given(P0=st.floats(1.0, 8.0), D0=st.floats(2.0, 12.0), K0=st.floats(2.0, 40.0), rate=st.floats(0.5, 20.0),
       n=st.integers(2, 16), objective=st.sampled_from(["min-gpus", "min-cost", "max-goodput"]))
def test_top_k_is_a_prefix_on_fake_hardware(repo_root, P0, D0, K0, rate, n, objective):
    sc = load_scenario(repo_root / EXAMPLE)
    ev = FakeEvaluator(sc, P0=P0, D0=D0, K0=K0)
    kw = dict(evaluator=ev, executor="serial", knee=False, serving_config=False, **FAKE_SPACE,
              **_objective_kw(objective, rate, n))
    _assert_prefixes({k: _rows(plan(sc, objective, top_k=k, **kw)) for k in (1, 2, 3, 5, 8)})


# examples x objectives on the engine, in small spaces (the example's own GPU)
ENGINE_CASES = [
    pytest.param("llama3-70b-disagg-h100.yaml", dict(tps=[4, 8], max_instances=3, max_gpus=16), marks=pytest.mark.slow),
    pytest.param("opt13b-disagg-a100.yaml", dict(tps=[1, 2], max_instances=3, max_gpus=6)),
    pytest.param("llama3-8b-chunked-h100.yaml", dict(tps=[1, 2], max_instances=3, max_gpus=6), marks=pytest.mark.slow),
]


@pytest.mark.parametrize("objective", ["min-gpus", "max-goodput"])
@pytest.mark.parametrize("example,space", ENGINE_CASES, ids=[c.values[0] for c in ENGINE_CASES])
def test_top_k_is_a_prefix_on_the_examples(repo_root, example, space, objective):
    sc = load_scenario(repo_root / "examples" / example)
    ev = EngineEvaluator(sc)
    rate = sc.rate_per_s
    kw = dict(evaluator=ev, executor="serial", knee=False, serving_config=False, **space,
              **_objective_kw(objective, rate, space["max_gpus"]))
    _assert_prefixes({k: _rows(plan(sc, objective, top_k=k, **kw)) for k in (1, 2, 3, 6)})


def test_top_k_is_a_prefix_in_the_cli(repo_root, capsys, monkeypatch):
    """The issue's case: llama3-70b min-gpus, where --top 1/2/3 each named a different best plan."""
    monkeypatch.chdir(repo_root)
    by_k = {}
    for k in (1, 2, 3, 5):
        rc = main(["plan", EXAMPLE, "--serial", "--objective", "min-gpus", "--tps", "2,4,8", "--max-instances", "4",
                   "--no-knee", "--json", "--top", str(k)])
        out, _ = capsys.readouterr()
        assert rc == 0
        d = json.loads(out)
        by_k[k] = [(p["label"], p["goodput_rps"]) for p in d["plans"]]
        if k == 1:
            best_config = json.dumps(d.get("serving_config"), sort_keys=True)
        else:
            assert json.dumps(d.get("serving_config"), sort_keys=True) == best_config
    _assert_prefixes(by_k)
