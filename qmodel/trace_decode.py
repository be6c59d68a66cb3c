"""The decode pool of a disaggregated deployment under a trace's bursts: slots, not a queue.

A decode pool serves every admitted sequence at once, one token per step each, and a sequence
stays for its whole output, several hundred mean inter-arrival times on the bundled Azure
conversation example. A burst of handoffs therefore does not queue in front of the pool while it
has free slots: the sequences join the batch, the occupancy N rises, and every step, of every
sequence in the batch, takes longer (the step time grows with the batch). The fluid backlog of
:mod:`qmodel.trace_law`, which charged the work above the full-batch throughput as an admission
wait, read such a burst as a queue (TPOT p99 +490% against the replay at 0.9 of the limit;
docs/validation.md, "Trace arrivals as a nonstationary process").

**Token clock.** All sequences in the pool advance together, one token per step, so in the
pool's token time θ (tokens each sequence has received, dθ = dt / t(n)) a sequence stays exactly
its output length L, whatever the batch does. In θ the pool is an infinite-server queue with a
time-varying input (M_t/G/∞; Eick, Massey & Whitt 1993, "The physics of the M_t/G/∞ queue"):

    N(θ) = ∫ a(θ − y) P(L > y) dy,                      a: handoffs per unit of token time,
    dθ/ds = 1 / (λ · t(min(N, C)/I)),   t(n) = a_s + β_s n,   s in mean gaps of the trace,

with t the decode station's affine step fit per instance (``extra["a_s"]``, ``["beta_s"]``), I
instances with the load balanced over them, C = n_max·I its slots. The two are solved together
by a damped fixed point (:func:`occupancy`): the clock from N, N from the clock (a circular
convolution over the trace's period, which repeats, on a uniform grid of θ). Where N exceeds C
the pool runs at full batch and the excess waits; that is the only queue.

**What a window reads.** A request that arrives at s with L tokens has TPOT = (s(θ(s) + L) − s)/(λL):
the mean step over its life. Averaged over the output law and over window w, that is the mean
TPOT T_w of the window's requests. The window's TPOT law is the decode station's stationary law
at the rate g_w whose fluid state has that step: t(n/I) = T_w gives n, and g_w = n / (λ E[L] T_w)
(the fluid pool's departures at occupancy n, over the mean rate); the stations are solved at
most at the trace model's cap (0.9 of the limit), and a window above it reads the capped
station's TPOT stretched by the ratio of the fluid steps, t*(g_w)/t*(cap) (:func:`stretched`,
:meth:`DecodePool.fluid_step`). Only the handoffs that find the slots full wait: the fluid stage
behind the pool is fed its departures D(N) = N / (λ E[L] t(N/I)) (scaled so that N = C is the
stage's limit) instead of the handoffs, so it backs up only where the slots are full. Where the
occupancy reaches the slots anywhere in the period, the pool is a queue at its full-slot rate
and the stage keeps the handoffs' fluid backlog (the infinite-server picture does not hold
there; reading the count above the slots as the queue measured far too optimistic on the
corpus's small pools, docs/validation.md).

Checked against the replay on the bundled example at 0.9 of its limit
(benchmarks/trace_decode_windows.py): per-window occupancy correlation 0.959 and per-window mean
TPOT within 5.8% (median) of the replay's, against 34.7% for the stations at the windows' own
arrival rates (docs/validation.md, "The decode pool under bursts").
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any, NamedTuple

import numpy as np

from qmodel.arrays import quantiles
from qmodel.convolution import fast_len
from qmodel.dist import GridDist, pow2_grid
from qmodel.trace_law import RATE_CLASSES, TraceLaw, rate_classes

__all__ = ["SLOT_LIMIT_TOL", "TPOT_CLASSES", "DecodePool", "WindowMeans", "decode_law", "decode_pool", "decode_rates",
           "occupancy", "stretched", "window_means", "window_ttft_attainment"]

#: most classes of the decode pool's experienced rate (:func:`decode_law`)
#: (twice RATE_CLASSES: K = 8 on g moved the example's TPOT p90 by 1.5% against one class per
#: window, 16 by at most 0.4%; docs/validation.md)
TPOT_CLASSES = 16
#: the slot model (:func:`decode_law`) describes the decode stage where the pool's full-slot rate is
#: its limit within this relative tolerance (else in-flight KV or the link sets it)
SLOT_LIMIT_TOL = 0.02
#: quantile points of the output law that the life averages use
_LENGTH_POINTS = 64
#: fixed-point iterations of the token clock, and their relative tolerance on N (of C)
_ITERATIONS = 60
_TOL = 1e-4


class DecodePool:
    """The decode pool's fluid parameters: step t(n) = a_s + beta_s n per instance, ``instances``,
    slots ``cap`` (None: no slot cap), mean rate ``rate`` (requests/s) and output lengths."""

    def __init__(self, a_s: float, beta_s: float, instances: int, cap: float | None, rate: float,
                 output: np.ndarray) -> None:
        self.a_s, self.beta_s, self.instances, self.cap, self.rate = a_s, beta_s, instances, cap, rate
        self.output = np.sort(np.asarray(output, dtype=float))
        self.mean_output = float(self.output.mean())

    def step(self, n: np.ndarray) -> np.ndarray:
        """t(n/I): the step time (s) at pool occupancy n (at most the slots)."""
        n = np.asarray(n, dtype=float)
        if self.cap is not None:
            n = np.minimum(n, self.cap)
        return self.a_s + self.beta_s * n / self.instances

    def fluid_step(self, x: float) -> float:
        """t(N*/I) at the stationary fluid point of the relative input x (rate x·λ):
        N* = w a_s / (1 − w β_s / I), w = λ E[L] x, at most the slots (full slots past them)."""
        w = self.rate * self.mean_output * x
        d = 1.0 - w * self.beta_s / self.instances
        n = w * self.a_s / d if d > 0 else np.inf
        return float(self.step(np.array(min(n, self.cap if self.cap is not None else np.inf))))

    def full_rate(self) -> float:
        """Completions per second at full slots (without a slot cap, as N grows: I / (E[L] β_s))."""
        if self.cap is None:
            return self.instances / (self.mean_output * self.beta_s)
        return float(self.departures(np.array(self.cap))) * self.rate

    def departures(self, n: np.ndarray) -> np.ndarray:
        """D(n) = n / (λ E[L] t(n/I)): completions per mean gap at occupancy n (full speed above C)."""
        return np.asarray(n, dtype=float) / (self.rate * self.mean_output * self.step(n))


def _periodic_inverse(theta: np.ndarray, period: float, total: float, x: np.ndarray) -> np.ndarray:
    """s(θ) for the increasing clock ``theta`` on the grid edges 0..period (θ(period) = ``total``),
    continued periodically (s(θ + total) = s(θ) + period)."""
    k = np.floor(x / total)
    return k * period + np.interp(x - k * total, theta, np.linspace(0.0, period, len(theta)))


def _survival_kernel(output: np.ndarray, dg: float, n: int) -> np.ndarray:
    """Cell j of the kernel: the mean of P(L > y) over [j dg, (j+1) dg) (exact: E[min(L, x)] from the
    sorted sample ``output``), lags beyond the n cells of one period folded onto it (the trace
    repeats)."""
    periods = max(int(np.ceil(float(output[-1]) / (n * dg))), 1)
    x = np.arange(periods * n + 1) * dg
    k = np.searchsorted(output, x, side="right")
    below = np.concatenate(([0.0], np.cumsum(output)))[k]
    e_min = (below + x * (len(output) - k)) / len(output)  # E[min(L, x)]
    return np.diff(e_min).reshape(periods, n).sum(axis=0) / dg


def _circular_convolution(a: np.ndarray, k: np.ndarray) -> np.ndarray:
    """The circular convolution of ``a`` and ``k`` (one length n): their linear convolution, ``k``
    cut after its last nonzero cell (m cells), on a 5-smooth transform length >= n + m - 1
    (:func:`~qmodel.convolution.fast_len`), its tail folded back. The same sums as a length-n
    transform (to FFT round-off), but a period of the trace in mean gaps is often a product of
    large primes (19366 = 2·23·421 on the bundled Azure example), where one length-n transform
    cost ~10x a 5-smooth one twice as long; and a sequence's stay is mostly far shorter than the
    period (m << n), so the transform is barely longer than n."""
    n = len(a)
    nz = np.flatnonzero(k)
    m = int(nz[-1]) + 1 if nz.size else 1
    size = fast_len(n + m - 1)
    lin = np.fft.irfft(np.fft.rfft(a, size) * np.fft.rfft(k[:m], size), n=size)
    out = lin[:n].copy()
    out[: m - 1] += lin[n: n + m - 1]
    return out


def occupancy(pool: DecodePool, handoffs: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(N on the grid cells, θ at the grid edges) of the pool fed ``handoffs`` per grid cell of one
    mean gap over the period (module doc, "Token clock"): the fixed point of the clock and the
    M_t/G/∞ occupancy in token time, damped by half per iteration, from the stationary fluid N at
    the mean input."""
    n = len(handoffs)
    cum = np.concatenate(([0.0], np.cumsum(handoffs)))
    work = pool.rate * pool.mean_output * float(handoffs.mean())  # λ E[L] f: D(N) = f at N = work · t(N/I)
    N = np.full(n, work * pool.a_s / max(1.0 - work * pool.beta_s / pool.instances, 0.05))
    for _ in range(_ITERATIONS):
        theta = np.concatenate(([0.0], np.cumsum(1.0 / (pool.rate * pool.step(N)))))
        total = float(theta[-1])
        grid = np.linspace(0.0, total, n + 1)
        dg = total / n
        arrivals = np.diff(np.interp(grid, theta, cum))  # handoffs per θ cell
        n_theta = _circular_convolution(arrivals, _survival_kernel(pool.output, dg, n))
        # the convolution with the cell-averaged kernel is N at each θ cell's right edge
        # (periodic: N at θ = 0 is the last cell's; np.interp's period= would sort the grid again)
        new = np.interp(0.5 * (theta[:-1] + theta[1:]), np.concatenate(([0.0], grid[1:])),
                        np.concatenate((n_theta[-1:], n_theta)))
        done = float(np.max(np.abs(new - N))) <= _TOL * max(float(N.max()), 1.0)
        N = 0.5 * (N + new) if not done else new
        if done:
            break
    theta = np.concatenate(([0.0], np.cumsum(1.0 / (pool.rate * pool.step(N)))))
    return N, theta


