"""Measured step-time tables: splitwise-sim CSV, DistServe profiler JSON, and qmodel's own CSV.

Formats
-------
**splitwise-sim** ``perf_model.csv`` (``model, hardware, prompt_size, batch_size, token_size, ...,
prompt_time, token_time, ..., tensor_parallel``): ``prompt_time`` is the prefill time of the whole
batch in ms, ``token_time`` the mean decode iteration in ms over ``token_size`` iterations. Each
setting is repeated; qmodel takes the median of the repeats. A decode row's mean context per
sequence is ``prompt_size + token_size / 2`` (the context grows from ``prompt_size`` by one token
per iteration). Names map to the catalog: llama2-70b -> llama-2-70b, bloom-176b -> bloom-176b,
a100-80gb -> a100-80gb-sxm, h100-80gb -> h100-sxm; the power-capped ``h100-80gb-pcap`` is chosen
with ``hardware_key``.

**DistServe** ``profiler-<gpu>.<engine>.json``: ``{model: {tp: {"prefill": [a, b, c],
"decoding_smallbs": [a, b, c], "decoding_largebs": [a, b, c], "decoding_large_small_bs_threshold":
B0}}}`` with times in ms (:class:`DistServeModel`).

**qmodel CSV** (write your own measurements in this form)::

    # lines starting with '#' are comments
    phase,batch_size,prompt_tokens,context_tokens,time_s[,model,hardware,tp]
    prefill,1,512,,0.0943
    prefill,8,512,,0.7676
    decode,1,,576,0.0449
    decode,32,,576,0.0530

``phase`` is ``prefill`` (``batch_size`` requests of ``prompt_tokens`` each; ``time_s`` for the whole
batch) or ``decode`` (``batch_size`` sequences of mean context ``context_tokens``; ``time_s`` for one
iteration). Repeated settings are reduced to their median. The optional ``model``, ``hardware`` and
``tp`` columns let one file hold several configurations (selected with ``model_key``,
``hardware_key`` and the deployment's tp). Requirements: prefill rows at batch size 1 for at least
two prompt lengths; decode rows for at least two batch sizes.

Interpolation (splitwise and qmodel CSV, :class:`SweepTableModel`)
------------------------------------------------------------------
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

Every table model records the SHA-256 of the file bytes as its ``fingerprint``.
"""

from __future__ import annotations

import bisect
import csv
import hashlib
import io
import json
import math
from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from numpy.typing import ArrayLike

from qmodel.errors import DataError, InputError
from qmodel.settings import missing_file_problem
from qmodel.perf.base import ArrayOrFloat, ServiceTimeModel
from qmodel.perf.table_header import LAYOUTS, parse_header

__all__ = [
    "medians_as_points",
    "TablePoint",
    "SweepTableModel",
    "DistServeModel",
    "SPLITWISE_MODELS",
    "SPLITWISE_HARDWARE",
    "DISTSERVE_MODELS",
    "DISTSERVE_HARDWARE",
    "load_splitwise",
    "load_distserve",
    "load_qmodel_csv",
    "detect_format",
    "interp_piecewise",
    "interp_piecewise_scalar",
    "median_groups",
]

#: catalog model name -> splitwise-sim model key
SPLITWISE_MODELS: dict[str, str] = {"llama-2-70b": "llama2-70b", "bloom-176b": "bloom-176b"}
#: catalog GPU name -> splitwise-sim hardware key (h100-80gb-pcap, power-capped, only via hardware_key)
SPLITWISE_HARDWARE: dict[str, str] = {"a100-80gb-sxm": "a100-80gb", "h100-sxm": "h100-80gb"}
#: catalog model name -> DistServe model key
DISTSERVE_MODELS: dict[str, str] = {"opt-13b": "facebook/opt-13b", "opt-66b": "facebook/opt-66b",
                                    "opt-175b": "facebook/opt-175b"}
#: DistServe file-name GPU tag -> catalog GPU name
DISTSERVE_HARDWARE: dict[str, str] = {"a100-80g": "a100-80gb-sxm"}


