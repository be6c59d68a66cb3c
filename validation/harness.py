"""The validation harness: every scenario of a suite through the analytical engine and the replay.

Per case (config x arrivals x utilization, see :mod:`qmodel.validation.suites`):

* analytic: ``Solver(scenario).solve(u * max_stable_rate)``;
* replay: :func:`qmodel.validation.replay.replay` at the same rate with one run per seed, each
  ``suite.n_requests(u)`` long (∝ 1/(1-u)²: waiting times stay correlated over ~1/(1-u)² arrivals, Whitt, "Planning queueing simulations", Management Science 35 (1989)) with the first 10% cut as
  warm-up. The replay value is the mean over seeds; its noise is the standard error of that mean
  relative to it, |r0 - r1| / (r0 + r1) for two seeds (sample std / sqrt(k) / mean in general).

Relative error is (analytic - replay) / replay (positive: the model is conservative). Attainment
is compared as analytic - replay (a difference of probabilities).

Goodput per (config, arrivals): the analytical goodput (:func:`qmodel.goodput.goodput_search`)
against a replay goodput found by bisection on the rate with replays -- common random numbers
(one seed at every rate, so the measured attainment curve is close to monotone), stopping when
the bracket is ``GOODPUT_REL_TOL`` (2%) of the rate; the replay goodput is the bracket's midpoint.

The summary gives, per metric, the median and 90th percentile of |relative error| over cases,
overall, per topology and per utilization band; for goodput also the fraction of comparisons
within 5%.
"""

from __future__ import annotations

import math
from concurrent.futures import ProcessPoolExecutor
from typing import Any, Callable, Iterable

import numpy as np

from qmodel.errors import QmodelError
from qmodel.validation.suites import Case, Config, Suite

__all__ = ["REPLAY_FIELDS", "LATENCY_METRICS", "SUMMARY_METRICS", "BANDS", "GOODPUT_REL_TOL", "band_of", "latency_metrics", "compare_scenario", "run_case", "run_goodput",
           "compare_goodput", "replay_goodput", "abs_error_stats", "summarize", "run_suite", "round_sig"]

LATENCY_METRICS = ["ttft_p50", "ttft_p90", "ttft_p99", "tpot_p50", "tpot_p90", "tpot_p99"]
SUMMARY_METRICS = LATENCY_METRICS + ["attainment", "goodput"]
GOODPUT_REL_TOL = 0.02
GOODPUT_WITHIN = 0.05
#: the suite's load bands: (name, lower, upper); u above the last upper bound falls in the last band
BANDS = (("u<=0.5", 0.0, 0.5), ("0.5<u<=0.8", 0.5, 0.8), ("u>0.8", 0.8, 1.0))


def band_of(u: float) -> str:
    """The suite's utilization band of load u."""
    for name, lo, hi in BANDS:
        if lo < u <= hi or (lo == 0.0 and u <= hi):
            return name
    return BANDS[-1][0]


