"""M/G/1 FCFS: Pollaczek–Khinchine mean E[W] = λE[S²]/(2(1−ρ)) (exact), Takács second moment
E[W²] = 2E[W]² + λE[S³]/(3(1−ρ)) (exact), tail P(W > t) ≈ min(ρ, C e^{−ηt}) with the exact
Cramér–Lundberg decay λ(E[e^{ηS}] − 1) = η and C = (1−ρ)/(λE[S e^{ηS}] − 1) (Takács 1962).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import cached_property

from qmodel.stations.fcfs.checks import require_positive, require_stable
from qmodel.stations.fcfs.service import ServiceSample, cramer_lundberg
from qmodel.stations.fcfs.waiting import ExpTail

__all__ = ["MG1"]


@dataclass(frozen=True)
class MG1(ExpTail):
    """M/G/1 FCFS: exact P-K mean and Takács second moment; Cramér–Lundberg exponential tail.

    P(W > t) ≈ min(ρ, C e^{−ηt}): the atom P(W = 0) = 1 − ρ and the decay η are exact, and for
    M/D/1 at ρ = 0.8 p90/p99 agree with the exact law to 4 digits (docs/methods.md, "Stations": fcfs).
    """

    lam: float
    service: ServiceSample
    method: str = field(default="M/G/1 Pollaczek-Khinchine + Cramer-Lundberg tail", init=False)
    exact: bool = field(default=False, init=False)

    def __post_init__(self) -> None:
        require_positive("arrival_rate_per_s", self.lam)
        require_stable("fcfs", self.rho, self.lam)

    @property
    def rho(self) -> float:
        return self.lam * self.service.mean_s

    @property
    def p_wait(self) -> float:  # type: ignore[override]
        return self.rho

    @property
    def mean_s(self) -> float:
        return self.lam * self.service.moment(2) / (2.0 * (1.0 - self.rho))

    @property
    def second_moment_s2(self) -> float:
        w = self.mean_s
        return 2.0 * w * w + self.lam * self.service.moment(3) / (3.0 * (1.0 - self.rho))

    @cached_property
    def _cl(self) -> tuple[float, float]:
        return cramer_lundberg(self.lam, self.service)

    @property
    def decay_rate(self) -> float:
        return self._cl[0]

    @property
    def tail_const(self) -> float:
        return self._cl[1]