class WindowMeans(NamedTuple):
    """Per window of the trace: the pool's mean occupancy N_w, its mean departures D_w (per mean
    gap), the mean TPOT T_w (s) of the window's requests; and whether N reaches the slots anywhere."""

    occupancy: np.ndarray
    departures: np.ndarray
    tpot: np.ndarray
    fills: bool


def window_means(pool: DecodePool, fed: np.ndarray, length: np.ndarray) -> WindowMeans:
    """:class:`WindowMeans` of the pool fed ``fed`` handoffs per mean gap (over the mean rate) in
    windows of ``length`` mean gaps (module doc: :func:`occupancy` on a grid of one mean gap; a
    request's TPOT (s(θ + L) − s)/(λL) averaged over :data:`_LENGTH_POINTS` quantiles of L)."""
    period = float(np.sum(length))
    n = max(int(round(period)), 1)
    edges = np.concatenate(([0.0], np.cumsum(length)))
    x = np.linspace(0.0, period, n + 1)
    cells = np.diff(np.interp(x, edges, np.concatenate(([0.0], np.cumsum(fed * length)))))
    N, theta = occupancy(pool, cells)
    total = float(theta[-1])
    mid = 0.5 * (theta[:-1] + theta[1:])
    ls = quantiles(pool.output, (np.arange(_LENGTH_POINTS) + 0.5) / _LENGTH_POINTS)
    s0 = (np.arange(n) + 0.5) * (period / n)
    tpot = np.zeros(n)
    for ell in ls:  # each request's mean step over its life, in seconds
        tpot += (_periodic_inverse(theta, period, total, mid + ell) - s0) / (pool.rate * ell)
    tpot /= len(ls)

    def per_window(v: np.ndarray) -> np.ndarray:
        return np.diff(np.interp(edges, x, np.concatenate(([0.0], np.cumsum(v * np.diff(x)))))) / length

    fills = pool.cap is not None and float(N.max()) > pool.cap
    return WindowMeans(per_window(N), per_window(pool.departures(N)), per_window(tpot), fills)


