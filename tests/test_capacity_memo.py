"""The saturated schedule (qmodel.stations.capacity.saturated_schedule) is a pure function of its
inputs, and the last few are kept by them (the planner builds one decode station per instance
count, each asking for the same schedule): a repeat with equal inputs returns the kept answer, and
any changed input (the service object, a sample's contents, a cap) computes afresh. Its iterations
do not depend on the service: they are kept apart from it, and another service object only times
them again (the same numbers as a schedule computed from nothing)."""

from __future__ import annotations

import copy

import numpy as np
import pytest

from data_needs import EXAMPLES, example_needs

import qmodel.stations.capacity as capacity
from qmodel.stations.capacity import iterations, saturated_schedule, timed


def _inputs(name: str):
    from qmodel.solver import Solver
    from qmodel.scenario import load_scenario

    r = Solver(load_scenario(EXAMPLES / f"{name}.yaml")).resolved
    return r, np.asarray(r.lengths.prompt, dtype=float), np.asarray(r.lengths.output, dtype=float)


@pytest.mark.parametrize("name", [pytest.param("llama3-8b-colocated-h100", marks=example_needs("llama3-8b-colocated-h100"))])
def test_repeat_returns_the_kept_schedule_and_changes_recompute(name: str) -> None:
    r, p, L = _inputs(name)
    svc = next(iter(r.pools.values())).service
    kv = 2.0e5
    a = saturated_schedule(svc, p, L, kv, None, None)
    assert saturated_schedule(svc, p.copy(), L.copy(), kv, None, None) is a  # equal contents: kept
    other_service = saturated_schedule(copy.copy(svc), p, L, kv, None, None)
    assert other_service == a and other_service is not a  # another service object: computed again, same answer
    p2 = p.copy()
    p2[0] += 1.0
    assert saturated_schedule(svc, p2, L, kv, None, None) is not a  # one prompt changed
    assert saturated_schedule(svc, p, L, kv * 0.5, None, None) != a  # less KV: a smaller schedule
    assert saturated_schedule(svc, p, L, kv, 8, None) != a  # a slot cap
    assert saturated_schedule(svc, p, L, kv, None, 2048) != a  # prefill iterations in the schedule


@pytest.mark.parametrize("name", [pytest.param("llama3-8b-colocated-h100", marks=example_needs("llama3-8b-colocated-h100"))])
def test_iterations_are_kept_apart_from_the_service(name: str, monkeypatch: pytest.MonkeyPatch) -> None:
    r, p, L = _inputs(name)
    svc = next(iter(r.pools.values())).service
    for kv, cap, budget in ((2.0e5, None, None), (2.0e5, 8, 2048), (None, 64, 2048)):
        fresh = timed(svc, iterations(p, L, kv, cap, budget, 0, None))
        assert saturated_schedule(svc, p, L, kv, cap, budget) == fresh
        # another service object (what a new resolution builds): the kept iterations are timed
        # again, not recomputed, and give the same numbers
        monkeypatch.setattr(capacity, "iterations", lambda *a, **k: pytest.fail("iterations recomputed"))
        assert saturated_schedule(copy.copy(svc), p, L, kv, cap, budget) == fresh
        monkeypatch.undo()
    # no cap at all: the schedule's answer needs no times
    assert timed(svc, iterations(p, L, None, None, None, 0, None)) == (float("inf"), float("inf"))
