"""Waits of prefill-priority iterations (the TTFT side), shared by colocated and chunked.

The Pollaczek–Khinchine and JSQ waits for the iteration in progress (:func:`pk_wait`,
:func:`jsq_wait`, :func:`batch_wait`), the equilibrium residual of an iteration
(:func:`equilibrium_residual`), the arrivals a wait gathers (:func:`add_arrivals_during`) and the
burst increment of non-Poisson arrivals (:func:`burst_increment`, :func:`renewal_excess`,
:func:`burst_batch_mean`). Formulas and measured accuracy: the docstrings of
:mod:`qmodel.stations.colocated` and :mod:`qmodel.stations.chunked`.
"""

from __future__ import annotations

import math

import numpy as np

from qmodel.dist import GridDist, convolve, fast_len as _fast_len
from qmodel.stations.iteration_stalls import split_pmf

__all__ = ["burst_increment", "pk_wait", "equilibrium_residual", "win_against", "poisson_sf", "add_arrivals_during", "jsq_wait", "renewal_excess", "burst_batch_mean", "batch_wait"]

_INCREMENT_POINTS = 8192


def burst_increment(base: GridDist, burst: GridDist, limit: GridDist) -> GridDist:
    """The law of Q_base(U) + (Q_burst(U) - Q_limit(U))^+, U uniform: ``base`` plus, comonotonically,
    what ``burst`` adds over its own Poisson ``limit``; exactly ``base`` when burst = limit, and a
    larger increment at every u gives a stochastically larger result.

    The probability axis of base's grid mass is cut at its cells' edges and at 8192 equal steps; each
    piece keeps its length as mass and moves from its cell to cell + increment, the increment read at
    the piece's midpoint (split between the two neighbouring grid points). The mass moved is exactly
    base's, so the result is a law, and every piece's mass, midpoint and increment move continuously
    with the laws, hence with the rate. Q_burst and Q_limit are read continuously (:func:`_quantiles`),
    so the increment is not a whole number of grid steps. Where the increment falls with u faster than
    Q_base rises (the burst law reaching a density step, e.g. the longest prompts' prefill, before the
    limit does), the pieces keep their own values: the result is the law of that sum, its quantile
    function the sum rearranged, not a running maximum, which would pile that stretch of u onto one
    value and put the grid's mean above the stated one. Base's tail past its grid is kept.
    """
    c = np.cumsum(base.pmf)
    top = float(c[-1])
    edges = np.union1d(np.linspace(0.0, top, _INCREMENT_POINTS + 1), np.clip(c, 0.0, top))
    mass = np.diff(edges)
    keep = mass > 0
    mass, u = mass[keep], 0.5 * (edges[:-1] + edges[1:])[keep]
    cell = np.minimum(np.searchsorted(c, u), base.n - 1)
    qb = cell * base.dx
    qm, q1 = (_quantiles(d, u) for d in (burst, limit))
    vals = qb + np.maximum(qm - q1, 0.0)
    if not np.any(vals > qb):
        return base
    pmf = split_pmf(vals, base.dx, weights=mass)
    # the mean from the exact means kept beside the grids (E[(Q_m - Q_1)^+] = E[burst] - E[limit]
    # where burst >= limit in the usual stochastic order, as a larger burst is)
    return GridDist(base.dx, pmf, base.mean_s + max(burst.mean_s - limit.mean_s, 0.0), tail=base.tail,
                    tail_rate=min(base.tail_rate, burst.tail_rate), exact=False)


def _quantiles(d: GridDist, u: np.ndarray) -> np.ndarray:
    """Quantiles of ``d`` at every u (sorted), vectorised, continuous in u and in the pmf: bin k's mass
    (k >= 1) spread evenly over ((k - 1) dx, k dx] as in GridDist.quantile's continuous part, the
    mass at 0 kept there, then the exponential tail."""
    c = np.cumsum(d.pmf)
    k = np.searchsorted(c, u - 1e-12)
    inside = np.minimum(k, d.n - 1)
    below = np.where(inside > 0, c[np.maximum(inside - 1, 0)], 0.0)
    mass = d.pmf[inside]
    frac = np.clip((u - below) / np.maximum(mass, 1e-300), 0.0, 1.0)
    out = np.where(inside > 0, (inside - 1 + frac) * d.dx, 0.0)
    past = k >= d.n
    if np.any(past):
        end = (d.n - 1) * d.dx
        if math.isfinite(d.tail_rate) and d.tail > 0:
            out[past] = end + np.log(d.tail / np.maximum(1.0 - u[past], 1e-300)) / d.tail_rate
        else:
            out[past] = end
    return out


