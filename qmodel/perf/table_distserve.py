"""DistServe's fitted step-time formula, as its simulator evaluates its profiler JSON."""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from qmodel.perf.base import ArrayOrFloat, ServiceTimeModel
from qmodel.perf.table_interp import SCALAR_TYPES, TablePoint

if TYPE_CHECKING:  # annotations only: numpy.typing stays unimported at run time (a cold CLI start)
    from numpy.typing import ArrayLike

__all__ = ["DistServeModel"]


class DistServeModel(ServiceTimeModel):
    r"""DistServe's fitted latency model (times in ms in the file, seconds here).

    ::

        prefill(T, Q)  = (a_p + b_p * T + c_p * Q) / 1000                  Q = sum l_i^2
        decode(n, S)   = (a + b * (S + n) + c * n) / 1000                   S + n = sum (ctx_i + 1)
                         with (a, b, c) = decoding_smallbs if n < threshold else decoding_largebs

    exactly as DistServe's simulator evaluates its profiler JSON (pp = 1). The formula is a fit,
    valid as such for any input; nothing is marked as extrapolated.
    """

    kind = "table:distserve"

    def __init__(self, prefill: tuple[float, float, float], decode_small: tuple[float, float, float],
                 decode_large: tuple[float, float, float], threshold: int, *, sha256: str, source: str,
                 keys: dict[str, object] | None = None) -> None:
        self.prefill_coef = tuple(float(v) for v in prefill)
        self.decode_small = tuple(float(v) for v in decode_small)
        self.decode_large = tuple(float(v) for v in decode_large)
        self.threshold = int(threshold)
        self._sha = sha256
        self.source = source
        self.keys = dict(keys or {})

    def prefill_time_s(self, sum_tokens: ArrayLike, sum_sq_tokens: ArrayLike, n_requests: ArrayLike) -> ArrayOrFloat:
        a, b, c = self.prefill_coef
        if type(sum_tokens) in SCALAR_TYPES and type(sum_sq_tokens) in SCALAR_TYPES and type(n_requests) in SCALAR_TYPES:
            return (a + b * sum_tokens + c * sum_sq_tokens) / 1000.0 if sum_tokens > 0 else 0.0
        t, q, _ = np.broadcast_arrays(np.asarray(sum_tokens, dtype=float), np.asarray(sum_sq_tokens, dtype=float),
                                      np.asarray(n_requests, dtype=float))
        val = np.where(t > 0, (a + b * t + c * q) / 1000.0, 0.0)  # an empty batch takes no time
        return float(val) if val.ndim == 0 else val

    def decode_step_time_s(self, n_seqs: ArrayLike, sum_context_tokens: ArrayLike) -> ArrayOrFloat:
        if type(n_seqs) in SCALAR_TYPES and type(sum_context_tokens) in SCALAR_TYPES:
            if not n_seqs > 0:
                return 0.0
            a, b, c = self.decode_small if n_seqs < self.threshold else self.decode_large
            return (a + b * (sum_context_tokens + n_seqs) + c * n_seqs) / 1000.0
        n, s = np.broadcast_arrays(np.asarray(n_seqs, dtype=float), np.asarray(sum_context_tokens, dtype=float))
        small = n < self.threshold
        a = np.where(small, self.decode_small[0], self.decode_large[0])
        b = np.where(small, self.decode_small[1], self.decode_large[1])
        c = np.where(small, self.decode_small[2], self.decode_large[2])
        val = np.where(n > 0, (a + b * (s + n) + c * n) / 1000.0, 0.0)
        return float(val) if val.ndim == 0 else val

    def points(self) -> list[TablePoint]:
        """Samples of the fitted formula on DistServe's own workload grid (for calibration).

        Prompts 64-2048 at batch 1 and batches 2-16 of 512-token prompts; decode batches 1-256 at
        contexts 256-2048 per sequence (the OPT models' 2048-token limit).
        """
        out = []
        for p in (64, 128, 256, 512, 1024, 2048):
            out.append(TablePoint("prefill", 1, p, p * p, 0.0, float(self.prefill_time_s(p, p * p, 1))))
        for k in (2, 4, 8, 16):
            out.append(TablePoint("prefill", k, 512 * k, k * 512**2, 0.0, float(self.prefill_time_s(512 * k, k * 512**2, k))))
        for n in (1, 2, 4, 8, 16, 32, 64, 128, 256):
            for ctx in (256, 1024, 2048):
                out.append(TablePoint("decode", n, 0.0, 0.0, n * ctx, float(self.decode_step_time_s(n, n * ctx))))
        return out

    @property
    def fingerprint(self) -> str:
        return self._sha

    def describe(self) -> dict[str, object]:
        return {"kind": self.kind, "source": self.source, **self.keys, "sha256": self._sha,
                "prefill_ms": list(self.prefill_coef), "decoding_smallbs_ms": list(self.decode_small),
                "decoding_largebs_ms": list(self.decode_large), "threshold": self.threshold}
