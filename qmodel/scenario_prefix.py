"""The scenario's prefix-cache law (``workload.prefix_cache``): a stated hit/miss mixture, or the
trace's own block hashes. Absent, ``workload.prefix_hit_ratio`` (a uniform ratio) applies as before.

The laws themselves (who hits, how much, the LRU) live in :mod:`qmodel.prefix_cache`, shared by
the solver and the replay; docs/methods.md, "Prefix-cache hits", states them.
"""

from __future__ import annotations

from typing import Annotated, Literal, Union

from pydantic import Field

from qmodel.scenario_base import Strict
from qmodel.units import Real

__all__ = ["PrefixCache", "PrefixMixture", "PrefixTraceHashes"]


class PrefixMixture(Strict):
    """A fraction ``hit_fraction`` of the requests find ``hit_ratio`` of their prompt cached; the
    rest compute it whole (a multi-turn workload: first turns miss, later turns hit)."""

    kind: Literal["mixture"] = "mixture"
    hit_fraction: Real = Field(ge=0, le=1, description="fraction of requests that hit the prefix cache")
    hit_ratio: Real = Field(ge=0, lt=1, description="fraction of a hitting request's prompt served from the cache")


class PrefixTraceHashes(Strict):
    """Each request's cached prefix from the trace's block hashes (Mooncake ``hash_ids``) through a
    per-instance LRU as large as the instance's KV memory (:func:`qmodel.prefix_cache.cache_blocks`)."""

    kind: Literal["trace_hashes"] = "trace_hashes"


PrefixCache = Annotated[Union[PrefixMixture, PrefixTraceHashes], Field(discriminator="kind")]
