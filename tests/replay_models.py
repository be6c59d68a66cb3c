"""Tiny service-time models for replay tests (pure, linear, documented)."""

from __future__ import annotations

import hashlib

import numpy as np

from qmodel.perf.base import ServiceTimeModel


class LinearModel(ServiceTimeModel):
    """prefill: alpha + gamma*sum_tokens + per_req*n ; decode step: a + b*n + c*sum_context."""

    kind = "test-linear"

    def __init__(self, alpha=0.0, gamma=0.0, per_req=0.0, a=0.01, b=0.0, c=0.0) -> None:
        self.p = (alpha, gamma, per_req, a, b, c)

    def prefill_time_s(self, sum_tokens, sum_sq_tokens, n_requests):
        alpha, gamma, per_req, *_ = self.p
        return alpha + gamma * np.asarray(sum_tokens, float) + per_req * np.asarray(n_requests, float)

    def decode_step_time_s(self, n_seqs, sum_context_tokens):
        *_, a, b, c = self.p
        return a + b * np.asarray(n_seqs, float) + c * np.asarray(sum_context_tokens, float)

    @property
    def fingerprint(self) -> str:
        return hashlib.sha256(repr(self.p).encode()).hexdigest()
