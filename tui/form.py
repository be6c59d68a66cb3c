"""The scenario form as data: which fields exist, when they show, and how they map to a Scenario.

No Textual here, so the mapping is unit-tested on its own and reused by the app, the command
palette and the planner hand-off. A form is a flat ``dict[str, str]`` keyed by the dotted path of
each field in the scenario file (``deployment.pool.tp``); values are the strings the user typed,
handed to pydantic as they are so its unit parsing ("500 ms", "6 req/s") and its messages apply.

Fields that do not belong to the chosen topology or kind are hidden and left out of the scenario;
keys the form does not show (``dispatch``, ``pp``, fine roofline factors, ...) are carried over
from the loaded file as long as the section keeps its kind, so a load/save round trip keeps them.
"""

from __future__ import annotations

import copy
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

from pydantic import ValidationError

from qmodel.errors import CatalogError, QmodelError
from qmodel.scenario import Scenario, error_location
from qmodel.scenario_fields import schema_field
from qmodel.units import format_bandwidth, format_duration

__all__ = ["FieldSpec", "FIELDS", "FIELD_BY_KEY", "SECTIONS", "DEFAULT_RAW", "FormBuild", "build", "values_from_raw",
           "visible", "raw_from_values", "field_for_error"]


Values = dict[str, str]


def _is(key: str, *allowed: str) -> Callable[[Values], bool]:
    return lambda v: v.get(key, "") in allowed


def _shape(test: Callable[[Any], bool]) -> Callable[[Values], bool]:
    """Shown for the shapes whose :class:`~qmodel.topology.Topology` passes ``test`` (asked, not named)."""
    def when(v: Values) -> bool:
        from qmodel.topology import TOPOLOGIES  # lazily: the form module stays light to import
        cls = TOPOLOGIES.get(v.get(_TOPO, ""))
        return cls is not None and test(cls)
    return when


_TOPO = "deployment.topology"
_single = _shape(lambda t: not t.separate_prefill)  # one pool serves both phases
_disagg = _shape(lambda t: t.separate_prefill)  # a prefill pool and a decode pool
_budget = {f: _shape(lambda t, f=f: t.budget_field == f) for f in ("max_batch_tokens", "chunk_tokens")}
_ARR = "workload.arrivals.kind"
_LEN = "workload.lengths.kind"
_PERF = "perf.kind"


@dataclass(frozen=True)
class FieldSpec:
    """One form field: its scenario path, label, widget kind and when it is shown."""

    key: str
    label: str
    section: str
    kind: str = "text"  # text | select | catalog
    options: tuple[str, ...] = ()  # select choices
    catalog: str = ""  # models | gpus | links | workloads
    optional: bool = False  # blank -> key left out (the schema default applies)
    when: Callable[[Values], bool] = field(default=lambda v: True, compare=False)
    help: str = ""
    fmt: str = ""  # how to show a loaded number: duration | bandwidth | ""


#: The scenario the app opens with when no file is given: one the roofline model can solve anywhere.
DEFAULT_RAW: dict[str, Any] = {
    "name": "untitled",
    "model": "llama-3.1-8b",
    "workload": {"arrivals": {"kind": "poisson", "rate_per_s": 4.0},
                 "lengths": {"kind": "preset", "name": "sharegpt"}},
    "slo": {"ttft_s": 0.5, "tpot_s": 0.05, "percentile": 90.0, "attainment_goal": 0.9},
    "deployment": {"topology": "colocated",
                   "pool": {"gpu": "h100-sxm", "tp": 1, "instances": 2, "max_batch": 256},
                   "max_batch_tokens": 8192},
    "perf": {"kind": "roofline"},
}


def _get(d: dict[str, Any], path: str) -> Any:
    node: Any = d
    for p in path.split("."):
        if not isinstance(node, dict) or p not in node:
            return None
        node = node[p]
    return node


def _choices(key: str) -> tuple[str, ...]:
    """A select's options: the schema's allowed values at ``key`` (:func:`qmodel.scenario_fields.schema_field`).

    Order: the value a fresh form starts at first (:data:`DEFAULT_RAW`'s, else the schema default),
    then the others in the schema's order; so a blank or unknown value shows the starting one, and
    a value the schema gains appears in the form without editing it.
    """
    sf = schema_field(key)
    first = _get(DEFAULT_RAW, key)
    if first is None and sf.has_default:
        first = sf.default
    return tuple(sorted((str(c) for c in sf.choices), key=lambda c: c != first))  # stable: schema order after


