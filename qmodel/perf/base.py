"""The service-time interface shared by the analytical engine and the replay.

A :class:`ServiceTimeModel` answers two questions for one *instance* (a group of ``tp x pp`` GPUs
holding one copy of the model):

* ``prefill_time_s(sum_tokens, sum_sq_tokens, n_requests)``: seconds for one prefill batch.
  ``sum_tokens`` is the number of prompt tokens computed (cached-prefix tokens excluded);
  ``sum_sq_tokens`` is the attention work term  sum_i (n_i**2 + 2 n_i c_i)  for request i with
  n_i new tokens over c_i cached ones (for no cache, simply sum n_i**2);
* ``decode_step_time_s(n_seqs, sum_context_tokens)``: seconds for one decode iteration of
  ``n_seqs`` sequences whose contexts total ``sum_context_tokens``.

Both accept numpy arrays (broadcast) so the analytical engine can evaluate whole grids at once,
and the replay calls them with scalars. Implementations must be pure functions of their inputs.
An empty batch (``sum_tokens == 0`` or ``n_seqs == 0``) takes 0 s in every implementation, so grids
that start at zero need no special case.

Pipeline parallelism (``pp`` stages): the stage models (roofline, tables) answer the *stage*
time, the busiest stage's share of the work plus its inter-stage send; one batch's latency through
the pipeline is ``pp`` stage times (:meth:`ServiceTimeModel.pipeline_latency_s`). What the stations
and the replay read is the *instance* model :class:`qmodel.perf.pipeline.PipelineInstance` wraps
around it (qmodel/build.py does so for every pool with pp > 1): its prefill time is the stage time
(the engine is busy that long) and a batch leaves :attr:`ServiceTimeModel.prefill_exit_stages` = pp
of them after it started (:meth:`ServiceTimeModel.prefill_exit_s`); its decode step is the time in
which every running sequence advances one token, pp stage times of a micro-batch.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import TYPE_CHECKING, Union

import numpy as np

if TYPE_CHECKING:  # annotations only: numpy.typing stays unimported at run time (a cold CLI start)
    from numpy.typing import ArrayLike

__all__ = ["ServiceTimeModel", "ArrayOrFloat", "SCALAR_TYPES"]

ArrayOrFloat = Union[float, np.ndarray]
#: Inputs of these exact types take a model's scalar fast path (numpy arrays, lists and 0-d arrays do not).
SCALAR_TYPES = (int, float, np.float64, np.int64, np.float32, np.int32)


class ServiceTimeModel(ABC):
    """Step times of one model instance. Subclasses document their formula in the class docstring."""

    #: short name of the implementation, e.g. "roofline", "table:splitwise", "fixed"
    kind: str = "abstract"
    #: pipeline stages of the instance (the step times are stage times; 1 = no pipeline)
    pp: int = 1
    #: a prefill batch's first token and KV leave the instance this many of its prefill times after
    #: it started: 1 when the prefill time is the batch's whole latency, pp for a pipeline instance
    #: (:class:`qmodel.perf.pipeline.PipelineInstance`), whose prefill time is the busy stage time
    prefill_exit_stages: int = 1

    @abstractmethod
    def prefill_time_s(self, sum_tokens: ArrayLike, sum_sq_tokens: ArrayLike, n_requests: ArrayLike) -> ArrayOrFloat:
        """Seconds for one prefill batch."""

    @abstractmethod
    def decode_step_time_s(self, n_seqs: ArrayLike, sum_context_tokens: ArrayLike) -> ArrayOrFloat:
        """Seconds for one decode iteration."""

    @property
    @abstractmethod
    def fingerprint(self) -> str:
        """SHA-256 of what determines the times (table bytes, or the parameters); recorded with results."""

    def describe(self) -> dict[str, object]:
        """Parameters worth printing with a result (override to add more)."""
        return {"kind": self.kind, "sha256": self.fingerprint}

    # Convenience used by stations: one request of p prompt tokens, no cache.
    def prefill_one_s(self, prompt_tokens: ArrayLike) -> ArrayOrFloat:
        p = np.asarray(prompt_tokens, dtype=float)
        return self.prefill_time_s(p, p * p, np.ones_like(p))

    def prefill_exit_s(self, prefill_time_s: ArrayLike) -> ArrayOrFloat:
        """When a prefill batch of this (service) time leaves the instance, from its start:
        ``prefill_exit_stages`` times it (the time itself, bit for bit, when that is 1)."""
        if self.prefill_exit_stages == 1:
            return prefill_time_s  # type: ignore[return-value]
        out = self.prefill_exit_stages * np.asarray(prefill_time_s, dtype=float)
        return float(out) if out.ndim == 0 else out

    def pipeline_latency_s(self, stage_time_s: ArrayLike) -> ArrayOrFloat:
        """One batch's latency through the instance: ``pp`` stage times (a stage time is what the
        two step-time methods return; = the step time itself when pp = 1)."""
        out = self.pp * np.asarray(stage_time_s, dtype=float)
        return float(out) if out.ndim == 0 else out
