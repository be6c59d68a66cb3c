"""Stall laws of prefill-priority iterations (the TPOT side), shared by colocated and chunked.

The compound Poisson law of the prefill work that lands in a window
(:func:`compound_poisson_pmf`), the busy periods prefill stalls cluster into
(:func:`busy_period_stalls`), the per-request TPOT with those stalls (:func:`stall_tpot`, over the
occupancy nodes of :func:`n_nodes`) and the residual of a decode step (:func:`decode_residual`);
for chunked's per-state tables, :func:`state_at` (a fractional state) and :func:`strata_nodes`
(equal-probability strata of a wait law).
Formulas and measured accuracy: the docstrings of :mod:`qmodel.stations.colocated` and
:mod:`qmodel.stations.chunked`.
"""

from __future__ import annotations

import math

import numpy as np

from qmodel.dist import GridDist, fast_len as _fast_len

__all__ = ["N_NODES", "L_GROUPS", "compound_poisson_pmf", "grid_pmf", "split_pmf", "n_nodes", "stall_tpot", "OWN_BP_POINTS", "busy_period_stalls", "decode_residual",
           "state_at", "strata_nodes"]

N_NODES = 5
L_GROUPS = 10


def compound_poisson_pmf(jump_pmf: np.ndarray, mu: np.ndarray, size: int,
                         extra: list[tuple[np.ndarray, np.ndarray]] | None = None) -> np.ndarray:
    """pmf on a grid of sum_{j<=K} T_j, K ~ Poisson(mu) (one row per mu), by FFT of exp(mu (phi_T - 1)).

    ``extra``: further independent compound Poisson terms (jump pmf, mu per row) added to the sum.
    """
    # The callers size the grid at mean + 12 sd + one jump, so the mass that wraps around the
    # cyclic transform is far below 1e-12; a quarter of slack (not a doubling) covers it, and a
    # 5-smooth length is as fast as a power of two.
    nfft = _fast_len(size + size // 4 + 2)
    expo = np.outer(mu, np.fft.rfft(jump_pmf, nfft) - 1.0)
    for jp, m in extra or []:
        expo += np.outer(m, np.fft.rfft(jp, nfft) - 1.0)
    out = np.fft.irfft(np.exp(expo), nfft, axis=-1)[:, :size]
    return np.clip(out, 0.0, None)


def grid_pmf(values: np.ndarray, dx: float) -> np.ndarray:
    """Equal-weight sample -> pmf on a grid (rounded up)."""
    pmf = np.bincount(np.ceil(values / dx - 1e-9).astype(np.int64), minlength=2).astype(float)
    return pmf / pmf.sum()


def n_nodes(pi: np.ndarray, k: int = N_NODES) -> tuple[list[float], np.ndarray]:
    """Quadrature nodes of N: conditional means within k equal-probability strata (keeps E[N] exact).

    A state straddling a stratum boundary is split between the two strata, so the nodes move
    continuously with the rate (no jumps when a boundary crosses an integer state).
    """
    p = pi / float(pi.sum())
    hi_c = np.cumsum(p)
    lo_c = hi_c - p
    q = np.linspace(0.0, 1.0, k + 1)
    share = np.clip(np.minimum(hi_c[None, :], q[1:, None]) - np.maximum(lo_c[None, :], q[:-1, None]), 0.0, None)
    w = share.sum(axis=1)
    nodes = (share @ np.arange(len(p), dtype=float)) / np.maximum(w, 1e-300)
    keep = w > 0
    return [float(v) for v in nodes[keep]], w[keep] / w[keep].sum()


def stall_tpot(lam: float, groups: list[tuple[float, float, float]], node_w: np.ndarray, node_td: np.ndarray,
               node_rho: list[float], node_jumps: list[np.ndarray],
               node_cap: list[float] | None = None, node_own: list[float] | None = None,
               node_life_jumps: list[np.ndarray] | None = None,
               node_life_rate: list[float] | None = None, dx0: float | None = None) -> GridDist:
    """TPOT = t_n + S/(L-1) with S = S_life + S_own, independent compound Poisson sums:

    S_own: K_0 ~ Poisson(lam (T_own + own_n)) jumps X (the prompts queued behind the request);
    S_life: K ~ Poisson(lam r_n D), D = (L-1) t_n/(1-rho_n), jumps Y (``node_life_jumps``, default X,
    with rate factor r_n, default 1: clustered stalls, e.g. whole prefill busy periods, use r_n < 1).

    ``groups``: (weight, representative L-1, mean own prefill time); per N node n: weight, decode step
    t_n, capacity loss rho_n and samples of the stalls (equal weights). Each L group gets its own S
    grid: S enters TPOT divided by L-1, so a step of dx (L-1) on S is a step of dx on TPOT; the grid
    reaches mean + 12 sd of S plus one jump. ``node_cap``: an upper bound on TPOT per node (chunked:
    every iteration emits a token, so TPOT <= the longest iteration); the mean is then taken from the
    capped grid. ``node_own``: per node, seconds added to the own-prefill window. ``dx0``: a
    rate-independent base grid step (the grid is dx0 2^j, j the smallest that fits 60000 points), so
    that attainment P(TPOT <= y) moves monotonically with the rate instead of with a rescaled grid.
    """
    nn = len(node_td)
    own = [0.0] * nn if node_own is None else list(node_own)
    life = node_jumps if node_life_jumps is None else node_life_jumps
    rate = [1.0] * nn if node_life_rate is None else list(node_life_rate)

    memo: dict[int, tuple[float, float, float]] = {}

    def mom(x: np.ndarray) -> tuple[float, float, float]:
        # nodes usually share one sample array: its moments once per array, not once per node
        if id(x) not in memo:
            memo[id(x)] = (float(x.mean()), float(np.dot(x, x)) / len(x), float(x.max()))
        return memo[id(x)]

    m_own = [mom(x) for x in node_jumps]
    m_life = [mom(x) for x in life]
    split_memo: dict[tuple[int, float], np.ndarray] = {}

    def split(x: np.ndarray, step: float) -> np.ndarray:
        # L groups whose grid step hits the same floor (short outputs) reuse one discretised jump law
        key = (id(x), step)
        if key not in split_memo:
            split_memo[key] = split_pmf(x, step)
        return split_memo[key]
    mean_tpot = 0.0
    for gw, lm1, tp in groups:
        for j in range(nn):
            d_life = lm1 * node_td[j] / (1 - node_rho[j])
            s_mean = lam * rate[j] * d_life * m_life[j][0] + lam * (tp + own[j]) * m_own[j][0]
            mean_tpot += gw * node_w[j] * (node_td[j] + s_mean / lm1)
    dx = mean_tpot / 400.0 if dx0 is None else dx0
    # blocks of rows sharing one S grid: (weights, lm1, t_n per row, dx_s, pmf rows, caps per row)
    rows: list[tuple[np.ndarray, float, np.ndarray, float, np.ndarray, np.ndarray]] = []
    caps = [math.inf] * nn if node_cap is None else list(node_cap)
    hi_t = 0.0
    keyed: dict[tuple[int, int], list[int]] = {}
    for j in range(nn):
        keyed.setdefault((id(node_jumps[j]), id(life[j])), []).append(j)
    for gw, lm1, tp in groups:
        for idx in keyed.values():
            j0 = idx[0]
            (eo, eo2, xo), (el, el2, xl) = m_own[j0], m_life[j0]
            if eo <= 0 and el <= 0:
                for j in idx:
                    rows.append((np.array([gw * node_w[j]]), lm1, np.array([float(node_td[j])]), 1.0,
                                 np.ones((1, 1)), np.array([caps[j]])))
                    hi_t = max(hi_t, float(node_td[j]))
                continue
            mu_o = np.array([lam * (tp + own[j]) for j in idx])
            mu_l = np.array([lam * rate[j] * lm1 * node_td[j] / (1 - node_rho[j]) for j in idx])
            small = min(v for v in (eo, el) if v > 0)
            xmax = max(xo, xl)
            need = max(dx * lm1, small / 64.0, xmax / 1024.0)
            # power-of-two multiples of the own-jump scale keep the S grid fixed between nearby rates
            base = small / 64.0
            dxs = base * 2.0 ** math.ceil(math.log2(need / base) - 1e-12)
            comps = []
            for x, mu in ((node_jumps[j0], mu_o), (life[j0], mu_l)):
                comps.append((split(x, dxs), mu))
            mean_s = float(np.max(mu_o * eo + mu_l * el))
            var_s = float(np.max(mu_o * eo2 + mu_l * el2))
            s_hi = mean_s + 12 * math.sqrt(var_s) + xmax
            size = int(min(math.ceil(s_hi / dxs) + 2, 1 << 16))
            cp = compound_poisson_pmf(comps[0][0], comps[0][1], size, extra=[comps[1]])
            rows.append((np.array([gw * node_w[j] for j in idx]), lm1, np.array([float(node_td[j]) for j in idx]),
                         dxs, cp, np.array([caps[j] for j in idx])))
            for j in idx:
                hi_t = max(hi_t, min(float(node_td[j]) + (size - 1) * dxs / lm1, caps[j]))
    if dx0 is None:
        dx = max(dx, hi_t / 60000.0)
    else:
        dx = dx0 * 2.0 ** max(0, math.ceil(math.log2(hi_t / (60000.0 * dx0))))
    nt = int(math.ceil(hi_t / dx)) + 2
    pmf = np.zeros(nt)
    capped_mean = 0.0
    for w, lm1, tdn, dxs, block, cap in rows:
        # one binning per block of rows (TPOT = t_n + S/(L-1), capped) instead of one per row
        v = np.minimum(tdn[:, None] + np.arange(block.shape[1]) * (dxs / lm1), cap[:, None])
        fin = np.isfinite(cap)
        if np.any(fin):
            capped_mean += float(np.dot(w[fin], np.einsum("ij,ij->i", v[fin], block[fin])))
        k = np.minimum(np.ceil(v / dx - 1e-9).astype(np.int64), nt - 1)
        pmf += np.bincount(k.ravel(), weights=(w[:, None] * block).ravel(), minlength=nt)
    if node_cap is not None:
        mean_tpot = capped_mean / max(float(pmf.sum()), 1e-300)
    lost = max(0.0, 1.0 - float(pmf.sum()))
    return GridDist(dx, pmf, float(mean_tpot), tail=lost, tail_rate=1.0 / max(mean_tpot, 1e-12), exact=False)


def split_pmf(values: np.ndarray, dx: float, weights: np.ndarray | None = None) -> np.ndarray:
    """Equal-weight sample -> pmf on a grid, each value split between its two neighbouring points so
    the mean is kept exactly (a compound sum of many jumps would otherwise inherit a rounding bias per
    jump; the split only adds at most dx^2/4 variance per jump). ``weights``: per-value weights
    (unnormalised) instead of equal ones."""
    u = np.maximum(values, 0.0) / dx
    k = np.floor(u).astype(np.int64)
    f = u - k
    w = 1.0 / len(u) if weights is None else weights
    pmf = np.bincount(k, weights=(1.0 - f) * w, minlength=int(k.max()) + 2)
    pmf += np.bincount(k + 1, weights=f * w, minlength=len(pmf))[: len(pmf)]
    return pmf


_BP_POINTS = 1024
OWN_BP_POINTS = 256  # strata of the own-window busy period (its top one at the 0.998 quantile)


def busy_period_stalls(work: np.ndarray, stall: np.ndarray, rho: float, batch_mean: float = 1.0,
                        points: int = _BP_POINTS) -> np.ndarray:
    """Stall added by one whole prompt-backlog busy period (deterministic quantile sample).

    Prompt backlogs form M/G/1 busy periods B that start at rate lam (1 - rho), with
    E[B] = E[S]/(1 - rho) and E[B^2] = E[S^2]/(1 - rho)^3 (Takacs). B is represented by the gamma law
    with those two moments at the mid-point quantiles of 1024 strata, and its stall is B E[X]/E[S].
    Clustering the stalls this way keeps their mean (lam D E[X]) and carries the busy-period
    correlation that independent per-prompt stalls miss.

    ``batch_mean`` m > 1 (bursty arrivals as geometric batches, :func:`burst_batch_mean`): busy periods
    of M^X/G/1 start at rate lam (1 - rho)/m (the caller's rate factor) and have the moments above
    with S replaced by the batch work S_b: E[S_b] = m E[S], E[S_b^2] = m E[S^2] + 2m(m-1) E[S]^2.
    """
    from qmodel.special import gammaincinv  # local: keeps `import qmodel` light

    es, es2 = float(work.mean()), float(np.mean(work * work))
    m = max(float(batch_mean), 1.0)
    stall_per_work = float(stall.mean()) / es
    es, es2 = m * es, m * es2 + 2.0 * m * (m - 1.0) * es * es
    eb, eb2 = es / (1.0 - rho), es2 / (1.0 - rho) ** 3
    var = max(eb2 - eb * eb, 1e-30)
    shape, scale = eb * eb / var, var / eb
    q = (np.arange(points) + 0.5) / points
    b = gammaincinv(shape, q) * scale
    b *= eb / float(b.mean())  # exact mean after stratification
    return b * stall_per_work


def decode_residual(gd: np.ndarray, wd: np.ndarray, slow: float, busy: float, dx: float) -> GridDist:
    """Residual of a running decode step, stretched by 1/slow, on a fixed grid: with probability
    ``busy`` uniform on t/slow, t ~ ``gd`` with weights ``wd``; else 0 (exact CDF at the grid points)."""
    top = float(gd.max()) / slow
    xk = np.arange(int(math.ceil(top / dx)) + 2) * dx
    cdf = (1.0 - busy) + busy * (wd @ np.clip(xk[None, :] * slow / gd[:, None], 0.0, 1.0))
    return GridDist(dx, np.diff(cdf, prepend=0.0), busy * float(np.dot(wd, gd)) / (2.0 * slow), exact=False)


def state_at(table: np.ndarray, v: float) -> float | np.ndarray:
    """table[v] for a fractional state v (rows of a 2-D table), linear between the neighbours."""
    j = int(math.floor(v))
    f = v - j
    if f <= 0.0 or j + 1 >= len(table):
        row = table[min(j, len(table) - 1)]
        return float(row) if np.ndim(row) == 0 else row
    out = (1.0 - f) * table[j] + f * table[j + 1]
    return float(out) if np.ndim(out) == 0 else out


def strata_nodes(d: GridDist, k: int) -> tuple[list[float], list[float]]:
    """k equal-probability strata of a grid distribution: conditional means (keeps the mean) and weights."""
    if k <= 1:
        return [d.mean_s], [1.0]
    x = np.arange(d.n) * d.dx
    p = d.pmf / max(float(d.pmf.sum()), 1e-300)
    c = np.cumsum(p)
    cuts = [0] + [int(np.searchsorted(c, q)) + 1 for q in np.linspace(0, 1, k + 1)[1:-1]] + [d.n]
    nodes, wts = [], []
    for lo, hi in zip(cuts[:-1], cuts[1:]):
        w = float(p[lo:hi].sum())
        if hi > lo and w > 0:
            nodes.append(float(np.dot(x[lo:hi], p[lo:hi]) / w))
            wts.append(w)
    scale = d.mean_s / max(sum(a * b for a, b in zip(nodes, wts)), 1e-300) if nodes else 1.0
    return [v * scale for v in nodes], [w / sum(wts) for w in wts]
