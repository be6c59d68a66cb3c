"""The grid-distribution algebra every composition rests on (qmodel.dist)."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from qmodel import dist
from qmodel.convolution import direct_sum
from qmodel.dist import GridDist, LazyGridDist, convolve, fast_len, pow2_grid, sum_cdf


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


def _sparse_law(rng: np.random.Generator, n: int, nnz: int, dx: float) -> GridDist:
    # a law on a grid much finer than its spread: a few atoms (deterministic batch/transfer times)
    p = np.zeros(n)
    p[rng.choice(n, size=nnz, replace=False)] = rng.random(nnz) + 0.1
    p[n - 1] = max(p[n - 1], 0.05)  # the support reaches the end (nothing to trim)
    p /= p.sum()
    return GridDist(dx, p, float(np.arange(n) @ p) * dx)


@pytest.mark.parametrize("case", ["shifts", "sparse-products", "dense-short", "fft", "mixed-three"])
def test_every_convolution_path_is_the_exact_discrete_convolution(case: str) -> None:
    # convolve picks shifted copies, direct sums over nonzero bins, dense direct sums or one FFT
    # pass by cost (qmodel.convolution.direct_sum); each must give np.convolve's numbers to round-off
    rng = np.random.default_rng(11)
    laws = {
        "shifts": [_law(rng, 1800, 1e-5), _sparse_law(rng, 1165, 4, 1e-5)],  # 4 shifted copies
        "sparse-products": [_sparse_law(rng, 3600, 40, 1e-5), _law(rng, 62, 1e-5)],  # 40 x 62 products
        "dense-short": [_law(rng, 90, 1e-3), _law(rng, 300, 1e-3)],
        "fft": [_law(rng, 1800, 1e-3), _law(rng, 1200, 1e-3)],
        "mixed-three": [_law(rng, 1800, 1e-3), _sparse_law(rng, 1100, 30, 1e-3), _law(rng, 100, 1e-3)],
    }[case]
    want = laws[0].pmf
    for law in laws[1:]:
        want = np.convolve(want, law.pmf)
    got = convolve(*laws)
    assert got.n == want.size
    np.testing.assert_allclose(got.pmf, want, rtol=0, atol=1e-15)
    assert got.mean_s == pytest.approx(sum(x.mean_s for x in laws), rel=1e-14)
    # and the path taken is the one the case names
    def direct(x: np.ndarray, y: np.ndarray) -> np.ndarray | None:
        return direct_sum(x, y, int(np.count_nonzero(x)), int(np.count_nonzero(y)))

    a, b = laws[0].pmf, laws[1].pmf
    if case == "mixed-three":  # the sparse and the short factor fold directly, the long one by FFT
        both = direct(laws[2].pmf, b)
        assert both is not None and direct(both, a) is None
    else:
        assert (direct(a, b) is None) == (case == "fft")


@pytest.mark.parametrize("negligible_bins", [0, 5, 64, 65, 700])
def test_trimmed_drops_exactly_the_negligible_run(negligible_bins: int) -> None:
    # trimmed() first sums the last _TRIM_PROBE bins; a longer negligible run needs the whole law
    rng = np.random.default_rng(negligible_bins)
    head = rng.random(300) + 0.01
    head /= head.sum()
    pmf = np.concatenate([head * (1.0 - 1e-13), np.full(negligible_bins, 1e-13 / max(negligible_bins, 1))])
    law = GridDist(1e-3, pmf, 0.1)
    c = np.cumsum(pmf[::-1])  # the plain rule: drop the trailing bins whose total is below 1e-12
    drop = int(np.searchsorted(c, 1e-12))
    got = law.trimmed()
    assert got.trimmed() is got  # a trimmed law remembers it
    if drop <= 0:
        assert got is law
    else:
        assert got.n == pmf.size - drop
        assert got.pmf.sum() == pytest.approx(1.0, abs=1e-15)
    assert got.n >= 300 - 1


@given(st.integers(1, 300), st.integers(0, 250), st.floats(1e-20, 1e-9), st.integers(0, 2**31 - 1))
@settings(max_examples=200, deadline=None)
def test_trimmed_from_is_trimmed(n: int, zeros: int, tail: float, seed: int) -> None:
    # a station builds its laws trimmed in one go from a fresh pmf; it must be GridDist.trimmed's
    # law exactly (tiny tails, long zero runs past the first probe, nothing to trim)
    rng = np.random.default_rng(seed)
    pmf = np.concatenate([rng.random(n), np.zeros(zeros), tail * rng.random(rng.integers(0, 80))])
    pmf[rng.random(pmf.size) < 0.3] = 0.0
    want = GridDist(0.01, pmf.copy(), 1.5, exact=False).trimmed()
    got = GridDist.trimmed_from(pmf.copy(), 0.01, 1.5, False)
    assert got.dx == want.dx and got.mean_s == want.mean_s and got.exact == want.exact
    assert np.array_equal(got.pmf, want.pmf)
    assert got.trimmed() is got


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


def test_scalar_cdf_is_the_array_cdf_and_laws_stay_frozen() -> None:
    # cdf(x) at one point takes a scalar path (an SLO target per solve): the same grid point as
    # the array path, at, between, before and past the grid points
    rng = np.random.default_rng(11)
    law = _law(rng, 50, 0.003, 1e-5)
    xs = np.concatenate([np.arange(-2, 55) * 0.003, rng.uniform(-0.01, 0.2, 300), [0.0029999999999]])
    arr = law.cdf(xs)
    for x, want in zip(xs.tolist(), arr.tolist()):
        assert law.cdf(x) == want and law.cdf(np.float64(x)) == want
    assert law.cdf(3) == float(law.cum[-1]) and law.cdf(-3) == 0.0 and law.cdf(float("-inf")) == 0.0
    assert law.cdf(float("inf")) == float(law.cum[-1])
    with pytest.raises(dataclasses.FrozenInstanceError):
        law.dx = 1.0  # type: ignore[misc]
    assert GridDist(0.1, law.pmf, 1.0).meta == {} and GridDist(0.1, law.pmf, 1.0).meta is not law.meta


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


def test_linear_convolution_first_points_need_no_full_length():
    # Asked for fewer points than the whole convolution, the FFT path must not wrap the later
    # points onto the first ones (it did: a transform of only n points); exact to FFT round-off.
    from qmodel.convolution import linear_convolution

    rng = np.random.default_rng(5)
    a, b = rng.random(3000), rng.random(2500)  # dense and long: the FFT path
    for n in (1, 100, 3000, 5499):
        got = linear_convolution([a, b], n)
        want = np.convolve(a, b)[:n]
        assert got.shape == (n,)
        assert np.max(np.abs(got - want)) <= 1e-12 * want.max()


def test_pow2_grid_is_a_nested_ladder():
    # base·2^k, the smallest k >= 0 covering the span in max_points steps (exact powers of two)
    assert pow2_grid(0.01, 1.0, 100) == 0.01
    assert pow2_grid(0.01, 1.0001, 100) == 0.02
    assert pow2_grid(0.01, 5.0, 100) == 0.08
    assert pow2_grid(0.01, 0.5, 100) == 0.01  # never finer than the base
    # a span exactly on a rung, up to round-off, stays on it (the TPOT sum's step, a product of
    # steps that are powers of two apart, lands within 1e-16 of one)
    assert pow2_grid(0.003, 0.012 * (1 + 1e-15), 1.0) == 0.012
    # the steps nest: each a whole multiple of every finer one on the same ladder
    steps = [pow2_grid(0.0037, s, 64) for s in np.linspace(0.01, 40.0, 500)]
    assert all(b / a == round(b / a) for a, b in zip(steps, steps[1:]))
    assert sorted(steps) == steps


def test_cdf_reads_the_continuous_part_between_grid_points_as_quantile_places_it() -> None:
    # a law with point masses (atoms) and a continuous part: cdf and quantile are inverses, and
    # sum_cdf of such laws is their convolution's cdf between grid points too
    rng = np.random.default_rng(3)
    laws = []
    for n in (40, 25, 60):
        pmf = rng.random(n)
        pmf /= pmf.sum()
        atoms = pmf * rng.choice([0.0, 0.3, 1.0], n)
        laws.append(GridDist(0.01, pmf, float(np.dot(np.arange(n) * 0.01, pmf)), atoms=atoms))
    a = laws[0]
    for q in np.linspace(0.01, 0.99, 37):
        x = a.quantile(q)
        k = round(x / a.dx)
        if abs(x / a.dx - k) > 1e-6:  # inside a bin's continuous part: exactly q back
            assert a.cdf(x) == pytest.approx(q, abs=1e-12)
        else:  # on a point mass: the cdf there covers q
            assert a.cdf(x) >= q - 1e-12
    xs = np.concatenate([np.arange(130) * 0.01, rng.uniform(-0.01, 1.3, 300)])
    np.testing.assert_allclose(a.cdf(xs), [a.cdf(float(x)) for x in xs], rtol=0, atol=1e-15)
    full = convolve(*laws)
    np.testing.assert_allclose([sum_cdf(laws, float(x)) for x in xs], full.cdf(xs), rtol=0, atol=1e-12)
    np.testing.assert_allclose([sum_cdf(laws[:2], float(x)) for x in xs], convolve(*laws[:2]).cdf(xs),
                               rtol=0, atol=1e-12)
    # without atoms every bin's mass sits at its upper edge: between grid points, the point below
    b = GridDist(0.01, laws[1].pmf, laws[1].mean_s)
    assert b.cdf(0.055) == b.cdf(0.05)
