"""The scenario schema: model + workload + SLO + deployment + service-time model.

Everything crossing a boundary (files, CLI, TUI, library callers) is one of these pydantic models.
Fields carry their unit in the name and accept human strings ("500 ms", "400 Gbps").

Files: YAML, TOML or JSON (:func:`load_scenario`), with ``--set path.to.field=value`` overrides
(:func:`apply_overrides`). Validation failures become one-line :class:`~qmodel.errors.InputError`s
naming the dotted field, the value and what is allowed.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Annotated, Any, Literal, Union

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from qmodel.errors import DataError, InputError
from qmodel.units import BytesPerSecond, RatePerSecond, Seconds

__all__ = [
    "Strict",
    "PoissonArrivals",
    "GammaArrivals",
    "TraceArrivals",
    "Arrivals",
    "FixedLengths",
    "LognormalLengths",
    "EmpiricalLengths",
    "PresetLengths",
    "Lengths",
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


class Strict(BaseModel):
    """Scenario parts: unknown keys are errors (a typo must never be silently ignored)."""

    model_config = ConfigDict(extra="forbid", frozen=True, validate_default=True)


# ---- workload ----------------------------------------------------------------------------------

class PoissonArrivals(Strict):
    kind: Literal["poisson"] = "poisson"
    rate_per_s: RatePerSecond = Field(gt=0)


class GammaArrivals(Strict):
    """Renewal arrivals with Gamma inter-arrival times; ``cv`` is the coefficient of variation (1 = Poisson)."""

    kind: Literal["gamma"] = "gamma"
    rate_per_s: RatePerSecond = Field(gt=0)
    cv: float = Field(gt=0, le=20)


class TraceArrivals(Strict):
    """Arrival times from a trace file; ``time_scale`` < 1 compresses time (raises the rate)."""

    kind: Literal["trace"] = "trace"
    path: str
    format: Literal["auto", "azure", "mooncake", "splitwise", "vidur", "distserve", "qmodel"] = "auto"
    time_scale: float = Field(default=1.0, gt=0)
    rate_per_s: RatePerSecond | None = Field(default=None, gt=0, description="if set, rescale time to this mean rate")
    jitter_seed: int | None = Field(
        default=None, ge=0, description="spread arrivals uniformly within quantised timestamp slots (Mooncake's ~3 s slots), seeded")


Arrivals = Annotated[Union[PoissonArrivals, GammaArrivals, TraceArrivals], Field(discriminator="kind")]


class FixedLengths(Strict):
    kind: Literal["fixed"] = "fixed"
    prompt_tokens: int = Field(gt=0)
    output_tokens: int = Field(gt=0)


class LognormalLengths(Strict):
    """Lognormal prompt and output lengths (median and log-sigma), truncated at the caps."""

    kind: Literal["lognormal"] = "lognormal"
    prompt_median_tokens: float = Field(gt=0)
    prompt_sigma: float = Field(ge=0)
    prompt_max_tokens: int = Field(default=32768, gt=0)
    output_median_tokens: float = Field(gt=0)
    output_sigma: float = Field(ge=0)
    output_max_tokens: int = Field(default=4096, gt=0)
    correlation: float = Field(default=0.0, ge=-1, le=1, description="correlation of log-lengths")


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
    arrivals: Arrivals
    lengths: Lengths
    prefix_hit_ratio: float = Field(default=0.0, ge=0, lt=1, description="fraction of prompt tokens served from a prefix cache")


class SLO(Strict):
    """Latency targets. Attainment = P(TTFT <= ttft_s and TPOT <= tpot_s); goodput needs it >= attainment_goal."""

    ttft_s: Seconds = Field(gt=0)
    tpot_s: Seconds = Field(gt=0)
    percentile: float = Field(default=90.0, gt=0, lt=100, description="percentile reported against the targets")
    attainment_goal: float = Field(default=0.9, gt=0, lt=1)


# ---- deployment --------------------------------------------------------------------------------

class PoolConfig(Strict):
    gpu: str
    tp: int = Field(default=1, ge=1, le=64)
    pp: int = Field(default=1, ge=1, le=64)
    instances: int = Field(default=1, ge=1, le=100000)

    @property
    def gpus(self) -> int:
        return self.tp * self.pp * self.instances


class PrefillPool(PoolConfig):
    max_batch_tokens: int = Field(default=8192, ge=1, description="token budget of one prefill batch")
    dispatch: Literal["random", "round_robin", "least_loaded"] = "round_robin"


class DecodePool(PoolConfig):
    kv_memory_fraction: float = Field(default=0.9, gt=0, le=1, description="fraction of memory left after weights given to KV")
    max_batch: int = Field(default=256, ge=1, description="max concurrent sequences per instance")
    dispatch: Literal["random", "round_robin", "least_loaded"] = "least_loaded"


class ColocatedDeployment(Strict):
    """Each instance does prefill and decode (vLLM-like, prefill-priority iterations)."""

    topology: Literal["colocated"] = "colocated"
    pool: DecodePool
    max_batch_tokens: int = Field(default=8192, ge=1, description="token budget of a prefill iteration")

    @property
    def gpus(self) -> int:
        return self.pool.gpus


class ChunkedDeployment(Strict):
    """Sarathi-style chunked prefill: every iteration mixes decode tokens and prefill chunks under a budget."""

    topology: Literal["chunked"] = "chunked"
    pool: DecodePool
    chunk_tokens: int = Field(default=512, ge=16, description="per-iteration token budget (decode tokens + prefill chunk)")

    @property
    def gpus(self) -> int:
        return self.pool.gpus


class DisaggregatedDeployment(Strict):
    """Separate prefill and decode pools joined by a KV-transfer link (one link path per prefill instance)."""

    topology: Literal["disaggregated"] = "disaggregated"
    prefill: PrefillPool
    decode: DecodePool
    link: str = Field(description="catalog link name, e.g. 'ib-ndr-400'")
    link_sharing: Literal["dedicated", "fcfs", "fair"] = Field(
        default="fcfs", description="dedicated: no contention; fcfs: one transfer at a time per link; fair: concurrent transfers share it")
    transfer_mode: Literal["serialized", "layerwise"] = "layerwise"
    link_bandwidth_bytes_per_s: BytesPerSecond | None = Field(
        default=None, gt=0, description="override the catalog link's nominal bandwidth (what-if), e.g. '200 Gbps'")
    first_token_from: Literal["prefill", "decode"] = Field(
        default="prefill", description="whether TTFT ends at the prefill pass or at the first decode step")

    @property
    def gpus(self) -> int:
        return self.prefill.gpus + self.decode.gpus


Deployment = Annotated[Union[ColocatedDeployment, ChunkedDeployment, DisaggregatedDeployment], Field(discriminator="topology")]


# ---- service-time model ------------------------------------------------------------------------

class RooflinePerf(Strict):
    """Roofline step times from catalog specs with documented efficiency factors."""

    kind: Literal["roofline"] = "roofline"
    mfu: float = Field(default=0.55, gt=0, le=1, description="achieved fraction of dense tensor FLOP/s in prefill")
    mbu: float = Field(default=0.75, gt=0, le=1, description="achieved fraction of memory bandwidth in decode")
    prefill_overhead_s: Seconds = Field(default=0.010, ge=0)
    decode_overhead_s: Seconds = Field(default=0.004, ge=0)
    comm_efficiency: float = Field(default=0.7, gt=0, le=1, description="achieved fraction of intra-node link bandwidth for TP all-reduce")
    compute_dtype: str | None = Field(default=None, description="default: the model's weight dtype")
    attention_efficiency: float = Field(default=1.0, gt=0, le=1, description="attention FLOPs run at mfu * this (calibration fits it)")
    prefill_per_request_s: Seconds = Field(default=0.0, ge=0, description="time per request in a prefill batch beyond its tokens (calibration fits it)")


class TablePerf(Strict):
    """Measured step times from a table (splitwise-sim CSV, DistServe profiler JSON, or qmodel CSV)."""

    kind: Literal["table"] = "table"
    path: str
    format: Literal["auto", "splitwise", "distserve", "qmodel"] = "auto"
    model_key: str | None = Field(default=None, description="model name inside the table if it differs")
    hardware_key: str | None = None


class FixedPerf(Strict):
    """Constant prefill time per request and constant decode step (teaching, closed-form checks)."""

    kind: Literal["fixed"] = "fixed"
    prefill_s: Seconds = Field(gt=0)
    decode_step_s: Seconds = Field(gt=0)


PerfModel = Annotated[Union[RooflinePerf, TablePerf, FixedPerf], Field(discriminator="kind")]


class Scenario(Strict):
    name: str = "scenario"
    model: str
    workload: Workload
    slo: SLO
    deployment: Deployment
    perf: PerfModel = Field(default_factory=RooflinePerf)

    @property
    def rate_per_s(self) -> float | None:
        return getattr(self.workload.arrivals, "rate_per_s", None)

    def with_rate(self, rate_per_s: float) -> "Scenario":
        """The same scenario at another mean arrival rate (trace arrivals get rescaled)."""
        arr = self.workload.arrivals.model_copy(update={"rate_per_s": float(rate_per_s)})
        return self.model_copy(update={"workload": self.workload.model_copy(update={"arrivals": arr})})


# ---- loading -----------------------------------------------------------------------------------

def _first_error_line(err: ValidationError, source: str) -> InputError:
    e = err.errors()[0]
    loc = ".".join(str(p) for p in e["loc"] if not (isinstance(p, str) and p in _UNION_TAGS))
    msg = e["msg"].removeprefix("Value error, ")
    value = e.get("input")
    if e["type"] == "extra_forbidden":
        return InputError(loc, value, "unknown field (check the spelling)")
    if e["type"] == "missing":
        return InputError(loc, None, "this field is required")
    if e["type"] == "union_tag_invalid":
        return InputError(loc + (".kind" if "kind" in msg else ".topology"), value, msg)
    return InputError(loc or source, value, msg)


# Discriminator values pydantic puts into error locations; they are not field names.
_UNION_TAGS = {"poisson", "gamma", "trace", "fixed", "lognormal", "empirical", "preset",
               "colocated", "chunked", "disaggregated", "roofline", "table"}


def parse_scenario(data: dict[str, Any], source: str = "scenario") -> Scenario:
    """Validate a dict into a :class:`Scenario`, raising a one-line :class:`InputError`."""
    try:
        return Scenario.model_validate(data)
    except ValidationError as err:
        raise _first_error_line(err, source) from None


def _read(path: Path) -> dict[str, Any]:
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise DataError(str(path), "no such file") from None
    except OSError as err:
        raise DataError(str(path), f"cannot read ({err.strerror})") from None
    suffix = path.suffix.lower()
    try:
        if suffix in (".yaml", ".yml"):
            import yaml

            data = yaml.safe_load(text)
        elif suffix == ".toml":
            import tomllib

            data = tomllib.loads(text)
        elif suffix == ".json":
            data = json.loads(text)
        else:
            raise DataError(str(path), "scenario files must end in .yaml, .yml, .toml or .json")
    except DataError:
        raise
    except Exception as err:  # each parser has its own exception type; all mean "not parseable"
        first = str(err).splitlines()[0] if str(err) else type(err).__name__
        raise DataError(str(path), f"not valid {suffix[1:].upper()}: {first}") from None
    if not isinstance(data, dict):
        raise DataError(str(path), "the top level must be a mapping of scenario fields")
    return data


def _resolve_paths(data: dict[str, Any], base: Path) -> None:
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
    low = text.strip().lower()
    if low in ("true", "false"):
        return low == "true"
    if low in ("null", "none"):
        return None
    for cast in (int, float):
        try:
            return cast(text)
        except ValueError:
            pass
    return text


def apply_overrides(data: dict[str, Any], overrides: list[str]) -> dict[str, Any]:
    """Apply ``a.b.c=value`` overrides to a raw scenario dict (before validation)."""
    out = json.loads(json.dumps(data))
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
    data = _read(p)
    if overrides:
        data = apply_overrides(data, overrides)
    _resolve_paths(data, p.parent)
    data.setdefault("name", p.stem)
    return parse_scenario(data, str(p))


def scenario_sha256(scenario: Scenario) -> str:
    """SHA-256 of the scenario's canonical JSON (sorted keys): identical inputs, identical hash."""
    blob = json.dumps(scenario.model_dump(mode="json"), sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(blob.encode()).hexdigest()
