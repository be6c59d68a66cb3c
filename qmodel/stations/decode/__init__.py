"""Decode pool with continuous batching, a generalized processor-sharing (GPS) queue.

This package re-exports its modules' public names (import from ``qmodel.stations.decode``):

* :mod:`~qmodel.stations.decode.station`  :class:`DecodeStation`, the pool (model and formulas in
  its docstring).
* :mod:`~qmodel.stations.decode.chain`  :class:`GPSChain`, the birth–death occupancy chain, and the
  time-average context / affine fit of the step time.
* :mod:`~qmodel.stations.decode.slot_wait`  the wait for a free slot in a capped chain
  (:func:`slot_wait`, :func:`admission_wait`, :func:`wait_law`).
* :mod:`~qmodel.stations.decode.laws`  laws read off the chain (step residual, TPOT grid, occupancy
  quantiles and variance).
"""

from __future__ import annotations

from qmodel.stations.decode.chain import GPSChain, fit_affine, mean_context_tokens
from qmodel.stations.decode.laws import uniform_mixture_cdf as _uniform_mixture_cdf  # the old private name
from qmodel.stations.decode.slot_wait import (SLOT_WAIT_NEGLIGIBLE, admission_wait, bounded_slot_wait, fewest_residents,
                                              slot_wait, slot_wait_span_s, wait_law)
from qmodel.stations.decode.station import DecodeStation, Dispatch

__all__ = ["DecodeStation", "GPSChain", "mean_context_tokens", "fit_affine", "slot_wait", "slot_wait_span_s",
           "admission_wait", "bounded_slot_wait", "fewest_residents", "wait_law", "Dispatch", "SLOT_WAIT_NEGLIGIBLE"]