def decode_rates(pool: DecodePool, fed: np.ndarray, length: np.ndarray,
                 limit_rel: float) -> tuple[np.ndarray, np.ndarray]:
    """(m_w, g_w) per window (module doc, "What a window reads"): m_w the feed of the fluid stage
    behind the pool, its departures D_w scaled so that full slots are ``limit_rel`` (the stage's
    limit over the mean rate), or the handoffs ``fed`` themselves where the occupancy reaches the
    slots anywhere in the period (the M_t/G/∞ picture holds only while slots are free; a pool that
    fills is a queue at its full-slot rate, the handoffs' fluid backlog); g_w the rate whose
    stationary fluid has the window's mean step T_w: t(n/I) = T_w, g_w = n / (λ E[L] T_w)."""
    w = window_means(pool, fed, length)
    m = fed if w.fills else w.departures * (limit_rel * pool.rate / pool.full_rate())
    n_eq = np.maximum((w.tpot - pool.a_s) * pool.instances / pool.beta_s, 0.0)
    return m, n_eq / (pool.rate * pool.mean_output * w.tpot)


def stretched(d: GridDist, c: float) -> GridDist:
    """The law of c·X for X ~ ``d`` (c >= 1), on the pow2 ladder of ``d``'s step (mean kept): a
    window's decode TPOT past the rate the stations are solved at, its steps longer by c."""
    if c <= 1.0:
        return d
    x = GridDist(d.dx * c, d.pmf, d.mean_s * c, d.tail, d.tail_rate / c, d.exact, d.meta, d.atoms, d.tail_exact)
    return x.regrid(pow2_grid(d.dx, d.dx * c, 1.0), keep_mean=True)


