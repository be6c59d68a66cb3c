"""Input checks every FCFS queue shares: a positive rate or time, an integer server count, and
stability ρ < 1 (raised as :class:`~qmodel.errors.UnstableError` with the rate at which it binds)."""

from __future__ import annotations

import math

from qmodel.errors import InputError, UnstableError

__all__ = ["require_positive", "require_servers", "require_stable"]


def require_positive(name: str, value: float) -> float:
    v = float(value)
    if not math.isfinite(v) or v <= 0:
        raise InputError(name, value, "must be a finite number > 0")
    return v


def require_servers(c: int) -> int:
    if int(c) != c or c < 1:
        raise InputError("servers", c, "must be an integer >= 1")
    return int(c)


def require_stable(station: str, rho: float, lam: float) -> None:
    if rho >= 1.0:
        raise UnstableError(station, rho, lam, lam / rho * (1.0 - 1e-12))
