"""Step times interpolated on full grids: prefill by prompt tokens x batch, decode by batch x context.

A qmodel CSV whose header declares ``# layout: grid`` (what ``qmodel perf import`` writes for
sources that can be evaluated anywhere: the AIConfigurator database, Vidur's operator profiles,
DistServe's fits) holds every combination of its prefill batch sizes and prompt lengths, and of
its decode batch sizes and contexts. :class:`GridTableModel` reproduces every grid node exactly and
interpolates between nodes:

* prefill ``t(T, Q, n)``: with ``p_eff = Q / T`` and ``n_eff = T / p_eff`` (as in
  :class:`~qmodel.perf.table_sweep.SweepTableModel`), each measured batch size ``n_j`` gives a curve
  ``t_j(p)`` interpolated piecewise-linearly in log-log space (prefill grows between linearly and
  quadratically in p); the answer is linear in ``n_eff`` between the two neighbouring ``n_j``.
* decode ``t(n, S)``: with ``ctx = S / n``, each measured batch size gives ``t_j(ctx)``, linear in
  ctx (a decode step reads the KV cache, linear in its length); then linear in ``n``.

Outside the grid every curve continues its end segment linearly (the same rule as the sweep
tables, :func:`~qmodel.perf.table_interp.interp_piecewise`), the query is counted in ``extrapolated``,
and results are floored at 1% of the smallest grid time.
"""

from __future__ import annotations

import bisect
from typing import TYPE_CHECKING

import numpy as np

from qmodel.errors import DataError
from qmodel.perf.base import ArrayOrFloat
from qmodel.perf.table_interp import (
    SCALAR_TYPES,
    MeasuredTableModel,
    interp_piecewise,
    interp_piecewise_scalar,
    median_groups,
)

if TYPE_CHECKING:  # annotations only: numpy.typing stays unimported at run time (a cold CLI start)
    from numpy.typing import ArrayLike

__all__ = ["GridTableModel"]


def _grid(rows: list[tuple[float, float, float]], phase: str, axis: str, source: str
          ) -> tuple[list[float], list[float], np.ndarray]:
    """(n, x, t) medians -> (batch sizes, x values, times[n, x]); every combination must be present."""
    cells = {(n, x): t for n, x, t in rows}
    ns = sorted({n for n, _, _ in rows})
    xs = sorted({x for _, x, _ in rows})
    if len(ns) < 2 or len(xs) < 2:
        raise DataError(source, f"a grid table needs {phase} rows at two or more batch sizes and two or more {axis}")
    missing = [(n, x) for n in ns for x in xs if (n, x) not in cells]
    if missing:
        shown = ", ".join(f"({n:g}, {x:g})" for n, x in missing[:3])
        raise DataError(source, f"grid layout: {len(missing)} {phase} (batch_size, {axis}) cell(s) missing, e.g. {shown}")
    return ns, xs, np.array([[cells[(n, x)] for x in xs] for n in ns])


