"""What the replay returns (``qmodel replay --json`` is its dump).

Metric fields use the names and shapes of :class:`qmodel.result.Result` (``ttft``/``tpot`` as
{mean, p50, p90, p99}, ``attainment``, ``stations`` with ``name``/``utilization``/...), so the
validation harness can compare the two field by field. The header records what determines the
numbers: SHA-256 of the trace, of each service-time model and of the scenario, plus seed and
run length. Nothing depends on the wall clock: the same inputs give byte-identical JSON.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_serializer

from qmodel.result import DistSummary

__all__ = ["ReplayHeader", "ReplayStation", "Conservation", "Precision", "ReplayResult"]


class _Out(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class ReplayHeader(_Out):
    scenario: str
    scenario_sha256: str
    trace_sha256: str
    trace_source: str
    perf_sha256: dict[str, str]
    seed: int
    n_requests: int
    warmup_fraction: float
    engine: str = Field(default="qmodel-replay/1", description="replay engine and semantics version")
    assumptions: list[str] = Field(default_factory=list)


class ReplayStation(_Out):
    """One station measured over the window after warm-up (time averages) and its requests."""

    name: str
    utilization: float = Field(description="busy server-time / (window x servers); for continuous-batching "
                               "decode this is the fraction of time with any sequence running, not a capacity load; "
                               "for a link, the transmitting fraction (bytes / (bandwidth x window x paths); with a dedicated "
                               "link, the mean number of concurrent transfers per path)")
    mean_in_system: float = Field(description="time-average number of requests in the station")
    mean_wait_s: float = Field(description="mean time from entering the station to starting service")
    p90_wait_s: float
    p99_wait_s: float
    mean_sojourn_s: float
    throughput_rps: float = Field(description="requests that entered the station per second of window")
    little_rel_error: float = Field(description="Little's law on the sample path: |L T - sum of sojourns clipped to "
                                    "the window| / (L T), T the window; exact at any run length, so above 1e-9 "
                                    "(round-off) it is a replay bug")
    servers: int
    mean_batch: float | None = Field(default=None, description="prefill: requests per batch; decode engines: "
                                     "sequences per decode step (whole run)")
    kv_utilization: float | None = Field(default=None, description="time-average reserved KV / KV capacity")
    notes: list[str] = Field(default_factory=list)


class Conservation(_Out):
    arrived: int
    completed: int
    dropped: int = Field(description="requests that can never fit one instance's KV memory")
    unfinished: int = Field(description="requests still in the system when the event list emptied (0 unless deadlocked)")
    measured: int = Field(description="completed requests arriving after warm-up (the statistics' sample)")
    little_max_rel_error: float = Field(description="largest station little_rel_error (tolerance 1e-9, any run length)")


class Precision(_Out):
    """Standard errors of the replay's own estimates, by batch means over 20 consecutive groups of
    measured requests (arrival order): what a difference from the analytical answer must exceed
    to mean anything. Batch means understate the SE when correlations outlast a batch (high load)."""

    batches: int
    ttft_mean_se_s: float
    tpot_mean_se_s: float
    attainment_se: float


class ReplayResult(_Out):
    header: ReplayHeader
    scenario: str
    topology: Literal["colocated", "chunked", "disaggregated"]
    rate_per_s: float = Field(description="measured arrival rate over the trace")
    ttft: DistSummary
    tpot: DistSummary
    e2e: DistSummary
    attainment: float = Field(description="fraction of measured requests with TTFT <= target and TPOT <= target (jointly)")
    ttft_attainment: float
    tpot_attainment: float
    throughput_rps: float
    output_tokens_per_s: float
    stations: list[ReplayStation]
    conservation: Conservation
    precision: Precision
    gpus: int
    horizon_s: float
    events: int
    warnings: list[str] = Field(default_factory=list)
    rejected_fraction: float | None = Field(default=None, description="share of the offered requests refused for "
                                            "exceeding the context window (workload.context_overflow = reject); "
                                            "the attainments count them as misses; absent when none")
    tbt: DistSummary | None = Field(default=None, description="TBT = (e2e - TTFT)/L over the requests with L >= 2 "
                                    "(shown when the scenario sets slo.tpot_definition)")

    @model_serializer(mode="wrap")
    def _omit_unset(self, handler: Any):  # unannotated: the JSON Schema stays the fields' (an Any return would erase it)
        out = handler(self)
        for name in ("rejected_fraction", "tbt"):
            if getattr(self, name) is None and isinstance(out, dict):
                out.pop(name, None)
        return out