@dataclass(frozen=True)
class TablePoint:
    """One measured median in the ServiceTimeModel's coordinates (used by calibration)."""

    phase: str  # "prefill" or "decode"
    n: float  # requests in the prefill batch / sequences in the decode batch
    sum_tokens: float  # prefill: prompt tokens of the batch; decode: 0
    sum_sq_tokens: float  # prefill: sum of squared prompt lengths; decode: 0
    sum_context_tokens: float  # decode: context summed over sequences; prefill: 0
    time_s: float


def medians_as_points(prefill_medians: Iterable[tuple[float, float, float]],
                      decode_medians: Iterable[tuple[float, float, float]]) -> list[TablePoint]:
    """Table medians as ServiceTimeModel queries: prefill (batch n, prompt p, time) as n equal
    prompts of p tokens; decode (batch n, mean context, time) as n sequences of that context."""
    out = [TablePoint("prefill", n, n * p, n * p * p, 0.0, t) for n, p, t in prefill_medians]
    out += [TablePoint("decode", n, 0.0, 0.0, n * ctx, t) for n, ctx, t in decode_medians]
    return out


# Inputs of these exact types take the scalar fast path (numpy arrays, lists and 0-d arrays do not).
_SCALARS = (int, float, np.float64, np.int64, np.float32, np.int32)


def _sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def _read_bytes(path: str | Path) -> bytes:
    p = Path(path)
    try:
        return p.read_bytes()
    except FileNotFoundError:
        raise DataError(str(p), missing_file_problem(p)) from None
    except OSError as err:
        raise DataError(str(p), f"cannot read ({err.strerror})") from None
    except ValueError:  # an embedded NUL: no file can have that name
        raise DataError(repr(str(p)), "not a usable file name") from None


def _interp(x: np.ndarray, xs: np.ndarray, ys: np.ndarray, loglog: bool) -> tuple[np.ndarray, np.ndarray]:
    """Piecewise-linear interpolation (optionally in log-log space) with linear end-segment extrapolation.

    Returns (values, outside-mask). ``xs`` is strictly increasing with at least two points.
    """
    lo, hi = xs[0], xs[-1]
    inside = (x >= lo) & (x <= hi)
    xc = np.clip(x, lo, hi)
    if loglog:
        val = np.exp(np.interp(np.log(xc), np.log(xs), np.log(ys)))
    else:
        val = np.interp(xc, xs, ys)
    # Outside: continue the end segment's secant in linear space.
    s_lo = (ys[1] - ys[0]) / (xs[1] - xs[0])
    s_hi = (ys[-1] - ys[-2]) / (xs[-1] - xs[-2])
    val = np.where(x < lo, ys[0] + s_lo * (x - lo), val)
    val = np.where(x > hi, ys[-1] + s_hi * (x - hi), val)
    return val, ~inside


def _interp1(x: float, xs: list[float], ys: list[float], loglog: bool) -> tuple[float, bool]:
    """Scalar twin of :func:`_interp` (pure Python, for the replay's one-at-a-time calls)."""
    lo, hi = xs[0], xs[-1]
    if x < lo:
        return ys[0] + (ys[1] - ys[0]) / (xs[1] - xs[0]) * (x - lo), True
    if x > hi:
        return ys[-1] + (ys[-1] - ys[-2]) / (xs[-1] - xs[-2]) * (x - hi), True
    j = min(bisect.bisect_right(xs, x) - 1, len(xs) - 2)
    if loglog:
        lx0, lx1, ly0, ly1 = math.log(xs[j]), math.log(xs[j + 1]), math.log(ys[j]), math.log(ys[j + 1])
        return math.exp(ly0 + (ly1 - ly0) / (lx1 - lx0) * (math.log(x) - lx0)), False
    return ys[j] + (ys[j + 1] - ys[j]) / (xs[j + 1] - xs[j]) * (x - xs[j]), False