def round_sig(x: Any, digits: int = 4) -> Any:
    """Round every float in a nested structure to ``digits`` significant digits (snapshots, JSON)."""
    if isinstance(x, dict):
        return {k: round_sig(v, digits) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [round_sig(v, digits) for v in x]
    if isinstance(x, (float, np.floating)):
        v = float(x)
        if v == 0.0 or not math.isfinite(v):
            return v
        return float(f"{v:.{digits}g}")
    return x


def latency_metrics(res) -> dict[str, float]:
    """The compared fields of a Result or ReplayResult (same names by design)."""
    out = {f"ttft_{k}": float(getattr(res.ttft, k)) for k in ("mean", "p50", "p90", "p99")}
    out.update({f"tpot_{k}": float(getattr(res.tpot, k)) for k in ("mean", "p50", "p90", "p99")})
    out.update(attainment=float(res.attainment), ttft_attainment=float(res.ttft_attainment),
               tpot_attainment=float(res.tpot_attainment))
    return out


def _rel(a: float, r: float) -> float:
    if r == 0.0:
        return 0.0 if a == 0.0 else 1.0
    return (a - r) / r


def _mean_and_noise(values: list[float]) -> tuple[float, float]:
    """Mean over seeds and its relative standard error (0 with one seed: unknown, not zero noise)."""
    m = float(np.mean(values))
    if len(values) < 2 or m == 0.0:
        return m, 0.0
    se = float(np.std(values, ddof=1)) / math.sqrt(len(values))
    return m, se / abs(m)


#: replay fields of a :func:`compare_scenario` record (what ``reuse`` copies)
REPLAY_FIELDS = ("replay", "replay_noise", "replay_requests", "replay_seeds", "replay_station_utilization",
                 "replay_warnings")


def compare_scenario(sc0, utilization: float, n_requests: int, seeds: tuple[int, ...] | list[int],
                     reuse: dict[str, Any] | None = None) -> dict[str, Any]:
    """Analytic solve and replays (one per seed, ``n_requests`` each) of ``sc0`` at ``utilization``
    x its analytic stability limit: rate, limit, analytic/replay metrics, replay noise and
    ``error_rel``; an analytic failure becomes ``error`` (never a crash). Shared by the suites and
    the generated corpus (:mod:`qmodel.validation.corpus_run`).

    ``reuse``: an earlier record of the same scenario; its replay is taken instead of replaying again
    when it ran at the same rate (relative 1e-9), the same requests and seeds (the replay is
    deterministic in those), so an analytic change is re-scored without re-running the replays.

    A closed loop (arrivals ``closed``) has no rate to set: ``utilization`` is ignored, the analytic
    side is :func:`qmodel.closed.solve_closed` (latencies at its seen rate, plus ``throughput``, the
    loop's X(N)), the replay runs the loop itself and ``error_rel["throughput"]`` compares X(N) with
    the replay's completions per second; ``rate_per_s`` is the analytic X(N). The record keeps the
    scenario's ``scenario_sha256``; its replay is reused when that hash, the requests and the seeds
    match (the scenario fixes the loop; its rate is an analytic output)."""
    from qmodel.closed import solve_closed
    from qmodel.scenario import ClosedArrivals, scenario_sha256
    from qmodel.solver import Solver

    rec: dict[str, Any] = {}
    solver = Solver(sc0)
    lam, station = solver.max_stable_rate()
    closed = isinstance(sc0.workload.arrivals, ClosedArrivals)
    rate = utilization * lam
    rec.update(rate_per_s=rate, max_stable_rate_per_s=lam, limiting_station=station)
    if closed:
        rec["scenario_sha256"] = scenario_sha256(sc0)
    try:
        if closed:
            sol = solve_closed(sc0, solver)
            rate = rec["rate_per_s"] = sol.loop.throughput_per_s
            rec["analytic"] = dict(latency_metrics(sol.result), throughput=rate,
                                   seen_rate_per_s=sol.loop.seen_rate_per_s, saturated=float(sol.loop.saturated))
        else:
            rec["analytic"] = latency_metrics(solver.solve(rate))
    except Exception as err:  # noqa: BLE001 -- a station bug must not abort a long suite: the record
        # says why, summary["failures"] lists it (and the CI test fails on it)
        rec["analytic"] = None
        rec["error"] = f"analytic: {type(err).__name__}: {err}"
    same = (reuse.get("scenario_sha256") == rec["scenario_sha256"] if closed
            else abs(reuse.get("rate_per_s", -1.0) / rate - 1.0) <= 1e-9) if reuse is not None else False
    if (reuse is not None and reuse.get("replay") and same
            and reuse.get("replay_requests") == n_requests and list(reuse.get("replay_seeds", ())) == list(seeds)):
        rec.update({k: reuse[k] for k in REPLAY_FIELDS})
        rec["replay_reused"] = True
    else:
        rec.update(_replays(sc0 if closed else sc0.with_rate(rate), n_requests, seeds, throughput=closed))
    rep = rec["replay"]
    if rec["analytic"] is not None:
        a = rec["analytic"]
        err = {k: _rel(a[k], rep[k]) for k in LATENCY_METRICS + ["ttft_mean", "tpot_mean"]}
        for k in ("attainment", "ttft_attainment", "tpot_attainment"):
            err[k] = a[k] - rep[k]
        if closed:
            err["throughput"] = _rel(a["throughput"], rep["throughput"])
        rec["error_rel"] = err
    return rec


def _replays(sc, n_requests: int, seeds: tuple[int, ...] | list[int], throughput: bool = False) -> dict[str, Any]:
    """The replay fields (:data:`REPLAY_FIELDS`) of ``sc``: one replay per seed, mean and noise per
    metric; ``throughput``: also the completions per second (a closed loop's output)."""
    from qmodel.validation.replay import replay

    runs = [replay(sc, n_requests=n_requests, seed=s) for s in seeds]
    per_seed = [latency_metrics(r) | ({"throughput": float(r.throughput_rps)} if throughput else {}) for r in runs]
    rep: dict[str, float] = {}
    noise: dict[str, float] = {}
    for k in per_seed[0]:
        rep[k], noise[k] = _mean_and_noise([p[k] for p in per_seed])
    return {"replay": rep, "replay_noise": noise, "replay_requests": n_requests, "replay_seeds": list(seeds),
            "replay_station_utilization": {s.name: float(np.mean([[t.utilization for t in r.stations if t.name == s.name][0]
                                                                  for r in runs])) for s in runs[0].stations},
            "replay_warnings": sorted({w for r in runs for w in r.warnings})}


def run_case(case: Case, suite: Suite) -> dict[str, Any]:
    """One scenario through both engines; errors become a record with ``error`` set, never a crash."""
    sc0 = case.config.scenario(case.arrivals, 1.0, suite.empirical)
    rec: dict[str, Any] = {"name": case.name, "config": case.config.name, "topology": case.config.topology,
                           "model": case.config.model, "gpus": case.config.gpus, "arrivals": case.arrivals,
                           "lengths": sc0.workload.lengths.model_dump(mode="json"),
                           "utilization": case.utilization, "band": band_of(case.utilization)}
    rec.update(compare_scenario(sc0, case.utilization, suite.n_requests(case.utilization), suite.seeds))
    return rec


def replay_goodput(attainment: Callable[[float], float], guess: float, goal: float, lam_max: float,
                   rel_tol: float = GOODPUT_REL_TOL, max_steps: int = 24) -> tuple[float, float, float, int]:
    """(goodput, lower, upper, replays) by bracketing from ``guess`` then bisection.

    The bracket grows from ``guess`` by a factor 1.25 that squares at every step (1.25, 1.56,
    2.44, ...: a good guess costs one extra replay, a bad one a logarithmic number) until
    attainment crosses ``goal``; the upper end never needs
    to exceed 1.5 x ``lam_max`` (past the analytical limit a replay of finite length may still
    meet the goal; beyond 1.5x we report the cap rather than chase a transient).
    """
    calls = 0

    def f(r: float) -> float:
        nonlocal calls
        calls += 1
        return attainment(r)

    guess = guess if guess > 0 else 0.1 * lam_max
    cap = 1.5 * lam_max
    step = 1.25
    if f(guess) >= goal:
        lo, hi = guess, None
        while hi is None and calls < max_steps:
            r = min(lo * step, cap)
            step *= step
            if f(r) >= goal:
                lo = r
                if r >= cap:
                    return cap, cap, cap, calls
            else:
                hi = r
    else:
        lo, hi = None, guess
        while lo is None and calls < max_steps:
            floor = 1e-3 * lam_max  # below this the SLO is infeasible even when idle
            r = max(hi / step, floor)
            step *= step
            if f(r) >= goal:
                lo = r
            elif r <= floor:
                return 0.0, 0.0, r, calls
            else:
                hi = r
    if lo is None or hi is None:
        raise QmodelError(f"replay goodput: no bracket after {calls} replays")
    while hi - lo > rel_tol * hi and calls < max_steps:
        mid = 0.5 * (lo + hi)
        if f(mid) >= goal:
            lo = mid
        else:
            hi = mid
    return 0.5 * (lo + hi), lo, hi, calls


def run_goodput(config: Config, arrivals: str, suite: Suite) -> dict[str, Any]:
    """Analytic vs replay goodput for one (config, arrivals)."""
    sc0 = config.scenario(arrivals, 1.0, suite.empirical)
    rec: dict[str, Any] = {"name": f"{config.name}/{arrivals}", "config": config.name, "topology": config.topology,
                           "arrivals": arrivals}
    rec.update(compare_goodput(sc0, suite))
    return rec


def compare_goodput(sc0, suite: Suite, noise_seed: int | None = None) -> dict[str, Any]:
    """Analytic goodput (:func:`qmodel.goodput.goodput_search`) against the replay bisection
    (:func:`replay_goodput`, one seed ``suite.seeds[0]`` at every rate, bracket
    :data:`GOODPUT_REL_TOL`) of the open scenario ``sc0`` (its own rate ignored); each replay is
    max(goodput_requests, base/(1-u)^2 up to max_requests) long, u = min(rate / limit, 0.95).

    ``noise_seed``: also replay at the replay goodput with seeds[0] and ``noise_seed``, and report
    the attainment's standard error there (|a0 - a1| / 2, the two-seed mean's) and the goodput
    noise it implies, that error over the attainment curve's slope (secant of seed 0's points, the
    bisection's and the one at the goodput, straddling the goal, at least 5% of the rate apart where
    there are such; :func:`_slope`), relative to the goodput (None without a straddling pair).
    Failures become ``error`` (never a crash)."""
    from qmodel.goodput import goodput_search
    from qmodel.solver import Solver
    from qmodel.validation.replay import replay

    solver = Solver(sc0)
    lam, station = solver.max_stable_rate()
    goal = sc0.slo.attainment_goal
    rec: dict[str, Any] = {"max_stable_rate_per_s": lam, "limiting_station": station, "goal": goal}
    try:
        g_a, _ = goodput_search(solver.attainment, lam, goal)
        rec["analytic"] = {"goodput": g_a}
    except Exception as err:  # noqa: BLE001 -- recorded, listed in summary["failures"]
        g_a = math.nan
        rec["analytic"] = None
        rec["error"] = f"analytic: {type(err).__name__}: {err}"
    seed = suite.seeds[0]
    seen: list[tuple[float, float]] = []

    def att(r: float, s: int = seed) -> float:
        u = min(r / lam, 0.95)
        n = max(suite.goodput_requests, int(min(suite.base_requests / (1 - u) ** 2, suite.max_requests)))
        a = replay(sc0.with_rate(r), n_requests=n, seed=s).attainment
        if s == seed:
            seen.append((r, a))
        return a

    try:
        g_r, lo, hi, calls = replay_goodput(att, g_a if math.isfinite(g_a) else 0.5 * lam, goal, lam)
    except QmodelError as err:
        rec["replay"] = None
        rec["error"] = "; ".join(filter(None, [rec.get("error"), f"replay: {err}"]))
        return rec
    rec["replay"] = {"goodput": g_r, "bracket": [lo, hi], "replays": calls, "seed": seed}
    if noise_seed is not None and g_r > 0:
        a0, a1 = att(g_r), att(g_r, noise_seed)
        se, slope = abs(a0 - a1) / 2, _slope(seen, g_r, goal)
        rec["replay"].update(attainment_noise=se, goodput_noise=None if slope is None else se / slope / g_r)
    if rec["analytic"] is not None:
        rec["error_rel"] = {"goodput": _rel(g_a, g_r)}
    return rec


def _slope(seen: list[tuple[float, float]], g: float, goal: float) -> float | None:
    """-dA/dλ near the goodput ``g``: the secant between the nearest evaluated rates that meet and
    miss ``goal``, preferring a pair at least 5% of ``g`` apart (a narrower secant of one seed's
    attainment is itself noisy); floored at 1e-9; None without a pair (a goodput at the bracket's
    cap: no slope, no noise figure)."""
    meet = sorted(((r, a) for r, a in seen if a >= goal), reverse=True)
    miss = sorted((r, a) for r, a in seen if a < goal)
    if not meet or not miss:
        return None
    wide = [(m, x) for m in meet for x in miss if x[0] - m[0] >= 0.05 * g]
    (r0, a0), (r1, a1) = min(wide, key=lambda p: p[1][0] - p[0][0]) if wide else (meet[0], miss[0])
    return max((a0 - a1) / max(r1 - r0, 1e-12), 1e-9)


# ---- summary ------------------------------------------------------------------------------------

def abs_error_stats(errors: list[float]) -> dict[str, float | int]:
    a = np.abs(np.asarray(errors, dtype=float))
    if a.size == 0:
        return {"median_abs_rel_error": 0.0, "p90_abs_rel_error": 0.0, "n": 0}
    return {"median_abs_rel_error": float(np.median(a)), "p90_abs_rel_error": float(np.quantile(a, 0.9)),
            "n": int(a.size)}


def _table(cases: list[dict], goodputs: list[dict]) -> dict[str, dict]:
    out: dict[str, dict] = {}
    for m in SUMMARY_METRICS:
        src = goodputs if m == "goodput" else cases
        vals = [c["error_rel"][m] for c in src if c.get("error_rel") and m in c["error_rel"]]
        out[m] = abs_error_stats(vals)
        if m == "goodput":
            out[m]["within_5pct_fraction"] = (float(np.mean(np.abs(vals) <= GOODPUT_WITHIN)) if vals else 0.0)
        if m in LATENCY_METRICS:
            # how many errors are no larger than the replay's own noise (2 standard errors)
            inside = [abs(c["error_rel"][m]) <= 2 * c["replay_noise"][m] for c in src if c.get("error_rel")]
            out[m]["within_replay_noise"] = int(sum(inside))
    return out


def summarize(cases: list[dict], goodputs: list[dict]) -> dict[str, Any]:
    """Overall summary (METRIC -> stats) plus ``by_topology`` and ``by_band``."""
    summary: dict[str, Any] = _table(cases, goodputs)
    tops = sorted({c["topology"] for c in cases} | {g["topology"] for g in goodputs})
    summary["by_topology"] = {t: _table([c for c in cases if c["topology"] == t],
                                        [g for g in goodputs if g["topology"] == t]) for t in tops}
    summary["by_band"] = {b: {k: v for k, v in _table([c for c in cases if c["band"] == b], []).items()
                              if k != "goodput"} for b, _, _ in BANDS if any(c["band"] == b for c in cases)}
    summary["failures"] = [c["name"] + ": " + c["error"] for c in list(cases) + list(goodputs) if c.get("error")]
    return summary


def _job(item: tuple[str, Any, Suite]) -> dict[str, Any]:
    kind, obj, suite = item
    if kind == "case":
        return run_case(obj, suite)
    return run_goodput(obj[0], obj[1], suite)


def run_suite(suite: Suite, jobs: int = 1, goodput: bool = True,
              progress: Callable[[dict], None] | None = None) -> dict[str, Any]:
    """Run every case (and goodput comparison) of ``suite``; ``jobs`` > 1 uses worker processes."""
    items: list[tuple[str, Any, Suite]] = [("case", c, suite) for c in suite.cases]
    if goodput:
        items += [("goodput", g, suite) for g in suite.goodput]
    results: Iterable[dict]
    if jobs > 1:
        ex = ProcessPoolExecutor(max_workers=jobs)
        results = ex.map(_job, items)
    else:
        ex = None
        results = map(_job, items)
    cases: list[dict] = []
    goodputs: list[dict] = []
    try:
        for (kind, _, _), rec in zip(items, results):
            (cases if kind == "case" else goodputs).append(rec)
            if progress is not None:
                progress(rec)
    finally:
        if ex is not None:
            ex.shutdown()
    return {"suite": suite.name,
            "definition": {"utilization": "rate / Solver(scenario).max_stable_rate() (the smallest station limit)",
                           "rel_error": "(analytic - replay) / replay; attainment: analytic - replay",
                           "replay_noise": "standard error of the mean over seeds, relative to the mean",
                           "replay_requests": f"{suite.base_requests}/(1-u)^2 clipped to [{suite.min_requests}, "
                                              f"{suite.max_requests}], warm-up 10%" if suite.fixed_requests is None
                           else f"{suite.fixed_requests} fixed, warm-up 10%",
                           "goodput": f"replay bisection, one seed at every rate, bracket {GOODPUT_REL_TOL:.0%}"},
            "summary": summarize(cases, goodputs), "scenarios": cases, "goodput": goodputs}
