"""The prefill waiting-time laws on a time grid: W, W + S_own jointly, and S_own.

An arrival finds the engine idle (W = 0, own batch of one) or lands at age u of a batch and finds
q = r + Poisson(λu) ahead; the q ahead drain in batches (:mod:`~qmodel.stations.prefill.drain`),
and its own batch holds k = min(N', m + 1 + Poisson(λW)) with m still ahead when it starts. The
full method and its arguments: :func:`solve_grids` (reached as :meth:`BulkQueue.grids`).
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

import numpy as np

from qmodel.dist import MAX_POINTS, GridDist, LazyGridDist, pow2_grid
from qmodel.errors import InputError, NumericalError
from qmodel.stations.prefill.drain import drain_shifts, drain_transforms
from qmodel.stations.prefill.grid_tables import GridTables, grid_tables
from qmodel.stations.prefill.kernels import convolve_counts, convolve_rows, fast_len, poisson_matrix, scale_time, unit_vector
from qmodel.stations.prefill.own_batch import delay_law, distributions, own_batch_rows

if TYPE_CHECKING:
    from qmodel.stations.prefill.chain import BulkQueue

__all__ = ["solve_grids", "grid_step", "lazy_grids"]

#: the wait grid's count axis stops at this many counts ahead and carries the rest of the wait law
#: as its exact exponential tail (heavy traffic; the chain keeps up to 16384 explicit states)
_COUNT_MAX = 4096
#: the default wait grid's step is set by at most this many mean batch times of horizon (see solve_grids)
_DX_HORIZON_BATCHES = 1024.0
_STEPS_PER_SHORTEST = 16.0  # default time grid: at least this many steps in the shortest mean batch time
#: the wait grids drop the chain states (and counts ahead) whose total mass is below these: three
#: orders under the 1e-9 the time grid resolves (_WAIT_TAIL); the chain itself is solved to 1e-13
_STATE_MASS = 1e-12
_COUNT_MASS = 1e-12
#: the prefill wait's time grid reaches where at most this much mass is left (folded into its last bin)
_WAIT_TAIL = 1e-9
_GRID_POINTS = 8192.0  # default time grid: the waiting-time horizon in at most this many bins
#: batch-time grid laws with at most this many nonzero bins are correlated (with the ages) and
#: convolved (the drain, the own batch) by shifted adds, not FFTs
_SPARSE_LAW_BINS = 8
#: count-axis convolutions of at most this many products (m_own x b) are summed directly, not by FFT
_DIRECT_COUNT_TERMS = 64
#: the leftover-count convolution of the age table over at most this many counts is one product
#: with its (counts x counts) Toeplitz matrix, not FFTs (measured 1.2-6x faster up to 128 counts)
_TOEPLITZ_COUNTS = 128


def solve_grids(queue: BulkQueue, dx: float | None = None, wait_scale: float = 1.0, wait_prob: float | None = None,
                own_stages: int = 1) -> tuple[GridDist, GridDist, GridDist]:
    """(W, W + own_stages · S_own jointly, S_own) of ``queue`` on a common grid (a = 1).

    An arrival finds the engine idle (W = 0, own batch of one), or lands at age u of a batch
    (size k, fit or cut, r left waiting) and finds q = r + Poisson(λu) ahead. The q ahead drain
    in batches of N_i: with p still ahead the next batch is ours when N ≥ p + 1, else it takes
    N and leaves p − N. In transforms over time, with Ŷ_p^g the (residual, q = p) law when the
    next batch forms in regime g (fresh head after a fit batch, overflow heads after cuts),
    V_p^g = Ŷ_p^g + Σ_{h → g} Σ_k P_h(N = k) Ŝ_{h,k}^cut V_{p+k}^h (h → g: a cut in h leads to g) and
    P(W, m ahead, regime g) = V_m^g P_g(N ≥ m+1). Our batch then holds
    k = min(N', m + 1 + Poisson(λW)), N' ~ N_g given N' ≥ m + 1.
    ``wait_scale`` multiplies the queueing part (non-Poisson corrections); 1 is exact.
    ``wait_prob`` (non-Poisson arrivals) replaces P(W > 0) = 1 − P(idle) of the Poisson chain:
    who waits moves, and the wait of those who wait stays the chain's conditional law times
    ``wait_scale``. The distributions' ``mean_s`` stay ``wait_scale`` × the chain's mean.
    ``own_stages``: the own batch leaves that many of its batch times after it starts (a pp-stage
    pipeline instance, :mod:`qmodel.perf.pipeline`): the joint law is W + own_stages · S_own,
    the same rows h convolved with S_k on a grid own_stages times finer.

    The steps, in order: the states kept (:func:`_kept_states`), the time step and horizon
    (:func:`_time_step`), the (residual, count ahead) laws Y (:func:`_age_weights`,
    :func:`_residual_laws`, :func:`_normalised`), the drain (:func:`_drain_length`,
    :func:`_drain_rows`), W's rows by count ahead (:func:`_wait_rows`), the own batch
    (:func:`~qmodel.stations.prefill.own_batch.own_batch_rows`), W + S_own
    (:func:`~qmodel.stations.prefill.own_batch.delay_law`) and the distributions
    (:func:`~qmodel.stations.prefill.own_batch.distributions`).
    """
    if queue.a != 1:
        raise InputError("min_batch", queue.a, "the waiting-time law is implemented for a = 1")
    lam, b = queue.lam, queue.b
    nr = len(queue.regimes)
    pis, n_st, heavy = _kept_states(queue)
    p_idle = queue.p_idle
    max_s = queue.law.grid_extent[0]
    # (heavy: an arrival with n_st or more ahead is left to the tail)
    n_q = n_st if heavy else pis.shape[1] + int(math.ceil(lam * max_s + 10.0 * math.sqrt(lam * max_s) + 10.0))
    # Horizon: W's tail decays at least like e^{−ηt} with η = min(λ(z0 − 1), ln z0 E[N]/E[S_N])
    # (z0 the chain's decay root); the time grid reaches where it is below _WAIT_TAIL (the mass
    # past it, at most that, is folded into the last bin; the KV link's grids stop at the same
    # 1 − 1e-9). The default step is set from the 1e-12 horizon, as it always was: where the
    # horizon sets the step, a shorter one would move every quantile by a grid step.
    eta = _decay_rate(queue)
    own_mean = queue.mean_own_batch_s
    dx, horizon = _time_step(queue, dx, eta)
    tables = grid_tables(queue, dx)
    n_s = tables.n_s
    groups, unit, r_max = _age_weights(queue, pis, n_st, tables)
    ys = _residual_laws(groups, unit, r_max, lam * tables.ages, n_s, n_q, dx)
    busy_mass = 1.0 - p_idle
    ys, n_q = _normalised(ys, busy_mass)
    length, valid, size = _drain_length(queue, tables, n_q, n_st, heavy, horizon, dx)
    u, m_own = _drain_rows(queue, ys, tables, n_q, busy_mass, size)
    s_own = queue.law.own_weights[:, 0, :m_own].ravel()  # P_g(N ≥ m + 1): ours is the next batch
    u, p_zero, w_tail = _wait_rows(u, s_own, heavy, math.exp(-eta * dx) if heavy else 0.0, valid, n_s, busy_mass,
                                   p_idle, wait_prob, wait_scale)
    size = u.shape[1]
    wpmf = s_own @ u
    h = own_batch_rows(u.reshape(nr, m_own, size), lam * (np.arange(1, size) * dx), b, m_own,
                       queue.law.own_weights, p_zero, _DIRECT_COUNT_TERMS)
    tail_ratio = math.exp(-eta * dx / wait_scale) if heavy else 0.0
    joint, total, d_tail, own, tables = delay_law(queue, h, tables, dx, size, length, wait_scale, heavy, tail_ratio,
                                                  own_stages, w_tail, _SPARSE_LAW_BINS)
    wpmf[0] += p_zero
    wpmf /= wpmf.sum() / (1.0 - w_tail) if heavy else wpmf.sum()
    # The reported mean stays the heavy-traffic-scaled chain mean (validated on its own: within
    # 10% of the DES at 80% load); the law's own mean is lower by wait_prob/(1 − P(idle)).
    wq = queue.mean_wait_s * wait_scale
    own_exit_mean = own_mean if own_stages == 1 else own_stages * own_mean
    exact = wait_scale == 1.0 and wait_prob is None
    return distributions(wpmf, joint, own, tables.own_rows[0], dx, wq, own_exit_mean, own_mean, p_zero, total, exact,
                         heavy, eta / wait_scale if heavy else 0.0, w_tail, d_tail)


def _kept_states(queue: BulkQueue) -> tuple[np.ndarray, int, bool]:
    """(π on the states kept, their count n_st, heavy): the states that carry mass the grid resolves,
    at most _COUNT_MAX (heavy: the wait law continues past them as its exact exponential tail)."""
    nr = len(queue.regimes)
    pis = queue.pi_flags
    # The chain keeps states out to a 1e-13 tail for its moments; the grids need only the
    # states carrying mass the grid can resolve. Dropping those whose total is below _STATE_MASS
    # (renormalised below) shrinks the count axis of every transform, often 3x.
    # mass in the states j and above, from the top j down (non-decreasing: a search finds the cut)
    # (method forms: np.cumsum and np.searchsorted add a Python dispatch layer each)
    above = (pis[0] if nr == 1 else pis.sum(axis=0))[::-1].cumsum()
    above += queue.far_mass  # the implicit states past the explicit ones
    n_st = max(above.size - int(above.searchsorted(_STATE_MASS)), 1)
    # Heavy traffic: past _COUNT_MAX states (and so counts ahead) the wait grid is cut, and the
    # wait law continues as its exact exponential tail (below, after the drain)
    heavy = n_st > _COUNT_MAX
    if heavy:
        n_st = _COUNT_MAX
    return pis[:, :n_st], n_st, heavy


def lazy_grids(queue: BulkQueue, dx: float | None = None, wait_scale: float = 1.0, wait_prob: float | None = None,
               own_stages: int = 1) -> tuple[GridDist, GridDist, GridDist]:
    """:func:`solve_grids`' three laws as :class:`~qmodel.dist.LazyGridDist`, solved (once, for all
    three) when one of them is first read; W's and W + S_own's step (:func:`grid_step`) is known at
    once. The same laws, bit for bit, whenever they are built: the grids depend on the queue alone."""
    solved: list[tuple[GridDist, GridDist, GridDist]] = []

    def part(i: int) -> GridDist:
        if not solved:
            solved.append(solve_grids(queue, dx, wait_scale, wait_prob, own_stages))
        return solved[0][i]

    step = grid_step(queue, dx)
    return LazyGridDist(lambda: part(0), dx=step), LazyGridDist(lambda: part(1), dx=step), LazyGridDist(lambda: part(2))


def grid_step(queue: BulkQueue, dx: float | None = None) -> float:
    """The time step :func:`solve_grids` puts W and W + S_own on, without solving them (a trace's
    TPOT rate classes read only the step of the prefill pool's delay: qmodel.trace_law)."""
    return _time_step(queue, dx, _decay_rate(queue))[0]


def _decay_rate(queue: BulkQueue) -> float:
    """η: W's tail decays at least like e^{−ηt} (see :func:`solve_grids`)."""
    z0 = queue.decay_root
    en, esn = queue.law.mean_drain
    return min(queue.lam * (z0 - 1.0), en * math.log(z0) / esn)


def _time_step(queue: BulkQueue, dx: float | None, eta: float) -> tuple[float, float]:
    """(dx, the horizon where W's tail bound e^{−ηt} is below _WAIT_TAIL): ``dx`` if given, else at
    least 16 bins in the shortest mean batch time and the 1e-12 horizon within _GRID_POINTS bins."""
    max_s, min_mean = queue.law.grid_extent
    esn = queue.law.mean_drain[1]
    own_mean = queue.mean_own_batch_s

    # (the chain's own W: ``wait_scale`` stretches the result afterwards, not the drain grid)
    def reach(log_tail: float) -> float:  # time by which the tail bound is below e^{-log_tail}
        return max_s + log_tail / max(eta, 1e-300) + own_mean

    horizon = reach(math.log(1.0 / _WAIT_TAIL))
    if dx is None:
        # ≥ 16 bins for the shortest batch, and the 1e-12 horizon within _GRID_POINTS points
        # (time and memory grow with it; quantiles are conservative by at most dx per term)
        # Near saturation the horizon grows like 1/(1 − ρ) and with it the step: each drained
        # batch time, rounded up to the grid, then adds up to a step (at 0.999 of
        # llama3-70b-disagg-h100's limit the step reached 0.44 s, 0.7 of a batch time, and the
        # grid's mean wait ran 46% above the chain's). Past _DX_HORIZON_BATCHES mean batch
        # times the step stops growing: the grid then ends short of the 1e-9 horizon and the
        # rest of the law is its exponential tail (below).
        horizon_dx = min(reach(math.log(1e12)), reach(0.0) + _DX_HORIZON_BATCHES * esn)
        # On the ladder (min_mean/16)·2^k (pow2_grid), never coarser than horizon_dx/_GRID_POINTS:
        # the step then changes with the rate only by doubling, and a CDF read at the SLO target
        # cannot rise with it (a step growing continuously slid floor(x/dx)·dx towards the target).
        dx = pow2_grid(min_mean / _STEPS_PER_SHORTEST, horizon_dx, 2.0 * _GRID_POINTS)
    return dx, horizon


Groups = list[tuple[list[np.ndarray], list[np.ndarray]]]


def _age_weights(queue: BulkQueue, pis: np.ndarray, n_st: int, tables: GridTables) -> tuple[Groups, np.ndarray, int]:
    """Time weights of "in a batch with this time law and r left waiting", per unit service time,
    grouped by the regime the *next* batch forms in (fit -> 0, a cut -> its overflow head's regime):
    per regime (batch-time laws, their leftover-count laws ω(r)), the unit law (nothing left), r_max."""
    b, regs = queue.b, queue.regimes
    nr = len(regs)
    mix = queue.mix_pi
    cyc = queue.cycle["cycle_s"]
    ff, fc = tables.ff, tables.fc
    groups: Groups = [([], []) for _ in range(nr)]
    # the cut entries of the states kept (rows j < n_st: the first cut_upto[n_st], row-major)
    n_cut = [int(mx.cut_upto[n_st]) for mx in mix]
    r_max = max([1] + [int(mx.cut_rmax[m - 1]) + 1 for mx, m in zip(mix, n_cut) if m])
    unit = unit_vector(r_max)
    for f, (pi, mx, m) in enumerate(zip(pis, mix, n_cut)):
        w_fit = (pi @ mx.pfit[:n_st]) / cyc  # leftover 0, next batch fresh
        groups[0][0].append(w_fit @ ff[f])
        groups[0][1].append(unit)
        if m:
            # ω[k−1, r] = Σ_j π_j P_cut(k | j) [j − k = r] / cycle (bincount adds in np.add.at's order)
            flat = mx.cut_k[:m] * r_max + mx.cut_r[:m]
            omega = np.bincount(flat, weights=pi[mx.cut_j[:m]] * mx.cut_p[:m] / cyc,
                                minlength=b * r_max).reshape(b, r_max)
            for k in (omega.any(axis=1).nonzero()[0] + 1).tolist():
                g = regs[f].next_after_cut(k, nr - 1)
                groups[g][0].append(fc[f][k - 1])
                groups[g][1].append(omega[k - 1])
    return groups, unit, r_max


def _residual_laws(groups: Groups, unit: np.ndarray, r_max: int, lam_ages: np.ndarray, n_s: int, n_q: int,
                   dx: float) -> list[np.ndarray]:
    """Per regime Y[v, n] = Σ Σ_r ω(r) Σ_a f[v + a] P(Poisson(λa) = n − r) dx, the (residual, count
    ahead) law: a linear convolution in the count axis and a cross-correlation in time, both by one
    2-D FFT of the age table (``lam_ages`` = λ × the bin mid-points); a few laws (a plain cap) by
    one time correlation each, shifted adds where a law is a few bins."""
    p_age = poisson_matrix(lam_ages, n_q)
    lt = fast_len(2 * n_s + 1)
    lq_ = fast_len(n_q + r_max)
    pa = None
    ys = []
    for lf, lw in groups:
        if not lf:
            ys.append(np.zeros((n_s, n_q)))
            continue
        if len(lf) <= 2:
            # few laws (a plain cap): count-axis convolution only where r > 0, then one
            # time cross-correlation per law (cheaper than the 2-D transform)
            y = np.zeros((n_s, n_q))
            for fk, wk in zip(lf, lw):
                moved = wk is not unit and bool(wk[1:].any())
                if not moved:
                    cols = p_age
                elif n_q <= _TOEPLITZ_COUNTS:
                    cols = convolve_counts(p_age, wk)
                else:
                    cols = convolve_rows(p_age, wk, lq_)
                w0 = 1.0 if moved else wk[0]
                nz = np.nonzero(fk)[0]
                if nz.size and nz[0] == 0:  # (bin 0 adds nothing: v < 0)
                    nz = nz[1:]
                if nz.size <= _SPARSE_LAW_BINS:
                    # a (near-)deterministic batch time is a few grid bins: the correlation
                    # y[v−1] = Σ_s f[s] cols[s − v], v = 1..s, is that many shifted row blocks
                    for s in nz.tolist():
                        y[:s] += (fk[s] * w0) * cols[s - 1 :: -1]
                    continue
                c = np.fft.irfft(np.fft.rfft(fk, lt)[:, None] * np.conj(np.fft.rfft(cols, lt, axis=0)), lt, axis=0)
                y += c[1 : n_s + 1] * w0
            y *= dx
            ys.append(np.maximum(y, 0.0, out=y))
            continue
        if pa is None:  # reversed in age: the correlation becomes a convolution
            pa = np.fft.rfft2(p_age[::-1], s=(lt, lq_))
        fh = np.fft.fft(np.array(lf), lt, axis=1)  # (L, lt)
        wh = np.fft.rfft(np.array(lw), lq_, axis=1)  # (L, lq_/2+1)
        # the 2-D inverse as its two passes (what irfft2 does), the count-axis pass only on the
        # rows kept: lags v = 1..n_s
        lag = np.fft.ifft(pa * (fh.T @ wh), lt, axis=0)[n_s : 2 * n_s]
        y = np.fft.irfft(lag, lq_, axis=1)[:, :n_q] * dx
        ys.append(np.maximum(y, 0.0, out=y))
    return ys


def _normalised(ys: list[np.ndarray], busy_mass: float) -> tuple[list[np.ndarray], int]:
    """(Y scaled in place to the busy mass 1 − P(idle), cut to the counts ahead that carry more than
    _COUNT_MASS of it; that count n_q)."""
    ysum = float(ys[0].sum()) if len(ys) == 1 else sum(float(y.sum()) for y in ys)
    if ysum > 0:
        for y in ys:
            y *= busy_mass / ysum
    col = ys[0].sum(axis=0) if len(ys) == 1 else sum(y.sum(axis=0) for y in ys)
    nz = np.nonzero(col > _COUNT_MASS * busy_mass)[0]
    n_q = int(nz[-1]) + 1 if nz.size else 1
    return [y[:, :n_q] for y in ys], n_q


def _drain_length(queue: BulkQueue, tables: GridTables, n_q: int, n_st: int, heavy: bool, horizon: float,
                  dx: float) -> tuple[int, int, int]:
    """(bins W can reach, bins exact (heavy: below them), transform length) of the drain."""
    n_s = tables.n_s
    en, esn = queue.law.mean_drain
    max_s = queue.law.grid_extent[0]
    own_mean = queue.mean_own_batch_s
    # The drain runs top down in blocks of the smallest N (all of a plain cap's b at once): at
    # most ⌈n_q/kmin⌉ batches drain the queue ahead; past the horizon the mass is < _WAIT_TAIL
    kmin, nsb = queue.law.min_cut, tables.cut_support
    length = min(n_s + 1 + int(math.ceil(n_q / kmin)) * nsb + 1, int(math.ceil(horizon / dx)) + n_s + 2)
    valid = length
    if heavy:
        # Draining n_st ahead takes m = n_st/E[N] batches, mean m·E[S_N]; the waits of those with
        # n_st or more ahead (left out) lie below (1 − 5/√m) of that only with a relative
        # deviation of 5/√m, ≥ 10 standard deviations of a mean over m batch times per request
        # (their coefficient of variation is below 0.5): the grid is exact below `valid` bins.
        # The drain of up to n_st ahead takes at most twice its mean (the same bound, the other
        # way), which bounds the transform length instead of the 1e-9 horizon.
        m_batches = n_st / en
        valid = max(n_s + 2, int(m_batches * esn * max(0.25, 1.0 - 5.0 / math.sqrt(m_batches)) / dx))
        drain = 2.0 * n_st / en * esn + max_s + own_mean
        length = max(min(length, int(math.ceil(drain / dx)) + n_s + 2), valid + 1)
    size = fast_len(max(length, 2 * n_s + 2))
    if size > 4 * MAX_POINTS:
        raise NumericalError("prefill waiting-time grid too large; the load is too close to 1")
    return length, valid, size


def _drain_rows(queue: BulkQueue, ys: list[np.ndarray], tables: GridTables, n_q: int, busy_mass: float,
                size: int) -> tuple[np.ndarray, int]:
    """(P(W = t, m ahead) per (regime, m < m_own), m_own): the drain of the q ahead, by shifted adds
    when the cut laws are a few bins, else by transforms (:mod:`~qmodel.stations.prefill.drain`)."""
    regs = queue.regimes
    nr, last = len(regs), len(regs) - 1
    ks = [reg.live_k for reg in regs]
    flow = queue.law.cut_flow
    # rows that can carry mass, per regime: its own residual law, and what cuts bring down
    # (fit batches leave nothing waiting, so the fresh regime's rows stop at ~λ max S)
    ext = []
    for f in range(nr):
        if f == last:
            ext.append(n_q)
            continue
        nzf = np.nonzero(ys[f].sum(axis=0) > _STATE_MASS * busy_mass)[0]
        e = int(nzf[-1]) + 1 if nzf.size else 0
        for h in range(f):
            if f in flow[h]:
                e = max(e, ext[h] - min(ks[h]))
        ext.append(max(e, 1))
    m_own = min(queue.b, n_q)

    if tables.cut_bins[0] <= _SPARSE_LAW_BINS:
        u = drain_shifts(queue, ys, ext, tables, size, m_own)
    else:
        u = drain_transforms(queue, ys, ext, tables, size, m_own)
    np.maximum(u, 0.0, out=u)
    return u, m_own


def _wait_rows(u: np.ndarray, s_own: np.ndarray, heavy: bool, ratio: float, valid: int, n_s: int, busy_mass: float,
               p_idle: float, wait_prob: float | None, wait_scale: float) -> tuple[np.ndarray, float, float]:
    """(W's rows by (regime, m ahead) normalised to P(W > 0) and stretched by ``wait_scale``, P(W = 0),
    the mass of W's exponential tail past the grid (heavy; ``ratio`` = e^{−η dx} per bin))."""
    if heavy:
        # past `valid` bins each row (m ahead, regime) decays at the chain's exact rate η: it is
        # continued geometrically from its last exact bin for n_s + 2 bins (so that W + S_own is
        # exact up to the grid's end), and the rest is the law's exponential tail
        cont = n_s + 2
        last_col = u[:, valid - 1 : valid]
        u = np.concatenate([u[:, :valid], last_col * ratio ** np.arange(1, cont + 1)], axis=1)
    g_mass = float((s_own @ u).sum())
    if heavy:
        g_mass += float(s_own @ u[:, -1]) * ratio / (1.0 - ratio)
    factor = busy_mass / g_mass if g_mass > 0 else 1.0
    p_zero = p_idle
    if wait_prob is not None and busy_mass > 0:
        wait_prob = min(max(float(wait_prob), 1e-12), 1.0)
        factor *= wait_prob / busy_mass
        p_zero = 1.0 - wait_prob
    u *= factor
    w_tail = float(s_own @ u[:, -1]) * ratio / (1.0 - ratio) if heavy else 0.0
    if wait_scale != 1.0:  # (u.T is column-major: rescaled without a transposing copy)
        u = scale_time(u.T, wait_scale).T
    return u, p_zero, w_tail
