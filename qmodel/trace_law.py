"""Trace arrivals as a nonstationary process: pointwise-stationary windows with a fluid backlog.

A recorded arrival stream is not a renewal process: the Azure code trace comes in bursts, the
conversation trace drifts within the hour (191-507 arrivals a minute), and for minutes at a time
the deployment is overloaded although the mean rate is below its limit. Read as one renewal
process with the whole trace's gap SCV, the solver missed the replay's TTFT by 69-78% (median,
docs/validation.md "Trace arrivals as a nonstationary process"). The standard model instead
(pointwise-stationary approximation, Green & Kolesar 1991, with the fluid carry-over of
overloaded periods, the PSFFA of Massey & Whitt; docs/methods.md "Trace arrivals"):

* **Windows** (:func:`trace_law`, rate-independent, once per trace). Time is measured in mean
  inter-arrival times of the trace (s = (t - t_0)·ν, ν = (m - 1)/span, so a rescaling to any
  mean rate λ, which the replay does, leaves it unchanged); one period of the trace is
  m mean gaps long (the replay repeats the trace with one mean gap between copies). It is cut
  into windows of ``A`` = :data:`WINDOW_GAPS` mean gaps: window w holds n_w arrivals over L_w
  gaps, its relative rate r_w = n_w/L_w, its arrival weight π_w = n_w/m, and the gaps inside it
  give its SCV, pooled over windows (each gap divided by its window's mean gap) into the one
  SCV c_a² the stations read. Two scales bound ``A``: the stations relax in about ρ/(1 - √ρ)²
  mean gaps whatever the server count (M/M/c, Whitt: 72 at ρ = 0.8, 342 at 0.9), and a window's
  count is noisy (relative error 1/√A), which a short window reads as drift. A = 100 (10%) is the
  shortest window that improved every trace source on the corpus (30 and 50 worsen the mildly
  drifting Mooncake trace; 300 and 1000 average the code trace's bursts away; docs/validation.md).
* **Rate classes**: one per distinct window rate if there are at most :data:`RATE_CLASSES`, else
  the windows' rates are binned into that many classes of equal width in r; a class's rate is
  its windows' arrival-weighted mean r. At mean rate λ the stations are solved once per class,
  at min(λ r_k, :data:`LOAD_CAP`·λ*) (λ* the stability limit): above the cap a station's
  relaxation time exceeds the window, and the fluid term carries the overload (0.95 measured
  worse). K = 8 against one class per rate: |Δ| of TTFT percentiles <= 1.1%, attainment <= 0.027.
* **Fluid backlog** (:func:`fluid_backlog`): where λ r_w exceeds λ* the excess queues,
  Q grows at (λ r_w - λ*) and drains at (λ* - λ r_w) afterwards (reflected at 0). In mean gaps
  and requests, with u = λ/λ*: dQ/ds = r_w - 1/u while Q > 0. The trace repeats, so Q is taken
  periodic-stationary: a first pass from Q = 0 ends at the sup of the net input over the period
  (the negative drift of a whole period makes that the stationary start, u < 1), a second pass
  from there gives each window's Q at its start and end. An arrival at fluid backlog Q waits
  Q/λ* more: within a window the backlog is linear in time and arrivals are uniform in time, so
  its extra wait is uniform on [Q_start, Q_end]/λ*, with an atom at 0 for the share of the
  window after Q drains (:func:`backlog_delay`).
* **Stages** (:func:`_stages`): the backlog sits at the station that cannot keep up. One pool is
  one stage; a disaggregated deployment has two, its prefill pool, then its link and decode pool
  at the lower of their limits, fed what the prefill stage passes on (window by window). The
  first stage's wait adds to TTFT; the second's too with the first token from decode, else it
  waits in the decode admission after token 1 and enters TPOT through the handoff, spread over
  each request's L - 1 later tokens as the topology spreads the handoff.
* **Demand**: when the lengths are the trace's own, replayed in its order (``prompt_rel``,
  ``output_rel``), a window's requests are not the mean request: the Azure conversation trace's
  busy minutes carry longer prompts and shorter outputs (window mean prompt 0.58-1.40x the
  trace's). A stage is then fed work, r_w e_w in mean requests per mean gap, with e_w its
  window's mean prompt over the trace's for the prefill pool (and a binding link: bytes go with
  the prompt), its mean output for the decode pool (one slot-step per token); its limit is in
  mean requests, so Q/μ is still the wait. One pool keeps e_w = 1 (its demand mixes both).
  The FIFO stage passes on its served work mapped to the next stage's demand by arrival position
  (:func:`pass_on`), not window by window: a backlog drains requests of earlier windows.
* **Decode pool** (:func:`decode_law`, :mod:`qmodel.trace_decode`): where a disaggregated
  deployment's decode slots set its second stage's limit, the pool absorbs bursts into free slots
  (token-clock M_t/G/∞): its TPOT is solved per class of the rate its requests experience, and
  its admission stage is fed the pool's departures unless the slots fill (docs/methods.md).
* **Mixture**: class k's TTFT (TPOT) is the stations' at its rate with its windows' backlog waits
  added (independent; FFT). TTFT and TPOT laws are the arrival-weighted mixtures over classes;
  attainment, its bracket and the per-metric attainments are the arrival-weighted means of the
  classes'.

The long-run stability limit is the mean rate's (``Solver.max_stable_rate``): below it the backlog
of every overloaded window drains within the period; for a finite run of the trace the answer is
that of its periodic repetition, the replay's reading (validation/synth.py).
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from typing import Any

import numpy as np

from qmodel.arrays import distinct
from qmodel.dist import MAX_POINTS, GridDist, LazyGridDist, convolve, mixture, pow2_grid

__all__ = ["LOAD_CAP", "RATE_CLASSES", "WINDOW_GAPS", "TraceLaw", "backlog_delay", "compose_windows", "fluid_backlog",
           "pass_on", "rate_classes", "trace_law", "trace_law_of"]

#: window length in mean inter-arrival times (see the module doc)
WINDOW_GAPS = 100
#: most rate classes the stations are solved at per rate
RATE_CLASSES = 8
#: a class's stations are solved at no more than this fraction of the stability limit
LOAD_CAP = 0.9
#: grid points of a backlog-delay law (its step from pow2_grid on the TTFT's)
_DELAY_POINTS = 1 << 15


@dataclass(frozen=True)
class TraceLaw:
    """A trace's windows (in trace order) and rate classes, independent of the mean rate."""

    rel_rate: np.ndarray  # r_w: the window's rate over the trace's mean rate
    length: np.ndarray  # L_w: the window's length in mean inter-arrival times
    weight: np.ndarray  # π_w: share of the trace's arrivals in the window
    ca2: float  # pooled within-window gap SCV
    cls: np.ndarray  # class index of each window
    levels: np.ndarray  # class rate over the mean rate (arrival-weighted mean r_w of its windows)
    class_weight: np.ndarray  # share of arrivals per class
    # the window's mean prompt (output) tokens over the trace's mean, when the lengths are the
    # trace's own (paired with its arrivals); None: the lengths do not drift with the windows
    prompt_rel: np.ndarray | None = None
    output_rel: np.ndarray | None = None


