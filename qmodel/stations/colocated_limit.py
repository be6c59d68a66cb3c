"""Stability side of the colocated station: the prefill batch fixed point, the joint stability limit,
the saturated schedule and the heavy-traffic batch (docs/methods.md, "Colocated stability limit").

Model (the formulas are in :mod:`qmodel.stations.colocated`'s docstring, "Joint stability"): a
prefill iteration takes every waiting prompt, so the mean batch k solves k = e^{-lam T(k)} / (1 - rho_p)
with rho_p = lam T(k)/k, capped at the token budget's b; the pool is stable while
lam E[L] d + rho_p(lam) < 1 (d the decode cost per token at the slot cap or the asymptotic slope);
where KV or max_batch caps the batch, the saturated schedule's capacity (an endless backlog) is the
limit and the KV soft wall is centred on its mean batch.

:class:`ColocatedLimits` is a mixin of :class:`qmodel.stations.colocated.ColocatedStation`: it reads
the attributes that ``ColocatedStation.__post_init__`` sets (``service``, ``p``, ``L``, ``held``,
``R``, ``mean_output``, ``mean_t1``, ``n_max``, ``b_max``, ``prefill_cost_sat``, ``decode_cost_per_token``,
``_ep``, ``_ep2``, ``_lam_max``).
"""

from __future__ import annotations

import math
from functools import cached_property

from qmodel.stations.admission import KVWall, kv_wall

__all__ = ["ColocatedLimits"]