def _median_groups(rows: list[tuple[float, float, float]]) -> list[tuple[float, float, float]]:
    """(n, x, t) rows -> one (n, x, median t) per distinct (n, x)."""
    groups: dict[tuple[float, float], list[float]] = defaultdict(list)
    for n, x, t in rows:
        groups[(n, x)].append(t)
    return [(n, x, float(np.median(ts))) for (n, x), ts in sorted(groups.items())]


#: A median more than this fraction below a smaller batch's median at the same length is impossible.
_MONOTONE_TOLERANCE = 0.10


def _drop_non_monotone(meds: list[tuple[float, float, float]]) -> tuple[list[tuple[float, float, float]],
                                                                       list[dict[str, float]]]:
    """Split (n, x, t) medians into kept ones and physically impossible ones.

    At a fixed per-request length ``x``, a batch of more requests does strictly more work, so its
    step cannot be faster than a smaller batch's. A median more than 10% (run-to-run noise is a
    few percent) below the slowest smaller batch at the same ``x`` is a failed or mislabelled
    run and is left out of the model and the calibration points, and reported. splitwise-sim has
    one: Llama2-70B TP2 on A100, 64 x 512 tokens in 0.79 s against 6.6 s for 32 x 512.
    """
    keep, bad = [], []
    by_x: dict[float, list[tuple[float, float, float]]] = defaultdict(list)
    for row in meds:
        by_x[row[1]].append(row)
    dropped = set()
    for rows in by_x.values():
        slowest = 0.0
        for n, x, t in sorted(rows):
            if t < (1.0 - _MONOTONE_TOLERANCE) * slowest:
                dropped.add((n, x))
                bad.append({"batch_size": n, "length": x, "time_s": t, "slower_smaller_batch_s": slowest})
            else:
                slowest = max(slowest, t)
    keep = [r for r in meds if (r[0], r[1]) not in dropped]
    return keep, bad


#: Public names of the interpolation and median helpers, shared with :mod:`qmodel.perf.grid`.
interp_piecewise = _interp
interp_piecewise_scalar = _interp1
median_groups = _median_groups


