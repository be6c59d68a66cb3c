"""The binding constraint and the KV link's bandwidth need, read from the percentile the SLO names.

Binding (:func:`diagnose`): the metric that binds is the one fewer requests meet (TTFT or TPOT).
A disaggregated metric is a sum of independent station terms (:meth:`qmodel.solver.Solver.latency_terms`):

    first token from prefill:  TTFT = prefill (queue wait and own batch)
                               TPOT = decode step (batch size) + (KV link + decode admission wait) / (L − 1)
    first token from decode:   TTFT = prefill + KV link (wait and exposed transfer) + decode admission
                                      wait and first step
                               TPOT = decode step (batch size)

Each term's contribution at the percentile p is what removing it takes off the metric's p-th
percentile, q_p(all terms) − q_p(all terms but that one) (waits included: a station's term holds
its queue). The largest part is the term contributing most; summing means instead, or comparing
each term's own percentile, misses a link whose wait is a few long outliers or a term that only
matters in the tail.

Bandwidth needed (:func:`link_report`): the total bandwidth at which the link's contribution to
the p-th percentile of TTFT and of TPOT stays within LINK_SHARE of the target, found by bisection
on log bandwidth with the link re-solved at each point (the prefill and decode solutions are kept:
the decode KV reserved for transfers in flight, which shrinks with bandwidth, is not re-solved, so
the figure is slightly conservative). :class:`ShareSearch` returns that bisection's answer while
re-solving the link only where monotonicity in the bandwidth leaves a decision open (3-6 link solves
instead of 9-11). The mean byte rate, which the link must exceed merely to be stable, is reported
beside it.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any, Callable

from qmodel.dist import GridDist, convolve
from qmodel.errors import QmodelError, UnstableError
from qmodel.result import LinkReport

__all__ = ["diagnose", "binding_at", "largest_part", "link_report", "contributions", "ShareSearch", "LINK_SHARE"]

LINK_SHARE = 0.10  # the link's allowed share of each SLO target at the SLO percentile
_BW_REL_TOL = 0.02  # bandwidth search precision (relative)
_BW_MAX_FACTOR = 1e4  # search up to this multiple of the available bandwidth


def _q(terms: list[GridDist], q: float) -> float:
    return float((convolve(*terms) if len(terms) > 1 else terms[0]).quantile(q))


def _without(sol: Any, *fields: str) -> Any:
    """A station solution with the named distributions replaced by zero (the term removed)."""
    return dataclasses.replace(sol, **{f: GridDist.point(0.0, getattr(sol, f).dx) for f in fields
                                       if getattr(sol, f) is not None})


def contributions(solver: Any, c: Any) -> dict[str, dict[str, float]]:
    """{"TTFT"|"TPOT": {part: seconds it adds to the metric's SLO percentile}} (disaggregated)."""
    q = solver.scenario.slo.percentile / 100.0
    sp, st, sd = c.stations
    ttft, tpot = solver.latency_terms(sp, st, sd)
    base = {"TTFT": _q(ttft, q), "TPOT": _q(tpot, q)}
    removed = {
        "prefill queue and batch": (_without(sp, "delay"), st, sd),
        "KV link wait and transfer": (sp, _without(st, "delay", "wait"), sd),
        "decode admission wait": (sp, st, _without(sd, "wait", "delay")),
        "decode step (step time grows with the batch)": (sp, st, _without(sd, "tpot")),
    }
    out: dict[str, dict[str, float]] = {"TTFT": {}, "TPOT": {}}
    for name, sols in removed.items():
        t2, p2 = solver.latency_terms(*sols)
        out["TTFT"][name] = max(0.0, base["TTFT"] - _q(t2, q))
        out["TPOT"][name] = max(0.0, base["TPOT"] - _q(p2, q))
    return out


def _fmt_s(x: float) -> str:
    from qmodel.units import format_duration

    return format_duration(x)


def diagnose(solver: Any, c: Any) -> str:
    """The binding constraint at composition ``c`` in words (see the module doc)."""
    slo = solver.scenario.slo
    q = slo.percentile / 100.0
    if c.ttft_attainment <= c.tpot_attainment:
        metric, dist, target, att = "TTFT", c.ttft, slo.ttft_s, c.ttft_attainment
        culprit = f"{c.stations[0].name} prefill wait behind other iterations"
    else:
        metric, dist, target, att = "TPOT", c.tpot, slo.tpot_s, c.tpot_attainment
        culprit = f"{c.stations[0].name}: decode steps stretched by prefill work on the same GPUs"
    culprit = solver.topology.binding_part(solver, c, metric) or culprit
    busiest = max(c.stations, key=lambda s: s.utilization)
    return (f"{metric} binds: p{slo.percentile:g} {_fmt_s(dist.quantile(q))} vs target {_fmt_s(target)} "
            f"({att * 100:.1f}% meet it); largest part: {culprit}; busiest station {busiest.name} "
            f"at utilization {busiest.utilization:.2f}")


def largest_part(solver: Any, c: Any, metric: str) -> str:
    """The part adding most to ``metric``'s SLO percentile at ``c``, with the others' shares
    (:func:`contributions`; disaggregated)."""
    parts = contributions(solver, c)[metric]
    name = max(parts, key=lambda k: parts[k])
    others = ", ".join(f"{k.split(' (')[0]} {_fmt_s(v)}" for k, v in sorted(parts.items(), key=lambda t: -t[1])
                       if k != name)
    return f"{name} (adds {_fmt_s(parts[name])} to p{solver.scenario.slo.percentile:g}; {others})"


def binding_at(solver: Any, g: float, station: str) -> str:
    """The binding constraint at rate ``g`` (a goodput): what :func:`diagnose` says there, or
    why the SLO cannot be met at all (g <= 0), or the station at whose stability edge g sits."""
    if g <= 0:
        idle = solver.solve(solver.max_stable_rate()[0] * 1e-4)
        return f"SLO infeasible even when idle: {idle.binding}"
    c = solver.recent_composition(g)  # a goodput search solved g already: explain that solution
    if c is not None:
        return solver.binding(c)
    try:
        return solver.solve(g).binding
    except UnstableError:  # g sits at the stability edge
        return f"stability of {station}"


def _link_share(solver: Any, c: Any, bw_per_path: float, without: dict[str, float]) -> float:
    """max over TTFT/TPOT of the link's contribution to the SLO percentile / the target, with the
    link re-solved at ``bw_per_path`` (inf where it is unstable there)."""
    slo = solver.scenario.slo
    q = slo.percentile / 100.0
    sp, _, sd = c.stations
    try:
        st = solver.solve_link(c.rate_per_s, sp, sd, bw_per_path)
    except (UnstableError, QmodelError):
        return math.inf
    ttft, tpot = solver.latency_terms(sp, st, sd)
    return max((_q(ttft, q) - without["TTFT"]) / slo.ttft_s, (_q(tpot, q) - without["TPOT"]) / slo.tpot_s)


def link_report(solver: Any, c: Any) -> LinkReport:
    """The link's report at ``c``, its bandwidth need found as the module doc states."""
    tr = solver.transfer_station
    r = solver.resolved
    base = tr.link_report(c.rate_per_s, c.stations[1]).model_copy(update={
        "link": r.link.name, "paths": r.link_paths, "bandwidth_per_path_bytes_per_s": r.link_bandwidth_bytes_per_s,
        "nominal_per_path_bytes_per_s": r.link.bandwidth_bytes_per_s, "efficiency": r.link.efficiency})
    q = solver.scenario.slo.percentile / 100.0
    sp, st, sd = c.stations
    t0, p0 = solver.latency_terms(sp, _without(st, "delay", "wait"), sd)
    without = {"TTFT": _q(t0, q), "TPOT": _q(p0, q)}
    paths = base.bandwidth_available_bytes_per_s / tr.bandwidth_bytes_per_s
    have = tr.bandwidth_bytes_per_s
    floor = base.bandwidth_needed_bytes_per_s / paths  # per path: at or below it the link is unstable
    search = ShareSearch(lambda bw: _link_share(solver, c, bw, without), floor)
    ok = search.ok

    hi = have
    if not ok(hi):
        while not ok(hi):
            hi *= 4.0
            if hi > have * _BW_MAX_FACTOR:
                return base.model_copy(update={
                    "bandwidth_needed_bytes_per_s": base.bandwidth_available_bytes_per_s * _BW_MAX_FACTOR,
                    "sufficient": False, "mean_byte_rate_bytes_per_s": base.bandwidth_needed_bytes_per_s,
                    "share_of_target": LINK_SHARE, "reachable": False})
        lo, first = hi / 4.0, None
    else:
        lo = first = max(floor * (1.0 + 1e-6), 1e-300)
    need = search.bisect(lo, hi, first) * paths
    return base.model_copy(update={"bandwidth_needed_bytes_per_s": need,
                                   "sufficient": need <= base.bandwidth_available_bytes_per_s * (1 + _BW_REL_TOL),
                                   "mean_byte_rate_bytes_per_s": base.bandwidth_needed_bytes_per_s,
                                   "share_of_target": LINK_SHARE, "reachable": True})


class ShareSearch:
    """The smallest bandwidth with ``share(bw) <= LINK_SHARE``, as the plain bisection on log
    bandwidth finds it (:meth:`bisect`), with fewer link solves.

    ``share`` falls with bandwidth (a faster link waits less and transfers faster; inf at or below
    the stability floor), so one evaluation decides every point on its side: ok at b means ok above
    b, not ok at a means not ok below a. The bisection's path of midpoints is fixed by its decisions
    alone, so if the two points it ends between are evaluated (ok above, not ok below), every
    other decision on the path follows from them. The search guesses the crossing (the share
    interpolated linearly in log(share) against log(bw − floor) between the tightest known points
    on either side, i.e. share ~ 1/(bw − floor)^α near the floor), runs the bisection with that
    guess standing in for the unknown decisions, and evaluates the undecided point on that path
    nearest the guess, until no point on the path is undecided: typically 3-5 link solves instead
    of 9-11. The bisection is then replayed with the evaluated and the implied decisions, in the
    same floating-point operations, so its answer is the plain bisection's to the bit wherever the
    share is monotone in the bandwidth (tests/test_binding_search.py checks it against the plain
    bisection).
    """

    GUESSES = 8  # evaluations spent on guesses; past them the replay evaluates what is undecided

    def __init__(self, share: Callable[[float], float], floor: float) -> None:
        self.share = share
        self.floor = floor
        self.known: dict[float, float] = {}

    def evaluate(self, bw: float) -> float:
        if bw not in self.known:
            self.known[bw] = self.share(bw)
        return self.known[bw]

    def decided(self, bw: float) -> bool | None:
        """ok at ``bw`` if an evaluation decides it (there or by monotonicity), else None."""
        if bw in self.known:
            return self.known[bw] <= LINK_SHARE
        if any(v <= LINK_SHARE and b <= bw for b, v in self.known.items()):
            return True
        if any(v > LINK_SHARE and b >= bw for b, v in self.known.items()):
            return False
        return None

    def ok(self, bw: float) -> bool:
        d = self.decided(bw)
        return self.evaluate(bw) <= LINK_SHARE if d is None else d

    def _path(self, lo: float, hi: float, first: float | None, decide: Callable[[float], bool]) -> float:
        """The bisection on [lo, hi] (``first``: lo, tested first; ok there ends it), ``decide``
        answering; returns its hi."""
        if first is not None and decide(first):
            return first
        while hi / lo > 1.0 + _BW_REL_TOL:
            mid = math.sqrt(lo * hi)
            if decide(mid):
                hi = mid
            else:
                lo = mid
        return hi

    def _guess(self) -> float | None:
        """The crossing interpolated from the tightest evaluations on either side (None: none ok yet)."""
        ok_pts = [(b, v) for b, v in self.known.items() if v <= LINK_SHARE]
        if not ok_pts:
            return None
        b_hi, s_hi = min(ok_pts)
        bad = [(b, v) for b, v in self.known.items() if v > LINK_SHARE and self.floor < b < b_hi]
        if not (s_hi > 0.0 and math.isfinite(s_hi)) or b_hi <= self.floor:
            return None
        x_hi, y_hi = math.log(b_hi - self.floor), math.log(s_hi)
        if bad and math.isfinite(max(bad)[1]):
            b_lo, s_lo = max(bad)
            x_lo, y_lo = math.log(b_lo - self.floor), math.log(s_lo)
        else:  # nothing finite below: share ~ 1/(bw − floor)
            b_lo, x_lo, y_lo = max(bad)[0] if bad else self.floor, x_hi - 1.0, y_hi + 1.0
        x = x_lo + (math.log(LINK_SHARE) - y_lo) * (x_hi - x_lo) / (y_hi - y_lo)
        guess = self.floor + math.exp(x)
        return guess if b_lo < guess < b_hi else math.sqrt(max(b_lo, 1e-300) * b_hi)

    def bisect(self, lo: float, hi: float, first: float | None) -> float:
        """What the plain bisection on log bandwidth over [lo, hi] returns (``first``: see :meth:`_path`)."""
        for _ in range(self.GUESSES):
            guess = self._guess()
            if guess is None:
                break
            undecided: list[float] = []

            def predict(bw: float, g: float = guess, todo: list[float] = undecided) -> bool:
                d = self.decided(bw)
                if d is None:
                    todo.append(bw)
                    return bw >= g
                return d

            self._path(lo, hi, first, predict)
            if not undecided:
                break
            self.evaluate(min(undecided, key=lambda b: abs(math.log(b / guess))))
        return self._path(lo, hi, first, self.ok)
