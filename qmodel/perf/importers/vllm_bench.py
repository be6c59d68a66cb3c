"""``vllm bench serve`` / ``benchmark_serving.py`` result JSONs -> fitted qmodel sweep table.

A result JSON saved with ``--save-result --save-detailed`` holds, per successful request, its
prompt length (``input_lens``), TTFT (``ttfts``, seconds) and inter-token latencies (``itls``,
seconds, one per output token after the first), plus the run's ``duration`` (seconds). It holds
no timeline (when each request ran, with whom), so the fit rests on stated assumptions:

**Prefill** (batch-1 curve). In the run with the lowest mean decode concurrency (see below)
each TTFT is taken as one batch-1 prefill of that prompt: no queueing, no other prompt in the
batch. That holds for ``--max-concurrency 1`` or a low ``--request-rate``; at higher load TTFT
also holds queueing and the curve comes out high. ``t(p) = a + b p + c p^2`` (a, b, c >= 0) is
fitted by non-negative least squares on relative error, once, then once more without the
requests more than 3 median-absolute-deviations away (a queued request is an outlier upward).
Rows: batch 1 at four prompt lengths per doubling over the measured range; batch 2 rows are
written as twice the batch-1 time, i.e. *no batching gain is assumed* (exact for a
compute-bound prefill, conservative otherwise; the JSON cannot show co-batched prefills).

**Decode.** Each run's mean number of sequences decoding is, by Little's law,
``B = sum of all ITLs / duration``. Each ITL is one decode step of a request whose KV holds
``prompt + k - 1`` tokens at its ``k``-th ITL; a run's (context, ITL) pairs are split into four
equal-count bins by context and each bin gives a row (batch ``B``, median context, median ITL;
medians so the steps that also ran another request's prefill do not pull the row up). The table
then fits ``t = h(B) + c * B * context`` across runs (:class:`~qmodel.perf.tables.SweepTableModel`).
Decode therefore needs runs at two or more concurrencies (e.g. ``--max-concurrency 1, 8, 32``).
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np

from qmodel.errors import DataError, InputError
from qmodel.perf.importers import ImportedTable, sha256_file
from qmodel.settings import resolve_data_path

__all__ = ["import_vllm_bench", "BenchRun", "read_bench_json", "fit_prefill_quadratic"]

_NEEDED = ("input_lens", "ttfts", "itls", "duration")
_DECODE_BINS = 4


class BenchRun:
    """The successful requests of one result JSON and its Little's-law decode concurrency."""

    def __init__(self, path: str, prompts: list[float], ttfts: list[float], itls: list[list[float]], duration_s: float,
                 sha256: str) -> None:
        self.path, self.sha256 = path, sha256
        self.prompts, self.ttfts, self.itls, self.duration_s = prompts, ttfts, itls, duration_s
        self.mean_decode_batch = sum(sum(x) for x in itls) / duration_s

    def decode_rows(self) -> list[tuple[float, float, float]]:
        """(batch, median context, median ITL) per equal-count context bin (see the module docstring)."""
        pairs = sorted((p + k, t) for p, row in zip(self.prompts, self.itls) for k, t in enumerate(row))
        if len(pairs) < _DECODE_BINS:
            raise DataError(self.path, f"only {len(pairs)} inter-token latencies; a decode fit needs {_DECODE_BINS}+")
        rows = []
        for chunk in np.array_split(np.array(pairs), _DECODE_BINS):
            rows.append((self.mean_decode_batch, float(np.median(chunk[:, 0])), float(np.median(chunk[:, 1]))))
        return rows


def _list(doc: dict, key: str, path: str) -> list:
    v = doc.get(key)
    if not isinstance(v, list):
        raise DataError(path, f"{key!r} must be a list (save the run with --save-result --save-detailed)")
    return v