class SweepTableModel(ServiceTimeModel):
    """Step times interpolated from measured sweeps (splitwise-sim or qmodel CSV).

    prefill ``t = n_eff * f1(p_eff) * g(n_eff)``; decode ``t = h(n) + c * S`` (see the module
    docstring for the definitions, the interpolation and the extrapolation rule).
    """

    def __init__(self, prefill_rows: list[tuple[float, float, float]], decode_rows: list[tuple[float, float, float]],
                 *, sha256: str, source: str, kind: str, keys: dict[str, object] | None = None) -> None:
        """``prefill_rows``: (batch size, prompt tokens per request, seconds); ``decode_rows``:
        (batch size, mean context per sequence, seconds). Repeats are reduced to medians."""
        self.kind = kind
        self.source = source
        self.keys = dict(keys or {})
        self._sha = sha256
        pre, bad_p = _drop_non_monotone(_median_groups(prefill_rows))
        dec, bad_d = _drop_non_monotone(_median_groups(decode_rows))
        self.prefill_medians, self.decode_medians = pre, dec
        #: medians left out as physically impossible (see :func:`_drop_non_monotone`), per phase
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
                f, _ = _interp(np.array([p]), self._p, self._f1, loglog=True)
                gs[float(n)].append(t / (n * float(f[0])))
        self._gn = np.array(sorted(gs))
        self._g = np.array([float(np.median(gs[n])) for n in self._gn])
        self._fit_decode(dec, source)
        self._floor_prefill = 0.01 * min(t for _, _, t in pre)
        self._floor_decode = 0.01 * min(t for _, _, t in dec)
        #: number of queries answered by extrapolation, per phase (reported by describe())
        self.extrapolated: dict[str, int] = {"prefill": 0, "decode": 0}
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
        h = [float(np.median([t - c * n * ctx for m, ctx, t in dec if m == n])) for n in ns]
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
        if type(sum_tokens) in _SCALARS and type(sum_sq_tokens) in _SCALARS and type(n_requests) in _SCALARS:
            return self._prefill_scalar(float(sum_tokens), float(sum_sq_tokens))
        t, q, _ = np.broadcast_arrays(np.asarray(sum_tokens, dtype=float), np.asarray(sum_sq_tokens, dtype=float),
                                      np.asarray(n_requests, dtype=float))
        p_eff, n_eff = self._eff(t, q)
        f, out1 = _interp(np.maximum(p_eff, 1e-9), self._p, self._f1, loglog=True)
        g, out2 = _interp(n_eff, self._gn, self._g, loglog=False)
        val = np.maximum(n_eff * f * g, self._floor_prefill)
        val = np.where(t > 0, val, 0.0)  # an empty batch takes no time
        self.extrapolated["prefill"] += int(np.count_nonzero((out1 | out2) & (t > 0)))
        return float(val) if val.ndim == 0 else val

    def decode_step_time_s(self, n_seqs: ArrayLike, sum_context_tokens: ArrayLike) -> ArrayOrFloat:
        if type(n_seqs) in _SCALARS and type(sum_context_tokens) in _SCALARS:
            return self._decode_scalar(float(n_seqs), float(sum_context_tokens))
        n, s = np.broadcast_arrays(np.asarray(n_seqs, dtype=float), np.asarray(sum_context_tokens, dtype=float))
        h, _ = _interp(n, self._hn, self._h, loglog=False)
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
        f, out1 = _interp1(max(p_eff, 1e-9), self._lp, self._lf1, loglog=True)
        g, out2 = _interp1(n_eff, self._lgn, self._lg, loglog=False)
        if out1 or out2:
            self.extrapolated["prefill"] += 1
        return max(n_eff * f * g, self._floor_prefill)

    def _decode_scalar(self, n: float, s: float) -> float:
        if not n > 0:
            return 0.0
        h, _ = _interp1(n, self._lhn, self._lh, loglog=False)
        ctx = s / n
        if not (self._lhn[0] <= n <= self._lhn[-1] and self._ctx_range[0] <= ctx <= self._ctx_range[1]):
            self.extrapolated["decode"] += 1
        return max(h + self.context_cost_s_per_token * s, self._floor_decode)

    # ---- calibration support and identity ---------------------------------------------------
    def points(self) -> list[TablePoint]:
        """The measured medians as ServiceTimeModel queries (for calibration and tests)."""
        return medians_as_points(self.prefill_medians, self.decode_medians)

    @property
    def fingerprint(self) -> str:
        return self._sha

    def describe(self) -> dict[str, object]:
        return {
            "kind": self.kind, "source": self.source, **self.keys, "sha256": self._sha,
            "prompt_tokens_range": [float(self._p[0]), float(self._p[-1])],
            "prefill_batch_range": [1.0, float(self._gn[-1])],
            "decode_batch_range": [float(self._hn[0]), float(self._hn[-1])],
            "decode_context_range": [float(self._ctx_range[0]), float(self._ctx_range[1])],
            "context_cost_s_per_token": self.context_cost_s_per_token,
            "suspect_rows": self.suspect,
            "extrapolated_queries": dict(self.extrapolated),
        }


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
        if type(sum_tokens) in _SCALARS and type(sum_sq_tokens) in _SCALARS and type(n_requests) in _SCALARS:
            return (a + b * sum_tokens + c * sum_sq_tokens) / 1000.0 if sum_tokens > 0 else 0.0
        t, q, _ = np.broadcast_arrays(np.asarray(sum_tokens, dtype=float), np.asarray(sum_sq_tokens, dtype=float),
                                      np.asarray(n_requests, dtype=float))
        val = np.where(t > 0, (a + b * t + c * q) / 1000.0, 0.0)  # an empty batch takes no time
        return float(val) if val.ndim == 0 else val

    def decode_step_time_s(self, n_seqs: ArrayLike, sum_context_tokens: ArrayLike) -> ArrayOrFloat:
        if type(n_seqs) in _SCALARS and type(sum_context_tokens) in _SCALARS:
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


# ---- loaders ---------------------------------------------------------------------------------

