"""The scenario schema: model + workload + SLO + deployment + service-time model.

Everything crossing a boundary (files, CLI, TUI, library callers) is one of these pydantic models.
Fields carry their unit in the name and accept human strings ("500 ms", "400 Gbps").

The base model and shared domains are in :mod:`qmodel.scenario_base`, the pools and deployment
shapes in :mod:`qmodel.scenario_deployment`, the prefix-cache laws in :mod:`qmodel.scenario_prefix`
and the service-time models in :mod:`qmodel.scenario_perf`; this module re-exports them (``__all__``).
What the schema allows and defaults at a dotted path: :mod:`qmodel.scenario_fields`.

Files: YAML, TOML or JSON (:func:`load_scenario`), with ``--set path.to.field=value`` overrides
(:func:`apply_overrides`). Validation failures become one-line :class:`~qmodel.errors.InputError`s
naming the dotted field, the value and what is allowed.
"""

from __future__ import annotations

import copy
import hashlib
import json
import math
from functools import lru_cache
from pathlib import Path
from typing import Annotated, Any, Literal, Union

from pydantic import Field, ValidationError, field_validator

from qmodel.errors import DataError, InputError
from qmodel.inputfiles import MAX_SCENARIO_DEPTH, check_size, read_text, yaml_loader
from qmodel.scenario_base import MAX_PRICE_USD_PER_GPU_HOUR, MAX_RATE_PER_S, MAX_TOKENS, Strict
from qmodel.scenario_prefix import PrefixCache, PrefixMixture, PrefixTraceHashes
from qmodel.scenario_deployment import (ChunkedDeployment, ColocatedDeployment, DecodePool, Deployment,
                                         DisaggregatedDeployment, PoolConfig, PrefillPool)
from qmodel.scenario_perf import FixedPerf, PerfModel, RooflinePerf, TablePerf
from qmodel.units import Count, RatePerSecond, Real, Seconds

__all__ = [
    "error_location",
    "read_scenario_data",
    "resolve_scenario_paths",
    "Strict",
    "PoissonArrivals",
    "GammaArrivals",
    "TraceArrivals",
    "ClosedArrivals",
    "Arrivals",
    "FixedLengths",
    "LognormalLengths",
    "EmpiricalLengths",
    "PresetLengths",
    "Lengths",
    "PrefixCache", "PrefixMixture", "PrefixTraceHashes",
    "Workload",
    "SLO",
    "PoolConfig",
    "PrefillPool",
    "DecodePool",
    "ColocatedDeployment",
    "ChunkedDeployment",
    "DisaggregatedDeployment",
    "Deployment",
    "RooflinePerf",
    "TablePerf",
    "FixedPerf",
    "PerfModel",
    "Scenario",
    "load_scenario",
    "parse_scenario",
    "apply_overrides",
    "scenario_sha256",
]



# ---- workload ----------------------------------------------------------------------------------

class PoissonArrivals(Strict):
    kind: Literal["poisson"] = "poisson"
    rate_per_s: RatePerSecond = Field(gt=0, le=MAX_RATE_PER_S)


class GammaArrivals(Strict):
    """Renewal arrivals with Gamma inter-arrival times; ``cv`` is the coefficient of variation (1 = Poisson)."""

    kind: Literal["gamma"] = "gamma"
    rate_per_s: RatePerSecond = Field(gt=0, le=MAX_RATE_PER_S)
    cv: Real = Field(ge=0.01, le=20)


class TraceArrivals(Strict):
    """Arrival times from a trace file; ``time_scale`` < 1 compresses time (raises the rate)."""

    kind: Literal["trace"] = "trace"
    path: str
    format: Literal["auto", "azure", "mooncake", "splitwise", "vidur", "distserve", "qmodel"] = "auto"
    time_scale: Real = Field(default=1.0, ge=1e-6, le=1e6)
    rate_per_s: RatePerSecond | None = Field(default=None, gt=0, le=MAX_RATE_PER_S,
                                             description="if set, rescale time to this mean rate")
    jitter_seed: Count | None = Field(
        default=None, ge=0, description="spread arrivals uniformly within quantised timestamp slots (Mooncake's ~3 s slots), seeded")