def trace_law(arrival_s: np.ndarray, window_gaps: float = WINDOW_GAPS, classes: int = RATE_CLASSES,
              ca2_cap: float = 400.0, prompt: np.ndarray | None = None,
              output: np.ndarray | None = None) -> TraceLaw:
    """The windows and rate classes of a trace's arrival times (see the module doc). A window
    shorter than half of ``window_gaps`` at the period's end joins the one before it. ``prompt`` and
    ``output`` (the requests' lengths in arrival order, both or neither) give each window's mean
    lengths over the trace's (``prompt_rel``, ``output_rel``)."""
    order = np.argsort(np.asarray(arrival_s, dtype=float), kind="stable")
    t = np.asarray(arrival_s, dtype=float)[order]
    m = len(t)
    span = float(t[-1] - t[0]) if m > 1 else 0.0
    if span <= 0:
        raise ValueError("the trace needs at least two arrivals at distinct times")
    s = (t - t[0]) * ((m - 1) / span)  # mean gaps; the period is m of them
    edges = np.arange(0.0, m, float(window_gaps))
    if len(edges) > 1 and m - edges[-1] < 0.5 * window_gaps:
        edges = edges[:-1]
    edges = np.append(edges, float(m))
    w = np.clip(np.searchsorted(edges, s, side="right") - 1, 0, len(edges) - 2)
    n = np.bincount(w, minlength=len(edges) - 1).astype(float)
    length = np.diff(edges)
    r = n / length
    # within-window SCV: each gap over its window's mean gap, pooled
    g = np.diff(s)
    same = w[1:] == w[:-1]
    gw, ww = g[same], w[1:][same]
    cnt = np.bincount(ww, minlength=len(n))
    ok = cnt[ww] >= 2
    mean_g = np.bincount(ww, weights=gw, minlength=len(n)) / np.maximum(cnt, 1)
    ca2 = 1.0
    if np.any(ok) and np.all(mean_g[ww[ok]] > 0):
        ca2 = float(np.mean((gw[ok] / mean_g[ww[ok]] - 1.0) ** 2))
    ca2 = min(max(ca2, 0.0), ca2_cap)
    weight = n / m
    cls, levels, cw = rate_classes(r, weight, classes)
    rel: list[np.ndarray | None] = [None, None]
    if prompt is not None and output is not None:
        for j, x in enumerate((prompt, output)):
            x = np.asarray(x, dtype=float)[order]
            rel[j] = np.bincount(w, weights=x, minlength=len(n)) / np.maximum(n, 1.0) / float(x.mean())
    return TraceLaw(r, length, weight, ca2, cls, levels, cw, rel[0], rel[1])