def _csv_rows(data: bytes, path: str) -> list[dict[str, str]]:
    try:
        text = data.decode("utf-8-sig")
    except UnicodeDecodeError:
        raise DataError(path, "not UTF-8 text") from None
    lines = [ln for ln in text.splitlines() if ln.strip() and not ln.lstrip().startswith("#")]
    return list(csv.DictReader(io.StringIO("\n".join(lines))))


def _num(row: dict[str, str], col: str, path: str, line: int) -> float:
    try:
        v = float(row[col])
    except (KeyError, TypeError, ValueError):
        raise DataError(path, f"row {line}: column {col!r} is {row.get(col)!r}, expected a number") from None
    if not np.isfinite(v) or v < 0:
        raise DataError(path, f"row {line}: column {col!r} is {v!r}, expected a finite non-negative number")
    return v


def load_splitwise(path: str | Path, model_key: str, hardware_key: str, tp: int,
                   field_prefix: str = "deployment") -> SweepTableModel:
    """Load one (model, hardware, tp) group of splitwise-sim's ``perf_model.csv``."""
    data = _read_bytes(path)
    rows = _csv_rows(data, str(path))
    need = {"model", "hardware", "prompt_size", "batch_size", "token_size", "prompt_time", "token_time", "tensor_parallel"}
    if not rows or not need <= set(rows[0]):
        raise DataError(str(path), f"not a splitwise-sim perf_model.csv (needs columns {sorted(need)})")
    models = sorted({r["model"] for r in rows})
    if model_key not in models:
        raise InputError("perf.model_key", model_key, f"models in {Path(path).name}: {', '.join(models)}")
    hws = sorted({r["hardware"] for r in rows if r["model"] == model_key})
    if hardware_key not in hws:
        raise InputError("perf.hardware_key", hardware_key, f"hardware for {model_key}: {', '.join(hws)}")
    sel = [(i + 2, r) for i, r in enumerate(rows) if r["model"] == model_key and r["hardware"] == hardware_key]
    tps = sorted({int(float(r["tensor_parallel"])) for _, r in sel})
    if tp not in tps:
        raise InputError(f"{field_prefix}.tp", tp, f"the table measures {model_key} on {hardware_key} at tp "
                                                   f"{', '.join(map(str, tps))}")
    pre, dec = [], []
    for line, r in sel:
        if int(float(r["tensor_parallel"])) != tp:
            continue
        n = _num(r, "batch_size", str(path), line)
        p = _num(r, "prompt_size", str(path), line)
        out = _num(r, "token_size", str(path), line)
        pre.append((n, p, _num(r, "prompt_time", str(path), line) / 1000.0))
        dec.append((n, p + out / 2.0, _num(r, "token_time", str(path), line) / 1000.0))
    return SweepTableModel(pre, dec, sha256=_sha256(data), source=str(path), kind="table:splitwise",
                           keys={"model_key": model_key, "hardware_key": hardware_key, "tp": tp})