class ClosedArrivals(Strict):
    """A closed loop: ``concurrency`` clients, each sending its next request when its last one has
    finished (its last token), after a think time of mean ``think_time_s`` (exponential or fixed).
    This is how ``vllm bench serve --max-concurrency`` and concurrency sweeps load a server; its
    throughput is an output (docs/methods.md, "Closed-loop workloads")."""

    kind: Literal["closed"] = "closed"
    concurrency: Count = Field(ge=1, le=1_000_000, description="clients, each with one request in flight or thinking")
    think_time_s: Seconds = Field(default=0.0, ge=0, le=1e6, description="mean pause between a reply and the next request")
    think_time_dist: Literal["exponential", "fixed"] = "exponential"


Arrivals = Annotated[Union[PoissonArrivals, GammaArrivals, TraceArrivals, ClosedArrivals], Field(discriminator="kind")]


class FixedLengths(Strict):
    kind: Literal["fixed"] = "fixed"
    prompt_tokens: Count = Field(gt=0, le=MAX_TOKENS)
    output_tokens: Count = Field(gt=0, le=MAX_TOKENS)


class LognormalLengths(Strict):
    """Lognormal prompt and output lengths (median and log-sigma), truncated at the caps."""

    kind: Literal["lognormal"] = "lognormal"
    prompt_median_tokens: Real = Field(ge=1, le=MAX_TOKENS)
    prompt_sigma: Real = Field(ge=0, le=5, description="log-sigma; 5 already spans a factor 1e4 between p1 and p99")
    prompt_max_tokens: Count = Field(default=32768, gt=0, le=MAX_TOKENS)
    output_median_tokens: Real = Field(ge=1, le=MAX_TOKENS)
    output_sigma: Real = Field(ge=0, le=5)
    output_max_tokens: Count = Field(default=4096, gt=0, le=MAX_TOKENS)
    correlation: Real = Field(default=0.0, ge=-1, le=1, description="correlation of log-lengths")


class EmpiricalLengths(Strict):
    """(prompt, output) pairs resampled jointly from a trace, so their correlation is kept."""

    kind: Literal["empirical"] = "empirical"
    path: str
    format: Literal["auto", "azure", "mooncake", "splitwise", "vidur", "distserve", "qmodel", "sharegpt"] = "auto"


class PresetLengths(Strict):
    """A named length mix from the catalog's workload presets (e.g. 'azure-conv-2023')."""

    kind: Literal["preset"] = "preset"
    name: str


Lengths = Annotated[Union[FixedLengths, LognormalLengths, EmpiricalLengths, PresetLengths], Field(discriminator="kind")]


class Workload(Strict):
    OMIT_WHEN_NONE = ("prefix_cache", "max_output_tokens", "context_overflow")  # absent stays absent (same sha256)

    arrivals: Arrivals
    lengths: Lengths
    prefix_hit_ratio: Real = Field(default=0.0, ge=0, lt=1, description="fraction of prompt tokens served from a prefix cache")
    prefix_cache: PrefixCache | None = Field(default=None, description="a hit/miss mixture or the trace's block hashes")
    max_output_tokens: Count | None = Field(
        default=None, ge=1, le=MAX_TOKENS, description="the requests' max_tokens (as `vllm bench` passes it): outputs "
        "longer are cut to it, and a max_tokens KV reservation reserves it; default: the length law's upper support")
    context_overflow: Literal["truncate", "reject"] | None = Field(
        default=None, description="a request whose prompt + output exceeds the context window: truncate (default: "
        "the prompt keeps <= window - 1 tokens, the output what is left) or reject (not served: an SLO miss)")

    @field_validator("prefix_cache")
    @classmethod
    def _one_prefix_law(cls, v: Any, info: Any) -> Any:
        if v is not None and info.data.get("prefix_hit_ratio", 0) > 0:
            raise ValueError("either workload.prefix_hit_ratio or workload.prefix_cache, not both")
        return v


