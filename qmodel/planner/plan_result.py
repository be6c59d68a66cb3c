"""What ``qmodel plan`` answers, as pydantic models (the ``--json`` output is their dump).

Rates are requests per second, times seconds, power watts, money US dollars per hour. For
colocated and chunked plans ``prefill`` is null and ``decode`` describes the one pool.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

__all__ = ["PoolOut", "PlanRow", "CheckRow", "PlanCheck", "SearchStats", "PlanResult", "PeriodPlan", "ScheduleResult",
           "Objective"]

Objective = Literal["min-gpus", "min-cost", "max-goodput"]


class _Out(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid", populate_by_name=True)


class PoolOut(_Out):
    gpu: str
    tp: int
    instances: int
    gpus: int


class PlanRow(_Out):
    """One ranked plan with its numbers at the SLO."""

    rank: int
    topology: Literal["colocated", "chunked", "disaggregated"]
    label: str
    prefill: PoolOut | None
    decode: PoolOut
    link: str | None = None
    link_path_bandwidth_bytes_per_s: float | None = Field(
        default=None, description="effective bandwidth of one KV transfer path (one per prefill instance): nominal x "
                                  "the link's efficiency; the aggregate is that x prefill instances")
    transfer_mode: str | None = None
    chunk_tokens: int | None = None
    gpus: int
    power_w: float = Field(description="GPU board power (TDP x GPUs); hosts and network not included")
    cost_per_hour: float | None = Field(alias="cost_per_hour_usd",
                                        description="list price of the GPUs, USD per hour; null if a GPU has no price")
    goodput_rps: float = Field(description="largest rate meeting the SLO attainment goal")
    goodput_per_gpu: float
    goodput_per_usd_hour: float | None = None
    usd_per_million_input_tokens: float | None = Field(
        default=None, description="cost_per_hour / (goodput x mean prompt tokens x 3600) x 1e6 (qmodel.cost)")
    usd_per_million_output_tokens: float | None = Field(
        default=None, description="cost_per_hour / (goodput x mean output tokens x 3600) x 1e6: the price of tokens served at the SLO")
    usd_per_million_tokens: float | None = Field(
        default=None, description="cost_per_hour / (goodput x mean (prompt + output) tokens x 3600) x 1e6")
    rate_per_s: float = Field(description="the rate at which attainment, latencies and binding are reported (target, else goodput)")
    attainment: float
    ttft_p90_s: float
    tpot_p90_s: float
    max_stable_rate_per_s: float
    knee_rps: float | None = Field(default=None, description="rate where the binding percentile reaches twice its "
                                                            "near-idle value (null when not computed: --no-knee)")
    headroom_to_knee: float | None = Field(default=None, description="knee_rps / rate_per_s - 1 (negative: past the knee)")
    binding: str
    validity: str
    pareto: bool = Field(default=False, description="not dominated in (goodput per GPU up, p90 TTFT down, p90 TPOT down)")


class CheckRow(_Out):
    rank: int
    label: str
    rate_per_s: float
    analytic_attainment: float
    replay_attainment: float
    analytic_ttft_p90_s: float
    replay_ttft_p90_s: float
    analytic_tpot_p90_s: float
    replay_tpot_p90_s: float
    ttft_p90_rel_diff: float
    tpot_p90_rel_diff: float


class PlanCheck(_Out):
    """``--check K``: the top K plans replayed at one common rate and compared with the analytic numbers."""

    k: int
    rate_per_s: float
    n_requests: int
    seed: int
    kendall_tau: float | None = Field(description="rank agreement of attainment (analytic vs replay); null if undefined (ties)")
    kendall_p_value: float | None = None
    rows: list[CheckRow]
    summary: str


class SearchStats(_Out):
    candidates: int = Field(description="plans in the search space (every instance count of every configuration)")
    families: int = Field(description="configurations (plans without instance counts)")
    pruned: dict[str, int] = Field(description="candidates not kept for ranking, by reason (candidates = sum of these + feasible)")
    solves: int = Field(description="attainment evaluations (one queueing solve each)")
    feasible: int = Field(description="feasible plans kept for ranking (instance-minimal ones for min objectives)")
    seconds: float = Field(description="wall time of the whole plan() call")
    search_seconds: float = Field(default=0.0, description="enumeration, bounds and boundary walk")
    rank_seconds: float = Field(default=0.0, description="goodput, latencies and knee of the ranked plans")
    executor: str


class PlanResult(_Out):
    scenario: str
    model: str
    objective: Objective
    target_rate_per_s: float | None
    budget: dict[str, float] = Field(default_factory=dict)
    attainment_goal: float
    plans: list[PlanRow]
    stats: SearchStats
    check: PlanCheck | None = None
    serving_config: dict | None = Field(default=None, description="launch commands for the best plan")
    notes: list[str] = Field(default_factory=list)

    @property
    def best(self) -> PlanRow | None:
        return self.plans[0] if self.plans else None

    @property
    def pareto(self) -> list[PlanRow]:
        return [p for p in self.plans if p.pareto]


class PeriodPlan(_Out):
    period: int
    rate_per_s: float
    hours: float
    label: str | None
    gpus: int
    cost_per_hour: float | None = Field(alias="cost_per_hour_usd")


class ScheduleResult(_Out):
    """A plan per period of a rate curve, against provisioning every period for the peak."""

    objective: Objective
    periods: list[PeriodPlan]
    gpu_hours: float
    peak_gpu_hours: float
    gpu_hours_saved: float
    saved_fraction: float
    cost: float | None = None
    peak_cost: float | None = None
    notes: list[str] = Field(default_factory=list)
