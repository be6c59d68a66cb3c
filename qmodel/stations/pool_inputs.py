"""What every single-pool station (colocated, chunked) declares and shares: its parameters with their
domains (the joint length sample, the instance count, the arrival SCV, the dispatch), the lengths as
float arrays, and the KV-held prompt tokens (uncached + prefix-cache hit).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from qmodel.errors import InputError
from qmodel.stations.base import DISPATCHES, Param, integer, number, one_of, sample

__all__ = ["POOL_PARAMS", "float_lengths", "held_prompt_tokens", "reserved_output"]


def _joint_lengths_ok(p: np.ndarray, L: np.ndarray) -> bool:
    return not (p.size == 0 or p.size != L.size or np.any(L < 1) or np.any(p < 0) or not p.mean() > 0
                or not (np.all(np.isfinite(p)) and np.all(np.isfinite(L))))


def _sizes(lengths: tuple[Any, Any]) -> str:
    return "{} prompts / {} outputs".format(*(np.size(x) for x in lengths))


#: the parameters every single-pool station declares (checked by :class:`~qmodel.stations.base.StationModel`)
POOL_PARAMS = (
    Param(("prompt_tokens", "output_tokens"),
          sample(_joint_lengths_ok,
                 "a non-empty joint sample, uncached prompts >= 0 (mean > 0) and outputs >= 1 tokens"),
          "lengths", shown=_sizes),
    Param("instances", integer(1, "an integer >= 1"), "{name}.instances"),
    Param("ca2", number(0.0, expected="a finite arrival SCV >= 0 (1 = Poisson)"), "{name}.ca2"),
    Param("dispatch", one_of(DISPATCHES), "{name}.dispatch"),
)


def float_lengths(prompt_tokens: np.ndarray, output_tokens: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(prompts, outputs) of the joint sample as flat float arrays."""
    return np.asarray(prompt_tokens, dtype=float).ravel(), np.asarray(output_tokens, dtype=float).ravel()


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


def reserved_output(name: str, output_tokens: np.ndarray, reserved: np.ndarray | None) -> np.ndarray:
    """Output tokens a request's KV reservation counts: its own output (``kv_reservation = actual``,
    ``reserved`` None) or what a ``max_tokens`` reservation holds for its whole life
    (:func:`qmodel.workload.reserved_output_tokens`), never less than the output. KV slot caps, the
    saturated schedule's admissions and least-loaded sizes use these; decode contexts do not."""
    if reserved is None:
        return output_tokens
    r = np.asarray(reserved, dtype=float).ravel()
    if r.shape != output_tokens.shape or np.any(r < output_tokens) or not np.all(np.isfinite(r)):
        raise InputError(f"{name}.reserved_output_tokens", f"{r.size} values",
                         f"{output_tokens.size} finite counts >= each request's output")
    return r