class SLO(Strict):
    """Latency targets. Attainment = P(TTFT <= ttft_s and TPOT <= tpot_s); goodput needs it >= attainment_goal."""

    ttft_s: Seconds = Field(ge=1e-4, le=86400, description="100 us to a day")
    tpot_s: Seconds = Field(ge=1e-5, le=3600, description="10 us to an hour")
    percentile: Real = Field(default=90.0, ge=1, lt=100, description="percentile reported against the targets")
    attainment_goal: Real = Field(default=0.9, ge=0.01, lt=1)
    tpot_definition: Literal["per_interval", "per_token"] | None = Field(
        default=None, description="what tpot_s bounds: per_interval (default) TPOT = (e2e - TTFT)/(L - 1), as vLLM's "
        "bench reports it; per_token TBT = (e2e - TTFT)/L")
    OMIT_WHEN_NONE = ("tpot_definition",)


# ---- deployment: pools and shapes live in qmodel.scenario_deployment (imported above) -----------

# ---- service-time model: qmodel.scenario_perf (imported above) ---------------------------------

class Scenario(Strict):
    name: str = "scenario"
    model: str
    workload: Workload
    slo: SLO
    deployment: Deployment
    perf: PerfModel = Field(default_factory=RooflinePerf)
    prices: dict[str, Annotated[Real, Field(gt=0, le=MAX_PRICE_USD_PER_GPU_HOUR)]] | None = Field(
        default=None, description="USD per GPU-hour by catalog GPU name, replacing the catalog's list price wherever "
                                  "cost is computed (goodput, plan min-cost and budgets, compare), e.g. {h200-sxm: 3.5}")

    @field_validator("name", mode="before")
    @classmethod
    def _date_name(cls, v: Any) -> Any:
        """YAML reads ``name: 2024-01-01`` as a date; a name is its text."""
        import datetime

        return v.isoformat() if isinstance(v, (datetime.date, datetime.time)) else v

    @property
    def rate_per_s(self) -> float | None:
        return getattr(self.workload.arrivals, "rate_per_s", None)

    def with_rate(self, rate_per_s: float) -> "Scenario":
        """The same scenario at another mean arrival rate (trace arrivals get rescaled). A closed loop
        has no rate to set: its throughput follows from its concurrency (:mod:`qmodel.closed`)."""
        if isinstance(self.workload.arrivals, ClosedArrivals):
            raise InputError("workload.arrivals.kind", "closed", "an open arrival kind (poisson, gamma, trace) to set a "
                             "rate; a closed loop's throughput follows from its concurrency")
        arr = self.workload.arrivals.model_copy(update={"rate_per_s": float(rate_per_s)})
        return self.model_copy(update={"workload": self.workload.model_copy(update={"arrivals": arr})})


# ---- loading -----------------------------------------------------------------------------------

def error_location(e: dict[str, Any]) -> str:
    """A pydantic error's location as the dotted scenario path a user writes: pydantic puts the
    discriminated unions' member tags into it ("workload.arrivals.gamma.cv"), left out here."""
    tags = _union_tags()
    return ".".join(str(p) for p in e["loc"] if not (isinstance(p, str) and p in tags))


@lru_cache(maxsize=1)
def _union_tags() -> frozenset[str]:
    """The member tags of the scenario's discriminated unions, read from the schema."""
    from qmodel.scenario_fields import schema_field

    return frozenset(tag for key in ("deployment.topology", "workload.arrivals.kind", "workload.lengths.kind",
                                     "perf.kind") for tag in schema_field(key).choices)


def _first_error_line(err: ValidationError, source: str) -> InputError:
    e = err.errors()[0]
    loc = error_location(e)
    msg = e["msg"].removeprefix("Value error, ")
    value = e.get("input")
    inner = (e.get("ctx") or {}).get("error")
    if isinstance(inner, InputError):  # a unit parser's own message; the location is the full field path
        return InputError(loc or source, inner.value, inner.allowed)
    if e["type"] == "extra_forbidden":
        return InputError(loc, value, "unknown field (check the spelling)")
    if e["type"] == "missing":
        return InputError(loc, None, "this field is required")
    if e["type"] == "union_tag_invalid":
        ctx = e.get("ctx") or {}
        tag = ctx.get("discriminator", "'kind'").strip("'")
        return InputError(f"{loc}.{tag}", ctx.get("tag", value), f"expected one of {ctx.get('expected_tags', '')}")
    return InputError(loc or source, value, msg)


