"""Step times interpolated from measured one-factor sweeps (splitwise-sim CSV, qmodel CSV).

The public tables are two one-factor sweeps (prompt length at batch 1; batch size at one prompt
length), not a grid, so qmodel uses a separable model that reproduces every measured median
exactly and needs no grid:

* prefill: ``t(T, Q, n) = n_eff * f1(p_eff) * g(n_eff)`` with ``p_eff = Q / T`` (token-weighted mean
  length, = p for equal prompts; it carries the attention over cached prefixes too) and
  ``n_eff = T / p_eff``. ``f1`` is the batch-1 curve, interpolated piecewise-linearly in log-log
  space (times grow between linearly and quadratically in p, so a power law between neighbouring
  points is far closer than linear segments; a single a+bT+cT^2 fit misses splitwise's 128-512 knee
  by >20%). ``g(n) = t(n, p_ref) / (n f1(p_ref))`` is the measured batching factor (piecewise linear
  in n; g(1) = 1). Why not total tokens alone: splitwise's batch of 16 x 512 takes 2.08 s against
  1.55 s for one 8192-token prompt (Llama2-70B, A100, TP8), so T alone would be 35% off.
* decode: ``t(n, S) = h(n) + c * S``: a fixed effect per measured batch size plus one shared
  cost per context token, fitted by least squares over all decode medians (c >= 0; c = 0 when the
  table has no context variation); ``h`` is piecewise linear in n.

Outside the measured range (prompt length, batch size, context per sequence) every curve is
extended linearly from its end segment, never clamped, and the query is counted as extrapolated
(:attr:`SweepTableModel.extrapolated`, reported by ``describe()``; ``in_range_*`` give masks).
Results are floored at 1% of the smallest measured time so a steep end segment can never produce
a non-positive time; inside the measured range the floor never binds.

Medians that are physically impossible (a larger batch of the same prompts finishing >10% faster
than a smaller one) are left out and listed under ``suspect_rows`` in ``describe()``.
"""

from __future__ import annotations

from collections import defaultdict
from typing import TYPE_CHECKING

import numpy as np

from qmodel.arrays import median
from qmodel.errors import DataError
from qmodel.perf.base import ArrayOrFloat
from qmodel.perf.table_interp import (
    SCALAR_TYPES,
    MeasuredTableModel,
    drop_non_monotone,
    interp_piecewise,
    interp_piecewise_scalar,
    median_groups,
)

if TYPE_CHECKING:  # annotations only: numpy.typing stays unimported at run time (a cold CLI start)
    from numpy.typing import ArrayLike

__all__ = ["SweepTableModel"]