#: largest number of grid steps the Pollaczek–Khinchine transform spans (see pk_wait)
_PK_MAX_BINS = 1 << 15


def pk_wait(residual: GridDist, rho: float) -> GridDist:
    """M/G/1 FCFS wait: sum_k (1 - rho) rho^k R^{*k} (Pollaczek–Khinchine), by FFT on a padded grid.

    The grid reaches well past the mean (the tail is geometric-compound, decaying at least like
    rho^k), so the wrap-around mass of the cyclic FFT is below 1e-12 for rho <= 0.9; beyond
    _PK_MAX_BINS steps of the residual's grid the transform runs on a coarser step instead.
    """
    er = residual.mean_s
    mean_w = rho * er / (1.0 - rho)
    span = mean_w * 60.0 + residual.n * residual.dx * 4.0
    if span / residual.dx > _PK_MAX_BINS:
        # A wait hundreds of residuals long (high load) does not need the residual's own step: put
        # the residual on a coarser one, each bin's mass split between the two nearest coarse
        # points (mean kept exactly; rounding up would bias W by K·dx/2 with K ~ 1/(1 - rho) terms).
        # The transform then covers the whole span in at most _PK_MAX_BINS points; before, up to
        # 2^18 points covered only part of it and the rest of the compound-geometric tail wrapped
        # around. The step is a power-of-two multiple of the residual's: constant over wide ranges
        # of the rate, so attainment moves monotonically with the rate under a goodput search.
        dxc = residual.dx * 2.0 ** math.ceil(math.log2(span / residual.dx / _PK_MAX_BINS))
        residual = residual.regrid(dxc, keep_mean=True)
    size = min(_fast_len(int(span / residual.dx) + 2), 1 << 18)
    phi = np.fft.rfft(residual.pmf, size)
    pmf = np.clip(np.fft.irfft((1.0 - rho) / (1.0 - rho * phi), size), 0.0, None)
    if pmf[0] > 1.0 - rho:
        # P(W = 0) is exactly 1 - rho. A residual below one coarse step keeps part of its mass at
        # 0, which inflates the atom: that excess is waits shorter than a step, moved to the first.
        pmf[1] += pmf[0] - (1.0 - rho)
        pmf[0] = 1.0 - rho
    keep = int(min(size, 1 << 16))
    pmf = pmf[:keep]
    tail = max(0.0, 1.0 - float(pmf.sum()))
    # drop the far bins that carry < 1e-12 in all (60 means of headroom is mostly empty): every later
    # convolution and the co-batching transform then run on the part that matters
    c = np.cumsum(pmf[::-1])
    drop = int(np.searchsorted(c, 1e-12))
    if 0 < drop < len(pmf):
        pmf = pmf[: len(pmf) - drop].copy()
        pmf[-1] += c[drop - 1]
    return GridDist(residual.dx, pmf, mean_w, tail=tail, tail_rate=(1.0 - rho) / max(er, 1e-300), exact=False)


_W_STRATA = 16


