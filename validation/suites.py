"""Validation suites: which scenarios ``qmodel validate`` runs through both the analytical engine and the replay.

A suite is data: a list of :class:`Config` (model, GPUs, topology, length mix, SLO) crossed with
arrival processes and utilizations. Utilization is defined as

    u = rate / Solver(scenario).max_stable_rate()[0]

i.e. the arrival rate as a fraction of the smallest per-station stability limit the analytical
engine computes (prefill batching, link, decode KV/slots, single-pool work). The replay is run at
the same absolute rate, so a replay that saturates below u = 1 shows up as a latency error.

Suites:

* ``quick``: four scenarios (one per topology, plus Gamma arrivals) at moderate load, short
  replays; what CI runs.
* ``snapshot``: three fixed scenarios at u = 0.5 with fixed short replays (syrupy snapshots).
* ``full`` (the default): six configurations spanning the three topologies, five models and four
  GPUs, Poisson and Gamma(CV=2) arrivals, Azure 2023 conversation and code length mixes
  (empirical from the traces when the data folder exists, else the catalog presets), at
  u in {0.3, 0.5, 0.7, 0.8, 0.9, 0.95}: 72 scenarios plus 12 goodput comparisons.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from qmodel.errors import InputError
from qmodel.scenario import Scenario, parse_scenario

__all__ = ["Config", "Case", "Suite", "SUITES", "UTILIZATIONS", "ARRIVALS", "get_suite", "length_source"]

UTILIZATIONS: tuple[float, ...] = (0.3, 0.5, 0.7, 0.8, 0.9, 0.95)
# name -> the arrivals block without its rate (the harness sets the rate from the utilization)
ARRIVALS: dict[str, dict[str, Any]] = {"poisson": {"kind": "poisson"}, "gamma-cv2": {"kind": "gamma", "cv": 2.0}}

# Azure 2023 traces: the length mix is taken from the file when the data folder exists.
_TRACE_FILES = {"azure-conv-2023": "data:azure_llm_2023/AzureLLMInferenceTrace_conv.csv",
                "azure-code-2023": "data:azure_llm_2023/AzureLLMInferenceTrace_code.csv"}


def length_source(mix: str, empirical: bool | None = None) -> dict[str, Any]:
    """The lengths block for a named Azure mix: empirical from the trace file when the data
    folder exists (or ``empirical`` is True), else the catalog preset of the same name."""
    if empirical is None:
        from qmodel.settings import data_dir

        empirical = data_dir() is not None
    if empirical and mix in _TRACE_FILES:
        return {"kind": "empirical", "path": _TRACE_FILES[mix], "format": "azure"}
    return {"kind": "preset", "name": mix}


@dataclass(frozen=True)
class Config:
    """One deployment + workload shape; the suite crosses it with arrivals and utilizations."""

    name: str
    model: str
    deployment: dict[str, Any]
    mix: str  # an Azure length mix name (azure-conv-2023 / azure-code-2023)
    slo: dict[str, Any]
    perf: dict[str, Any] = field(default_factory=lambda: {"kind": "roofline"})

    @property
    def topology(self) -> str:
        return str(self.deployment["topology"])

    @property
    def gpus(self) -> list[str]:
        d = self.deployment
        from qmodel.topology import TOPOLOGIES

        pools = [d[role] for role in TOPOLOGIES[self.topology].pool_roles]
        return sorted({p["gpu"] for p in pools})

    def scenario(self, arrivals: str, rate_per_s: float = 1.0, empirical: bool | None = None) -> Scenario:
        if arrivals not in ARRIVALS:
            raise InputError("arrivals", arrivals, "one of " + ", ".join(ARRIVALS))
        arr = dict(ARRIVALS[arrivals], rate_per_s=float(rate_per_s))
        return parse_scenario({"name": f"{self.name}/{arrivals}", "model": self.model,
                               "workload": {"arrivals": arr, "lengths": length_source(self.mix, empirical)},
                               "slo": self.slo, "deployment": self.deployment, "perf": self.perf},
                              source=f"suite config {self.name}")


@dataclass(frozen=True)
class Case:
    """One scenario of a suite: a config, an arrival process and a utilization."""

    config: Config
    arrivals: str
    utilization: float

    @property
    def name(self) -> str:
        return f"{self.config.name}/{self.arrivals}/u{self.utilization:g}"


@dataclass(frozen=True)
class Suite:
    """Cases, which (config, arrivals) pairs get a goodput comparison, and replay run lengths.

    Replay length per case follows the relaxation time of a queue (Whitt, "Planning queueing simulations", Management Science 35 (1989)): n = base_requests / (1 - u)^2, clipped
    to [min_requests, max_requests] (waiting times are autocorrelated over ~1/(1-u)^2 arrivals),
    with the first 10% of the trace cut as warm-up; two seeds give the replay's own noise.
    """

    name: str
    cases: tuple[Case, ...]
    goodput: tuple[tuple[Config, str], ...] = ()
    base_requests: int = 1000
    min_requests: int = 2000
    max_requests: int = 40000
    goodput_requests: int = 10000
    seeds: tuple[int, ...] = (0, 1)
    fixed_requests: int | None = None  # snapshot suite: one fixed length regardless of u
    empirical: bool | None = None  # None: empirical lengths when the data folder exists

    def n_requests(self, utilization: float) -> int:
        if self.fixed_requests is not None:
            return self.fixed_requests
        n = self.base_requests / max(1.0 - utilization, 1e-3) ** 2
        return int(min(max(n, self.min_requests), self.max_requests))


# ---- configurations ------------------------------------------------------------------------------

_SLO_SMALL = {"ttft_s": "1 s", "tpot_s": "50 ms", "attainment_goal": 0.9}
_SLO_LARGE = {"ttft_s": "2 s", "tpot_s": "100 ms", "attainment_goal": 0.9}

CONFIGS: dict[str, Config] = {c.name: c for c in [
    Config("colocated-llama8b-h100", "llama-3.1-8b",
           {"topology": "colocated", "pool": {"gpu": "h100-sxm", "tp": 1, "instances": 2}, "max_batch_tokens": 8192},
           "azure-conv-2023", _SLO_SMALL),
    Config("colocated-qwen32b-h200", "qwen2.5-32b",
           {"topology": "colocated", "pool": {"gpu": "h200-sxm", "tp": 1, "instances": 2}, "max_batch_tokens": 8192},
           "azure-code-2023", _SLO_LARGE),
    Config("chunked-llama8b-h100", "llama-3.1-8b",
           {"topology": "chunked", "pool": {"gpu": "h100-sxm", "tp": 1, "instances": 2}, "chunk_tokens": 1024},
           "azure-code-2023", _SLO_SMALL),
    Config("chunked-mistral7b-l40s", "mistral-7b",
           {"topology": "chunked", "pool": {"gpu": "l40s", "tp": 1, "instances": 2}, "chunk_tokens": 1024},
           "azure-conv-2023", _SLO_LARGE),
    Config("disagg-llama70b-h100", "llama-3.1-70b",
           {"topology": "disaggregated", "prefill": {"gpu": "h100-sxm", "tp": 4, "instances": 2},
            "decode": {"gpu": "h100-sxm", "tp": 4, "instances": 2}, "link": "roce-4x200",
            "link_sharing": "fcfs", "transfer_mode": "layerwise"},
           "azure-conv-2023", _SLO_LARGE),
    Config("disagg-qwen7b-a100", "qwen2.5-7b",
           {"topology": "disaggregated", "prefill": {"gpu": "a100-80gb-sxm", "tp": 1, "instances": 2},
            "decode": {"gpu": "a100-80gb-sxm", "tp": 1, "instances": 1}, "link": "pcie-gen4-x16",
            "link_sharing": "fcfs", "transfer_mode": "serialized"},
           "azure-code-2023", _SLO_SMALL),
]}


def _full() -> Suite:
    cases = tuple(Case(c, a, u) for c in CONFIGS.values() for a in ARRIVALS for u in UTILIZATIONS)
    # 2000/(1-u)^2 requests up to 100k: at u = 0.9 that is 100k requests, ~5% relative noise on p99
    return Suite("full", cases, goodput=tuple((c, a) for c in CONFIGS.values() for a in ARRIVALS),
                 base_requests=2000, min_requests=4000, max_requests=100000, goodput_requests=20000)


def _quick() -> Suite:
    c = CONFIGS
    cases = (Case(c["colocated-llama8b-h100"], "poisson", 0.5), Case(c["chunked-llama8b-h100"], "gamma-cv2", 0.7),
             Case(c["disagg-llama70b-h100"], "poisson", 0.8), Case(c["disagg-qwen7b-a100"], "gamma-cv2", 0.5))
    # presets, not trace files, so CI gives the same numbers with or without the data folder
    return Suite("quick", cases, goodput=((c["disagg-llama70b-h100"], "poisson"),), base_requests=600,
                 min_requests=1500, max_requests=6000, goodput_requests=3000, empirical=False)


def _snapshot() -> Suite:
    c = CONFIGS
    cases = (Case(c["colocated-llama8b-h100"], "poisson", 0.5), Case(c["chunked-llama8b-h100"], "poisson", 0.5),
             Case(c["disagg-qwen7b-a100"], "poisson", 0.5))
    return Suite("snapshot", cases, fixed_requests=1500, seeds=(0,), empirical=False)


SUITES = {"quick": _quick, "full": _full, "snapshot": _snapshot}


def get_suite(name: str) -> Suite:
    if name not in SUITES:
        raise InputError("--suite", name, "one of " + ", ".join(SUITES))
    return SUITES[name]()