def _optional_choices(key: str) -> tuple[str, ...]:
    """An optional select's options: blank first (the field left out, so the engine's default applies
    and the scenario's hash is that of a file without it), then the schema's values in its order."""
    return ("", *(str(c) for c in schema_field(key).choices))


_KV_RES_HELP = "actual: prompt + own output; max_tokens: prompt + max output for its whole life; blank: actual"

FIELDS: tuple[FieldSpec, ...] = (
    FieldSpec("name", "Name", "Scenario"),
    FieldSpec("model", "Model", "Scenario", "catalog", catalog="models"),
    FieldSpec(_TOPO, "Topology", "Deployment", "select", _choices(_TOPO)),
    # colocated / chunked
    FieldSpec("deployment.pool.gpu", "GPU", "Deployment", "catalog", catalog="gpus", when=_single),
    FieldSpec("deployment.pool.tp", "TP", "Deployment", when=_single, help="tensor-parallel GPUs per instance"),
    FieldSpec("deployment.pool.instances", "Instances", "Deployment", when=_single),
    FieldSpec("deployment.pool.max_batch", "Max batch", "Deployment", when=_single, help="concurrent sequences"),
    FieldSpec("deployment.pool.kv_memory_fraction", "KV mem frac", "Deployment", when=_single),
    FieldSpec("deployment.max_batch_tokens", "Prefill tok", "Deployment", when=_budget["max_batch_tokens"],
              help="tokens per prefill iteration"),
    FieldSpec("deployment.chunk_tokens", "Chunk tok", "Deployment", when=_budget["chunk_tokens"],
              help="tokens per mixed iteration"),
    FieldSpec("deployment.pool.kv_reservation", "KV reserve", "Deployment", "select",
              _optional_choices("deployment.pool.kv_reservation"), optional=True, when=_single, help=_KV_RES_HELP),
    # disaggregated
    FieldSpec("deployment.prefill.gpu", "Prefill GPU", "Deployment", "catalog", catalog="gpus", when=_disagg),
    FieldSpec("deployment.prefill.tp", "Prefill TP", "Deployment", when=_disagg),
    FieldSpec("deployment.prefill.instances", "Prefill inst", "Deployment", when=_disagg),
    FieldSpec("deployment.prefill.max_batch_tokens", "Prefill tok", "Deployment", when=_disagg),
    FieldSpec("deployment.decode.gpu", "Decode GPU", "Deployment", "catalog", catalog="gpus", when=_disagg),
    FieldSpec("deployment.decode.tp", "Decode TP", "Deployment", when=_disagg),
    FieldSpec("deployment.decode.instances", "Decode inst", "Deployment", when=_disagg),
    FieldSpec("deployment.decode.max_batch", "Max batch", "Deployment", when=_disagg),
    FieldSpec("deployment.decode.kv_memory_fraction", "KV mem frac", "Deployment", when=_disagg),
    FieldSpec("deployment.decode.kv_reservation", "KV reserve", "Deployment", "select",
              _optional_choices("deployment.decode.kv_reservation"), optional=True, when=_disagg, help=_KV_RES_HELP),
    FieldSpec("deployment.link", "Link", "Deployment", "catalog", catalog="links", when=_disagg),
    FieldSpec("deployment.link_bandwidth_bytes_per_s", "Link BW", "Deployment", optional=True, when=_disagg,
              help="blank: the catalog link's bandwidth", fmt="bandwidth"),
    FieldSpec("deployment.link_sharing", "Link share", "Deployment", "select",
              _choices("deployment.link_sharing"),
              when=_disagg),
    FieldSpec("deployment.transfer_mode", "Transfer", "Deployment", "select",
              _choices("deployment.transfer_mode"),
              when=_disagg),
    FieldSpec("deployment.first_token_from", "1st token", "Deployment", "select",
              _choices("deployment.first_token_from"),
              when=_disagg),
    FieldSpec("deployment.max_context_tokens", "Context win", "Deployment", optional=True,
              help="prompt + output tokens (vLLM --max-model-len); blank: the model's window"),
    # workload
    FieldSpec(_ARR, "Arrivals", "Workload", "select", _choices(_ARR)),
    FieldSpec("workload.arrivals.rate_per_s", "Rate", "Workload", optional=True,
              help="req/s (trace: blank keeps the trace's own rate)"),
    FieldSpec("workload.arrivals.cv", "Arrival CV", "Workload", when=_is(_ARR, "gamma")),
    FieldSpec("workload.arrivals.path", "Trace file", "Workload", when=_is(_ARR, "trace"),
              help="e.g. data:azure_llm_2023/AzureLLMInferenceTrace_conv.csv"),
    FieldSpec("workload.arrivals.format", "Trace fmt", "Workload", "select",
              _choices("workload.arrivals.format"), when=_is(_ARR, "trace")),
    FieldSpec(_LEN, "Lengths", "Workload", "select", _choices(_LEN)),
    FieldSpec("workload.lengths.name", "Preset", "Workload", "catalog", catalog="workloads", when=_is(_LEN, "preset")),
    FieldSpec("workload.lengths.prompt_tokens", "Prompt tok", "Workload", when=_is(_LEN, "fixed")),
    FieldSpec("workload.lengths.output_tokens", "Output tok", "Workload", when=_is(_LEN, "fixed")),
    FieldSpec("workload.lengths.prompt_median_tokens", "Prompt med.", "Workload", when=_is(_LEN, "lognormal")),
    FieldSpec("workload.lengths.prompt_sigma", "Prompt sigma", "Workload", when=_is(_LEN, "lognormal")),
    FieldSpec("workload.lengths.output_median_tokens", "Output med.", "Workload", when=_is(_LEN, "lognormal")),
    FieldSpec("workload.lengths.output_sigma", "Output sigma", "Workload", when=_is(_LEN, "lognormal")),
    FieldSpec("workload.lengths.path", "Lengths file", "Workload", when=_is(_LEN, "empirical")),
    FieldSpec("workload.lengths.format", "Lengths fmt", "Workload", "select",
              _choices("workload.lengths.format"), when=_is(_LEN, "empirical")),
    FieldSpec("workload.prefix_hit_ratio", "Prefix hits", "Workload", help="fraction of prompt tokens cached"),
    FieldSpec("workload.max_output_tokens", "Max output", "Workload", optional=True,
              help="the requests' max_tokens; blank: the length law's largest output"),
    FieldSpec("workload.context_overflow", "Overflow", "Workload", "select",
              _optional_choices("workload.context_overflow"), optional=True,
              help="prompt + output beyond the window: truncate, or reject (an SLO miss); blank: truncate"),
    # SLO
    FieldSpec("slo.ttft_s", "TTFT target", "SLO", fmt="duration"),
    FieldSpec("slo.tpot_s", "TPOT target", "SLO", fmt="duration"),
    FieldSpec("slo.percentile", "Percentile", "SLO"),
    FieldSpec("slo.attainment_goal", "Goal", "SLO", help="attainment needed for goodput"),
    FieldSpec("slo.tpot_definition", "TPOT def.", "SLO", "select", _optional_choices("slo.tpot_definition"),
              optional=True, help="per_interval: (e2e - TTFT)/(L - 1); per_token: TBT = (e2e - TTFT)/L; "
                                  "set either to show TBT; blank: per_interval, no TBT"),
    # service-time model
    FieldSpec(_PERF, "Perf model", "Service times", "select", _choices(_PERF)),
    FieldSpec("perf.mfu", "MFU", "Service times", optional=True, when=_is(_PERF, "roofline"),
              help="blank: the GPU architecture's measured GEMM efficiency curve"),
    FieldSpec("perf.mbu", "MBU", "Service times", optional=True, when=_is(_PERF, "roofline"),
              help="blank: the architecture's measured HBM efficiency"),
    FieldSpec("perf.path", "Table file", "Service times", when=_is(_PERF, "table")),
    FieldSpec("perf.format", "Table fmt", "Service times", "select", _choices("perf.format"),
              when=_is(_PERF, "table")),
    FieldSpec("perf.prefill_s", "Prefill s", "Service times", when=_is(_PERF, "fixed"), fmt="duration"),
    FieldSpec("perf.decode_step_s", "Decode step", "Service times", when=_is(_PERF, "fixed"), fmt="duration"),
)

