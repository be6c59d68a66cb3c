"""M/G/c approximation: Cosmetatos/Whitt mean with a mean-matched exponential tail.

E[W] ≈ (c_s² + (1 − c_s²)(1+γ)/2)·E[W_{M/M/c}], γ = (1−ρ)(c−1)(√(4+5c) − 2)/(16cρ), and
P(W > t) ≈ min(C(c,a), η E[W] e^{−ηt}), λ(E[e^{ηS/c}] − 1) = η; Cosmetatos' M/D/c mean is the
c_s² = 0 case (Cosmetatos 1976; Whitt 1993).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from functools import cached_property

from qmodel.stations.fcfs.checks import require_positive, require_servers, require_stable
from qmodel.stations.fcfs.erlang import MMc, erlang_c
from qmodel.stations.fcfs.service import ServiceSample, cramer_lundberg
from qmodel.stations.fcfs.waiting import ExpTail

__all__ = ["MGc", "cosmetatos_mdc"]


def cosmetatos_mdc(lam: float, d: float, c: int) -> float:
    """Cosmetatos' M/D/c mean wait ½(1+γ) E[W_{M/M/c}]."""
    return _whitt_mean(lam, d, c, 0.0)


def _whitt_mean(lam: float, mean_s: float, c: int, cs2: float) -> float:
    rho = lam * mean_s / c
    wmmc = MMc(lam, 1.0 / mean_s, c).mean_s
    gamma = (1.0 - rho) * (c - 1) * (math.sqrt(4.0 + 5.0 * c) - 2.0) / (16.0 * c * rho)
    if cs2 <= 1.0:
        return (cs2 + (1.0 - cs2) * (1.0 + gamma) / 2.0) * wmmc
    # Above c_s² = 1 the interpolation has no support; Allen–Cunneen's (1 + c_s²)/2 scaling is the
    # standard choice (exact for M/G/1).
    return (1.0 + cs2) / 2.0 * wmmc


@dataclass(frozen=True)
class MGc(ExpTail):
    """M/G/c approximation: Cosmetatos/Whitt mean with a mean-matched exponential tail.

    P(W > t) ≈ min(C(c,a), η·E[W]·e^{−ηt}), η solving λ(E[e^{ηS/c}] − 1) = η (exact decay for
    M/G/1, M/M/c and M/D/c). For c = 1 the mean is the exact P-K mean.
    """

    lam: float
    service: ServiceSample
    c: int = 1
    method: str = field(default="M/G/c Cosmetatos/Whitt mean + mean-matched exponential tail", init=False)
    exact: bool = field(default=False, init=False)

    def __post_init__(self) -> None:
        require_positive("arrival_rate_per_s", self.lam)
        require_servers(self.c)
        require_stable("fcfs", self.rho, self.lam)

    @property
    def rho(self) -> float:
        return self.lam * self.service.mean_s / self.c

    @property
    def p_wait(self) -> float:  # type: ignore[override]
        return erlang_c(self.c, self.lam * self.service.mean_s)

    @property
    def mean_s(self) -> float:
        if self.c == 1:
            return self.lam * self.service.moment(2) / (2.0 * (1.0 - self.rho))
        return _whitt_mean(self.lam, self.service.mean_s, self.c, self.service.scv)

    @cached_property
    def decay_rate(self) -> float:  # type: ignore[override]
        return cramer_lundberg(self.lam, self.service, scale=1.0 / self.c)[0]

    @property
    def tail_const(self) -> float:
        return self.decay_rate * self.mean_s
