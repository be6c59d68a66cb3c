"""Per-request KV handoff sizes and times, closed forms.

X = kv_bytes_per_token × (prompt − cached prefix) bytes per request; the link must move
kv_bytes/token × E[prompt] × λ bytes/s; a layer-by-layer transfer over ℓ layers exposes
g(X, T_p) = max(X/(Cℓ), X/C − T_p (1 − 1/ℓ)) of its X/C, T_p the request's own prefill time
(layer i is sent while layers i+1..ℓ compute).
"""

from __future__ import annotations

import numpy as np

__all__ = ["bandwidth_needed_bytes_per_s", "layerwise_exposed_s", "kv_transfer_bytes"]


def bandwidth_needed_bytes_per_s(kv_bytes_per_token: float, mean_prompt_tokens: float, rate_per_s: float) -> float:
    """Bytes per second the handoff must move at ``rate_per_s``: kv_bytes/token × E[prompt] × λ."""
    return float(kv_bytes_per_token) * float(mean_prompt_tokens) * float(rate_per_s)


def layerwise_exposed_s(x_bytes, bandwidth_bytes_per_s: float, layers: int, prefill_s):
    """max(X/(Cℓ), X/C − T_p(1 − 1/ℓ)): the part of a layer-by-layer transfer the prefill cannot hide."""
    x = np.asarray(x_bytes, dtype=float)
    t = x / bandwidth_bytes_per_s
    return np.maximum(t / layers, t - np.asarray(prefill_s, dtype=float) * (1.0 - 1.0 / layers))


def kv_transfer_bytes(kv_bytes_per_token: float, prompt_tokens: np.ndarray,
                      cached_tokens: np.ndarray | None = None) -> np.ndarray:
    """Per-request bytes to move: kv_bytes_per_token × (prompt − cached prefix), never negative."""
    p = np.asarray(prompt_tokens, dtype=float)
    c = np.zeros_like(p) if cached_tokens is None else np.asarray(cached_tokens, dtype=float)
    return float(kv_bytes_per_token) * np.maximum(p - c, 0.0)
