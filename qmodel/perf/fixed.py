"""Constant service times: the teaching and closed-form-check model."""

from __future__ import annotations

import hashlib
import json
from typing import TYPE_CHECKING

import numpy as np

from qmodel.errors import InputError
from qmodel.perf.base import ArrayOrFloat, ServiceTimeModel, SCALAR_TYPES

if TYPE_CHECKING:  # annotations only: numpy.typing stays unimported at run time (a cold CLI start)
    from numpy.typing import ArrayLike

__all__ = ["FixedModel"]

# Inputs of these exact types take the scalar fast path (numpy arrays, lists and 0-d arrays do not).


class FixedModel(ServiceTimeModel):
    r"""Constant prefill time per request and constant decode step.

    ::

        prefill(T, Q, k) = k * prefill_s        (k requests in the batch)
        decode(n, S)     = decode_step_s        (any batch size n >= 1 and context; 0 for n = 0)

    A batch of ``k`` requests costs ``k`` times one request: batching brings *no* prefill gain, so
    a prefill station with this model is an M/D/1-like queue whatever its batch rule (the DistServe
    M/D/1 analysis uses exactly this). Decode steps do not slow down with batch size or context, so
    every sequence advances one token per ``decode_step_s``. Both are deliberate simplifications for
    closed-form checks; use the roofline or a measured table for planning.
    """

    kind = "fixed"

    def __init__(self, prefill_s: float, decode_step_s: float) -> None:
        for name, v in (("perf.prefill_s", prefill_s), ("perf.decode_step_s", decode_step_s)):
            if not (np.isfinite(v) and v > 0):
                raise InputError(name, v, "a positive finite time in seconds")
        self.prefill_s = float(prefill_s)
        self.decode_step_s = float(decode_step_s)

    def prefill_time_s(self, sum_tokens: ArrayLike, sum_sq_tokens: ArrayLike, n_requests: ArrayLike) -> ArrayOrFloat:
        if type(n_requests) in SCALAR_TYPES and type(sum_tokens) in SCALAR_TYPES:
            return n_requests * self.prefill_s
        t, q, k = np.broadcast_arrays(np.asarray(sum_tokens, dtype=float), np.asarray(sum_sq_tokens, dtype=float),
                                      np.asarray(n_requests, dtype=float))
        out = k * self.prefill_s
        return float(out) if out.ndim == 0 else out

    def decode_step_time_s(self, n_seqs: ArrayLike, sum_context_tokens: ArrayLike) -> ArrayOrFloat:
        if type(n_seqs) in SCALAR_TYPES:
            return self.decode_step_s if n_seqs > 0 else 0.0
        n, s = np.broadcast_arrays(np.asarray(n_seqs, dtype=float), np.asarray(sum_context_tokens, dtype=float))
        out = np.where(n > 0, self.decode_step_s, 0.0)
        return float(out) if out.ndim == 0 else out

    @property
    def fingerprint(self) -> str:
        blob = json.dumps({"kind": self.kind, "prefill_s": self.prefill_s, "decode_step_s": self.decode_step_s},
                          sort_keys=True)
        return hashlib.sha256(blob.encode()).hexdigest()

    def describe(self) -> dict[str, object]:
        return {"kind": self.kind, "prefill_s": self.prefill_s, "decode_step_s": self.decode_step_s,
                "sha256": self.fingerprint}
