"""The TUI form's choices and defaults are the scenario schema's (issue 19), not re-typed copies.

Each select must offer exactly what the schema allows (read here straight from the pydantic
annotations, independently of :func:`qmodel.scenario_fields.schema_field`), so a value the schema
gains shows up in the form; and a field the file leaves out must fall back to the schema default,
so a scenario saved from the form equals the one the loader builds from the same file.
"""

from __future__ import annotations

from typing import Any, get_args

import pytest

from qmodel.scenario import (SLO, Arrivals, DecodePool, Deployment, DisaggregatedDeployment, EmpiricalLengths,
                             Lengths, PerfModel, PrefillPool, Scenario, TablePerf, TraceArrivals, Workload,
                             parse_scenario, scenario_sha256)
from qmodel.scenario_fields import schema_field
from qmodel.tui.form import DEFAULT_RAW, FIELDS, build, values_from_raw


def _tags(union: Any, tag: str) -> list[str]:
    return [m.model_fields[tag].default for m in get_args(get_args(union)[0])]


def _literal(model: Any, name: str) -> list[str]:
    return list(get_args(model.model_fields[name].annotation))


def _optional(model: Any, name: str) -> list[str]:
    """An optional ``Literal[...] | None`` field: blank (left out: the schema's None) and the literal's values."""
    lit, none = get_args(model.model_fields[name].annotation)
    assert none is type(None)
    return ["", *get_args(lit)]


#: what the schema declares for each select, read from the models themselves
DECLARED: dict[str, list[str]] = {
    "deployment.topology": _tags(Deployment, "topology"),
    "deployment.link_sharing": _literal(DisaggregatedDeployment, "link_sharing"),
    "deployment.transfer_mode": _literal(DisaggregatedDeployment, "transfer_mode"),
    "deployment.first_token_from": _literal(DisaggregatedDeployment, "first_token_from"),
    "workload.arrivals.kind": _tags(Arrivals, "kind"),
    "workload.arrivals.format": _literal(TraceArrivals, "format"),
    "workload.lengths.kind": _tags(Lengths, "kind"),
    "workload.lengths.format": _literal(EmpiricalLengths, "format"),
    "perf.kind": _tags(PerfModel, "kind"),
    "perf.format": _literal(TablePerf, "format"),
    "deployment.pool.kv_reservation": _optional(DecodePool, "kv_reservation"),
    "deployment.decode.kv_reservation": _optional(DecodePool, "kv_reservation"),
    "workload.context_overflow": _optional(Workload, "context_overflow"),
    "slo.tpot_definition": _optional(SLO, "tpot_definition"),
}
SELECTS = [f for f in FIELDS if f.kind == "select"]


def test_every_select_is_declared_here() -> None:
    assert sorted(f.key for f in SELECTS) == sorted(DECLARED)


@pytest.mark.parametrize("spec", SELECTS, ids=lambda f: f.key)
def test_select_offers_exactly_the_schemas_values(spec: Any) -> None:
    assert sorted(spec.options) == sorted(DECLARED[spec.key])
    assert len(spec.options) == len(set(spec.options))


@pytest.mark.parametrize("spec", SELECTS, ids=lambda f: f.key)
def test_select_order_is_start_value_then_schema_order(spec: Any) -> None:
    """The documented rule (tui/form.py ``_choices``): the value a fresh form starts at, then schema order."""
    start = values_from_raw(DEFAULT_RAW)[spec.key]
    assert spec.options[0] == start
    assert list(spec.options[1:]) == [v for v in DECLARED[spec.key] if v != start]


def _declared_default(model: Any, name: str) -> Any:
    return model.model_fields[name].default


@pytest.mark.parametrize(("key", "model", "name"), [
    ("deployment.pool.tp", DecodePool, "tp"), ("deployment.pool.instances", DecodePool, "instances"),
    ("deployment.pool.max_batch", DecodePool, "max_batch"),
    ("deployment.pool.kv_memory_fraction", DecodePool, "kv_memory_fraction"),
    ("deployment.prefill.max_batch_tokens", PrefillPool, "max_batch_tokens"),
    ("deployment.decode.max_batch", DecodePool, "max_batch"),
    ("deployment.link_sharing", DisaggregatedDeployment, "link_sharing"),
    ("deployment.transfer_mode", DisaggregatedDeployment, "transfer_mode"),
    ("deployment.first_token_from", DisaggregatedDeployment, "first_token_from"),
    ("workload.arrivals.format", TraceArrivals, "format"), ("workload.lengths.format", EmpiricalLengths, "format"),
    ("perf.format", TablePerf, "format"),
])
def test_fallback_is_the_schema_default(key: str, model: Any, name: str) -> None:
    """A field the file does not set shows the schema's default (checked against the model, not schema_field)."""
    shown = values_from_raw({})[key]
    want = _declared_default(model, name)
    assert (float(shown) == want) if isinstance(want, (int, float)) else (shown == want)


def test_every_schema_default_is_the_forms_fallback() -> None:
    """Breadth: every form field with a (non-null) schema default falls back to it, ``name`` excepted."""
    values = values_from_raw({})
    for spec in FIELDS:
        sf = schema_field(spec.key)
        if spec.key == "name" or not sf.has_default or sf.default is None:
            continue
        shown = values[spec.key]
        ok = float(shown) == sf.default if isinstance(sf.default, (int, float)) else shown == sf.default
        assert ok, (spec.key, shown, sf.default)


_BASE = {"model": "llama-3.1-8b", "slo": {"ttft_s": 0.5, "tpot_s": 0.05},
         "workload": {"arrivals": {"kind": "gamma", "rate_per_s": 2.0, "cv": 1.5},
                      "lengths": {"kind": "fixed", "prompt_tokens": 300, "output_tokens": 50}}}


@pytest.mark.parametrize("deployment", [
    {"topology": "colocated", "pool": {"gpu": "h100-sxm"}},
    {"topology": "chunked", "pool": {"gpu": "h100-sxm"}},
    {"topology": "disaggregated", "prefill": {"gpu": "h100-sxm"}, "decode": {"gpu": "h100-sxm"}, "link": "ib-ndr-400"},
], ids=lambda d: d["topology"])
def test_a_minimal_file_through_the_form_is_the_loaders_scenario(deployment: dict[str, Any]) -> None:
    """Only required fields given: the form's fallbacks must be exactly the defaults the loader applies."""
    raw = {**_BASE, "name": "minimal", "deployment": deployment}
    fb = build(values_from_raw(raw), raw)
    assert fb.errors == {}
    assert scenario_sha256(fb.scenario) == scenario_sha256(parse_scenario(raw))


def test_schema_field_reads_unions_tags_and_defaults() -> None:
    assert schema_field("deployment.topology").choices == ("colocated", "chunked", "disaggregated")
    assert not schema_field("deployment.topology").has_default  # the deployment is required
    perf = schema_field("perf.kind")
    assert perf.has_default and perf.default == Scenario.model_fields["perf"].default_factory().kind
    rate = schema_field("workload.arrivals.rate_per_s")
    assert not rate.has_default  # required for poisson/gamma, optional for trace
    trace_rate = schema_field("workload.arrivals.rate_per_s", "trace")
    assert trace_rate.has_default and trace_rate.default is None
    assert schema_field("deployment.pool.max_batch").default == 256  # colocated and chunked agree
    with pytest.raises(KeyError, match="deployment.nope"):
        schema_field("deployment.nope")
