"""Pareto flags of ranked plans over (goodput per GPU, p90 TTFT, p90 TPOT)."""

from __future__ import annotations

from typing import Iterable

__all__ = ["pareto_flags"]


def pareto_flags(points: Iterable[tuple[float, float, float]]) -> list[bool]:
    """For (goodput per GPU, p90 TTFT, p90 TPOT) triples: True where no other point is at least as
    good in all three and strictly better in one."""
    pts = list(points)
    flags = []
    for i, (g, a, b) in enumerate(pts):
        dom = any((g2 >= g and a2 <= a and b2 <= b) and (g2 > g or a2 < a or b2 < b)
                  for j, (g2, a2, b2) in enumerate(pts) if j != i)
        flags.append(not dom)
    return flags