def load_qmodel_csv(path: str | Path, tp: int, model_key: str | None = None, hardware_key: str | None = None,
                    field_prefix: str = "deployment") -> SweepTableModel:
    """Load a qmodel-format CSV (see the module docstring), filtered by the optional model/hardware/tp columns."""
    data = _read_bytes(path)
    rows = _csv_rows(data, str(path))
    need = {"phase", "batch_size", "time_s"}
    if not rows or not need <= set(rows[0]):
        raise DataError(str(path), "a qmodel table needs columns phase,batch_size,prompt_tokens,context_tokens,time_s")
    cols = set(rows[0])
    pre, dec = [], []
    tps_seen: set[int] = set()
    for i, r in enumerate(rows):
        line = i + 2
        if model_key is not None and "model" in cols and r["model"] != model_key:
            continue
        if hardware_key is not None and "hardware" in cols and r["hardware"] != hardware_key:
            continue
        if "tp" in cols and r.get("tp"):
            rtp = int(_num(r, "tp", str(path), line))
            tps_seen.add(rtp)
            if rtp != tp:
                continue
        phase = (r.get("phase") or "").strip().lower()
        n = _num(r, "batch_size", str(path), line)
        t = _num(r, "time_s", str(path), line)
        if n < 1 or t <= 0:
            raise DataError(str(path), f"row {line}: batch_size must be >= 1 and time_s > 0")
        if phase == "prefill":
            pre.append((n, _num(r, "prompt_tokens", str(path), line), t))
        elif phase == "decode":
            dec.append((n, _num(r, "context_tokens", str(path), line), t))
        else:
            raise DataError(str(path), f"row {line}: phase is {phase!r}, expected 'prefill' or 'decode'")
    if tps_seen and tp not in tps_seen:
        raise InputError(f"{field_prefix}.tp", tp, f"the table has tp {', '.join(map(str, sorted(tps_seen)))}")
    if not pre or not dec:
        raise DataError(str(path), "no prefill or no decode rows match the selected model/hardware/tp")
    keys: dict[str, object] = {"model_key": model_key, "hardware_key": hardware_key, "tp": tp}
    header = parse_header(data.decode("utf-8-sig", errors="replace"))
    if header:
        keys["provenance"] = header
    layout = header.get("layout", "sweep")
    if layout == "grid":
        from qmodel.perf.grid import GridTableModel  # grid builds on this module's helpers

        return GridTableModel(pre, dec, sha256=_sha256(data), source=str(path), kind="table:qmodel-grid", keys=keys)
    if layout != "sweep":
        raise DataError(str(path), f"header 'layout: {layout}' is not one of {', '.join(LAYOUTS)}")
    return SweepTableModel(pre, dec, sha256=_sha256(data), source=str(path), kind="table:qmodel", keys=keys)


def load_distserve(path: str | Path, model_key: str, tp: int, field_prefix: str = "deployment") -> DistServeModel:
    """Load one (model, tp) entry of a DistServe profiler JSON."""
    data = _read_bytes(path)
    try:
        doc = json.loads(data)
    except (UnicodeDecodeError, json.JSONDecodeError) as err:
        raise DataError(str(path), f"not valid JSON: {err}") from None
    if not isinstance(doc, dict):
        raise DataError(str(path), "not a DistServe profiler JSON (top level must map model -> tp -> coefficients)")
    if model_key not in doc:
        raise InputError("perf.model_key", model_key, f"models in {Path(path).name}: {', '.join(sorted(doc))}")
    entries = doc[model_key]
    if str(tp) not in entries:
        raise InputError(f"{field_prefix}.tp", tp, f"the table profiles {model_key} at tp "
                                                   f"{', '.join(sorted(entries, key=int))}")
    e = entries[str(tp)]
    try:
        coef = [tuple(float(x) for x in e[k]) for k in ("prefill", "decoding_smallbs", "decoding_largebs")]
        thr = int(e["decoding_large_small_bs_threshold"])
    except (KeyError, TypeError, ValueError) as err:
        raise DataError(str(path), f"{model_key} tp {tp}: missing or malformed coefficient ({err})") from None
    if any(len(c) != 3 for c in coef):
        raise DataError(str(path), f"{model_key} tp {tp}: every coefficient list must have 3 numbers")
    return DistServeModel(coef[0], coef[1], coef[2], thr, sha256=_sha256(data), source=str(path),
                          keys={"model_key": model_key, "tp": tp})


def detect_format(path: str | Path) -> str:
    """'distserve', 'splitwise' or 'qmodel' from the file's content."""
    p = Path(path)
    head = _read_bytes(p)[:4096].decode("utf-8", errors="replace")
    if head.lstrip().startswith("{"):
        return "distserve"
    first = next((ln for ln in head.splitlines() if ln.strip() and not ln.lstrip().startswith("#")), "")
    cols = {c.strip() for c in first.split(",")}
    if {"prompt_time", "token_time", "tensor_parallel"} <= cols:
        return "splitwise"
    if {"phase", "batch_size", "time_s"} <= cols:
        return "qmodel"
    raise DataError(str(p), "unknown table format; expected a splitwise-sim CSV, a DistServe JSON or a qmodel CSV")