def equilibrium_residual(it: np.ndarray, dx: float) -> tuple[np.ndarray, tuple[np.ndarray, np.ndarray], float]:
    """(residual pmf, (E[age | residual], E[age^2 | residual]) per grid point, E[residual]) of an
    operation whose duration has pmf ``it`` on the grid dx, met at a random time: P(R = k)
    proportional to P(T >= k) (k >= 1) and, given R = k, the age is T - k, so E[A | R = k] =
    E[T | T >= k] - k."""
    k = np.arange(len(it), dtype=float)
    sf_ge = np.cumsum(it[::-1])[::-1]
    res = np.concatenate([[0.0], sf_ge[1:]])
    res /= res.sum()
    first_ge = np.cumsum((k * it)[::-1])[::-1]
    second_ge = np.cumsum((k * k * it)[::-1])[::-1]
    inv = np.where(sf_ge > 1e-300, 1.0 / np.maximum(sf_ge, 1e-300), 0.0)
    age = np.maximum(first_ge * inv - k, 0.0) * dx
    # E[(T - k)^2 | T >= k] = E[T^2 | .] - 2k E[T | .] + k^2
    age2 = np.maximum(second_ge * inv - 2.0 * k * first_ge * inv + k * k, 0.0) * dx * dx
    e1, e2 = float(np.dot(k, it)) * dx, float(np.dot(k * k, it)) * dx * dx
    return res, (age, age2), e2 / (2.0 * e1) if e1 > 0 else 0.0


def win_against(size: np.ndarray, weight: np.ndarray, delta: float) -> np.ndarray:
    """P(S + D < S') per sample S, S' drawn with ``weight`` from the same sample and D a Laplace
    difference of scale delta: F_D(d) = 1 - exp(-d/delta)/2 for d >= 0, exp(d/delta)/2 below."""
    order = np.argsort(size, kind="stable")
    s_ = size[order] / delta
    w = weight[order] / weight.sum()
    z = np.clip(s_ - s_.mean(), -700.0, 700.0)  # centred exponents: no overflow for any workload
    up = np.cumsum((w * np.exp(-z))[::-1])[::-1]  # sum over S' >= S of w' e^{-S'}
    ge = np.cumsum(w[::-1])[::-1]  # P(S' >= S)
    below = np.concatenate([[0.0], np.cumsum(w * np.exp(z))[:-1]])  # sum over S' < S of w' e^{S'}
    out_sorted = ge - 0.5 * np.exp(z) * up + 0.5 * np.exp(-z) * below
    out = np.empty_like(out_sorted)
    out[order] = np.clip(out_sorted, 0.0, 1.0)
    return out


def _count_pmf(mu_w: np.ndarray, kmax: int, ea: np.ndarray | None = None, shape: np.ndarray | None = None,
               scale: np.ndarray | None = None, lam: float = 0.0) -> np.ndarray:
    """P(K = j), j < kmax, per row: K ~ Poisson(mu_w) plus, when ``ea`` is given, an independent count
    over a gamma(shape, scale) window at rate lam (negative binomial; Poisson(lam ea) where shape = inf)."""
    out = np.exp(-mu_w)[:, None] * np.ones(kmax)
    for i in range(1, kmax):
        out[:, i] = out[:, i - 1] * mu_w / i
    if ea is None:
        return out
    nb = np.empty_like(out)
    fin = np.isfinite(shape)
    sh = np.where(fin, shape, 1.0)
    p = np.where(fin, lam * scale / (1.0 + lam * scale), 0.0)  # NB success-probability form
    nb[:, 0] = np.where(fin, (1.0 - p) ** sh, np.exp(-lam * ea))
    for i in range(1, kmax):
        nb[:, i] = np.where(fin, nb[:, i - 1] * p * (sh + i - 1) / i, nb[:, i - 1] * lam * ea / i)
    # convolve the two counts row by row (kmax is small: the token budget in mean prompts)
    return np.stack([np.convolve(out[r], nb[r])[:kmax] for r in range(len(out))]) if len(out) else out[:, :0]


def poisson_sf(k: int, mu: float) -> float:
    """P(K >= k) for K ~ Poisson(mu)."""
    from qmodel.special import pdtrc  # local: keeps `import qmodel` light

    return float(pdtrc(k - 1, mu)) if k > 0 else 1.0