FIELD_BY_KEY: dict[str, FieldSpec] = {f.key: f for f in FIELDS}
SECTIONS: tuple[str, ...] = tuple(dict.fromkeys(f.section for f in FIELDS))


def visible(spec: FieldSpec, values: Values) -> bool:
    return bool(spec.when(values))


def _set(d: dict[str, Any], path: str, value: Any) -> None:
    parts = path.split(".")
    node = d
    for p in parts[:-1]:
        node = node.setdefault(p, {})
    node[parts[-1]] = value


def _delete(d: dict[str, Any], path: str) -> None:
    parts = path.split(".")
    node = d
    for p in parts[:-1]:
        node = node.get(p)
        if not isinstance(node, dict):
            return
    node.pop(parts[-1], None)


def _show(spec: FieldSpec, value: Any) -> str:
    if value is None:
        return ""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, float)):
        if spec.fmt == "duration":
            return format_duration(float(value))
        if spec.fmt == "bandwidth":
            return format_bandwidth(float(value), bits=True)
        if isinstance(value, float) and value.is_integer():
            return str(int(value))
        return f"{value:.6g}"
    return str(value)


# Values for fields the loaded scenario does not set (a colocated file has no decode pool, ...): the
# schema's default where it has one (below), and these where the schema requires the field, so
# there is no default to read: starting points for the user to edit, each valid on its own.
_REQUIRED_START: Values = {
    "deployment.link": "ib-ndr-400", "workload.arrivals.cv": "2", "workload.lengths.name": "sharegpt",
    "workload.lengths.prompt_tokens": "512", "workload.lengths.output_tokens": "128",
    "workload.lengths.prompt_median_tokens": "1000", "workload.lengths.prompt_sigma": "1",
    "workload.lengths.output_median_tokens": "200", "workload.lengths.output_sigma": "0.8",
    "perf.prefill_s": "100 ms", "perf.decode_step_s": "20 ms",
}
# ``name`` takes no fallback: a file without one is named after the file (load_scenario), not the
# schema's "scenario"; the form leaves it blank as the file does.
_NO_FALLBACK = ("name",)


