"""Prefix caching as a per-request law: which requests hit, and how many prompt tokens they skip.

One module for the solver and the replay (docs/methods.md, "Prefix-cache hits"):

* **uniform** (``workload.prefix_hit_ratio`` h, the default): every request skips h of its
  prompt: uncached = max(1, rint(P (1 - h))).
* **stated mixture** (``workload.prefix_cache = {kind = "mixture", hit_fraction = f, hit_ratio = h}``):
  a fraction f of the requests skip h of their prompt, the others compute it whole. The uniform
  ratio is the mixture with f = 1 (:func:`uncached_tokens` is the one formula for both). The
  solver marks hits on its equally weighted length nodes by a Bresenham pattern in prompt-rank
  order (:func:`mixture_nodes`): floor(N f) of the N nodes hit, spread evenly over the prompt
  sizes, so the hit is independent of the length as in the replay, which draws each request's hit
  (probability f) from its own seeded stream (:func:`mixture_draws`).
* **from the trace's block hashes** (``{kind = "trace_hashes"}``, Mooncake ``hash_ids``): each
  cache instance keeps an LRU of prefix blocks (:class:`BlockLRU`, a shared block counted once);
  a request's cached prefix is the longest run of its leading blocks present, capped at P - 1
  (the last prompt token always runs), and then every block of its prompt is inserted or
  refreshed. The capacity is the instance's KV memory in blocks (:func:`cache_blocks`, the one
  rule the replay's cache uses too). The solver runs the LRU once over the trace's request order,
  rate-independently (:func:`lru_cached_tokens`); dispatch over c cache instances is read as each
  instance seeing every c-th request of the stream (round-robin: the replay's least_loaded and jsq
  spread a conversation's turns over the instances just as obliviously).
"""

from __future__ import annotations

import hashlib
from collections import OrderedDict
from collections.abc import Sequence

import numpy as np

__all__ = ["MIXTURE_STREAM", "PREFIX_BLOCK_TOKENS", "BlockLRU", "cache_blocks", "cached_prefix_tokens", "lru_cached_tokens", "lru_cached_tokens_once",
           "mixture_draws", "mixture_nodes", "uncached_tokens"]

#: tokens per prefix block (Mooncake's hash_ids and vLLM-style block caches)
PREFIX_BLOCK_TOKENS = 512

#: second word of the replay's mixture-hit generator's seed sequence (arrivals use 1, think times 2)
MIXTURE_STREAM = 3


def cache_blocks(kv_capacity_tokens: float, block_tokens: int = PREFIX_BLOCK_TOKENS) -> int:
    """Prefix blocks one instance's LRU holds: its KV capacity in whole blocks. For a colocated or
    chunked instance an upper bound (in vLLM cached blocks are the evictable part of the same
    memory); a prefill instance's is an HBM-only cache of its KV memory."""
    return int(kv_capacity_tokens) // int(block_tokens)


class BlockLRU:
    """One instance's LRU of prefix blocks keyed by block hash (a block shared by many prompts is
    held once). :meth:`lookup` counts the leading blocks present without changing the order;
    :meth:`insert` then refreshes or adds every block of the prompt and evicts the least recently
    used beyond ``capacity`` blocks."""

    __slots__ = ("capacity", "blocks")

    def __init__(self, capacity: int) -> None:
        self.capacity = int(capacity)
        self.blocks: OrderedDict[int, None] = OrderedDict()

    def lookup(self, hashes: Sequence[int]) -> int:
        """Leading blocks of ``hashes`` in the cache (the longest cached prefix, in blocks)."""
        blocks = self.blocks
        hits = 0
        for h in hashes:
            if h not in blocks:
                break
            hits += 1
        return hits

    def insert(self, hashes: Sequence[int]) -> None:
        blocks = self.blocks
        for h in hashes:
            if h in blocks:
                blocks.move_to_end(h)
            else:
                blocks[h] = None
        while len(blocks) > self.capacity:
            blocks.popitem(last=False)


