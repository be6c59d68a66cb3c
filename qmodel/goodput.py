"""Goodput: the largest arrival rate whose SLO attainment meets the goal.

    goodput = sup { λ < λ_max : A(λ) >= goal },   A(λ) = P(TTFT <= x, TPOT <= y) at rate λ

λ_max is the smallest per-station stability limit, so the bracket never contains an unstable
rate. A(λ) is non-increasing in λ for the FCFS, bulk and GPS stations used here (Lindley
coupling); the bisection asserts it on the points it evaluates and raises NumericalError if a
solver breaks monotonicity, rather than return a wrong answer.

Per-GPU and per-dollar figures divide by the deployment's GPU count and list price per hour.
Sensitivities are elasticities d ln(goodput) / d ln(input), by a one-sided finite difference of
the whole goodput computation (the inputs are integers or catalog choices as often as reals).
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Callable

from qmodel.errors import NumericalError
from qmodel.progress import ProgressFn
from qmodel.result import Goodput, Sensitivity
from qmodel.roots import brent
from qmodel.scenario import Scenario, scenario_sha256

__all__ = ["elasticity", "goodput", "goodput_search", "perturbations", "sensitivities"]

REL_TOL = 1e-3  # bisection stops when the bracket is 0.1 % of the rate: far below model error
_CLIMB = (0.75, 0.9, 0.97, 0.99, 0.999)  # load fractions probed above half load, cheapest first
_DESCEND = (0.25, 0.05, 1e-4)  # and below it, dearest first (the last: the system nearly idle)


def _y(a: float) -> float:
    """log(1 − A): closer to linear in λ than A itself where attainment falls from 1 towards 0
    (tail probabilities of queueing delays grow roughly geometrically with the load)."""
    return math.log(max(1.0 - a, 1e-12))


def goodput_search(attainment: Callable[[float], float], lam_max: float, goal: float,
                   guess: float | None = None) -> tuple[float, float]:
    """(goodput, attainment at goodput): the root of A(λ) = goal on (0, lam_max), bracketed.

    The bracket [lo, hi] (A(lo) >= goal > A(hi)) shrinks until hi − lo <= REL_TOL·hi, as plain
    bisection would, but by Brent's method on log(1 − A(λ)) − log(1 − goal) (inverse quadratic
    interpolation and secant steps, with bisection whenever they do not shrink the bracket fast
    enough; :func:`qmodel.roots.brent`): 4-8 solves instead of 14 on the shipped examples. The bracket comes
    from half load, then steps up (0.75, 0.9, ... of λmax) or down (0.25, 0.05, 1e-4) to the first
    rate on the other side of the goal. Brent stops with
    a bracket of at most REL_TOL·b between evaluated rates; any rest is finished by
    bisection. The result is the bracket's lower end, as before, so it differs from bisection's
    by less than REL_TOL.

    ``guess``: a warm start where the caller has a nearby answer (the base goodput for the
    sensitivities' perturbed scenarios, the TUI's last goodput): the bracket is then grown from
    the guess (:func:`_bracket_near`) instead of from half load, and an unchanged answer costs two
    solves. The answer has the same contract either way: the lower end of an evaluated bracket of
    width <= REL_TOL·hi, so a warm and a cold search differ by less than REL_TOL (0.1 %).
    """
    if not (lam_max > 0 and math.isfinite(lam_max)):
        return 0.0, 0.0
    if guess is not None and 1e-4 * lam_max < guess < _CLIMB[-1] * lam_max:
        seen: list[tuple[float, float]] = []
        near = _bracket_near(attainment, lam_max, goal, guess, seen)
        if near is None:  # as the cold search's ends: met up to 0.999·λmax, or missed even near idle
            x_end, a_end = seen[-1]
            _check_monotone(seen, goal)
            return (x_end if a_end >= goal else 0.0), a_end
        (lo, a_lo), (hi, a_hi) = near
        return _finish(attainment, lo, a_lo, hi, a_hi, goal, seen)
    # Half load first: solves near saturation are the dearest (the chains' grids grow like
    # 1/(1 − ρ)), and when the goodput lies below half load the search never needs one; when it
    # lies above, A(λ) >= goal below half load follows from monotonicity and is not solved for.
    mid = 0.5 * lam_max
    a_mid = attainment(mid)
    seen: list[tuple[float, float]] = [(mid, a_mid)]
    if a_mid < goal:
        hi, a_hi = mid, a_mid
        # Descend in steps whose solves get cheaper, stopping at the first rate that meets the
        # goal: a bracket [λmax/4, λmax/2] needs fewer Brent steps than [λmax·1e-4, λmax/2], and
        # the near-idle point is solved only when everything above it misses.
        for frac in _DESCEND:
            lo = lam_max * frac
            a_lo = attainment(lo)
            seen.append((lo, a_lo))
            if a_lo >= goal:
                break
            hi, a_hi = lo, a_lo
        else:
            _check_monotone(seen, goal)
            return 0.0, a_lo
    else:
        lo, a_lo = mid, a_mid
        # Climb towards saturation in steps whose cost grows like 1/(1 − ρ), stopping at the first
        # miss: a solve at 0.999 load can cost a thousand solves at 0.75, and is needed only when
        # the goal holds almost up to saturation. The last 0.1 % is below every model's error.
        for frac in _CLIMB:
            hi = lam_max * frac
            a_hi = attainment(hi)
            seen.append((hi, a_hi))
            if a_hi < goal:
                break
            lo, a_lo = hi, a_hi
        else:
            _check_monotone(seen, goal)
            return lo, a_lo
    return _finish(attainment, lo, a_lo, hi, a_hi, goal, seen)


def _bracket_near(attainment: Callable[[float], float], lam_max: float, goal: float, guess: float,
                  seen: list[tuple[float, float]]) -> tuple[tuple[float, float], tuple[float, float]] | None:
    """A bracket ((lo, A(lo)), (hi, A(hi))) with A(lo) >= goal > A(hi), grown from ``guess``, or
    None when the goal holds up to 0.999·λmax or fails down to 1e-4·λmax (the cold search's ends).

    The first step is REL_TOL·guess (an unchanged answer is bracketed at once); each later one
    aims past the secant root of log(1 − A) through the last two rates by half the distance again,
    and is at least twice and at most 64 times the step before (a secant that points the wrong
    way, as grid noise can make it, is overruled by the doubling); upwards, no step closes more
    than two thirds of the gap to λmax."""
    top, bottom = _CLIMB[-1] * lam_max, 1e-4 * lam_max
    x0, a0 = guess, attainment(guess)
    seen.append((x0, a0))
    up = a0 >= goal
    step = REL_TOL * guess
    y_goal = _y(goal)
    while True:
        # upwards, at most two thirds of the way to saturation at a time (as the cold climb): a solve
        # costs about 1/(1 − ρ), and one at 0.999 load can cost a thousand at 0.75
        x1 = min(x0 + step, top, lam_max - (lam_max - x0) / 3.0) if up else max(x0 - step, bottom)
        a1 = attainment(x1)
        seen.append((x1, a1))
        if (a1 < goal) == up:  # crossed: bracketed
            return ((x0, a0), (x1, a1)) if up else ((x1, a1), (x0, a0))
        if x1 in (top, bottom):
            return None
        slope = (_y(a1) - _y(a0)) / (x1 - x0)  # log(1 − A) rises with λ; noise can flatten or flip it
        aim = 1.25 * abs((y_goal - _y(a1)) / slope) if slope > 0 else math.inf
        step = min(max(aim, 2.0 * step), 64.0 * step)
        x0, a0 = x1, a1


def _finish(attainment: Callable[[float], float], lo: float, a_lo: float, hi: float, a_hi: float, goal: float,
            seen: list[tuple[float, float]]) -> tuple[float, float]:
    """Shrink the bracket [lo, hi] (A(lo) >= goal > A(hi)) to REL_TOL·hi by Brent, then bisection."""
    y_goal = _y(goal)

    def g(a: float) -> float:
        # A >= goal must map to g >= 0 exactly (the clip in _y could tie them otherwise)
        return max(y_goal - _y(a), 0.0) if a >= goal else min(y_goal - _y(a), -1e-300)

    def f(x: float) -> float:
        a = attainment(x)
        seen.append((x, a))
        return g(a)

    brent(f, lo, hi, g(a_lo), g(a_hi), 0.5 * REL_TOL)
    lo = max(x for x, a in seen if a >= goal)
    a_lo = max(a for x, a in seen if x == lo)
    hi = min(x for x, a in seen if a < goal)
    first = True
    while hi - lo > REL_TOL * hi:
        # Brent stops at once on a point that meets the goal exactly (g = 0 there), leaving a wide
        # bracket; that point is the root if the curve is smooth, so the first probe sits just above
        # it, and the rest bisect.
        x = min(lo * (1.0 + 0.9 * REL_TOL), 0.5 * (lo + hi)) if first else 0.5 * (lo + hi)
        first = False
        a = attainment(x)
        seen.append((x, a))
        if a >= goal:
            lo, a_lo = x, a
        else:
            hi = x
    _check_monotone(seen, goal)
    return lo, a_lo


#: a rise of the attainment with the rate that no queue can show but grid rounding can (5.5e-5 seen
#: on bursty colocated TTFT): tolerated when it does not cross the goal, since the answer is then the
#: same whatever the wobble; a larger rise means a broken solver
RISE_TOL = 1e-3


def _check_monotone(seen: list[tuple[float, float]], goal: float) -> None:
    """A(λ) must not rise with λ (Lindley coupling); a solver that breaks it must not give an answer.

    A rise of more than 1e-6 between two probed rates is refused when it crosses the goal (a rate
    above one that misses the goal meets it: the goodput would be ambiguous) or exceeds
    :data:`RISE_TOL` (no rounding does that); smaller rises on one side of the goal cannot move
    the answer and are let through.
    """
    seen.sort()
    for (r1, a1), (r2, a2) in zip(seen, seen[1:]):
        if a2 > a1 + 1e-6 and (a2 - a1 > RISE_TOL or (a1 < goal <= a2)):
            raise NumericalError(f"attainment rose from {a1:.6f} at {r1:.4g} req/s to {a2:.6f} at {r2:.4g} req/s; "
                                 "a station's truncation is too small near saturation")


def goodput(scenario: Scenario | str | Path, with_sensitivities: bool = False,
            progress: ProgressFn | None = None, guess: float | None = None) -> Goodput:
    """Goodput of a scenario, or of the scenario file at a path (its own arrival rate is ignored;
    the workload's shape is kept); ``progress(done, total, what)`` after each sensitivity;
    ``guess``: the search's warm start (:func:`goodput_search`; the same answer within REL_TOL).

    A closed-loop scenario's goodput is the throughput of the most clients (its think time kept)
    whose SLO attainment meets the goal, that loop in ``closed_loop``
    (:func:`qmodel.closed.closed_goodput`, from the one open goodput search).

    With sensitivities, the base and the perturbed scenarios are solved by solvers that share the
    stations a perturbation leaves alone, and their solutions at rates already solved
    (:class:`qmodel.station_cache.StationCache`; the same numbers as fresh solvers)."""
    from qmodel.solver import Solver
    from qmodel.source import as_scenario

    scenario = as_scenario(scenario)
    closed = scenario.workload.arrivals.kind == "closed"
    if closed and with_sensitivities:
        from qmodel.errors import InputError

        raise InputError("--sensitivities", "closed-loop arrivals", "open arrivals (sensitivities are of the open goodput)")
    cache = None
    if with_sensitivities:
        from qmodel.station_cache import StationCache

        cache = StationCache()
    solver = Solver(scenario) if cache is None else cache.solver(scenario)
    lam_max, station = solver.max_stable_rate()
    g, a = goodput_search(solver.attainment, lam_max, scenario.slo.attainment_goal, guess=guess)
    from qmodel.binding import binding_at

    loop = None
    seen = g  # the rate the latencies and binding are read at (and the open validity)
    if closed:  # the closed question: the most clients meeting the goal, and their throughput
        from qmodel.closed import closed_goodput

        sol = closed_goodput(scenario, solver, g)
        if sol is None:
            g = 0.0
        else:
            loop, seen = sol.loop, sol.loop.seen_rate_per_s
            g, a = loop.throughput_per_s, sol.result.attainment
    binding = binding_at(solver, seen, station)
    gpus = solver.resolved.gpus
    cost = solver.resolved.cost_per_hour_usd
    from qmodel.cost import token_prices

    tok = token_prices(cost, g, solver.resolved.mean_prompt_tokens, solver.resolved.mean_output_tokens)
    # the perturbed goodputs start from this one (a warm start: the same answer within REL_TOL)
    sens = (sensitivities(scenario, g, progress, goodput_of=lambda s: cache.goodput_rps(s, guess=g or None))
            if cache is not None else [])
    return Goodput(
        scenario=scenario.name,
        topology=scenario.deployment.topology,
        goodput_rps=g,
        goodput_per_gpu=g / gpus,
        goodput_per_usd_hour=None if not cost else g / cost,
        attainment_at_goodput=a,
        max_stable_rate_per_s=lam_max,
        binding=binding,
        gpus=gpus,
        cost_per_hour_usd=cost,
        **(tok.model_dump() if tok else {}),
        sensitivities=sens,
        validity=solver.validity(g if closed else seen),  # a closed loop's load is its throughput X(N) / lam_max
        closed_loop=loop,
        inputs_sha256=scenario_sha256(scenario),
    )


def perturbations(scenario: Scenario) -> list[tuple[str, list[str], float]]:
    """(input name, --set overrides, relative change of the input) for the elasticities."""
    dep = scenario.deployment
    out: list[tuple[str, list[str], float]] = [
        ("slo.ttft_s", [f"slo.ttft_s={scenario.slo.ttft_s * 1.1}"], 0.1),
        ("slo.tpot_s", [f"slo.tpot_s={scenario.slo.tpot_s * 1.1}"], 0.1),
    ]
    from qmodel.topology import topology_named

    out += topology_named(dep.topology).perturbations(dep)
    return out


def sensitivities(scenario: Scenario, base: float, progress: ProgressFn | None = None,
                  goodput_of: Callable[[Scenario], float] | None = None) -> list[Sensitivity]:
    """Elasticity of goodput to each input; inputs whose perturbation is invalid are reported, not skipped.

    ``goodput_of``: the goodput of a perturbed scenario (default :func:`goodput` warm-started from
    ``base``, as the callers' own are); the TUI passes its cached solvers and a cancel check (an
    exception other than QmodelError ends the loop)."""
    from qmodel.errors import QmodelError
    from qmodel.scenario import apply_overrides, parse_scenario

    raw = scenario.model_dump(mode="json")
    out: list[Sensitivity] = []
    todo = perturbations(scenario)
    for i, (name, sets, rel) in enumerate(todo):
        if progress is not None:
            progress(i, len(todo), "sensitivities")
        try:
            sc = parse_scenario(apply_overrides(raw, sets))
            g = goodput_of(sc) if goodput_of is not None else goodput(sc, guess=base or None).goodput_rps
        except QmodelError as err:
            out.append(Sensitivity(input=name, elasticity=0.0, note=f"not evaluated: {err}"))
            continue
        out.append(elasticity(name, sets, rel, base, g))
    return out


def elasticity(name: str, sets: list[str], rel: float, base: float, g: float) -> Sensitivity:
    """ln(g / base) / ln(1 + rel): the goodput's elasticity to an input changed by the factor 1 + rel.

    From zero goodput there is no elasticity (ln 0): it is None, and the note gives the goodput
    after the change; a change to zero goodput is read at 1e-12 req/s (a large negative figure)."""
    if base <= 0:
        return Sensitivity(input=name, elasticity=0.0 if g <= 0 else None,
                           note=f"goodput {g:.4g} req/s after the change (from 0)")
    el = math.log(max(g, 1e-12) / base) / math.log1p(rel)
    return Sensitivity(input=name, elasticity=el,
                       note=f"{sets[0].split('=')[0]} x{1 + rel:.3g}: goodput {base:.4g} -> {g:.4g} req/s ({(g / base - 1) * 100:+.1f}%)")