def _fallback() -> Values:
    """Each field's fallback, in form order: the schema default, else the required field's start."""
    out: Values = {}
    for spec in FIELDS:
        sf = schema_field(spec.key)
        if spec.key in _REQUIRED_START:
            out[spec.key] = _REQUIRED_START[spec.key]
        elif spec.key not in _NO_FALLBACK and sf.has_default and sf.default is not None:
            out[spec.key] = _show(spec, sf.default)
    return out


_FALLBACK: Values = _fallback()


def values_from_raw(raw: dict[str, Any]) -> Values:
    """Form values for a raw scenario dict (as read from a file, paths unresolved)."""
    values: Values = dict(_FALLBACK)
    dep = raw.get("deployment") or {}
    # Seed the pools of the other topology from this one, so switching topology keeps the hardware.
    if "pool" in dep and isinstance(dep["pool"], dict):
        for role in ("prefill", "decode"):
            for k in ("gpu", "tp", "kv_reservation"):
                if k in dep["pool"] and f"deployment.{role}.{k}" in FIELD_BY_KEY:
                    values[f"deployment.{role}.{k}"] = _show(FIELD_BY_KEY[f"deployment.{role}.{k}"], dep["pool"][k])
    elif "decode" in dep and isinstance(dep["decode"], dict):
        for k in ("gpu", "tp", "kv_reservation"):
            if k in dep["decode"]:
                values[f"deployment.pool.{k}"] = _show(FIELD_BY_KEY[f"deployment.pool.{k}"], dep["decode"][k])
        n = sum(int(dep.get(r, {}).get("instances", 1)) for r in ("prefill", "decode") if isinstance(dep.get(r), dict))
        values["deployment.pool.instances"] = str(n)
    for spec in FIELDS:
        v = _get(raw, spec.key)
        if v is not None:
            values[spec.key] = _show(spec, v)
        elif spec.key not in values:
            values[spec.key] = ""
    for key in (_TOPO, _ARR, _LEN, _PERF):  # the section's kind: the file's, else the one the app opens with
        if not values.get(key):
            values[key] = str(_get(DEFAULT_RAW, key))
    return values


# Sections whose "kind" picks the shape of the sub-dict: switching kind starts that sub-dict afresh.
_KINDED = (("workload.arrivals", "kind"), ("workload.lengths", "kind"), ("perf", "kind"), ("deployment", "topology"))


