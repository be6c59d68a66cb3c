"""M/M/c, exact: Erlang B and C and the exponential waiting-time law.

Erlang B by the stable recursion B_k = aB_{k-1}/(k + aB_{k-1}), C = B/(1 − ρ(1 − B)),
P(W > t) = C·e^{−(cμ−λ)t}, E[W] = C/(cμ − λ), a = λ/μ, ρ = a/c (Erlang 1909).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from functools import cached_property

from qmodel.errors import InputError, UnstableError
from qmodel.stations.fcfs.checks import require_positive, require_servers, require_stable
from qmodel.stations.fcfs.waiting import ExpTail

__all__ = ["erlang_b", "erlang_c", "MMc", "MM1", "mm1_sojourn_quantile"]


def erlang_b(c: int, a: float) -> float:
    """Erlang B blocking probability by the stable recursion B_k = aB_{k−1}/(k + aB_{k−1})."""
    c = require_servers(c)
    a = float(a)
    if a < 0:
        raise InputError("offered_load", a, "must be >= 0")
    b = 1.0
    for k in range(1, c + 1):
        b = a * b / (k + a * b)
    return b


def erlang_c(c: int, a: float) -> float:
    """Erlang C probability of waiting, C = B/(1 − ρ(1 − B)), ρ = a/c < 1."""
    c = require_servers(c)
    rho = a / c
    if rho >= 1:
        raise UnstableError("fcfs", rho, a, float(c))
    b = erlang_b(c, a)
    return b / (1.0 - rho * (1.0 - b))


@dataclass(frozen=True)
class MMc(ExpTail):
    """M/M/c: P(W > t) = C(c, a) e^{−(cμ−λ)t}, E[W] = C/(cμ − λ), a = λ/μ (exact)."""

    lam: float
    mu: float
    c: int = 1
    method: str = field(default="M/M/c Erlang C", init=False)

    def __post_init__(self) -> None:
        require_positive("arrival_rate_per_s", self.lam)
        require_positive("service_rate_per_s", self.mu)
        require_servers(self.c)
        require_stable("fcfs", self.lam / (self.c * self.mu), self.lam)

    @property
    def rho(self) -> float:
        return self.lam / (self.c * self.mu)

    @cached_property
    def p_wait(self) -> float:  # type: ignore[override]
        return erlang_c(self.c, self.lam / self.mu)

    @property
    def decay_rate(self) -> float:
        return self.c * self.mu - self.lam

    @property
    def tail_const(self) -> float:
        return self.p_wait

    @property
    def mean_s(self) -> float:
        return self.p_wait / self.decay_rate

    @property
    def lq(self) -> float:
        return self.lam * self.mean_s

    @property
    def mean_sojourn_s(self) -> float:
        return self.mean_s + 1.0 / self.mu


def MM1(lam: float, mu: float) -> MMc:
    """M/M/1 (sojourn T ~ Exp(μ − λ): see :func:`mm1_sojourn_quantile`)."""
    return MMc(lam, mu, 1)


def mm1_sojourn_quantile(lam: float, mu: float, q: float) -> float:
    """M/M/1 sojourn time T ~ Exp(μ − λ): quantile −ln(1 − q)/(μ − λ)."""
    MMc(lam, mu, 1)
    return -math.log1p(-q) / (mu - lam)