def read_bench_json(path: str) -> BenchRun:
    """One result JSON -> :class:`BenchRun` (failed requests, with an error or no TTFT, are left out)."""
    p = resolve_data_path(path)
    sha = sha256_file(Path(p))
    try:
        doc = json.loads(Path(p).read_text(encoding="utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as err:
        raise DataError(str(p), f"not valid JSON ({err})") from None
    if not isinstance(doc, dict) or any(k not in doc for k in _NEEDED):
        missing = [k for k in _NEEDED if not isinstance(doc, dict) or k not in doc]
        raise DataError(str(p), f"not a vllm bench serve result with per-request detail (missing {', '.join(missing)}; "
                                "save it with --save-result --save-detailed)")
    ins, ttfts, itls = _list(doc, "input_lens", str(p)), _list(doc, "ttfts", str(p)), _list(doc, "itls", str(p))
    errors = doc.get("errors") if isinstance(doc.get("errors"), list) else [""] * len(ins)
    if not (len(ins) == len(ttfts) == len(itls) == len(errors)):
        raise DataError(str(p), "input_lens, ttfts, itls (and errors) must have one entry per request")
    try:
        duration = float(doc["duration"])
    except (TypeError, ValueError):
        raise DataError(str(p), f"'duration' is {doc['duration']!r}, expected seconds") from None
    if not (math.isfinite(duration) and duration > 0):
        raise DataError(str(p), f"'duration' is {duration!r}, expected positive seconds")
    keep_p, keep_t, keep_i = [], [], []
    for i, (n, t, row, err) in enumerate(zip(ins, ttfts, itls, errors)):
        if err or t is None:
            continue
        try:
            n_f, t_f, row_f = float(n), float(t), [float(x) for x in (row or [])]
        except (TypeError, ValueError):
            raise DataError(str(p), f"request {i}: input_lens/ttfts/itls must be numbers") from None
        if not (math.isfinite(t_f) and t_f > 0 and n_f >= 1 and all(math.isfinite(x) and x >= 0 for x in row_f)):
            continue  # vLLM records a failed request with ttft 0
        keep_p.append(n_f)
        keep_t.append(t_f)
        keep_i.append(row_f)
    if not keep_p:
        raise DataError(str(p), "no successful request (every one has an error or no TTFT)")
    return BenchRun(str(path), keep_p, keep_t, keep_i, duration, sha)


def fit_prefill_quadratic(prompts: list[float], ttfts: list[float]) -> tuple[float, float, float]:
    """(a, b, c) >= 0 of ``ttft = a + b p + c p^2``: NNLS on relative error, refitted without >3 MAD outliers."""
    from scipy.optimize import nnls

    p, t = np.asarray(prompts, dtype=float), np.asarray(ttfts, dtype=float)
    scale = float(p.max())  # columns 1, p/scale, (p/scale)^2 are of one magnitude for NNLS
    keep = np.ones(p.size, dtype=bool)
    coef = np.zeros(3)
    for _ in range(2):
        x = p[keep] / scale
        a = np.stack([np.ones(x.size), x, x * x], axis=1) / t[keep, None]
        sol, _res = nnls(a, np.ones(x.size))
        coef = sol / np.array([1.0, scale, scale * scale])
        rel = (coef[0] + coef[1] * p + coef[2] * p * p) / t - 1.0
        mad = float(np.median(np.abs(rel - np.median(rel))))
        keep = np.abs(rel - np.median(rel)) <= 3.0 * mad if mad > 0 else np.ones(p.size, dtype=bool)
    return float(coef[0]), float(coef[1]), float(coef[2])


def import_vllm_bench(paths: list[str], tp: int) -> ImportedTable:
    """Fit prefill and decode step times to one or more result JSONs (see the module docstring)."""
    runs = [read_bench_json(p) for p in paths]
    batches = sorted({round(r.mean_decode_batch, 9) for r in runs})
    if len(batches) < 2:
        raise InputError("PATH", paths, "decode needs result JSONs at two or more concurrencies "
                                        f"(these runs all decode {batches[0]:.3g} sequences on average)")
    low = min(runs, key=lambda r: r.mean_decode_batch)
    if len(set(low.prompts)) < 2:
        raise DataError(low.path, "the prefill fit needs prompts of two or more lengths in the lowest-concurrency run")
    a, b, c = fit_prefill_quadratic(low.prompts, low.ttfts)
    lo, hi = min(low.prompts), max(low.prompts)
    k = max(1, math.ceil(4 * math.log2(hi / lo)))
    lengths = sorted({float(round(lo * (hi / lo) ** (j / k))) for j in range(k + 1)})
    pre = [(1.0, q, a + b * q + c * q * q) for q in lengths] + [(2.0, q, 2.0 * (a + b * q + c * q * q)) for q in lengths]
    dec = [row for r in runs for row in r.decode_rows()]
    return ImportedTable(
        source="vllm-bench", layout="sweep", tp=tp, prefill=pre, decode=dec,
        header={"source_file": [f"{Path(r.path).name} sha256={r.sha256} (mean decode batch {r.mean_decode_batch:.4g}, "
                                f"{len(r.prompts)} requests)" for r in runs],
                "method": f"prefill: ttft = a + b p + c p^2 fitted to {Path(low.path).name} (a={a:.6g} s, b={b:.6g} s, "
                          f"c={c:.6g} s); decode: median ITL per context bin at each run's Little's-law batch",
                "note": ["assumes TTFT = one batch-1 prefill in the lowest-concurrency run (no queueing)",
                         "batch-2 prefill rows are twice batch 1 (no batching gain assumed)"]})
