"""The chunked saturated schedule (qmodel/stations/chunked_capacity.py) against hand-computed schedules.

A service model with every term the engine uses (prefill: fixed + per token + per attention pair +
per prompt; decode step: fixed + per sequence + per context token), so each iteration's time is a
closed form. Tolerance 1e-3: the rate is completions over the time of the iterations after the
warm-up, and the warm-up's end cuts a cycle (one cycle in ~6,500, measured ~1e-4).
"""

from __future__ import annotations

import hashlib
import math

import numpy as np
import pytest

from qmodel.perf.base import ServiceTimeModel
from qmodel.stations.chunked_capacity import chunked_saturated_rate_per_s, chunked_saturation

ALPHA, GAMMA, ETA, PER_REQ = 0.02, 1e-5, 1e-9, 1e-3
A, B_SEQ, C_CTX = 0.01, 2e-4, 1e-7


class Affine(ServiceTimeModel):
    """prefill: ALPHA + GAMMA*tokens + ETA*sum_sq + PER_REQ*k; decode step: A + B_SEQ*n + C_CTX*context."""

    kind = "test-affine"

    def __init__(self, ctx: float = C_CTX) -> None:
        self.ctx = ctx

    def prefill_time_s(self, sum_tokens, sum_sq_tokens, n_requests):
        return (ALPHA + GAMMA * np.asarray(sum_tokens, float) + ETA * np.asarray(sum_sq_tokens, float)
                + PER_REQ * np.asarray(n_requests, float))

    def decode_step_time_s(self, n_seqs, sum_context_tokens):
        return A + B_SEQ * np.asarray(n_seqs, float) + self.ctx * np.asarray(sum_context_tokens, float)

    @property
    def fingerprint(self) -> str:
        return hashlib.sha256(repr(("affine", self.ctx)).encode()).hexdigest()


def _fixed(p: int, out: int, n: int = 10) -> tuple[np.ndarray, np.ndarray]:
    return np.full(n, float(p)), np.full(n, float(out))


def test_one_slot_one_chunk():
    # one slot: prefill alone T(P, P^2, 1), then L - 1 decode steps with contexts P + 1 .. P + L - 1
    sv = Affine()
    p, out = 300, 5
    t_pre = ALPHA + GAMMA * p + ETA * p * p + PER_REQ
    t_dec = sum(A + B_SEQ + C_CTX * (p + j) for j in range(1, out))
    rate = chunked_saturated_rate_per_s(sv, *_fixed(p, out), None, 1, 512)
    assert rate == pytest.approx(1.0 / (t_pre + t_dec), rel=1e-3)


def test_one_slot_two_chunks_reread_earlier_kv():
    # P = 768 over a 512 budget: chunks 512 (attention 512^2) and 256 over 512 computed tokens
    # (256^2 + 2*256*512): together P^2
    sv = Affine()
    p, out = 768, 3
    t_pre = 2 * (ALPHA + PER_REQ) + GAMMA * p + ETA * (512**2 + 256**2 + 2 * 256 * 512)
    t_dec = sum(A + B_SEQ + C_CTX * (p + j) for j in range(1, out))
    rate = chunked_saturated_rate_per_s(sv, *_fixed(p, out), None, 1, 512)
    assert rate == pytest.approx(1.0 / (t_pre + t_dec), rel=1e-3)


def test_two_slots_mix_one_prompt_with_the_decodes():
    # max_batch 2, P = 100, L = 3 (no context cost): a slot frees one at a time, so the cycle is
    # mixed (a prompt + 1 decode), mixed (a prompt + 1 decode), decode step of 2: 2 requests, where
    # the fluid packing would put both prompts in one iteration
    sv = Affine(ctx=0.0)
    t_mix = ALPHA + GAMMA * 101 + ETA * 100**2 + PER_REQ
    rate = chunked_saturated_rate_per_s(sv, *_fixed(100, 3), None, 2, 512)
    assert rate == pytest.approx(2.0 / (2 * t_mix + A + 2 * B_SEQ), rel=1e-3)


def test_kv_cap_counts_prompt_plus_reserved_output():
    # KV for exactly one sequence of 300 + 5 (a second never fits): the one-slot schedule; a
    # max_tokens reservation of 10 outputs in 610 tokens holds one too
    sv = Affine()
    one = chunked_saturated_rate_per_s(sv, *_fixed(300, 5), None, 1, 512)
    assert chunked_saturated_rate_per_s(sv, *_fixed(300, 5), 609.0, None, 512) == pytest.approx(one, rel=1e-12)
    assert chunked_saturated_rate_per_s(sv, *_fixed(300, 5), 610.0, None, 512, reserved_output=np.full(10, 10.0)) \
        == pytest.approx(one, rel=1e-12)


def test_no_cap_and_nothing_fits():
    sv = Affine()
    assert chunked_saturated_rate_per_s(sv, *_fixed(300, 5), None, None, 512) == math.inf
    assert chunked_saturated_rate_per_s(sv, *_fixed(300, 5), 304.0, None, 512) == 0.0


def test_two_slots_schedule_statistics():
    # the cycle of test_two_slots_mix_one_prompt_with_the_decodes: every mixed iteration carries one
    # prompt of 100 tokens and one decode, and takes T_p(101, 100^2, 1)
    sat = chunked_saturation(Affine(ctx=0.0), *_fixed(100, 3), None, 2, 512)
    assert sat.prompts_per_mixed == pytest.approx(1.0, rel=1e-12)
    assert sat.prompt_tokens_per_mixed == pytest.approx(100.0, rel=1e-12)
    assert sat.decodes_per_mixed == pytest.approx(1.0, rel=1e-12)
    assert sat.mixed_time_s == pytest.approx(ALPHA + GAMMA * 101 + ETA * 100**2 + PER_REQ, rel=1e-12)


def test_schedule_is_kept_by_its_inputs():
    # rate-independent: a second station over the same samples, caps and service reuses it
    sv = Affine()
    first = chunked_saturation(sv, *_fixed(300, 5), None, 1, 512)
    assert chunked_saturation(sv, *_fixed(300, 5), None, 1, 512) is first
    assert chunked_saturation(sv, *_fixed(300, 5), None, 2, 512) is not first

