"""The token-budget law's bookkeeping kept apart from the step-time model
(:mod:`qmodel.stations.prefill.budget_plan`): the laws are bit-identical to the one-pass build they
replaced, and a kept plan serves every service model."""

from __future__ import annotations

import hashlib

import numpy as np
import pytest

from qmodel.stations.prefill import BatchServiceLaw
from qmodel.stations.prefill.budget_plan import budget_plan
from qmodel.stations.prefill.sampling import prompt_sample
from test_stations_prefill import LinearPrefill, _prompts


def _digest(law: BatchServiceLaw) -> str:
    """sha256 (16 hex digits) of every array of a token-budget law and its head regimes."""
    h = hashlib.sha256()

    def add(lw: BatchServiceLaw) -> None:
        for a in (*lw.values_s, *lw.weights, lw.mean_s, lw.second_s2, *(lw.full_values_s or ()),
                  *(lw.full_weights or ())):
            h.update(np.ascontiguousarray(a, dtype=float).tobytes())

    add(law)
    for r in law.head_regimes or ():
        h.update(r.p_n.tobytes())
        h.update(r.s_n.tobytes())
        add(r.fit)
        add(r.cut)
        if r.after_cut is not None:
            h.update(np.asarray(r.after_cut).tobytes())
    return h.hexdigest()[:16]


CASES = [  # (service, prompts, budget, cap, cached, digest of the one-pass build at 93f83bd)
    (LinearPrefill(), _prompts(), 8192.0, 256, None, "7699861d08f00157"),
    (LinearPrefill(0.01, 2e-4, 1e-9), _prompts(), 4096.0, 16, np.rint(0.3 * _prompts()), "fa9186eec51b8a15"),
    (LinearPrefill(), _prompts(300, 3), 20000.0, 256, None, "116d87292c24e5e3"),
]


@pytest.mark.parametrize("case", range(len(CASES)))
def test_law_bit_identical_to_one_pass_build(case: int) -> None:
    """Exact: the digests were taken from the one-pass build (main 93f83bd) of the same inputs; a
    changed random stream or a reordered sum changes them. Built twice: the kept plan gives the
    same bits as the fresh one."""
    service, prompts, budget, cap, cached, want = CASES[case]
    for _ in range(2):
        law = BatchServiceLaw.from_prompts_budget(service, prompts, budget, cap, cached_tokens=cached)
        assert _digest(law) == want


def test_plan_shared_across_service_models() -> None:
    """One plan per (prompts, cached, budget, cap, seed), whatever the step-time model; a law built
    after another model's is the same as one built first (the plan is read-only)."""
    prompts = _prompts(2000, 5)
    a, b = LinearPrefill(0.02, 1e-4), LinearPrefill(0.05, 3e-4, 2e-9)
    first_b = _digest(BatchServiceLaw.from_prompts_budget(b, prompts, 6000.0, 64, seed=11))
    _digest(BatchServiceLaw.from_prompts_budget(a, prompts, 6000.0, 64, seed=11))
    assert _digest(BatchServiceLaw.from_prompts_budget(b, prompts, 6000.0, 64, seed=11)) == first_b
    p, c = prompt_sample(prompts, None)
    plan = budget_plan(p, c, 6000.0, 64, 11)
    assert budget_plan(p.copy(), c.copy(), 6000.0, 64, 11) is plan
    assert budget_plan(p, c, 6001.0, 64, 11) is not plan
    assert not plan.first.overflow.flags.writeable
