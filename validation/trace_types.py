"""The in-memory trace every loader produces and every replay consumes."""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field

import numpy as np

__all__ = ["Trace"]


@dataclass(frozen=True)
class Trace:
    """Requests sorted by arrival.

    ``arrival_s`` float64 seconds from the first arrival (starts at 0); ``prompt_tokens`` and
    ``output_tokens`` int64; ``hash_ids`` (Mooncake) is a tuple per request of prefix-block ids
    (``block_tokens`` tokens each) or None; ``sha256`` hashes the source bytes (file traces) or
    the generated arrays (synthetic traces), for result headers.
    """

    arrival_s: np.ndarray
    prompt_tokens: np.ndarray
    output_tokens: np.ndarray
    source: str
    format: str
    sha256: str
    hash_ids: tuple[tuple[int, ...], ...] | None = None
    block_tokens: int = 512
    meta: dict = field(default_factory=dict, compare=False)

    def __post_init__(self) -> None:
        n = len(self.arrival_s)
        if len(self.prompt_tokens) != n or len(self.output_tokens) != n:
            raise ValueError("trace columns differ in length")
        if self.hash_ids is not None and len(self.hash_ids) != n:
            raise ValueError("hash_ids length differs from the trace")

    def __len__(self) -> int:
        return len(self.arrival_s)

    @property
    def duration_s(self) -> float:
        return float(self.arrival_s[-1] - self.arrival_s[0]) if len(self) > 1 else 0.0

    @property
    def rate_per_s(self) -> float:
        return (len(self) - 1) / self.duration_s if self.duration_s > 0 else 0.0

    @staticmethod
    def digest_arrays(*arrays: np.ndarray) -> str:
        h = hashlib.sha256()
        for a in arrays:
            h.update(np.ascontiguousarray(a).tobytes())
        return h.hexdigest()

    def scaled(self, time_scale: float) -> "Trace":
        """Arrival times multiplied by ``time_scale`` (< 1 raises the rate); lengths unchanged."""
        return Trace(self.arrival_s * time_scale, self.prompt_tokens, self.output_tokens, self.source,
                     self.format, self.sha256, self.hash_ids, self.block_tokens,
                     {**self.meta, "time_scale": self.meta.get("time_scale", 1.0) * time_scale})

    def subset(self, keep: np.ndarray) -> "Trace":
        """The requests where ``keep`` is true, in order, at their own arrival times (a thinned trace:
        the requests an engine refuses never arrive at a station)."""
        k = np.asarray(keep, dtype=bool)
        hashes = None if self.hash_ids is None else tuple(h for h, y in zip(self.hash_ids, k) if y)
        return Trace(self.arrival_s[k], self.prompt_tokens[k], self.output_tokens[k], self.source, self.format,
                     self.sha256, hashes, self.block_tokens, {**self.meta, "kept": int(k.sum())})