def raw_from_values(values: Values, base: dict[str, Any] | None = None) -> dict[str, Any]:
    """The raw scenario dict the form describes, keeping ``base``'s keys the form does not show."""
    raw = copy.deepcopy(base) if base else {}
    for section, tag in _KINDED:
        chosen = values.get(f"{section}.{tag}", "")
        current = _get(raw, section)
        if not isinstance(current, dict) or current.get(tag) != chosen:
            _set(raw, section, {tag: chosen})
    dep = raw["deployment"]
    if _disagg(values):
        dep.pop("pool", None)
    else:
        dep.pop("prefill", None)
        dep.pop("decode", None)
    for spec in FIELDS:
        if not visible(spec, values):
            continue
        text = values.get(spec.key, "").strip()
        if text == "" and spec.optional:
            _delete(raw, spec.key)
        else:
            _set(raw, spec.key, text)
    if values.get(_ARR) == "trace" and not values.get("workload.arrivals.rate_per_s", "").strip():
        _delete(raw, "workload.arrivals.rate_per_s")
    return raw


# ---- validation ---------------------------------------------------------------------------------

# Discriminator tags pydantic puts into error locations; they are not field names.
@dataclass
class FormBuild:
    """The outcome of reading the form: a scenario, or the inline error of each bad field."""

    scenario: Scenario | None
    raw: dict[str, Any]
    errors: dict[str, str]


def field_for_error(path: str, values: Values) -> str | None:
    """The visible form field an error path belongs to (longest shared dotted prefix)."""
    path = path.strip()
    best, best_len = None, 0
    for spec in FIELDS:
        if not visible(spec, values):
            continue
        if path == spec.key:
            return spec.key
        common = 0
        for a, b in zip(spec.key.split("."), path.split(".")):
            if a != b:
                break
            common += 1
        if common > best_len:
            best, best_len = spec.key, common
    return best


def _catalog_errors(values: Values) -> dict[str, str]:
    from qmodel.registry import load_catalog

    cat = load_catalog()
    names = cat.names()
    kinds = {"models": "model", "gpus": "gpu", "links": "link", "workloads": "workload"}
    out: dict[str, str] = {}
    for spec in FIELDS:
        if spec.kind != "catalog" or not visible(spec, values):
            continue
        name = values.get(spec.key, "").strip()
        if name.lower() in (n.lower() for n in names[spec.catalog]):
            continue
        err = CatalogError(kinds[spec.catalog], name, names[spec.catalog])
        out[spec.key] = err.allowed
    return out


def build(values: Values, base: dict[str, Any] | None = None, folder: Path | None = None) -> FormBuild:
    """Validate the form. Every bad field gets pydantic's message (or the catalog's suggestion).

    ``folder`` is where relative trace/table paths are looked up (the loaded file's folder);
    ``data:`` paths resolve under the data folder. The form keeps the paths as typed.
    """
    from qmodel.scenario import resolve_scenario_paths  # the loader's own path rules, so the TUI agrees with the CLI

    raw = raw_from_values(values, base)
    errors: dict[str, str] = _catalog_errors(values)
    resolved = json.loads(json.dumps(raw))
    resolve_scenario_paths(resolved, folder or Path.cwd())
    try:
        sc = Scenario.model_validate(resolved)
    except ValidationError as err:
        for e in err.errors():
            loc = error_location(e)
            key = field_for_error(loc, values) or "name"
            msg = e["msg"].removeprefix("Value error, ")
            if e["type"] == "extra_forbidden":
                msg = f"unknown field {loc!r} (check the spelling)"
            errors.setdefault(key, msg)
        return FormBuild(None, raw, errors)
    if errors:
        return FormBuild(None, raw, errors)
    return FormBuild(sc, raw, {})


def error_field(err: QmodelError, values: Values) -> str | None:
    """The form field a solver error points at (InputError.field is a dotted path or a catalog kind)."""
    path = getattr(err, "field", None)
    if not isinstance(path, str) or not path:
        return None
    kind_to_field = {"model": "model", "link": "deployment.link", "workload": "workload.lengths.name"}
    if path in kind_to_field:
        return kind_to_field[path]
    if "." not in path and path not in FIELD_BY_KEY:
        return None
    return field_for_error(path, values)