def cached_prefix_tokens(hit_blocks: int, block_tokens: int, prompt: int) -> int:
    """Cached tokens of a prompt whose ``hit_blocks`` leading blocks are cached: at most P - 1."""
    return max(0, min(hit_blocks * block_tokens, prompt - 1))


def lru_cached_tokens(hash_ids: Sequence[Sequence[int]], prompt: np.ndarray, instances: int, capacity_blocks: int,
                      block_tokens: int = PREFIX_BLOCK_TOKENS) -> np.ndarray:
    """Cached prefix tokens per request, request i looked up then inserted in instance i mod c's
    :class:`BlockLRU` of ``capacity_blocks`` (see the module docstring). Deterministic."""
    if len(hash_ids) != len(prompt):
        raise ValueError("one hash list per prompt")
    lrus = [BlockLRU(capacity_blocks) for _ in range(max(1, int(instances)))]
    c = len(lrus)
    out = np.zeros(len(prompt), dtype=np.int64)
    if capacity_blocks <= 0:
        return out
    for i, (hashes, p) in enumerate(zip(hash_ids, prompt.tolist())):
        lru = lrus[i % c]
        out[i] = cached_prefix_tokens(lru.lookup(hashes), block_tokens, int(p))
        lru.insert(hashes)
    return out


#: (trace digest, prompts, instances, capacity, block tokens) -> cached tokens (read-only)
_LRU_RESULTS: dict[tuple, np.ndarray] = {}


def lru_cached_tokens_once(trace_sha256: str, hash_ids: Sequence[Sequence[int]], prompt: np.ndarray, instances: int,
                           capacity_blocks: int, block_tokens: int = PREFIX_BLOCK_TOKENS) -> np.ndarray:
    """:func:`lru_cached_tokens`, computed once per (trace, prompts, instances, capacity) and kept
    (read-only): the planner and sweeps resolve the same scenario many times."""
    p = np.ascontiguousarray(prompt, dtype=np.int64)
    key = (trace_sha256, hashlib.sha256(p.tobytes()).hexdigest(), int(instances), int(capacity_blocks), int(block_tokens))
    out = _LRU_RESULTS.get(key)
    if out is None:
        if len(_LRU_RESULTS) >= 16:
            _LRU_RESULTS.pop(next(iter(_LRU_RESULTS)))
        out = lru_cached_tokens(hash_ids, p, instances, capacity_blocks, block_tokens)
        out.setflags(write=False)
        _LRU_RESULTS[key] = out
    return out


def uncached_tokens(prompt: np.ndarray, hit_ratio: float, hit: np.ndarray | None = None) -> np.ndarray:
    """Prompt tokens a prefill computes: max(1, rint(P (1 - h))) where ``hit`` (every request when
    None: the uniform ratio), the whole prompt elsewhere."""
    hit_p = np.maximum(1, np.rint(prompt * (1.0 - hit_ratio))).astype(np.int64)
    if hit is None:
        return hit_p
    return np.where(hit, hit_p, np.asarray(prompt, dtype=np.int64))


def mixture_nodes(prompt: np.ndarray, hit_fraction: float) -> np.ndarray:
    """Which of N equally weighted length nodes hit: node of prompt rank k (stable order) hits iff
    floor((k + 1) f) - floor(k f) = 1, so floor(N f) nodes hit, evenly over the prompt sizes."""
    n = len(prompt)
    k = np.arange(n, dtype=np.int64)
    f = float(hit_fraction)
    by_rank = (np.floor((k + 1) * f) - np.floor(k * f)) > 0
    hit = np.empty(n, dtype=bool)
    hit[np.argsort(prompt, kind="stable")] = by_rank
    return hit


def mixture_draws(n: int, hit_fraction: float, seed: int) -> list[bool]:
    """The replay's per-request hits: request r hits iff u_r < f, u from
    ``default_rng([seed, MIXTURE_STREAM])`` (its own stream: the dispatch and arrival draws keep theirs)."""
    if hit_fraction >= 1.0:
        return [True] * n
    u = np.random.default_rng([int(seed), MIXTURE_STREAM]).random(n)
    return (u < hit_fraction).tolist()
