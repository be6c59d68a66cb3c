"""Input checks every single-pool station (colocated, chunked) shares: the joint length sample, the
instance count, the arrival SCV, the dispatch, and the KV-held prompt tokens (uncached + prefix-cache hit).
"""

from __future__ import annotations

import math

import numpy as np

from qmodel.errors import InputError

__all__ = ["check_pool_inputs", "held_prompt_tokens"]


def check_pool_inputs(name: str, prompt_tokens: np.ndarray, output_tokens: np.ndarray, instances: int, ca2: float,
                      dispatch: str) -> tuple[np.ndarray, np.ndarray]:
    """Validate the inputs every single-pool station shares; returns (prompts, outputs) as float arrays."""
    p = np.asarray(prompt_tokens, dtype=float).ravel()
    L = np.asarray(output_tokens, dtype=float).ravel()
    if (p.size == 0 or p.size != L.size or np.any(L < 1) or np.any(p < 0) or not p.mean() > 0
            or not (np.all(np.isfinite(p)) and np.all(np.isfinite(L)))):
        raise InputError("lengths", f"{p.size} prompts / {L.size} outputs",
                         "a non-empty joint sample, uncached prompts >= 0 (mean > 0) and outputs >= 1 tokens")
    if instances < 1:
        raise InputError(f"{name}.instances", instances, "an integer >= 1")
    if not (ca2 >= 0 and math.isfinite(ca2)):
        raise InputError(f"{name}.ca2", ca2, "a finite arrival SCV >= 0 (1 = Poisson)")
    if dispatch not in ("random", "round_robin", "least_loaded"):
        raise InputError(f"{name}.dispatch", dispatch, "one of random, round_robin, least_loaded")
    return p, L


def held_prompt_tokens(name: str, prompt_tokens: np.ndarray, cached_tokens: np.ndarray | None) -> np.ndarray:
    """Prompt tokens a request holds in KV memory while it decodes: the computed (uncached) ones plus
    its prefix-cache hit, which saves prefill compute but not memory (docs/methods.md, "Prefix-cache
    hits"). Slot caps, decode contexts and least-loaded sizes use these; prefill compute does not."""
    if cached_tokens is None:
        return prompt_tokens
    c = np.asarray(cached_tokens, dtype=float).ravel()
    if c.shape != prompt_tokens.shape or np.any(c < 0) or not np.all(np.isfinite(c)):
        raise InputError(f"{name}.cached_tokens", f"{c.size} values", f"{prompt_tokens.size} finite counts >= 0")
    return prompt_tokens + c