def rate_classes(r: np.ndarray, weight: np.ndarray, classes: int = RATE_CLASSES,
                 ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(class of each window, class level, class weight) of per-window rates ``r`` with arrival
    weights ``weight``: one class per distinct rate if there are at most ``classes``, else
    equal-width bins of r (empty ones dropped); a class's level is its windows' weighted mean r."""
    lo, hi = float(r.min()), float(r.max())
    if len(distinct(r)) <= classes:
        raw = r  # one class per distinct window rate
    else:
        raw = np.minimum(((r - lo) / (hi - lo) * classes).astype(np.int64), classes - 1)
    used, cls = np.unique(raw, return_inverse=True)
    cw = np.bincount(cls, weights=weight, minlength=len(used))
    levels = np.bincount(cls, weights=weight * r, minlength=len(used)) / np.where(cw > 0, cw, 1.0)
    return cls, levels, cw


def trace_law_of(path: str, format: str, jitter_seed: int | None, paired: bool = False) -> TraceLaw:
    """:func:`trace_law` of a trace file's arrivals, cached by the trace's content (the loader
    caches the file by name, time and size; the planner and goodput resolve one trace many times).
    ``paired``: the workload's lengths are this trace's own, replayed in its order, so each window
    carries its own mean lengths (:func:`trace_law`'s ``prompt``/``output``)."""
    from qmodel.validation.traces import load_trace, require_arrivals

    tr = require_arrivals(load_trace(path, format, jitter_seed=jitter_seed))
    key = (tr.sha256, bool(paired))
    law = _LAWS.get(key)
    if law is None:
        lengths = (tr.prompt_tokens, tr.output_tokens) if paired else (None, None)
        law = _LAWS[key] = trace_law(np.asarray(tr.arrival_s, dtype=float), prompt=lengths[0], output=lengths[1])
        while len(_LAWS) > 16:
            _LAWS.pop(next(iter(_LAWS)))
    return law


#: trace laws by the trace's sha256 and whether its lengths are paired (oldest dropped first)
_LAWS: dict[tuple[str, bool], TraceLaw] = {}


def fluid_backlog(law: TraceLaw, u: float, rel_rate: np.ndarray | None = None,
                  ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """(Q at each window's start, Q at its end, share of the window with Q > 0, the window's mean
    output rate over the mean rate), Q in requests, of a fluid station at load u = λ/μ < 1 of the
    mean rate fed at ``rel_rate`` (default: the trace's windows): the periodic-stationary reflected
    fluid (module doc). The output rate, (Q_start + r L - Q_end)/L, is what a station after it is fed."""
    r = law.rel_rate if rel_rate is None else rel_rate
    drift = r - 1.0 / u  # dQ/ds in requests per mean gap
    n = len(drift)
    q0, q1, busy = np.zeros(n), np.zeros(n), np.zeros(n)
    q = 0.0
    for sweep in range(2):
        for i in range(n):
            d, L = float(drift[i]), float(law.length[i])
            end = q + d * L
            if sweep:
                q0[i] = q
                busy[i] = 1.0 if end >= 0 else (q / (-d * L) if q > 0 else 0.0)
                q1[i] = max(end, 0.0)
            q = max(end, 0.0)
    return q0, q1, busy, (q0 + r * law.length - q1) / law.length


def pass_on(law: TraceLaw, q0: np.ndarray, q1: np.ndarray, demand: np.ndarray | None, out: np.ndarray,
            demand_next: np.ndarray | None) -> np.ndarray:
    """The next stage's input per window (its mean requests' demand per mean gap) behind a FIFO fluid
    stage that held ``q0``/``q1`` (at each window's start/end, in its own demand) and passed on
    ``out`` (:func:`fluid_backlog`), the windows' relative demand per request being ``demand`` there
    and ``demand_next`` next (None: 1). With the same demand it is ``out``. Else the stage has
    served, by a window's edge, the work W(s) - Q its arrivals brought up to the position s of that
    edge: the requests that arrived before the position s* where W(s*) = W(s) - Q, which bring the
    next stage W'(s*). W and W' (cumulative r_w e_w L_w over the windows) are piecewise linear, so
    s* is exact by interpolation; a backlog from the period before (W(s) - Q < 0) maps into the
    previous copy of the trace. The input in window w is (W'(s*_end) - W'(s*_start)) / L_w."""
    if demand is demand_next:
        return out
    r, L = law.rel_rate, law.length
    ones = np.ones_like(r)
    w = np.concatenate(([0.0], np.cumsum(r * (ones if demand is None else demand) * L)))
    w2 = np.concatenate(([0.0], np.cumsum(r * (ones if demand_next is None else demand_next) * L)))
    xs = np.concatenate((w[:-1] - w[-1], w))
    ys = np.concatenate((w2[:-1] - w2[-1], w2))
    start = np.interp(w[:-1] - q0, xs, ys)
    end = np.interp(w[1:] - q1, xs, ys)
    return (end - start) / L


def backlog_delay(law: TraceLaw, backlog: tuple[np.ndarray, np.ndarray, np.ndarray], limit_per_s: float,
                  dx: float = 1e-3) -> list[GridDist | None]:
    """Per rate class, the law of the extra wait of its arrivals behind a fluid
    ``backlog`` (:func:`fluid_backlog`'s first three) drained at ``limit_per_s``, None where no
    window of the class has a backlog. Within window w, a share ``busy`` of the arrivals wait
    uniformly between min(Q_start, Q_end)/μ and max(Q_start, Q_end)/μ (from 0 when Q drains within
    the window), the rest none; the class's law mixes its windows by arrivals. The step is
    :func:`pow2_grid` of ``dx`` covering the longest wait in :data:`_DELAY_POINTS` points; the CDF
    is exact at the grid points."""
    q0, q1, busy = backlog
    c = 1.0 / limit_per_s
    out: list[GridDist | None] = []
    for k in range(len(law.levels)):
        sel = (law.cls == k) & (busy > 0) & (np.maximum(q0, q1) > 0)
        wk = law.weight[law.cls == k].sum()
        if not np.any(sel) or c <= 0 or wk <= 0:  # (a class of windows without arrivals waits for nothing)
            out.append(None)
            continue
        om = law.weight[sel] / wk * busy[sel]  # share of the class's arrivals in each backlogged stretch
        a = np.where(q1[sel] > 0, np.minimum(q0[sel], q1[sel]), 0.0) * c
        b = np.maximum(q0[sel], q1[sel]) * c
        step = pow2_grid(dx, float(b.max()), _DELAY_POINTS)
        x = np.arange(int(math.ceil(float(b.max()) / step)) + 2) * step
        F = np.full(x.size, 1.0 - om.sum())
        for wi, ai, bi in zip(om, a, b):
            F += wi * (np.clip((x - ai) / (bi - ai), 0.0, 1.0) if bi > ai else (x >= ai).astype(float))
        mean = float(np.sum(om * 0.5 * (a + b)))
        out.append(GridDist.from_cdf_values(F, step, mean, continuous=True))
    return out


def _stages(solver: Any, rate: float) -> list[tuple[float, str, np.ndarray | None]]:
    """(stage limit, where its backlog waits: "ttft" or "handoff", the windows' relative demand per
    request or None) in the order a request passes the stages: one pool's station (TTFT); or a
    disaggregated deployment's prefill pool (TTFT), then its link and decode pool, together, at the
    lower of their limits (TTFT with the first token from decode; else the handoff after token 1,
    which TPOT spreads over L - 1 tokens). With the trace's own lengths (``TraceLaw.prompt_rel``) a
    request of window w asks the prefill pool (and the link) for e_w = its window's mean prompt
    over the trace's, the decode pool for its mean output over the trace's (one slot-step per
    output token); one pool's demand mixes both, so it keeps e_w = 1 (module doc, "Demand")."""
    law: TraceLaw = solver.resolved.arrival_law
    limits = solver.served_limits()
    if not solver.topology.separate_prefill:
        return [(min(lim for lim, _ in limits), "ttft", None)]
    first = min(lim for lim, name in limits if name == "prefill")
    rest, name = min(((lim, name) for lim, name in limits if name != "prefill"), default=(math.inf, ""))
    after = "ttft" if solver.scenario.deployment.first_token_from == "decode" else "handoff"
    return [(first, "ttft", law.prompt_rel), (rest, after, law.prompt_rel if name == "kv_transfer" else law.output_rel)]


def compose_windows(solver: Any, rate: float, laws: bool) -> Any:
    """The :class:`~qmodel.topology.Composition` of a trace-driven scenario at mean rate ``rate``
    (below the limit, checked by the solver): the stations solved per rate class, the backlog
    delays of the fluid stages added (:func:`_stages`: each stage fed by the one before it), and
    the classes mixed by arrivals (module doc). A disaggregated deployment's TPOT is solved per
    class of the decode pool's experienced rate g_w instead, and its second stage fed m_w when the
    decode pool limits it (:func:`decode_law`; a window's attainment pairs its TTFT class with its
    TPOT class). Its ``stations`` are those at the mean rate (what the reports and the binding
    explanation describe)."""
    from qmodel.topology.base import Composition
    from qmodel.trace_decode import decode_law, stretched, window_ttft_attainment

    law: TraceLaw = solver.resolved.arrival_law
    topo = solver.topology
    slo = solver.scenario.slo
    lim = min(solver.served_limits())[0]
    base = topo.compose(solver, min(rate, LOAD_CAP * lim), False)
    # each delay's finest step: that of the wait it is added to (read off the solutions, not the
    # lazily composed laws)
    step = {"ttft": base.stations[0].delay.dx, "handoff": (base.stations[-1].wait or base.stations[-1].delay).dx}
    dlaw, pool = law, None  # the classes the TPOT is solved in; the slot model's pool
    delays: dict[str, list[list[GridDist]]] = {"ttft": [], "handoff": []}
    ttft_backlogs: list[tuple[np.ndarray, np.ndarray, np.ndarray, float]] = []  # for window_ttft_attainment
    before: tuple[np.ndarray, np.ndarray, np.ndarray | None, np.ndarray] | None = None  # the last stage's
    for stage_lim, metric, demand in _stages(solver, rate):
        if before is None:
            fed = law.rel_rate if demand is None else law.rel_rate * demand
        else:
            fed = pass_on(law, *before, demand)
            dec = decode_law(solver, law, rate, base, pass_on(law, *before, law.output_rel), stage_lim)
            if dec is not None:  # the slot model: the pool's departures feed its admission
                fed, dlaw, pool = dec
        if not math.isfinite(stage_lim) or stage_lim <= rate:
            continue
        q0, q1, busy, out = fluid_backlog(law, rate / stage_lim, fed)
        before = (q0, q1, demand, out)
        if metric == "ttft":
            ttft_backlogs.append((q0, q1, busy, stage_lim))
        delays[metric].append(backlog_delay(law if metric == "ttft" else dlaw, (q0, q1, busy), stage_lim, dx=step[metric]))
    ttfts, tpots, rows = [], [], []
    composed: dict[float, Any] = {}

    def rate_at(level: float) -> float:
        return min(max(rate * float(level), 1e-12 * lim), LOAD_CAP * lim)

    def at(level: float) -> Any:
        rk = rate_at(level)
        if rk not in composed:
            composed[rk] = base if rk == base.rate_per_s else topo.compose(solver, rk, laws)
        return composed[rk]

    # Where the TPOT has its own rate classes (the decode pool's), a class only one metric reads is
    # solved for that metric alone: a TPOT class without the prefill pool's wait grids, a TTFT
    # class (first token from prefill) without the link and the decode pool.
    ttft_rates = {rate_at(level) for level in law.levels}
    tpot_rates = {rate_at(level) for level in dlaw.levels}
    alone: dict[tuple[str, float], Any] = {}

    def one_metric(metric: str, rk: float) -> Any:
        if dlaw is law or rk in composed or rk == base.rate_per_s or rk in (tpot_rates if metric == "ttft" else ttft_rates):
            return None
        if (metric, rk) not in alone:
            alone[metric, rk] = (topo.compose_ttft if metric == "ttft" else topo.compose_tpot)(solver, rk, laws)
        return alone[metric, rk]

    def ttft_at(level: float) -> tuple[GridDist, float]:
        part = one_metric("ttft", rate_at(level))
        return part if part is not None else (at(level).ttft, at(level).ttft_attainment)

    def tpot_at(level: float) -> tuple[float, list, GridDist, float]:
        rk = rate_at(level)
        part = one_metric("tpot", rk)
        if part is None:
            c = at(level)
            return c.rate_per_s, c.stations, c.tpot, c.tpot_attainment
        return rk, *part

    for k, level in enumerate(law.levels):
        ttft, a = ttft_at(level)
        extra = [d[k] for d in delays["ttft"] if d[k] is not None]
        if extra:
            ttft = convolve(ttft, *extra)
            a = float(ttft.cdf(slo.ttft_s))
        ttfts.append(ttft)
        rows.append(a)
    tpot_rows = []
    for j, level in enumerate(dlaw.levels):
        rk, stations, tpot, b = tpot_at(level)
        extra = [d[j] for d in delays["handoff"] if d[j] is not None]
        # past the rate the stations are solved at, the slot model's steps are longer by the ratio
        # of its fluid steps (trace_decode.stretched)
        longer = 1.0 if dlaw is law else pool.fluid_step(float(level)) / pool.fluid_step(rk / rate)
        if extra or longer > 1.0:
            # the backlog waits in the decode admission, after token 1: the handoff's wait, spread
            # over each request's L - 1 later tokens as the topology spreads it
            sp, st, sd = stations
            sd = dataclasses.replace(sd, wait=convolve(sd.wait or sd.delay, *extra) if extra else sd.wait,
                                     tpot=stretched(sd.tpot, longer))
            terms = topo.tpot_terms(solver, sp, st, sd)
            tpot = convolve(*terms) if len(terms) > 1 else terms[0]
            b = solver.tpot_attainment(tpot)
        tpots.append(tpot)
        tpot_rows.append(b)
    if dlaw is law:
        cells = [(a, tpot_rows[k]) for k, a in enumerate(rows)]
        w = law.class_weight / law.class_weight.sum()
    else:  # per window: its TTFT attainment with its TPOT class's
        a_w = window_ttft_attainment(law, [ttft_at(x)[0] for x in law.levels], ttft_backlogs, slo.ttft_s)
        if a_w is None:
            a_w = np.array([rows[k] for k in law.cls])
        cells = [(float(x), tpot_rows[j]) for x, j in zip(a_w, dlaw.cls)]
        w = law.weight / law.weight.sum()
    tab = [(a, b, a * b, *topo.attainment_bounds(a, b)) for a, b in cells]
    a, b, att, lo, hi = (float(np.dot(w, col)) for col in zip(*tab))
    wt = law.class_weight / law.class_weight.sum()
    wd = dlaw.class_weight / dlaw.class_weight.sum()
    if laws:
        ttft_mix, tpot_mix = mixture(ttfts, wt), mixture(tpots, wd)
    else:
        ttft_mix = LazyGridDist(lambda: mixture(ttfts, wt))
        tpot_mix = LazyGridDist(lambda: mixture(tpots, wd))
    return Composition(rate, base.stations, ttft_mix, tpot_mix, a, b, att, (lo, hi))