def decode_pool(solver: Any, base: Any, rate: float) -> Any:
    """The :class:`~qmodel.trace_decode.DecodePool` of a disaggregated deployment at mean rate
    ``rate``: the decode station's affine step fit and slots (n_max per instance x instances), read
    off its solution in the base composition ``base``; None for one pool or without a step fit."""
    sd = base.stations[-1]
    a_s, beta_s, n_max = (sd.extra.get(k) for k in ("a_s", "beta_s", "n_max"))
    if not solver.topology.separate_prefill or a_s is None or beta_s is None or a_s <= 0 or beta_s <= 0:
        return None
    inst = int(solver.scenario.deployment.decode.instances)
    return DecodePool(float(a_s), float(beta_s), inst, None if n_max is None else float(n_max) * inst, rate,
                      np.asarray(solver.resolved.lengths.output, dtype=float))


def decode_law(solver: Any, law: TraceLaw, rate: float, base: Any, fed: np.ndarray,
               stage_lim: float) -> tuple[np.ndarray, TraceLaw, Any] | None:
    """(m_w, the trace law regrouped by g_w, the pool) of a disaggregated deployment's decode pool
    fed ``fed`` handoffs per window (in its demand, over the mean rate) at mean rate ``rate``: the
    token-clock model of :mod:`qmodel.trace_decode` (:func:`decode_pool`), ``stage_lim`` its
    stage's limit (requests/s). The regrouped law has the rate classes of g_w
    (:func:`rate_classes`), those the decode pool's TPOT is solved in. None for one pool, without a
    step fit, or where the full slots are not the stage's limit (within :data:`SLOT_LIMIT_TOL`:
    the KV that transfers in flight hold, or a slower link, sets it; the handoffs' fluid stays)."""
    pool = decode_pool(solver, base, rate)
    if pool is None or not math.isfinite(stage_lim) or abs(pool.full_rate() / stage_lim - 1.0) > SLOT_LIMIT_TOL:
        return None
    m, g = decode_rates(pool, fed, law.length, stage_lim / rate)
    # as many TPOT classes as the trace law has rate classes (at least RATE_CLASSES)
    cls, levels, cw = rate_classes(g, law.weight, max(TPOT_CLASSES, len(law.levels)))
    return m, dataclasses.replace(law, cls=cls, levels=levels, class_weight=cw), pool


def window_ttft_attainment(law: TraceLaw, ttfts: list[Any], backlogs: list[tuple[np.ndarray, np.ndarray, np.ndarray, float]],
                           target_s: float, points: int = 64) -> np.ndarray | None:
    """Per window, P(TTFT <= ``target_s``) with the window's own backlog wait (not its class's
    mixture): (1 − busy)·F(t) + busy·E[F(t − U)], U uniform on the wait's range (:func:`backlog_delay`),
    F its class's TTFT CDF without the backlog (``ttfts`` per class), E by the midpoint rule on
    ``points`` points. With the decode pool's TPOT classes apart from the TTFT classes, a window's
    attainment pairs these (the class's average would lose the windows' correlation). None unless
    exactly one fluid stage adds to TTFT."""
    if len(backlogs) != 1:
        return None
    q0, q1, busy, lim = backlogs[0]
    lo = np.where(q1 > 0, np.minimum(q0, q1), 0.0) / lim
    hi = np.maximum(q0, q1) / lim
    u = (np.arange(points) + 0.5) / points
    out = np.empty(len(q0))
    for k, d in enumerate(ttfts):
        sel = np.flatnonzero(law.cls == k)
        f0 = float(d.cdf(target_s))
        x = target_s - (lo[sel, None] + (hi[sel] - lo[sel])[:, None] * u[None, :])
        fx = np.asarray(d.cdf(x.ravel()), dtype=float).reshape(x.shape).mean(axis=1)
        out[sel] = (1.0 - busy[sel]) * f0 + busy[sel] * np.where(hi[sel] > 0, fx, f0)
    return out
