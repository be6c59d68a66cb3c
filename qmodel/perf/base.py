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
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import Union

import numpy as np
from numpy.typing import ArrayLike

__all__ = ["ServiceTimeModel", "ArrayOrFloat"]

ArrayOrFloat = Union[float, np.ndarray]


class ServiceTimeModel(ABC):
    """Step times of one model instance. Subclasses document their formula in the class docstring."""

    #: short name of the implementation, e.g. "roofline", "table:splitwise", "fixed"
    kind: str = "abstract"

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
