"""The KV-cache handoff between the prefill and the decode pool, as a queueing station.

Per request X = kv_bytes_per_token × (prompt − cached prefix) bytes move over one of ``paths``
independent link paths (one per prefill instance, each of effective bandwidth C = nominal ×
efficiency, base latency δ). Per path the load is ρ = λ E[X] / (paths · C) (stability ρ < 1).
Layer count ℓ, T_p the request's own prefill (batch) time. The transfer itself takes

    serialized:  g(X) = X / C
    layerwise:   g(X, T_p) = max(X/(Cℓ), X/C − T_p (1 − 1/ℓ))     (docs/methods.md, "Stations": kv_transfer: layer i is sent
                 while layers i+1..ℓ compute, so only what the prefill cannot cover is exposed)

and the exposed (TTFT-visible) time is, by ``sharing``:

* dedicated: δ + g — a pure delay, exact.
* fcfs (one transfer at a time per path): W + δ + g with W the M/G/1 wait of service X/C
  (Pollaczek–Khinchine mean, exact; Cramér–Lundberg tail). When the prefill releases batches
  (``batch_rate_per_s`` and ``batch_size_pmf`` given), W is the M^X/G/1 wait: the batch's wait
  (M/G/1 with the batch's total work, exact compound MGF) plus the work of the requests ahead in the
  same batch; mean λ_b E[K] E[S²]/(2(1−ρ)) + E[S] E[K(K−1)]/(2E[K](1−ρ)). Batch departures are
  not exactly Poisson, so this is a QNA-style decomposition (approximate).
* fair (processor sharing among concurrent transfers): Kleinrock's exact conditional mean
  E[T | x] = (x/C)/(1 − ρ); the distribution mixes that over x (the PS sojourn has no simple closed
  form; docs/methods.md, "Stations": kv_transfer), and layerwise uses the shared rate C(1 − ρ) in g.

Non-Poisson arrivals (``ca2`` ≠ 1) scale the fcfs wait by (c_a² + c_s²)/(1 + c_s²) (Kingman ratio,
approximate). The layerwise-with-queueing combination assumes the link wait adds to the exposed
time (the wait cannot overlap the prefill it follows): conservative.

Little's law gives what the decode side must reserve while transfers are in flight:
``extra["in_flight_mean"]`` = λ E[link time] and ``extra["in_flight_bytes_mean"]`` = λ E[B · link time]
(bytes held in flight on average, size-biased), the link time counted from transfer start, B the
decode-side bytes a transfer reserves: its own X, or X plus its reserved output's KV where the decode
pool reserves ``max_tokens`` (prompt + R for the request's whole life, from before its transfer).

Grid: the wait, the exposed time and their sum share one step, ``dx`` if given, else 1/400 of the
mean delay, coarse enough that the support (largest exposed time + the wait's 1 − 1e-9 quantile,
known in closed form before any grid is built) fits in 16384 bins (MAX_POINTS for a given ``dx``),
and no finer than ``dx_floor``. The engine gives only the floor: the step its readers re-bin the
law to (the handoff is summed with the decode admission wait on that wait's step; TTFT re-bins it
to its own step with the mean kept, and the floor there is a 64th of it). The prefill's TTFT step
itself would be too coarse: the exposed time also enters TPOT, spread over L − 1 tokens. Rounding
up to the grid makes quantiles conservative by at most one step per term.

:mod:`qmodel.stations.kv_transfer.batch_work` forms the work ahead in a batch; sums of the
independent terms are :func:`qmodel.dist.convolve` (direct sums for sparse terms).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any, Callable, Literal

import numpy as np

from qmodel.dist import MAX_POINTS, GridDist, LazyGridDist, convolve
from qmodel.errors import InputError, UnstableError
from qmodel.result import LinkReport
from qmodel.stations.base import (Domain, Param, StationModel, StationSolution, integer, number, one_of, optional,
                                  sample)
from qmodel.stations.fcfs import MG1, ServiceSample, mx_g1_mean_wait
from qmodel.stations.kv_transfer.batch_work import CompoundWork, position_pmf
from qmodel.stations.kv_transfer.transfer import layerwise_exposed_s

__all__ = ["KVTransferStation", "Sharing", "Mode"]

Sharing = Literal["dedicated", "fcfs", "fair"]
Mode = Literal["serialized", "layerwise"]

# At most this many bins span the delay's support (the 1 − 1e-9 quantile): a bound on the grids'
# and FFTs' size that costs resolution only for laws far wider than their mean.
_SPAN_POINTS = 16384
_STEPS_PER_MEAN = 400.0  # default grid step: the mean delay over this
# what a per-rate variant of a station shares with it (KVTransferStation._variant)
_RATE_INDEPENDENT = ("x", "service", "mean_bytes", "_mean_occupancy", "_exposed_at_full_rate")


#: batch sizes released together whose total probability is below this are left out of the link's
#: M^X/G/1 wait (three orders under the 1e-9 its grids resolve; see KVTransferStation._fcfs_wait)
_BATCH_MASS = 1e-12


def _end(mg1: MG1) -> float:
    """The 1 − 1e-9 quantile of an M/G/1 wait (0 when it waits with smaller probability)."""
    return mg1.quantile(1.0 - 1e-9) if mg1.p_wait > 1e-9 else 0.0


def _is_batch_pmf(v: Any) -> bool:
    pk = np.asarray(v, dtype=float)
    return not (pk.ndim != 1 or pk.size == 0 or np.any(pk < 0) or pk.sum() <= 0)


@dataclass(frozen=True, eq=False)
class KVTransferStation(StationModel):
    """KV handoff station (formulas in the module docstring).

    ``bytes_per_request``: equally weighted sample of X (bytes); ``prefill_time_s``: the request's own
    prefill time, as a sample aligned with ``bytes_per_request``, a scalar, or a callable of the
    bytes sample (needed for ``mode="layerwise"``; default 0, i.e. nothing hidden). ``dx`` fixes the
    grid step; ``dx_floor`` only bounds the default step from below: the step the laws' consumers
    re-bin them to, so that a finer one would be computed and then discarded.
    """

    bytes_per_request: np.ndarray
    bandwidth_bytes_per_s: float
    latency_s: float = 0.0
    paths: int = 1
    sharing: Sharing = "fcfs"
    mode: Mode = "serialized"
    layers: int = 1
    prefill_time_s: np.ndarray | float | Callable[[np.ndarray], np.ndarray] | None = None
    ca2: float = 1.0
    batch_rate_per_s: float | None = None
    batch_size_pmf: np.ndarray | None = None
    dx: float | None = None
    dx_floor: float | None = None
    #: decode-side bytes each transfer reserves while in flight, aligned with ``bytes_per_request``
    #: (None: its own bytes; ``kv_reservation = max_tokens``: prompt + reserved output)
    reserved_bytes_per_request: np.ndarray | None = None

    name: str = field(default="kv_transfer", init=False)

    params = (
        Param("bytes_per_request", sample(lambda x: x.size > 0 and bool(np.all(np.isfinite(x)) and np.all(x >= 0))
                                          and x.max() > 0, "bytes per request must be finite, >= 0, not all zero"),
              "kv_transfer.bytes", shown=lambda _: "sample"),
        Param("bandwidth_bytes_per_s", number(0.0, above=True, expected="must be a finite number of bytes/s > 0"),
              "link.bandwidth"),
        Param("latency_s", number(0.0, expected="must be a finite number of seconds >= 0"), "link.latency"),
        Param("paths", integer(1, "must be an integer >= 1"), "kv_transfer.paths"),
        Param("sharing", one_of(("dedicated", "fcfs", "fair")), "link_sharing"),
        Param("mode", one_of(("serialized", "layerwise")), "transfer_mode"),
        Param("layers", integer(1, "must be an integer >= 1"), "layers"),
        Param("ca2", number(0.0, expected="must be a finite number >= 0"), "arrivals.ca2"),
        Param(("batch_rate_per_s", "batch_size_pmf"),
              Domain(lambda v: (v[0] is None) == (v[1] is None),
                     "give both batch_rate_per_s and batch_size_pmf, or neither"),
              "batch_arrivals", shown=lambda v: v[0]),
        Param("batch_size_pmf",
              optional(Domain(_is_batch_pmf, "P(batch = k) for k = 1..b, non-negative, not all zero")),
              "batch_size_pmf", shown=lambda _: "array"),
    )

    # ---- derived ------------------------------------------------------------------------
    @cached_property
    def x(self) -> np.ndarray:
        return np.asarray(self.bytes_per_request, dtype=float).ravel()

    @cached_property
    def tp(self) -> np.ndarray:
        t = self.prefill_time_s
        if t is None:
            return np.zeros_like(self.x)
        if callable(t):
            out = np.asarray(t(self.x), dtype=float)
        else:
            out = np.broadcast_to(np.asarray(t, dtype=float), self.x.shape).astype(float)
        if out.shape != self.x.shape or not np.all(np.isfinite(out)) or np.any(out < 0):
            raise InputError("prefill_time_s", "sample", "one finite, non-negative prefill time per transfer")
        return out

    @cached_property
    def mean_bytes(self) -> float:
        return float(self.x.mean())

    @cached_property
    def _mean_occupancy(self) -> tuple[float, float]:
        """(E[X/C], E[B · X/C]): the link time from transfer start when the link is not shared; B the
        decode-side bytes it reserves (``reserved_bytes_per_request``, else X)."""
        occupancy = self.x / self.bandwidth_bytes_per_s
        held = self.x if self.reserved_bytes_per_request is None else \
            np.asarray(self.reserved_bytes_per_request, dtype=float).ravel()
        if held.shape != self.x.shape or not np.all(np.isfinite(held)) or np.any(held < self.x):
            raise InputError("kv_transfer.reserved_bytes", f"{held.size} values",
                             f"{self.x.size} finite byte counts >= each transfer's own")
        return float(np.mean(occupancy)), float(np.mean(held * occupancy))

    @cached_property
    def distinct_bytes(self) -> tuple[np.ndarray, np.ndarray]:
        """(distinct transfer sizes, ascending; how many transfers have each) of the bytes sample:
        it does not depend on the bandwidth, so every bandwidth variant shares it
        (:meth:`with_bandwidth`; the binding's bandwidth search builds 3-6 of them per solve)."""
        sizes, counts = np.unique(self.x, return_counts=True)
        return sizes, counts.astype(float)

    @cached_property
    def service(self) -> ServiceSample:
        """Link occupancy per transfer X/C (rate-independent: built once per station).

        ``ServiceSample.of(x / C)`` to the bit, from the distinct sizes: division by C > 0 keeps
        their order (IEEE division is monotone), so the distinct values of x/C are the distinct
        sizes over C with the same counts, unless two sizes round to one quotient or a quotient
        overflows; then the sample's own merge (``of``) decides."""
        sizes, counts = self.distinct_bytes
        with np.errstate(over="ignore"):  # (an overflow goes to the plain merge, which reports it)
            values = sizes / self.bandwidth_bytes_per_s
        if not (np.all(np.isfinite(values)) and np.all(values[1:] > values[:-1]) and values[-1] > 0):
            return ServiceSample.of(self.x / self.bandwidth_bytes_per_s)
        return ServiceSample(values, counts / counts.sum())

    def _exposed(self, bandwidth: float) -> tuple[np.ndarray, float, float]:
        """(exposed time per transfer, its mean, its maximum) at ``bandwidth``: latency + g."""
        exposed = self._transfer_time(bandwidth) + self.latency_s
        return exposed, float(np.mean(exposed)), float(np.max(exposed))

    @cached_property
    def _exposed_at_full_rate(self) -> tuple[np.ndarray, float, float] | None:
        """:meth:`_exposed` at the full bandwidth when it does not depend on the rate (serialized
        transfers: nothing overlaps the per-rate prefill time), else None."""
        return self._exposed(self.bandwidth_bytes_per_s) if self.mode == "serialized" else None

    def max_stable_rate_per_s(self) -> float:
        """paths · C / E[X]."""
        return self.paths * self.bandwidth_bytes_per_s / self.mean_bytes

    def load(self, rate_per_s: float) -> float:
        return rate_per_s / self.max_stable_rate_per_s()

    def bandwidth_needed_bytes_per_s(self, rate_per_s: float) -> float:
        return float(rate_per_s) * self.mean_bytes

    def _transfer_time(self, bandwidth: float) -> np.ndarray:
        if self.mode == "serialized":
            return self.x / bandwidth
        return layerwise_exposed_s(self.x, bandwidth, self.layers, self.tp)

    # ---- solve --------------------------------------------------------------------------
    def in_flight(self, rate_per_s: float) -> tuple[float, float]:
        """(mean transfers in flight, mean KV bytes they hold) per path set at ``rate_per_s``, by
        Little's law over the link time from transfer start: λ E[X/C'] and λ E[B · X/C'], with
        C' = C (dedicated, fcfs) or C(1 − ρ) (fair). Closed forms: no grid is built."""
        mean_occ, mean_x_occ = self._mean_occupancy
        if self.sharing == "fair":
            slow = 1.0 - rate_per_s / self.max_stable_rate_per_s()
            mean_occ, mean_x_occ = mean_occ / slow, mean_x_occ / slow
        return rate_per_s * mean_occ, rate_per_s * mean_x_occ

    def solve(self, rate_per_s: float, prefill_time_s: np.ndarray | None = None,
              batch_rate_per_s: float | None = None, batch_size_pmf: np.ndarray | None = None,
              dx: float | None = None, dx_floor: float | None = None, wait_law: bool = False) -> StationSolution:
        """Solve at ``rate_per_s``. ``prefill_time_s`` (optional) replaces the own-prefill-time sample
        for this rate, e.g. the prefill solution's ``extra["own_batch_time_per_prompt_s"]`` (aligned
        with the bytes sample), since a request's own batch time grows with load; ``batch_rate_per_s``
        and ``batch_size_pmf`` likewise replace the batch releases for this rate, ``dx`` the grid
        step. The per-rate variant shares this station's rate-independent parts (the service law
        and its moments). ``wait_law``: build the wait's law now and the delay from it (one
        convolution fewer when both are read: the station report reads the wait); by default the
        delay sums the terms in one pass and the wait is built on first use."""
        if prefill_time_s is not None or batch_rate_per_s is not None or batch_size_pmf is not None or dx is not None \
                or dx_floor is not None:
            changes: dict = {} if dx is None else {"dx": dx}
            if dx_floor is not None:
                changes["dx_floor"] = dx_floor
            if prefill_time_s is not None:
                changes["prefill_time_s"] = prefill_time_s
            if batch_rate_per_s is not None or batch_size_pmf is not None:
                changes.update(batch_rate_per_s=batch_rate_per_s, batch_size_pmf=batch_size_pmf)
            return self._variant(changes).solve(rate_per_s, wait_law=wait_law)
        if not (rate_per_s > 0 and math.isfinite(rate_per_s)):
            raise InputError("rate_per_s", rate_per_s, "must be a finite number > 0")
        lim = self.max_stable_rate_per_s()
        rho = rate_per_s / lim
        if rho >= 1.0:
            raise UnstableError("kv_transfer", rho, rate_per_s, lim,
                                detail=f"{self.paths} path(s) x {self.bandwidth_bytes_per_s:.4g} B/s, E[X] {self.mean_bytes:.4g} B")
        lam_p = rate_per_s / self.paths
        svc = self.service
        notes: list[str] = []
        exact = True
        in_flight, in_flight_bytes = self.in_flight(rate_per_s)
        wait_mean = 0.0
        wait_terms: list[GridDist] = []
        if self.sharing == "fair":
            exposed = self._transfer_time(self.bandwidth_bytes_per_s * (1.0 - rho)) + self.latency_s
            exposed_mean, exposed_max = float(np.mean(exposed)), float(np.max(exposed))
            method = "M/G/1-PS per path: E[T|x] = (x/C)/(1-rho) (Kleinrock), mixed over x"
            exact = False  # the mean is exact; the PS sojourn law is approximated by its conditional mean
        else:
            exposed, exposed_mean, exposed_max = self._exposed_at_full_rate or self._exposed(self.bandwidth_bytes_per_s)
            method = "dedicated path: pure delay"
        if self.sharing == "fcfs":
            wait_mean, wait_terms, method, exact = self._fcfs_wait(lam_p, svc, notes, exposed_mean, exposed_max)
        dx = wait_terms[0].dx if wait_terms else self._grid_dx(exposed_mean, exposed_max, 0.0, 0.0)
        own = GridDist.from_samples(exposed, dx)
        own = GridDist(dx, own.pmf, exposed_mean, own.tail, own.tail_rate)
        if not wait_terms:
            delay = own
            wait_dist = GridDist.point(0.0, dx)
        else:
            # the wait is a sum of independent terms (the batch's wait, the work ahead in it); the
            # delay convolves them with the transfer in one pass, and the wait alone, which only
            # the station report reads, is built if it is asked for (or first, with wait_law)
            def _wait(terms: list[GridDist] = wait_terms, mean: float = wait_mean) -> GridDist:
                w = convolve(*terms)
                return GridDist(w.dx, w.pmf, mean, w.tail, w.tail_rate, exact=False)

            if len(wait_terms) == 1 or wait_law:
                wait_dist = wait_terms[0] if len(wait_terms) == 1 else _wait()
                d = convolve(wait_dist, own)
            else:
                d = convolve(*wait_terms, own)
                wait_dist = LazyGridDist(_wait)
            delay = GridDist(d.dx, d.pmf, wait_mean + own.mean_s, d.tail, d.tail_rate, exact=d.exact)
        if self.mode == "layerwise":
            notes.append(f"layer-wise overlap with the request's own prefill over {self.layers} layers")
        return StationSolution(
            name="kv_transfer",
            utilization=rho,
            max_stable_rate_per_s=lim,
            delay=delay,
            wait=wait_dist,
            method=method,
            exact=exact,
            mean_in_system=rate_per_s * wait_mean + in_flight,
            notes=tuple(notes),
            extra={
                "in_flight_mean": in_flight,
                "in_flight_bytes_mean": in_flight_bytes,
                "in_flight_mean_bytes_each": in_flight_bytes / max(in_flight, 1e-300),
                "bandwidth_needed_bytes_per_s": self.bandwidth_needed_bytes_per_s(rate_per_s),
                "bandwidth_available_bytes_per_s": self.paths * self.bandwidth_bytes_per_s,
                "mean_transfer_bytes": self.mean_bytes,
                "mean_exposed_s": float(delay.mean_s),
                "mean_wait_s": wait_mean,
            },
        )

    def with_bandwidth(self, bandwidth_bytes_per_s: float) -> "KVTransferStation":
        """This station with each path's bandwidth set to ``bandwidth_bytes_per_s`` (the binding
        diagnosis's bandwidth search), sharing the bytes sample and its mean, which do not depend
        on it, and its distinct sizes; the bandwidth is checked as at construction."""
        _ = self.mean_bytes, self.distinct_bytes  # built here once, not in every variant
        return self.evolved({"bandwidth_bytes_per_s": bandwidth_bytes_per_s}, keep=("x", "mean_bytes", "distinct_bytes"))

    def _variant(self, changes: dict) -> "KVTransferStation":
        """This station with the per-rate fields in ``changes`` replaced, sharing its rate-independent
        parts (the sample, the service law with its memoised moments, their means).

        Built at every solve, so the fields are copied rather than by ``dataclasses.replace``, which
        would re-run every input check, the bytes sample's included; only the declared parameters
        among ``changes`` (the batch releases) are checked again (the own prefill times are checked
        where they are read, :attr:`tp`)."""
        for name in _RATE_INDEPENDENT:  # build them here once, not in every variant
            getattr(self, name)
        return self.evolved(changes, keep=_RATE_INDEPENDENT)

    def _grid_dx(self, exposed_mean_s: float, exposed_max_s: float, wait_mean_s: float, wait_end_s: float) -> float:
        """One grid step for the wait, the exposed time and their sum.

        ``dx`` if given, else 1/400 of the mean delay and coarse enough that the delay's support
        (largest exposed time + the wait's 1 − 1e-9 quantile) fits in _SPAN_POINTS bins: the FFTs
        stay small whatever the ratio of wait to transfer time; and no finer than ``dx_floor``. A
        given ``dx`` is coarsened only where the support would not fit in MAX_POINTS bins (the grid
        would be truncated).
        """
        span = exposed_max_s + wait_end_s
        if self.dx:
            return max(self.dx, span / MAX_POINTS)
        return max(max(exposed_mean_s + wait_mean_s, 1e-9) / _STEPS_PER_MEAN, span / _SPAN_POINTS, self.dx_floor or 0.0)

    def _fcfs_wait(self, lam_p: float, svc: ServiceSample, notes: list[str],
                   exposed_mean_s: float, exposed_max_s: float) -> tuple[float, list[GridDist], str, bool]:
        """(mean, independent terms whose sum is the wait (on the station's grid), method, exact) of
        the FCFS link wait.

        The mean and the tail (Cramér–Lundberg) are closed forms, so the grid step is chosen from
        them before any grid is built (:meth:`_grid_dx`).
        """
        if self.batch_size_pmf is None:
            mg1 = MG1(lam_p, svc)
            scale = 1.0
            if abs(self.ca2 - 1.0) > 1e-12:
                cs2 = svc.scv
                scale = (self.ca2 + cs2) / (1.0 + cs2)
                notes.append(f"arrival SCV {self.ca2:.3g}: wait scaled by Kingman ratio {scale:.3g} (approximate)")
            mean = mg1.mean_s * scale
            dx = self._grid_dx(exposed_mean_s, exposed_max_s, mean, _end(mg1) * scale)
            # the unscaled law on the step dx/scale, relabelled: W·scale on the grid dx
            w = mg1.grid(dx / scale)
            w = GridDist(dx, w.pmf, mean, w.tail, w.tail_rate / scale, exact=scale == 1.0 and w.exact)
            return mean, [w], "M/G/1 per path: Pollaczek-Khinchine mean, Cramer-Lundberg tail", False
        # batch arrivals per path: the batch waits as one M/G/1 customer with the batch's total work;
        # within the batch a request waits for those released ahead of it.
        pk = np.asarray(self.batch_size_pmf, dtype=float)
        pk = pk / pk.sum()
        # The largest batch sizes set the compound work's Cramér–Lundberg decay (its MGF grows like
        # e^{ηks}), and through it the whole exponential wait law: sizes whose total mass is below
        # _BATCH_MASS (round-off in the prefill's own-batch law, ~1e-17 at one rate and ~1e-50 at
        # a rate 1e-10 away) are dropped, or they move every quantile (azure-conv 3P+3D at 62.5 MB/s:
        # link wait p99 5.9 s with a size of mass 4e-19 kept, 13.3 s without it)
        above = np.cumsum(pk[::-1])[::-1]  # P(K >= k)
        pk = pk[: int(np.flatnonzero(above >= _BATCH_MASS)[-1]) + 1]
        pk = pk / pk.sum()
        work = CompoundWork(svc, pk)
        ek, ek_km1, _ = work.factorial_moments  # E[K], E[K(K−1)]
        lam_b = float(self.batch_rate_per_s) / self.paths  # type: ignore[arg-type]
        if abs(lam_b * ek - lam_p) > 1e-6 * lam_p:
            notes.append(f"batch rate x mean batch = {lam_b * ek:.4g}/s per path differs from the request rate "
                         f"{lam_p:.4g}/s; the request rate is used for the load")
            lam_b = lam_p / ek
        mean = mx_g1_mean_wait(lam_b, ek, ek_km1 + ek, svc.mean_s, svc.moment(2))
        mg1 = MG1(lam_b, work)
        # position part: customer-weighted batch size k, uniform position i in 0..k−1, i-fold work.
        # Its support is below (b−1)E[S] + 10 sd √(b−1) + 40 max S except for mass e^{-25}
        # (Bernstein's inequality, S bounded), which also bounds the FFT's circular wrap-around.
        nb = pk.size - 1
        sd = math.sqrt(max(svc.moment(2) - svc.mean_s ** 2, 0.0))
        smax = float(svc.values_s.max())
        reach = min(nb * smax, nb * svc.mean_s + 10.0 * sd * math.sqrt(nb) + 40.0 * smax)
        dx = self._grid_dx(exposed_mean_s, exposed_max_s, mean, _end(mg1) + reach)
        wb = mg1.grid(dx)
        # the link-time law on the grid, with the sample's weights (ServiceSample merges repeats)
        s_pmf = GridDist.from_samples(svc.values_s, dx, svc.weights).pmf
        #   Σ_k c_k/k Σ_{i<k} F^i = Σ_{i<b} d_i F^i,  d_i = Σ_{k>i} c_k/k  (Horner in F)
        d = np.cumsum(pk[::-1])[::-1] / ek  # c_k/k = P(K = k)/E[K]
        # each of the nb summands is rounded up by less than one bin on the grid: nb bins of slack
        # over the reach, so the truncation (and the FFT's wrap-around) stays at the bound's e^{-25}
        length = min(nb * (s_pmf.size - 1) + 1, int(math.ceil(reach / dx)) + s_pmf.size + nb)
        pos = position_pmf(d, s_pmf, length)
        pos_mean = float(svc.mean_s) * ek_km1 / (2.0 * ek)
        pos_d = GridDist(dx, pos / pos.sum(), pos_mean, exact=False).trimmed()
        notes.append("batch releases from prefill: M^X/G/1 with Poisson batch arrivals (QNA-style; approximate)")
        return mean, [wb, pos_d], "M^X/G/1 per path: exact mean for Poisson batches, Cramer-Lundberg batch tail", False

    # ---- reports ------------------------------------------------------------------------
    def link_report(self, rate_per_s: float, solution: StationSolution | None = None) -> LinkReport:
        """What the link must carry at ``rate_per_s`` against what it offers."""
        need = self.bandwidth_needed_bytes_per_s(rate_per_s)
        have = self.paths * self.bandwidth_bytes_per_s
        exposed = solution.delay.mean_s if solution is not None else float(np.mean(self._transfer_time(self.bandwidth_bytes_per_s))) + self.latency_s
        return LinkReport(bandwidth_needed_bytes_per_s=need, bandwidth_available_bytes_per_s=have,
                          sufficient=need < have, mean_transfer_bytes=self.mean_bytes, mean_exposed_s=float(exposed))

    @staticmethod
    def batch_pmf_from_prefill(own_batch_pmf: np.ndarray) -> np.ndarray:
        """Batch-weighted P(K = k) from the prefill's customer-weighted own-batch pmf (∝ pmf/k)."""
        p = np.asarray(own_batch_pmf, dtype=float) / np.arange(1, len(own_batch_pmf) + 1)
        return p / p.sum()
