"""What qmodel answers, as pydantic models (the JSON of ``qmodel solve`` / ``goodput`` is their dump).

All times are seconds, rates requests per second, bandwidths bytes per second.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_serializer

__all__ = ["DistSummary", "StationReport", "LinkReport", "Sensitivity", "MetricBand", "Validity", "Result", "ClosedLoop",
           "Goodput", "SweepRow", "Sweep", "ConcurrencyRow", "ConcurrencySweep"]


class _Out(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid", defer_build=True)  # schema built on first use


class DistSummary(_Out):
    """Mean and percentiles of a latency, in seconds (JSON keys carry the unit: ``mean_s``, ``p90_s``)."""

    model_config = ConfigDict(frozen=True, extra="forbid", populate_by_name=True)

    mean: float = Field(alias="mean_s")
    p50: float = Field(alias="p50_s")
    p90: float = Field(alias="p90_s")
    p99: float = Field(alias="p99_s")


class StationReport(_Out):
    """One queueing station's state at the solved rate."""

    name: str = Field(description="prefill, kv_transfer, decode, colocated, chunked, ...")
    utilization: float = Field(description="offered load rho in [0, 1)")
    busy_fraction: float | None = Field(
        default=None, description="fraction of time the station's instances are serving, where that differs from "
                                  "utilization (decode: 1 - P(no sequence running), while its utilization is the rate "
                                  "over its stability limit); what the replay meters as its utilization")
    max_stable_rate_per_s: float = Field(description="largest arrival rate this station alone can sustain")
    mean_wait_s: float = 0.0
    p90_wait_s: float = 0.0
    p99_wait_s: float = 0.0
    mean_in_system: float | None = None
    method: str = Field(description="the formula used, e.g. 'M/G[1,b]/1 embedded chain'")
    exact: bool = Field(description="exact for the stated model (True) or an approximation (False)")
    notes: list[str] = Field(default_factory=list)


class LinkReport(_Out):
    bandwidth_needed_bytes_per_s: float = Field(
        description="effective bandwidth (all paths) at which the link's wait + transfer adds at most share_of_target "
                    "of each SLO target to the SLO percentile of TTFT and TPOT (qmodel.binding)")
    bandwidth_available_bytes_per_s: float = Field(description="effective bandwidth of all transfer paths together "
                                                   "(aggregate: paths x bandwidth_per_path_bytes_per_s)")
    link: str | None = Field(default=None, description="the link's catalog name, or the bandwidth string of an anonymous link")
    paths: int | None = Field(default=None, description="transfer paths: one per prefill instance")
    bandwidth_per_path_bytes_per_s: float | None = Field(
        default=None, description="effective bandwidth of one path: nominal_per_path_bytes_per_s x efficiency")
    nominal_per_path_bytes_per_s: float | None = Field(
        default=None, description="nominal bandwidth of one path (the catalog's, or deployment.link_bandwidth_bytes_per_s)")
    efficiency: float | None = Field(default=None, description="the link's achieved fraction of its nominal bandwidth")
    sufficient: bool
    mean_transfer_bytes: float
    mean_exposed_s: float
    mean_byte_rate_bytes_per_s: float | None = Field(default=None, description="KV bytes per second the handoff moves "
                                                     "at this rate (the link is unstable at or below it)")
    share_of_target: float | None = None
    reachable: bool = Field(default=True, description="False when no bandwidth up to 1e4x the available one keeps "
                            "the share (the link's fixed latency alone exceeds it); bandwidth_needed is then that bound")

    def capacity_text(self) -> str:
        """What the link offers, per path and in aggregate, e.g. 'ib-ndr-400: 7 paths (one per prefill
        instance) x 360 Gbps effective (400 Gbps nominal x 0.9) = 2.52 Tbps aggregate'."""
        from qmodel.units import format_bandwidth

        agg = format_bandwidth(self.bandwidth_available_bytes_per_s, bits=True)
        if self.paths is None or self.bandwidth_per_path_bytes_per_s is None:
            return f"{agg} aggregate"
        per = format_bandwidth(self.bandwidth_per_path_bytes_per_s, bits=True)
        nominal = ("" if self.nominal_per_path_bytes_per_s is None or self.efficiency is None else
                   f" ({format_bandwidth(self.nominal_per_path_bytes_per_s, bits=True)} nominal x {self.efficiency:g})")
        return (f"{self.link + ': ' if self.link else ''}{self.paths} path{'s' if self.paths != 1 else ''} (one per "
                f"prefill instance) x {per} effective{nominal} = {agg} aggregate")


class Sensitivity(_Out):
    """Elasticity of goodput to one input: d ln(goodput) / d ln(input), by finite difference."""

    input: str
    #: None where it does not exist (the goodput before the change is zero)
    elasticity: float | None
    note: str = ""


class MetricBand(_Out):
    """The validity band of one metric: the signed relative error (analytic - replay) / replay lies
    in [low, high] for the band's share of the corpus scenarios like this one (qmodel.validity)."""

    metric: Literal["ttft", "tpot"]
    percentile: Literal[50, 90, 99]
    low: float = Field(description="lower end of the band, a fraction (-0.1: the analytic value 10% below the replay's)")
    high: float = Field(description="upper end of the band, a fraction")