def _lin_weights(x: np.ndarray, xs: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Index of the left neighbour and the linear weight of the right one (end segments extrapolate)."""
    j = np.clip(np.searchsorted(xs, x, side="right") - 1, 0, len(xs) - 2)
    w = (x - xs[j]) / (xs[j + 1] - xs[j])
    return j, w


class GridTableModel(MeasuredTableModel):
    """Bilinear (log-log in prompt length) interpolation on a full prefill and decode grid.

    prefill ``t = lin_n( loglog_p( t[n_j, p_k] ) )`` at ``(n_eff, p_eff)``; decode
    ``t = lin_n( lin_ctx( t[n_j, ctx_k] ) )`` at ``(n, S / n)``; see the module docstring.
    """

    def __init__(self, prefill_rows: list[tuple[float, float, float]], decode_rows: list[tuple[float, float, float]],
                 *, sha256: str, source: str, kind: str = "table:qmodel-grid",
                 keys: dict[str, object] | None = None) -> None:
        """``prefill_rows``: (batch size, prompt tokens per request, seconds); ``decode_rows``:
        (batch size, mean context per sequence, seconds). Repeats are reduced to medians."""
        self._identify(sha256=sha256, source=source, kind=kind, keys=keys)
        pre, dec = median_groups(prefill_rows), median_groups(decode_rows)
        self.prefill_medians, self.decode_medians = pre, dec
        pn, pp, ptab = _grid(pre, "prefill", "prompt lengths", source)
        dn, dc, dtab = _grid(dec, "decode", "contexts", source)
        self._pn, self._pp, self._pt = np.array(pn), np.array(pp), ptab
        self._dn, self._dc, self._dt = np.array(dn), np.array(dc), dtab
        self._lpn, self._lpp, self._lpt = pn, pp, ptab.tolist()
        self._ldn, self._ldc, self._ldt = dn, dc, dtab.tolist()
        self._floor_prefill = 0.01 * float(ptab.min())
        self._floor_decode = 0.01 * float(dtab.min())

    # ---- vectorised ------------------------------------------------------------------------------
    def _along_n(self, n: np.ndarray, per_row: list[np.ndarray], ns: np.ndarray) -> np.ndarray:
        j, w = _lin_weights(n, ns)
        stacked = np.stack(per_row)  # (rows, queries)
        cols = np.arange(n.size)
        lo = stacked[j.ravel(), cols].reshape(n.shape)
        hi = stacked[j.ravel() + 1, cols].reshape(n.shape)
        return lo + w * (hi - lo)

    def prefill_time_s(self, sum_tokens: ArrayLike, sum_sq_tokens: ArrayLike, n_requests: ArrayLike) -> ArrayOrFloat:
        if type(sum_tokens) in SCALAR_TYPES and type(sum_sq_tokens) in SCALAR_TYPES and type(n_requests) in SCALAR_TYPES:
            return self._prefill_scalar(float(sum_tokens), float(sum_sq_tokens))
        t, q, _ = np.broadcast_arrays(np.asarray(sum_tokens, dtype=float), np.asarray(sum_sq_tokens, dtype=float),
                                      np.asarray(n_requests, dtype=float))
        tt, qq = np.maximum(t, 0.0).ravel(), np.maximum(q, 0.0).ravel()
        p_eff = np.divide(qq, tt, out=np.zeros_like(tt), where=tt > 0)
        n_eff = np.maximum(np.divide(tt, p_eff, out=np.ones_like(tt), where=p_eff > 0), 1.0)
        p_safe = np.maximum(p_eff, 1e-9)
        rows = [interp_piecewise(p_safe, self._pp, self._pt[i], loglog=True)[0] for i in range(len(self._pn))]
        val = np.maximum(self._along_n(n_eff, rows, self._pn), self._floor_prefill)
        val = np.where(tt > 0, val, 0.0).reshape(t.shape)
        outside = (p_eff < self._pp[0]) | (p_eff > self._pp[-1]) | (n_eff < self._pn[0]) | (n_eff > self._pn[-1])
        self.extrapolated["prefill"] += int(np.count_nonzero(outside & (tt > 0)))
        return float(val) if val.ndim == 0 else val

    def decode_step_time_s(self, n_seqs: ArrayLike, sum_context_tokens: ArrayLike) -> ArrayOrFloat:
        if type(n_seqs) in SCALAR_TYPES and type(sum_context_tokens) in SCALAR_TYPES:
            return self._decode_scalar(float(n_seqs), float(sum_context_tokens))
        n, s = np.broadcast_arrays(np.asarray(n_seqs, dtype=float), np.asarray(sum_context_tokens, dtype=float))
        nn, ss = n.ravel(), s.ravel()
        ctx = np.divide(ss, nn, out=np.zeros_like(ss), where=nn > 0)
        rows = [interp_piecewise(ctx, self._dc, self._dt[i], loglog=False)[0] for i in range(len(self._dn))]
        val = np.maximum(self._along_n(nn, rows, self._dn), self._floor_decode)
        val = np.where(nn > 0, val, 0.0).reshape(n.shape)
        outside = (ctx < self._dc[0]) | (ctx > self._dc[-1]) | (nn < self._dn[0]) | (nn > self._dn[-1])
        self.extrapolated["decode"] += int(np.count_nonzero(outside & (nn > 0)))
        return float(val) if val.ndim == 0 else val

    # ---- scalar fast path (same formulas on Python floats) -----------------------------------------
    @staticmethod
    def _lin1(x: float, xs: list[float], ys: list[float]) -> float:
        j = min(max(bisect.bisect_right(xs, x) - 1, 0), len(xs) - 2)
        return ys[j] + (ys[j + 1] - ys[j]) / (xs[j + 1] - xs[j]) * (x - xs[j])

    def _prefill_scalar(self, t: float, q: float) -> float:
        if not t > 0:
            return 0.0
        p_eff = max(q, 0.0) / t
        n_eff = max(t / p_eff if p_eff > 0 else 1.0, 1.0)
        vals = [interp_piecewise_scalar(max(p_eff, 1e-9), self._lpp, row, loglog=True)[0] for row in self._lpt]
        if not (self._lpp[0] <= p_eff <= self._lpp[-1] and self._lpn[0] <= n_eff <= self._lpn[-1]):
            self.extrapolated["prefill"] += 1
        return max(self._lin1(n_eff, self._lpn, vals), self._floor_prefill)

    def _decode_scalar(self, n: float, s: float) -> float:
        if not n > 0:
            return 0.0
        ctx = s / n
        vals = [interp_piecewise_scalar(ctx, self._ldc, row, loglog=False)[0] for row in self._ldt]
        if not (self._ldc[0] <= ctx <= self._ldc[-1] and self._ldn[0] <= n <= self._ldn[-1]):
            self.extrapolated["decode"] += 1
        return max(self._lin1(n, self._ldn, vals), self._floor_decode)

    # ---- identity ---------------------------------------------------------------------------------
    def ranges(self) -> dict[str, object]:
        return {
            "prompt_tokens_range": [float(self._pp[0]), float(self._pp[-1])],
            "prefill_batch_range": [float(self._pn[0]), float(self._pn[-1])],
            "decode_batch_range": [float(self._dn[0]), float(self._dn[-1])],
            "decode_context_range": [float(self._dc[0]), float(self._dc[-1])],
        }