# Discriminator values pydantic puts into error locations; they are not field names.
def parse_scenario(data: dict[str, Any], source: str = "scenario") -> Scenario:
    """Validate a dict into a :class:`Scenario`, raising a one-line :class:`InputError`."""
    try:
        return Scenario.model_validate(data)
    except ValidationError as err:
        raise _first_error_line(err, source) from None


def read_scenario_data(path: Path) -> dict[str, Any]:
    """A scenario file's raw mapping (YAML/TOML/JSON by suffix), before overrides and validation;
    a file that does not parse or is not a mapping is a DataError naming it."""
    text = read_text(path)
    suffix = path.suffix.lower()
    try:
        if suffix in (".yaml", ".yml"):
            import yaml

            data = yaml.load(text, Loader=yaml_loader())
        elif suffix == ".toml":
            import tomllib

            data = tomllib.loads(text)
        elif suffix == ".json":
            data = json.loads(text)
        else:
            raise DataError(str(path), "scenario files must end in .yaml, .yml, .toml or .json")
    except DataError:
        raise
    except RecursionError:
        raise DataError(str(path), f"nested deeper than {MAX_SCENARIO_DEPTH} levels; a scenario is a few levels deep") from None
    except Exception as err:  # each parser has its own exception type; all mean "not parseable"
        first = " ".join(str(err).split()) if str(err) else type(err).__name__
        raise DataError(str(path), f"not valid {suffix[1:].upper()}: {first[:160]}") from None
    if not isinstance(data, dict):
        raise DataError(str(path), "the top level must be a mapping of scenario fields")
    check_size(data, str(path))
    return data


def resolve_scenario_paths(data: dict[str, Any], base: Path) -> None:
    """Make relative trace/table paths relative to the scenario file, not the working directory."""
    from qmodel.settings import resolve_data_path

    def fix(d: Any, where: str) -> None:
        if isinstance(d, dict):
            for k, v in d.items():
                if k == "path" and isinstance(v, str):
                    d[k] = str(resolve_data_path(v, base, field=f"{where}{k}"))
                else:
                    fix(v, f"{where}{k}.")

    fix(data, "")


def _coerce_scalar(text: str) -> Any:
    """``--set`` text as YAML would read it: booleans, null, ints, finite floats; anything else stays text.

    Text naming a non-finite float ('inf', '1e999') stays text, so the field's error echoes what was typed.
    """
    low = text.strip().lower()
    if low in ("true", "false"):
        return low == "true"
    if low in ("null", "none"):
        return None
    try:
        return int(text)
    except ValueError:
        pass
    try:
        x = float(text)
    except ValueError:
        return text
    return x if math.isfinite(x) else text


def apply_overrides(data: dict[str, Any], overrides: list[str]) -> dict[str, Any]:
    """Apply ``a.b.c=value`` overrides to a raw scenario dict (before validation)."""
    out = copy.deepcopy(data)
    for item in overrides:
        if "=" not in item:
            raise InputError("--set", item, "expected path.to.field=value")
        key, raw = item.split("=", 1)
        parts = [p for p in key.strip().split(".") if p]
        if not parts:
            raise InputError("--set", item, "expected path.to.field=value")
        node = out
        for p in parts[:-1]:
            nxt = node.get(p)
            if nxt is None:
                nxt = node[p] = {}
            if not isinstance(nxt, dict):
                raise InputError("--set", item, f"'{p}' is a value, not a section")
            node = nxt
        node[parts[-1]] = _coerce_scalar(raw)
    return out


def load_scenario(path: str | Path, overrides: list[str] | None = None) -> Scenario:
    """Load a scenario file (YAML/TOML/JSON), apply ``--set`` overrides, validate."""
    p = Path(path)
    data = read_scenario_data(p)
    if overrides:
        data = apply_overrides(data, overrides)
    resolve_scenario_paths(data, p.parent)
    data.setdefault("name", p.stem)
    return parse_scenario(data, str(p))


def scenario_sha256(scenario: Scenario) -> str:
    """SHA-256 of the scenario's canonical JSON (sorted keys): identical inputs, identical hash."""
    blob = json.dumps(scenario.model_dump(mode="json"), sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(blob.encode()).hexdigest()
