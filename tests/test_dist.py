"""The grid-distribution algebra every composition rests on (qmodel.dist)."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from qmodel.dist import GridDist, LazyGridDist, convolve, fast_len, sum_cdf


def _law(rng: np.random.Generator, n: int, dx: float, tail: float = 0.0) -> GridDist:
    p = rng.random(n) ** 3
    p *= (1.0 - tail) / p.sum()
    k = np.arange(n)
    return GridDist(dx, p, float(k @ p) * dx, tail=tail, tail_rate=5.0 if tail else float("inf"))


def test_convolve_is_the_exact_discrete_convolution() -> None:
    # FFT convolution against np.convolve (direct sums): the same numbers to round-off
    rng = np.random.default_rng(1)
    a, b = _law(rng, 37, 0.01), _law(rng, 501, 0.01)
    c = convolve(a, b)
    np.testing.assert_allclose(c.pmf, np.convolve(a.pmf, b.pmf), rtol=0, atol=1e-15)
    assert c.mean_s == pytest.approx(a.mean_s + b.mean_s, rel=1e-14)
    assert c.tail == pytest.approx(0.0, abs=1e-14)


@pytest.mark.parametrize("terms", [2, 3])
def test_sum_cdf_equals_the_convolved_law(terms: int) -> None:
    # P(X1 + ... + Xn <= x) by one dot product against the others' law, with tails off the grid,
    # at every grid point and between them: the convolved law's cdf to round-off
    rng = np.random.default_rng(7 + terms)
    laws = [_law(rng, n, 0.002, tail) for n, tail in zip((300, 41, 1200)[:terms], (1e-6, 0.0, 3e-5))]
    full = convolve(*laws)
    xs = np.concatenate([np.arange(full.n + 5) * 0.002, rng.uniform(-0.01, full.n * 0.002 + 0.01, 200)])
    got = np.array([sum_cdf(laws, x) for x in xs])
    want = np.array([full.cdf(x) for x in xs])
    np.testing.assert_allclose(got, want, rtol=0, atol=1e-13)
    assert sum_cdf(laws, -1.0) == 0.0
    assert sum_cdf(laws[:1], 0.1) == laws[0].cdf(0.1)


def test_lazy_grid_dist_builds_once_on_first_use() -> None:
    rng = np.random.default_rng(3)
    eager = _law(rng, 64, 0.5, 1e-4)
    calls: list[int] = []

    def build() -> GridDist:
        calls.append(1)
        return eager

    lazy = LazyGridDist(build)
    assert isinstance(lazy, GridDist) and calls == []
    assert lazy.quantile(0.9) == eager.quantile(0.9) and calls == [1]
    assert lazy.mean_s == eager.mean_s and lazy.n == eager.n and lazy.tail == eager.tail and calls == [1]
    assert np.array_equal(convolve(lazy, eager).pmf, convolve(eager, eager).pmf)
    moved = dataclasses.replace(LazyGridDist(build), mean_s=1.0)  # a built copy, as replace() gives
    assert moved.mean_s == 1.0 and np.array_equal(moved.pmf, eager.pmf)


@pytest.mark.parametrize("n", [1, 2, 7, 97, 1000, 4097, 8191, 65537])
def test_fast_len_is_the_smallest_5_smooth_length(n: int) -> None:
    def smooth(m: int) -> bool:
        for p in (2, 3, 5):
            while m % p == 0:
                m //= p
        return m == 1

    got = fast_len(n)
    assert got >= max(n, 2) and smooth(got)
    assert not any(smooth(m) for m in range(max(n, 2), got))


def test_stochastic_max_is_the_law_of_the_comonotone_maximum() -> None:
    # Two laws on grids of steps 1 and 2: the result's CDF is min(F_a, F_b) at a's points and its mean
    # is E[max(X_a, X_b)] for comonotone X_a, X_b (= E[X_a] + sum over the grid of F_a - F_max).
    from qmodel.dist import stochastic_max

    a = GridDist(1.0, np.array([0.1, 0.4, 0.3, 0.2]), 0.0 * 0.1 + 1 * 0.4 + 2 * 0.3 + 3 * 0.2)
    b = GridDist(2.0, np.array([0.5, 0.2, 0.3]), 0.0 * 0.5 + 2 * 0.2 + 4 * 0.3)
    m = stochastic_max(a, b)
    fa = np.array([0.1, 0.5, 0.8, 1.0, 1.0])
    fb = np.array([0.5, 0.5, 0.7, 0.7, 1.0])  # b's CDF read at 0, 1, 2, 3, 4 (rounded down to its grid)
    assert m.dx == 1.0
    assert np.allclose(np.cumsum(m.pmf), np.minimum(fa, fb), atol=1e-15)
    # comonotone maximum by quantile coupling: E[max(Qa(U), Qb(U))]
    u = (np.arange(200000) + 0.5) / 200000
    qa = np.searchsorted(fa, u - 1e-12)
    qb = np.searchsorted(fb, u - 1e-12)
    assert m.mean_s == pytest.approx(float(np.mean(np.maximum(qa, qb))), abs=1e-9)
    assert stochastic_max(a, GridDist.point(0.0, 1.0)) is a  # b never binds: a itself
