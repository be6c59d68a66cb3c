"""FCFS single-class queues without batching: exact formulas and the standard approximations.

This package re-exports its modules' public names (import from ``qmodel.stations.fcfs``); each
module holds one model with its formula in its docstring:

* :mod:`~qmodel.stations.fcfs.service`  the service-time law of a sample (:class:`ServiceSample`)
  and the Cramér–Lundberg root λ(E[e^{ηS}] − 1) = η (:func:`cramer_lundberg`).
* :mod:`~qmodel.stations.fcfs.waiting`  the waiting-time law interface: ``mean_s``, ``p_wait``
  (P(W > 0)), ``sf(t)`` = P(W > t), ``cdf(t)``, ``quantile(q)``, ``grid(dx)`` (a
  :class:`~qmodel.dist.GridDist`), and ``exact`` telling whether the *distribution* is exact.
* :mod:`~qmodel.stations.fcfs.checks`  input and stability checks the queues share.
* :mod:`~qmodel.stations.fcfs.erlang`  :class:`MMc` M/M/c, exact (Erlang B/C).
* :mod:`~qmodel.stations.fcfs.mg1`  :class:`MG1` M/G/1: P-K and Takács moments (exact),
  Cramér–Lundberg tail.
* :mod:`~qmodel.stations.fcfs.mdc`  :class:`MDc` M/D/c exact by Crommelin's chain.
* :mod:`~qmodel.stations.fcfs.mgc`  :class:`MGc` M/G/c Cosmetatos/Whitt approximation.
* :mod:`~qmodel.stations.fcfs.scalar`  Kingman, Krämer & Langenbach-Belz, Allen–Cunneen, QNA, the split stream's SCV
  (Whitt 1983) and the M^X/G/1 mean wait.

References: Erlang (1909); Crommelin (1932); Franx (2001); Takács (1962); Cosmetatos (1976);
Whitt (1983, 1993); Krämer & Langenbach-Belz (1976); docs/methods.md, "Stations" (fcfs).
"""

from __future__ import annotations

from qmodel.stations.fcfs.erlang import MM1, MMc, erlang_b, erlang_c, mm1_sojourn_quantile
from qmodel.stations.fcfs.mdc import MD1, MDc, erlang_md1_cdf
from qmodel.stations.fcfs.mg1 import MG1
from qmodel.stations.fcfs.mgc import MGc, cosmetatos_mdc
from qmodel.stations.fcfs.scalar import (allen_cunneen, gamma_gim1_sigma, kingman, klb_factor, mx_g1_mean_wait,
                                         qna_delay_probability, qna_departure_scv, split_arrival_scv)
from qmodel.stations.fcfs.service import ServiceSample, cramer_lundberg
from qmodel.stations.fcfs.waiting import WaitingTime

__all__ = [
    "gamma_gim1_sigma",
    "erlang_b",
    "erlang_c",
    "WaitingTime",
    "MMc",
    "MM1",
    "MG1",
    "MDc",
    "MD1",
    "MGc",
    "ServiceSample",
    "kingman",
    "klb_factor",
    "allen_cunneen",
    "cosmetatos_mdc",
    "qna_departure_scv",
    "qna_delay_probability",
    "split_arrival_scv",
    "mx_g1_mean_wait",
    "cramer_lundberg",
    "erlang_md1_cdf",
    "mm1_sojourn_quantile",
]
