"""Catalog links: a data path for KV transfer or tensor-parallel collectives, and the anonymous link a
bandwidth string in a scenario stands for."""

from __future__ import annotations

import re
from typing import Literal

from pydantic import Field

from qmodel.errors import InputError
from qmodel.frozen import Frozen
from qmodel.units import BytesPerSecond, Seconds, format_bandwidth, parse_bandwidth

__all__ = ["LinkSpec", "ANONYMOUS_LINK_EFFICIENCY", "ANONYMOUS_LINK_LATENCY_S", "LINK_BANDWIDTH_RANGE_BYTES_PER_S",
           "anonymous_link", "is_bandwidth_text"]


class LinkSpec(Frozen):
    """A data path for KV transfer or tensor-parallel collectives.

    ``bandwidth_bytes_per_s`` is nominal per direction for the whole path (for a multi-NIC aggregate,
    all NICs together); ``efficiency`` is the achievable fraction (e.g. Mooncake: 87 GB/s measured
    on 4 x 200 Gbps = 100 GB/s nominal -> 0.87).
    """

    name: str
    kind: Literal["nvlink", "pcie", "infiniband", "roce", "ethernet", "wan", "other"]
    source: str
    bandwidth_bytes_per_s: BytesPerSecond = Field(gt=0)
    latency_s: Seconds = Field(ge=0)
    efficiency: float = Field(gt=0, le=1)
    nics: int = Field(default=1, ge=1, description="NICs aggregated in bandwidth_bytes_per_s")

    @property
    def effective_bandwidth_bytes_per_s(self) -> float:
        return self.bandwidth_bytes_per_s * self.efficiency


#: an anonymous link (``link: "400 Gbps"``) achieves the bandwidth as written ...
ANONYMOUS_LINK_EFFICIENCY = 1.0
#: ... with no fixed per-transfer latency; name a catalog link for measured figures
ANONYMOUS_LINK_LATENCY_S = 0.0
#: the bandwidths a scenario may state for a link path (1 MB/s .. 100 TB/s)
LINK_BANDWIDTH_RANGE_BYTES_PER_S = (1e6, 1e14)

_NUMERIC_START = re.compile(r"\s*[-+]?(\d|\.\d)")


def is_bandwidth_text(name: object) -> bool:
    """Whether a link field holds a bandwidth (it starts with a number) rather than a catalog name."""
    return isinstance(name, str) and _NUMERIC_START.match(name) is not None


def anonymous_link(text: object, field: str = "deployment.link") -> LinkSpec:
    """The link a bandwidth string stands for: one transfer path of that nominal bandwidth,
    efficiency :data:`ANONYMOUS_LINK_EFFICIENCY`, latency :data:`ANONYMOUS_LINK_LATENCY_S`.
    A string that is not a bandwidth in range raises one InputError naming ``field``."""
    bw = parse_bandwidth(text, field)
    lo, hi = LINK_BANDWIDTH_RANGE_BYTES_PER_S
    if not lo <= bw <= hi:
        raise InputError(field, text, f"a bandwidth per transfer path from {format_bandwidth(lo)} to "
                                      f"{format_bandwidth(hi)}, e.g. '400 Gbps', or a catalog link name")
    name = text.strip() if isinstance(text, str) else format_bandwidth(bw, bits=True)
    return LinkSpec(name=name, kind="other", source="anonymous link from the scenario (bandwidth as written, "
                    f"efficiency {ANONYMOUS_LINK_EFFICIENCY:g}, latency {ANONYMOUS_LINK_LATENCY_S:g} s)",
                    bandwidth_bytes_per_s=bw, latency_s=ANONYMOUS_LINK_LATENCY_S, efficiency=ANONYMOUS_LINK_EFFICIENCY)