class SweepTableModel(MeasuredTableModel):
    """Step times interpolated from measured sweeps (splitwise-sim or qmodel CSV).

    prefill ``t = n_eff * f1(p_eff) * g(n_eff)``; decode ``t = h(n) + c * S`` (see the module
    docstring for the definitions, the interpolation and the extrapolation rule).
    """

    def __init__(self, prefill_rows: list[tuple[float, float, float]], decode_rows: list[tuple[float, float, float]],
                 *, sha256: str, source: str, kind: str, keys: dict[str, object] | None = None) -> None:
        """``prefill_rows``: (batch size, prompt tokens per request, seconds); ``decode_rows``:
        (batch size, mean context per sequence, seconds). Repeats are reduced to medians."""
        self._identify(sha256=sha256, source=source, kind=kind, keys=keys)
        pre, bad_p = drop_non_monotone(median_groups(prefill_rows))
        dec, bad_d = drop_non_monotone(median_groups(decode_rows))
        self.prefill_medians, self.decode_medians = pre, dec
        #: medians left out as physically impossible (see :func:`drop_non_monotone`), per phase
        self.suspect = {"prefill": bad_p, "decode": bad_d}
        b1 = [(p, t) for n, p, t in pre if n == 1]
        if len(b1) < 2:
            raise DataError(source, "a table needs prefill rows at batch size 1 for at least two prompt lengths")
        self._p = np.array([p for p, _ in b1])
        self._f1 = np.array([t for _, t in b1])
        # Batching factor g(n): median over the rows at each n of t / (n f1(p)).
        gs: dict[float, list[float]] = defaultdict(list)
        gs[1.0].append(1.0)
        for n, p, t in pre:
            if n > 1:
                f, _ = interp_piecewise(np.array([p]), self._p, self._f1, loglog=True)
                gs[float(n)].append(t / (n * float(f[0])))
        self._gn = np.array(sorted(gs))
        self._g = np.array([median(gs[n]) for n in self._gn])
        self._fit_decode(dec, source)
        self._floor_prefill = 0.01 * min(t for _, _, t in pre)
        self._floor_decode = 0.01 * min(t for _, _, t in dec)
        # Python lists for the scalar fast path.
        self._lp, self._lf1 = self._p.tolist(), self._f1.tolist()
        self._lgn, self._lg = self._gn.tolist(), self._g.tolist()
        self._lhn, self._lh = self._hn.tolist(), self._h.tolist()

    def _fit_decode(self, dec: list[tuple[float, float, float]], source: str) -> None:
        ns = sorted({n for n, _, _ in dec})
        if len(ns) < 2:
            raise DataError(source, "a table needs decode rows for at least two batch sizes")
        idx = {n: i for i, n in enumerate(ns)}
        a = np.zeros((len(dec), len(ns) + 1))
        y = np.array([t for _, _, t in dec])
        for r, (n, ctx, _) in enumerate(dec):
            a[r, idx[n]] = 1.0
            a[r, -1] = n * ctx
        varies = any(len({ctx for m, ctx, _ in dec if m == n}) > 1 for n in ns)
        c = 0.0
        if varies:
            sol, *_ = np.linalg.lstsq(a, y, rcond=None)
            c = max(float(sol[-1]), 0.0)
        # With c fixed, each h(n) is the median residual of its rows (robust to one noisy row).
        h = [median([t - c * n * ctx for m, ctx, t in dec if m == n]) for n in ns]
        self._hn = np.array(ns, dtype=float)
        self._h = np.array(h)
        self.context_cost_s_per_token = c
        ctxs = [ctx for _, ctx, _ in dec]
        self._ctx_range = (min(ctxs), max(ctxs))

    # ---- ranges ------------------------------------------------------------------------------
    @staticmethod
    def _eff(sum_tokens: np.ndarray, sum_sq: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        t = np.maximum(sum_tokens, 0.0)
        q = np.maximum(sum_sq, 0.0)
        p_eff = np.divide(q, t, out=np.zeros_like(t), where=t > 0)
        n_eff = np.divide(t, p_eff, out=np.ones_like(t), where=p_eff > 0)
        return p_eff, np.maximum(n_eff, 1.0)

    def in_range_prefill(self, sum_tokens: ArrayLike, sum_sq_tokens: ArrayLike) -> np.ndarray:
        """True where a prefill query lies inside the measured prompt lengths and batch sizes."""
        p_eff, n_eff = self._eff(np.asarray(sum_tokens, dtype=float), np.asarray(sum_sq_tokens, dtype=float))
        return (p_eff >= self._p[0]) & (p_eff <= self._p[-1]) & (n_eff <= self._gn[-1])

    def in_range_decode(self, n_seqs: ArrayLike, sum_context_tokens: ArrayLike) -> np.ndarray:
        """True where a decode query lies inside the measured batch sizes and contexts per sequence."""
        n = np.asarray(n_seqs, dtype=float)
        s = np.asarray(sum_context_tokens, dtype=float)
        ctx = np.divide(s, n, out=np.zeros_like(s * n), where=n > 0)
        return ((n >= self._hn[0]) & (n <= self._hn[-1]) & (ctx >= self._ctx_range[0]) & (ctx <= self._ctx_range[1]))

    # ---- step times ---------------------------------------------------------------------------
    def prefill_time_s(self, sum_tokens: ArrayLike, sum_sq_tokens: ArrayLike, n_requests: ArrayLike) -> ArrayOrFloat:
        if type(sum_tokens) in SCALAR_TYPES and type(sum_sq_tokens) in SCALAR_TYPES and type(n_requests) in SCALAR_TYPES:
            return self._prefill_scalar(float(sum_tokens), float(sum_sq_tokens))
        t, q, _ = np.broadcast_arrays(np.asarray(sum_tokens, dtype=float), np.asarray(sum_sq_tokens, dtype=float),
                                      np.asarray(n_requests, dtype=float))
        p_eff, n_eff = self._eff(t, q)
        f, out1 = interp_piecewise(np.maximum(p_eff, 1e-9), self._p, self._f1, loglog=True)
        g, out2 = interp_piecewise(n_eff, self._gn, self._g, loglog=False)
        val = np.maximum(n_eff * f * g, self._floor_prefill)
        val = np.where(t > 0, val, 0.0)  # an empty batch takes no time
        self.extrapolated["prefill"] += int(np.count_nonzero((out1 | out2) & (t > 0)))
        return float(val) if val.ndim == 0 else val

    def decode_step_time_s(self, n_seqs: ArrayLike, sum_context_tokens: ArrayLike) -> ArrayOrFloat:
        if type(n_seqs) in SCALAR_TYPES and type(sum_context_tokens) in SCALAR_TYPES:
            return self._decode_scalar(float(n_seqs), float(sum_context_tokens))
        n, s = np.broadcast_arrays(np.asarray(n_seqs, dtype=float), np.asarray(sum_context_tokens, dtype=float))
        h, _ = interp_piecewise(n, self._hn, self._h, loglog=False)
        val = np.maximum(h + self.context_cost_s_per_token * s, self._floor_decode)
        val = np.where(n > 0, val, 0.0)  # an empty batch takes no time
        self.extrapolated["decode"] += int(np.count_nonzero(~self.in_range_decode(n, s) & (n > 0)))
        return float(val) if val.ndim == 0 else val

    # ---- scalar fast path (same formulas as above on Python floats) ----------------------------
    def _prefill_scalar(self, t: float, q: float) -> float:
        if not t > 0:
            return 0.0
        q = max(q, 0.0)
        p_eff = q / t
        n_eff = max(t / p_eff if p_eff > 0 else 1.0, 1.0)
        f, out1 = interp_piecewise_scalar(max(p_eff, 1e-9), self._lp, self._lf1, loglog=True)
        g, out2 = interp_piecewise_scalar(n_eff, self._lgn, self._lg, loglog=False)
        if out1 or out2:
            self.extrapolated["prefill"] += 1
        return max(n_eff * f * g, self._floor_prefill)

    def _decode_scalar(self, n: float, s: float) -> float:
        if not n > 0:
            return 0.0
        h, _ = interp_piecewise_scalar(n, self._lhn, self._lh, loglog=False)
        ctx = s / n
        if not (self._lhn[0] <= n <= self._lhn[-1] and self._ctx_range[0] <= ctx <= self._ctx_range[1]):
            self.extrapolated["decode"] += 1
        return max(h + self.context_cost_s_per_token * s, self._floor_decode)

    # ---- identity ---------------------------------------------------------------------------
    def ranges(self) -> dict[str, object]:
        return {
            "prompt_tokens_range": [float(self._p[0]), float(self._p[-1])],
            "prefill_batch_range": [1.0, float(self._gn[-1])],
            "decode_batch_range": [float(self._hn[0]), float(self._hn[-1])],
            "decode_context_range": [float(self._ctx_range[0]), float(self._ctx_range[1])],
            "context_cost_s_per_token": self.context_cost_s_per_token,
            "suspect_rows": self.suspect,
        }