def add_arrivals_during(wait: GridDist, lam: float, jump: np.ndarray, mean_jump: float,
                         jump_dx: float | None = None, age: tuple[np.ndarray, np.ndarray] | None = None,
                         kmax: int | None = None, stats: dict | None = None) -> GridDist:
    """W + sum_{j <= K} J_j with K ~ Poisson(lam W) given W (mixed Poisson), on W's grid.

    ``age``: per grid point of W, (E[A | W], E[A^2 | W]) of a further window whose arrivals also join
    (K ~ Poisson(lam (W + A)), A given the stratum a gamma law with those moments); ``kmax``: K is
    capped there (min(K, kmax), the token budget), and ``stats["full"]`` receives P(K >= kmax).

    ``jump`` is the pmf of J on the grid ``jump_dx`` (default: W's); it is moved onto W's grid
    first when they differ (a long wait may come on a coarser step, see :func:`pk_wait`).

    W is cut into 16 equal-probability strata (boundary bins split, so the result moves continuously
    with the rate); within stratum s the count is Poisson(lam w_s) at the stratum mean w_s. In Fourier
    space: sum_s FFT(pmf_W restricted to s) exp(lam w_s (phi_J - 1)), one inverse FFT.
    """
    wait = wait.trimmed(1e-12)
    if jump_dx is not None and abs(jump_dx - wait.dx) > 1e-12 * wait.dx:
        # mean kept: K ~ Poisson(lam W) jumps add up
        jump = GridDist(jump_dx, jump, mean_jump, exact=False).regrid(wait.dx, keep_mean=True).pmf
    p = wait.pmf
    x = np.arange(wait.n) * wait.dx
    hi_c = np.cumsum(p)
    lo_c = hi_c - p
    q = np.linspace(0.0, float(hi_c[-1]), _W_STRATA + 1)
    share = np.clip(np.minimum(hi_c[None, :], q[1:, None]) - np.maximum(lo_c[None, :], q[:-1, None]), 0.0, None)
    mass = share.sum(axis=1)
    w_s = (share @ x) / np.maximum(mass, 1e-300)
    k = np.arange(len(jump))
    ej, ej2 = float(np.dot(k, jump)), float(np.dot(k * k, jump))
    shape = scale = None
    if age is None:
        mu_s = lam * w_s
    else:
        a, a2 = np.zeros(wait.n), np.zeros(wait.n)
        a[: min(len(age[0]), wait.n)] = age[0][: wait.n]
        a2[: min(len(age[1]), wait.n)] = age[1][: wait.n]
        inv = 1.0 / np.maximum(mass, 1e-300)
        ea, ea2 = (share @ a) * inv, (share @ a2) * inv
        va = np.maximum(ea2 - ea * ea, 0.0)
        # A given the stratum as a gamma law with its two moments: the count over the age window is
        # then negative binomial (a Poisson count mixed over a dispersed window), not Poisson(lam E[A])
        shape = np.where(va > 1e-12 * np.maximum(ea * ea, 1e-300), ea * ea / np.maximum(va, 1e-300), np.inf)
        scale = np.where(np.isfinite(shape), va / np.maximum(ea, 1e-300), 0.0)
        mu_s = lam * (w_s + ea)
    mu_max = float(mu_s.max())
    # the count's variance beyond Poisson (the age window's spread) widens the grid too, or the cyclic
    # transform would wrap the negative binomial's tail onto short waits
    over = 0.0 if shape is None else float((lam * lam * va).max(initial=0.0))
    n = wait.n + int(math.ceil(mu_max * ej + 12.0 * math.sqrt(mu_max * ej2 + over * ej * ej + 1.0))) + len(jump)
    n = min(n, 1 << 16)
    nfft = _fast_len(n)
    phi = np.fft.rfft(jump, nfft) - 1.0
    # strata with no arrivals (the atom at 0 spans several when P(W = 0) is large) share one factor 1
    zero = mu_s <= 0.0
    rows, mus = share[~zero], mu_s[~zero]
    if shape is not None:
        lw, ea_s = lam * w_s[~zero], ea[~zero]
        sh, sc = shape[~zero], scale[~zero]
        finite = np.isfinite(sh)
    acc = np.fft.rfft(rows, nfft, axis=1) if len(rows) else np.zeros((0, nfft // 2 + 1), complex)
    if kmax is not None and poisson_sf(kmax, 2.0 * mu_max) > 1e-12:
        # E[z^min(K, kmax)] = sum_{j < kmax} P(K = j) z^j + P(K >= kmax) z^kmax, at z = phi_J
        pk = _count_pmf(mus, kmax) if shape is None else _count_pmf(lw, kmax, ea_s, sh, sc, lam)
        fac = np.zeros_like(acc)
        zj = np.ones_like(phi)
        for j in range(kmax):
            fac += pk[:, j: j + 1] * zj[None, :]
            zj = zj * (phi + 1.0)
        left = np.clip(1.0 - pk.sum(axis=1), 0.0, None)
        acc = np.einsum("ij,ij->j", acc, fac + left[:, None] * zj[None, :])
        count = pk @ np.arange(kmax) + kmax * left
        if stats is not None:
            stats["full"] = float(mass[~zero] @ left)
    else:
        if shape is None:
            expo = np.outer(mus, phi)
        else:
            # Poisson(lam w) over the wait, gamma-mixed Poisson over the age window
            expo = np.outer(lw, phi)
            sh_f = np.where(finite, sh, 0.0)  # rows with a fixed window (shape = inf) stay Poisson
            expo += -sh_f[:, None] * np.log1p(-np.outer(lam * sc, phi))
            expo += np.outer(np.where(finite, 0.0, lam * ea_s), phi)
        acc = np.einsum("ij,ij->j", acc, np.exp(expo))
        count = mus
    if np.any(zero):
        acc += np.fft.rfft(share[zero].sum(axis=0), nfft)
    pmf = np.clip(np.fft.irfft(acc, nfft)[:n], 0.0, None)
    if age is None and kmax is None:
        mean = wait.mean_s + lam * wait.mean_s * mean_jump
    else:
        mean = wait.mean_s + float(mass[~zero] @ count) * mean_jump
    return GridDist(wait.dx, pmf, mean, tail=max(0.0, 1.0 - float(pmf.sum())), tail_rate=wait.tail_rate, exact=False)


def jsq_wait(pk: GridDist, rho: float, c: int, scale: float = 1.0) -> GridDist:
    """Prefill wait with least-loaded dispatch over c instances (approximation).

    Joining the least-loaded instance waits only when every instance has prefill work: the wait
    probability becomes Erlang C(c, c rho) instead of rho and, as in M/G/c, the conditional wait
    shrinks by 1/c. ``scale`` multiplies the conditional wait (the heavy-traffic correction
    (c_a^2 + c_s^2)/(1 + c_s^2) for non-Poisson arrivals). c = 1 and scale = 1 return ``pk``.
    """
    if (c <= 1 and scale == 1.0) or rho <= 0:
        return pk
    from qmodel.stations.fcfs import erlang_c

    cq = erlang_c(c, c * rho) if c > 1 else rho
    cond = pk.pmf.copy()
    p_wait = float(cond[1:].sum())
    cond[0] = 0.0
    if p_wait <= 0:
        return pk
    pmf = cq * cond / p_wait
    pmf[0] += 1.0 - cq
    mean = cq * (pk.mean_s / max(p_wait, 1e-300)) * scale / c
    return GridDist(pk.dx * scale / c, pmf, mean, tail=0.0, tail_rate=pk.tail_rate * c / scale, exact=False)


def renewal_excess(ca2: float, x: float) -> float:
    """U(t) - lam t at lam t = x for a Gamma renewal stream with SCV ca2 (Palm view: arrivals in (0, t]
    after an arrival, minus the Poisson count). U(t) = sum_n P(Gamma(n k, lam k) <= t), k = 1/ca2; the
    excess rises from 0 (x -> 0) to (ca2 - 1)/2 (x -> inf, the renewal-function asymptote)."""
    from qmodel.special import gammainc  # local: keeps `import qmodel` light

    k = 1.0 / ca2
    n_max = int(x + 12.0 * math.sqrt(ca2 * x + 1.0) + 20.0 * ca2) + 10
    n = np.arange(1, n_max + 1, dtype=float)
    return float(np.sum(gammainc(n * k, k * x))) - x


def burst_batch_mean(ca2: float, instances: int, least_loaded: bool, lam_s: float = math.inf,
                     window_s: float = math.inf) -> float:
    """Mean batch size m of the batch-Poisson stand-in for a renewal stream with arrival SCV ca2 > 1.

    A compound Poisson stream with geometric batches X (mean m) has (m - 1) extra arrivals right
    behind (and ahead of) a tagged one, where a renewal stream has the excess U(t) - lam t of its
    renewal function (:func:`renewal_excess`, Gamma stand-in with the same SCV). Matching the two over
    the window in which earlier arrivals are still present (``window_s``: the mean prompt-backlog busy
    period; the caller's choice) gives m = 1 + excess(lam window); for a long window this is
    m = (1 + ca2)/2, the batch stream with the same index of dispersion of counts 2m - 1 = ca2.
    ``lam_s``: the rate of the stream that feeds one queue. A random split over c instances thins it:
    SCV 1 + (ca2 - 1)/c per instance; least_loaded keeps the pooled stream (rate c lam; the batch is
    dealt out over the instances, :func:`batch_wait`). ca2 <= 1 gives m = 1.
    """
    if ca2 <= 1.0:
        return 1.0
    pooled = least_loaded or instances <= 1
    idx = ca2 if pooled else 1.0 + (ca2 - 1.0) / instances
    x = lam_s * (instances if (least_loaded and instances > 1) else 1) * window_s
    if not math.isfinite(x):
        return 0.5 * (1.0 + idx)
    return 1.0 + max(renewal_excess(idx, x), 0.0)


def batch_wait(service: np.ndarray, dx: float, rho: float, m: float, c: int,
               member: np.ndarray | None = None, sides: int = 1) -> GridDist:
    """FCFS wait of M^X/G/1 with geometric batches X >= 1 of mean m (bursty-arrival stand-in).

    W = W_b + A: W_b is the Pollaczek–Khinchine wait of whole batches (load rho, residual of the batch
    work S_b = S + sum_{X-1} M), A the work of the batch members served before the tagged one,
    J ~ Geometric_0(q), q = 1 - 1/m, E[J] = m - 1 (exact for M^X/G/1 with M = S). least_loaded over c
    instances: batches see the Erlang-C / c transform of :func:`jsq_wait`, and a burst is dealt out
    one per instance in turn, so the members ahead on the tagged one's instance are floor(J/c) ~
    Geometric_0(q^c). ``service``: pmf of one service S on the grid dx.

    Engines that batch (colocated prefill iterations) serve a burst in one iteration: ``member`` M is
    then the pmf of the cost one more member adds (its marginal prefill time; default M = S, serial
    service), and ``sides`` = 2 counts the members behind the tagged one as well (two independent
    Geometric_0(q^c) counts, by the symmetry of the geometric batch).
    """
    mem = service if member is None else member
    q = 1.0 - 1.0 / m

    def moments(p: np.ndarray) -> tuple[float, float]:
        k = np.arange(len(p))
        return float(np.dot(k, p)) * dx, float(np.dot(k * k, p)) * dx * dx

    es, es2 = moments(service)
    em, em2 = moments(mem)
    # Y = sum_{X-1} M, X - 1 ~ Geometric_0(q): E[X-1] = m - 1, Var(X-1) = m (m - 1)
    ey = (m - 1.0) * em
    vy = (m - 1.0) * (em2 - em * em) + em * em * m * (m - 1.0)
    eb, eb2 = es + ey, es2 + 2.0 * es * ey + vy + ey * ey
    size = _fast_len(int((eb + 14.0 * math.sqrt(max(eb2 - eb * eb, 0.0))) / dx) + len(service) + len(mem) + 2)
    phi_s = np.fft.rfft(service, size)
    phi_m = np.fft.rfft(mem, size)
    sb = np.clip(np.fft.irfft(phi_s * (1.0 - q) / (1.0 - q * phi_m), size), 0.0, None)
    sb /= sb.sum()
    sf = 1.0 - np.cumsum(sb)
    res = np.concatenate([[0.0], sf[:-1]])
    res = res / res.sum()
    wb = jsq_wait(pk_wait(GridDist(dx, res, eb2 / (2.0 * eb), exact=False), rho), rho, c)
    qc = q ** max(c, 1)
    ahead = np.clip(np.fft.irfft(((1.0 - qc) / (1.0 - qc * phi_m)) ** sides, size), 0.0, None)
    mean_a = sides * qc / (1.0 - qc) * em
    return convolve(wb, GridDist(dx, ahead / ahead.sum(), mean_a, exact=False))