class Validity(_Out):
    """Expected agreement with the replay (:mod:`qmodel.validity`): a band per metric, fitted on the
    generated validation corpus, and whether the scenario lies inside what the corpus drew."""

    level: float = Field(description="share of the corpus errors a band holds (0.9: a 90% band)")
    bands: list[MetricBand] = Field(description="one per metric; empty when the corpus has no such scenario")
    cell: str = Field(description="the corpus cell the bands come from, e.g. 'disaggregated/0.8-0.9/bursty'")
    cell_cases: int = Field(description="corpus scenarios in that cell")
    corpus_cases: int = Field(description="corpus scenarios the table was fitted on")
    measured_at: str = Field(description="commit of the corpus run the table comes from")
    inside_envelope: bool = Field(description="False when a feature lies outside what the corpus drew")
    outside: list[str] = Field(default_factory=list, description="the features outside the envelope, with their values")
    text: str = Field(description="the same in one line, as the CLI prints it")


class Result(_Out):
    scenario: str
    topology: Literal["colocated", "chunked", "disaggregated"]
    rate_per_s: float
    ttft: DistSummary
    tpot: DistSummary
    attainment: float = Field(description="P(TTFT <= target and TPOT <= target)")
    attainment_bounds: tuple[float, float] = Field(description="bounds that hold whatever the TTFT/TPOT dependence")
    ttft_attainment: float
    tpot_attainment: float
    stations: list[StationReport]
    binding: str = Field(description="which station and SLO limits attainment, in words")
    link: LinkReport | None = None
    gpus: int
    inputs_sha256: str
    perf_sha256: dict[str, str] = Field(default_factory=dict)
    validity: Validity | None = Field(default=None, description="expected agreement with the replay: an error band "
                                      "per metric fitted on the validation corpus, and the envelope flag")
    warnings: list[str] = Field(default_factory=list)
    tbt: DistSummary | None = Field(default=None, description="TBT = (e2e - TTFT)/L over requests of L >= 2 tokens "
                                    "(qmodel.tbt), shown when the scenario sets slo.tpot_definition")
    rejected_fraction: float | None = Field(default=None, description="share of offered requests refused for "
                                            "exceeding the context window (counted as SLO misses); absent when none")

    @model_serializer(mode="wrap")
    def _omit_unset(self, handler: Any):  # unannotated: the JSON Schema stays the fields' (an Any return would erase it)
        """Fields added later stay out of the JSON while unset, so unchanged scenarios answer byte-identically."""
        out = handler(self)
        for name in ("tbt", "rejected_fraction"):
            if getattr(self, name) is None and isinstance(out, dict):
                out.pop(name, None)
        return out


class ClosedLoop(_Out):
    """A closed loop's own answer (:mod:`qmodel.closed`): its throughput, and the open rate whose
    solve gives its latencies (the accompanying :class:`Result` is that solve)."""

    concurrency: int
    think_time_s: float
    think_time_dist: Literal["exponential", "fixed"]
    throughput_per_s: float = Field(description="X(N): requests completed per second")
    seen_rate_per_s: float = Field(description="the open rate whose solve gives the latencies: X (N - 1)/N, or at "
                                               "saturation the rate whose mean latency is N/X - Z")
    mean_latency_s: float = Field(description="mean end-to-end latency, E[TTFT] + E[L - 1] E[TPOT]")
    saturated: bool = Field(description="X is the stability limit: the deployment never idles")
    max_stable_rate_per_s: float


class Goodput(_Out):
    scenario: str
    topology: Literal["colocated", "chunked", "disaggregated"]
    goodput_rps: float
    goodput_per_gpu: float
    goodput_per_usd_hour: float | None = None
    attainment_at_goodput: float
    max_stable_rate_per_s: float
    binding: str
    gpus: int
    cost_per_hour_usd: float | None = Field(default=None, description="GPU price x GPUs (qmodel.cost); null if a GPU has no price")
    usd_per_million_input_tokens: float | None = Field(default=None, description="cost per hour / prompt tokens per hour at goodput, x 1e6")
    usd_per_million_output_tokens: float | None = Field(default=None, description="cost per hour / output tokens per hour at goodput, x 1e6")
    usd_per_million_tokens: float | None = Field(default=None, description="cost per hour / (prompt + output) tokens per hour at goodput, x 1e6")
    sensitivities: list[Sensitivity] = Field(default_factory=list)
    validity: Validity | None = Field(default=None, description="the validity band at the goodput rate (as in solve)")
    closed_loop: ClosedLoop | None = Field(default=None, description="closed-loop arrivals: the most clients meeting the "
                                           "goal (goodput_rps is their throughput); null for open arrivals")
    inputs_sha256: str


class SweepRow(_Out):
    """One rate of a sweep. An unstable rate (``stable`` False) or one too near saturation to solve has
    zero attainment and null latencies, with the reason in ``note``; never NaN."""

    rate_per_s: float
    attainment: float
    ttft_attainment: float | None = None
    tpot_attainment: float | None = None
    ttft_p50_s: float | None = None
    ttft_p90_s: float | None = None
    ttft_p99_s: float | None = None
    tpot_p50_s: float | None = None
    tpot_p90_s: float | None = None
    tpot_p99_s: float | None = None
    stable: bool = True
    note: str = ""


class Sweep(_Out):
    scenario: str
    mode: Literal["analytic", "replay"]
    rows: list[SweepRow]


class ConcurrencyRow(SweepRow):
    """One concurrency of a closed-loop sweep (``qmodel sweep --concurrency``): the latency columns are a
    sweep row's, ``rate_per_s`` the rate they are read at (analytic: the rate a request sees,
    :class:`ClosedLoop`; replay: the measured arrival rate), ``throughput_per_s`` X(N)."""

    concurrency: int
    think_time_s: float
    throughput_per_s: float
    saturated: bool = False


class ConcurrencySweep(_Out):
    scenario: str
    mode: Literal["analytic", "replay"]
    rows: list[ConcurrencyRow]
