"""The prompt sample behind the prefill batch laws (:mod:`qmodel.stations.prefill.law`).

A request cap standing in for a token budget (:func:`batch_cap`), the checked (uncached, cached)
prompt arrays, the stratified base sample the Monte Carlo laws permute (:func:`base_indices`), and
the strata that compress a sample of S_k to the nodes of the Poisson mixtures (:func:`strata`).
"""

from __future__ import annotations

import functools
import math

import numpy as np

from qmodel.arrays import distinct
from qmodel.errors import InputError

__all__ = ["DEFAULT_MAX_BATCH_SIZE", "batch_cap", "prompt_sample", "base_indices", "strata"]

_NODES = 44  # strata kept per batch size for the Poisson mixtures (see BatchServiceLaw._nodes)
_DRAWS = 4096  # k-tuples drawn per batch size (each column is an exact permutation of the mix)

#: Request cap used when only a token budget is given: vLLM's long-standing max_num_seqs default.
#: Without it a huge budget over short prompts would ask for batches of thousands of requests.
DEFAULT_MAX_BATCH_SIZE = 256


def batch_cap(max_batch_tokens: float | None, mean_prompt_tokens: float, max_batch_size: int | None = None) -> int:
    """Request cap b standing in for a token budget: max(1, ⌊B/E[P]⌋), capped by max_batch_size
    (default :data:`DEFAULT_MAX_BATCH_SIZE`)."""
    if max_batch_tokens is None and max_batch_size is None:
        raise InputError("max_batch_tokens", None, "give a token budget or a max_batch_size")
    if max_batch_size is not None and (int(max_batch_size) != max_batch_size or max_batch_size < 1):
        raise InputError("max_batch_size", max_batch_size, "must be an integer >= 1")
    b = 1 << 30 if max_batch_tokens is None else max(1, int(math.floor(max_batch_tokens / mean_prompt_tokens + 1e-9)))
    return max(1, min(b, int(max_batch_size) if max_batch_size is not None else DEFAULT_MAX_BATCH_SIZE))


def prompt_sample(prompt_tokens: np.ndarray, cached_tokens: np.ndarray | None) -> tuple[np.ndarray, np.ndarray]:
    """(uncached prompt, cached prefix) as float arrays, checked once for every law builder."""
    p = np.asarray(prompt_tokens, dtype=float).ravel()
    c = np.zeros_like(p) if cached_tokens is None else np.asarray(cached_tokens, dtype=float).ravel()
    if p.size == 0 or not np.all(np.isfinite(p)) or np.any(p < 0) or p.max() <= 0:
        raise InputError("prompt_tokens", "sample", "prompt lengths must be finite, >= 0, not all zero")
    if c.shape != p.shape or np.any(c < 0):
        raise InputError("cached_tokens", "sample", "one non-negative cached length per prompt")
    return p, c


def base_indices(p: np.ndarray) -> np.ndarray:
    """The base sample of the Monte Carlo laws: ``_DRAWS`` equally spaced order statistics of a large
    sample (pairs kept), or the whole small sample tiled up to at least ``_DRAWS``."""
    if p.size >= _DRAWS:
        order = np.argsort(p, kind="stable")
        return order[((np.arange(_DRAWS) + 0.5) * p.size / _DRAWS).astype(np.int64)]
    return np.tile(np.arange(p.size), int(math.ceil(_DRAWS / p.size)))


@functools.lru_cache(maxsize=256)
def strata(size: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(first index, count, weight) of each stratum of :meth:`BatchServiceLaw._nodes` for a sorted
    sample of ``size``: they depend on the size alone, and the laws ask for the same few sizes."""
    u = list(np.linspace(0.0, 0.9, 28)[:-1])
    tail = 0.1
    while tail * size >= 1.0 and len(u) < _NODES:
        u.append(1.0 - tail)
        tail /= 2.0
    cuts = distinct(np.round(np.array(u + [1.0]) * size).astype(np.int64))
    counts = np.diff(cuts).astype(float)
    out = cuts[:-1], counts, counts / counts.sum()
    for a in out:  # shared between laws: read-only
        a.flags.writeable = False
    return out