class ColocatedLimits:
    """Prefill batch, stability limit and saturated schedule of a colocated pool (module doc)."""

    def batch_time_s(self, k: float) -> float:
        """Mean time of a prefill iteration of k prompts (k may be fractional: a mean batch)."""
        return float(self.service.prefill_time_s(k * self._ep, k * self._ep2, k))

    def prefill_share(self, lam: float) -> tuple[float, float]:
        """(rho_p, mean prompts per prefill iteration) at per-instance rate lam.

        Arrivals that find a prefill running (probability rho_p, PASTA) all join the next iteration,
        which exists unless no one arrived: follow-up iterations occur at rate lam_b (1 - e^{-lam T});
        the others start one alone. So lam_b = lam (1 - rho_p) e^{lam T}, k = lam/lam_b, and
        rho_p = lam T(k)/k with T(k) the mean iteration time; solved by damped iteration, k <= b.
        """
        k = 1.0
        for _ in range(200):
            t = self.batch_time_s(k)
            rho = lam * t / k
            if rho >= 1.0:
                k_new = float(self.b_max)
            else:
                k_new = min(max(math.exp(-lam * t) / (1.0 - rho), 1.0), float(self.b_max))
            if abs(k_new - k) < 1e-10:
                break
            k = 0.5 * (k + k_new)
        return lam * self.batch_time_s(k) / k, k

    def _regulated_batch(self, lam: float, rho: float, k: float) -> tuple[float, float]:
        """(rho_p, k) with :func:`qmodel.stations.capacity.heavy_traffic_batch` (slot-capped pools only)."""
        if not self._raised:
            return rho, k
        from qmodel.stations.capacity import heavy_traffic_batch

        return heavy_traffic_batch(lam, rho, k, self.mean_output * self.decode_cost_per_token, self._lam_sat,
                                   self.b_max, self.batch_time_s)

    @cached_property
    def _onset(self) -> tuple[float, float, float]:
        """(rate, rho_p, k) where the heavy-traffic batch starts (per instance)."""
        from qmodel.stations.capacity import heavy_traffic_onset

        lam = heavy_traffic_onset(self.mean_output * self.decode_cost_per_token, self._lam_sat, self.prefill_share)
        return (lam, *self.prefill_share(lam))

    @cached_property
    def _limit_parts(self) -> tuple[float, bool]:
        """(the queueing pieces' per-instance limit lam_in, regulated): where KV or slots cap the batch,
        the saturated schedule's capacity (docs/methods.md, "Colocated stability limit") at most the
        full-budget bound 1/(E[L] d + T(b)/b) of those pieces, with the heavy-traffic batch of
        :meth:`_regulated_batch`; else the fixed point's own limit. The station's limit is the
        schedule's (:attr:`load_scale`)."""
        sat = self.saturated_rate_per_s
        if not math.isfinite(sat):
            return self._lam_max, False
        full = 1.0 / (self.mean_output * self.decode_cost_per_token + self.prefill_cost_sat)
        return min(sat, full * (1.0 - 1e-9)), True

    @cached_property
    def load_scale(self) -> float:
        """Internal rate / offered rate (<= 1): the pool is read at its load against the saturated schedule.

        The limit is the saturated schedule's capacity lam_sat (:meth:`max_stable_rate_per_s`): it
        times the iterations the engine really forms, and matches the replay's sustained rate within
        0.7% (median; 90th percentile 2.7%) on the 158 open colocated corpus rows (docs/validation.md,
        "Colocated limit: the saturated schedule alone"). The queueing pieces of :meth:`solve` (the
        decode chain at the slot cap ``n_max`` = KV/E[P + L], prefill batches of mean prompts
        T(k E[P], k E[P^2], k)) saturate at their own bound lam_in = min(lam_sat, 1/(E[L] d + T(b)/b)),
        which is below lam_sat where the residents are length-biased (the memory holds more than
        KV/E[P + L]) or T is not linear in the prompt (a measured table: T(E[P]) > E[T(P)]): up to
        27% below on the corpus. Those pieces are evaluated at the same load, rate x lam_in/lam_sat,
        so each percentile grows without bound at lam_sat, where the engine saturates, not at lam_in.
        1 where neither KV nor a slot cap bounds the batch (the fixed point's own limit)."""
        sat = self.saturated_rate_per_s
        if not self._raised or not math.isfinite(sat) or sat <= 0.0:
            return 1.0
        return min(1.0, self._lam_sat / sat)

    @property
    def _raised(self) -> bool:
        return self._limit_parts[1]

    @property
    def _lam_sat(self) -> float:
        return self._limit_parts[0]

    def _find_lam_max(self) -> float:
        """Largest per-instance rate with lam E[L] d + rho_p(lam) < 1 (decode at capacity 1 - rho_p)."""
        d = self.mean_output * self.decode_cost_per_token

        def ok(lam: float) -> bool:
            return lam * d + self.prefill_share(lam)[0] < 1.0

        lo = 1.0 / (d + self.mean_t1)  # unbatched: stable below this
        hi = 1.0 / (d + self.prefill_cost_sat)  # full batches: unstable above this
        if hi <= lo or ok(hi * (1 - 1e-12)):
            return hi if ok(hi * (1 - 1e-12)) else lo
        for _ in range(60):
            mid = 0.5 * (lo + hi)
            lo, hi = (mid, hi) if ok(mid) else (lo, mid)
        return lo

    @cached_property
    def _saturated(self) -> tuple[float, float]:
        """(requests/s, mean decode batch) of one instance under an endless backlog
        (:func:`qmodel.stations.capacity.saturated_schedule`)."""
        from qmodel.stations.capacity import saturated_schedule

        return saturated_schedule(self.service, self.p, self.L, self.kv_capacity_tokens, self.max_batch,
                                  self.max_batch_tokens, cached_tokens=self.cached_tokens,
                                  reserved_output=self.reserved_output_tokens)

    @property
    def saturated_rate_per_s(self) -> float:
        """Per-instance capacity under an endless backlog (:func:`qmodel.stations.capacity.saturated_rate_per_s`)."""
        return self._saturated[0]

    @cached_property
    def _wall(self) -> KVWall | None:
        """KV admission's soft wall (:mod:`qmodel.stations.admission`), centred on the saturated
        schedule's mean batch; None without a KV capacity."""
        if self.kv_capacity_tokens is None or self.n_max is None:
            return None
        return kv_wall(self.held, self.L, self.kv_capacity_tokens, self.n_max, self._saturated[1], self.R,
                       max_batch=self.max_batch)

    def max_stable_rate_per_s(self) -> float:
        """The saturated schedule's capacity where KV or slots cap the batch, else the fixed-point limit
        (the queueing pieces' own bound is read at the same load: :attr:`load_scale`)."""
        return self.instances * self._limit_parts[0] / self.load_scale
