"""The TUI's form model and files: scenario <-> form values, inline errors, save/load round trips.

No Textual here: these run in milliseconds. Equality is exact (scenario SHA-256), because a form
that changes a scenario it did not touch would silently change every number downstream.
"""

from __future__ import annotations

import sys
import tomllib
from pathlib import Path

import pytest

from qmodel.scenario import load_scenario, scenario_sha256
from qmodel.tui.files import read_raw, to_toml, write_scenario
from qmodel.tui.form import DEFAULT_RAW, FIELDS, build, field_for_error, raw_from_values, values_from_raw, visible

EXAMPLES = sorted((Path(__file__).resolve().parent.parent / "examples").glob("*.*"))


@pytest.mark.parametrize("path", EXAMPLES, ids=lambda p: p.name)
def test_example_round_trips_through_the_form(path: Path) -> None:
    raw = read_raw(path)
    fb = build(values_from_raw(raw), raw, path.parent)
    assert fb.errors == {}
    assert scenario_sha256(fb.scenario) == scenario_sha256(load_scenario(path))


def test_default_scenario_is_valid() -> None:
    fb = build(values_from_raw(DEFAULT_RAW), DEFAULT_RAW)
    assert fb.errors == {} and fb.scenario.deployment.topology == "colocated"


def test_switching_topology_keeps_the_hardware() -> None:
    v = values_from_raw(DEFAULT_RAW)
    v["deployment.topology"] = "disaggregated"
    fb = build(v, DEFAULT_RAW)
    dep = fb.scenario.deployment
    assert dep.prefill.gpu == dep.decode.gpu == "h100-sxm"
    assert dep.link == "ib-ndr-400"
    # and back: the colocated pool from a disaggregated file gets all the instances
    raw = read_raw(next(p for p in EXAMPLES if p.name == "llama3-70b-disagg-h100.yaml"))
    v = values_from_raw(raw)
    v["deployment.topology"] = "chunked"
    sc = build(v, raw).scenario
    assert (sc.deployment.pool.gpu, sc.deployment.pool.tp, sc.deployment.pool.instances) == ("h100-sxm", 4, 4)


def test_request_shape_fields_round_trip_validate_and_follow_a_topology_switch() -> None:
    """The issue-18 §3 fields: set in the form they reach the scenario (and a blank one is left out,
    so the scenario's hash is the file's without it); a bad value gets pydantic's message on its own
    field; the decode pool's KV reservation follows a topology switch as the hardware does."""
    sets = {"deployment.pool.kv_reservation": "max_tokens", "deployment.max_context_tokens": "4096",
            "workload.max_output_tokens": "512", "workload.context_overflow": "reject",
            "slo.tpot_definition": "per_token"}
    v = values_from_raw(DEFAULT_RAW)
    v.update(sets)
    fb = build(v, DEFAULT_RAW)
    raw = {**DEFAULT_RAW, "deployment": {**DEFAULT_RAW["deployment"], "max_context_tokens": 4096,
                                          "pool": {**DEFAULT_RAW["deployment"]["pool"], "kv_reservation": "max_tokens"}},
           "workload": {**DEFAULT_RAW["workload"], "max_output_tokens": 512, "context_overflow": "reject"},
           "slo": {**DEFAULT_RAW["slo"], "tpot_definition": "per_token"}}
    from qmodel.scenario import parse_scenario

    assert fb.errors == {} and scenario_sha256(fb.scenario) == scenario_sha256(parse_scenario(raw))
    back = values_from_raw(raw)  # and back (the other topology's decode pool is seeded from this pool)
    assert {k: back[k] for k in sets} == sets and back["deployment.decode.kv_reservation"] == "max_tokens"
    blank = build(values_from_raw(DEFAULT_RAW), DEFAULT_RAW).scenario
    assert scenario_sha256(blank) == scenario_sha256(parse_scenario(DEFAULT_RAW))
    bad = dict(v, **{"deployment.max_context_tokens": "1", "workload.max_output_tokens": "0",
                     "workload.context_overflow": "drop"})
    errors = build(bad, DEFAULT_RAW).errors
    assert set(errors) == {"deployment.max_context_tokens", "workload.max_output_tokens", "workload.context_overflow"}
    assert "greater than or equal to 2" in errors["deployment.max_context_tokens"]
    assert "'truncate' or 'reject'" in errors["workload.context_overflow"]
    back["deployment.topology"] = "disaggregated"
    assert build(back, raw).scenario.deployment.decode.kv_reservation == "max_tokens"


def test_hidden_fields_stay_out_of_the_scenario() -> None:
    v = values_from_raw(DEFAULT_RAW)
    raw = raw_from_values(v, DEFAULT_RAW)
    assert "chunk_tokens" not in raw["deployment"] and "prefill" not in raw["deployment"]
    shown = {f.key for f in FIELDS if visible(f, v)}
    assert "deployment.max_batch_tokens" in shown and "deployment.chunk_tokens" not in shown


def test_every_bad_field_gets_its_own_pydantic_message() -> None:
    v = values_from_raw(DEFAULT_RAW)
    v.update({"deployment.pool.tp": "two", "slo.ttft_s": "5 parsecs", "slo.attainment_goal": "1.5",
              "model": "llama-70b"})
    fb = build(v, DEFAULT_RAW)
    assert fb.scenario is None
    assert fb.errors["deployment.pool.tp"].startswith("Input should be a valid integer")
    assert "expected a duration" in fb.errors["slo.ttft_s"]
    assert fb.errors["slo.attainment_goal"] == "Input should be less than 1"
    assert fb.errors["model"].startswith("unknown model; did you mean")


def test_errors_map_to_the_nearest_visible_field() -> None:
    v = values_from_raw(DEFAULT_RAW)
    assert field_for_error("deployment.pool.tp", v) == "deployment.pool.tp"
    assert field_for_error("deployment.pool", v).startswith("deployment.pool.")
    assert field_for_error("slo", v).startswith("slo.")


def test_keys_the_form_does_not_show_are_kept() -> None:
    raw = {**DEFAULT_RAW, "deployment": {**DEFAULT_RAW["deployment"],
                                         "pool": {**DEFAULT_RAW["deployment"]["pool"], "dispatch": "round_robin"}}}
    v = values_from_raw(raw)
    v["deployment.pool.instances"] = "3"
    sc = build(v, raw).scenario
    assert sc.deployment.pool.dispatch == "round_robin" and sc.deployment.pool.instances == 3


@pytest.mark.parametrize("suffix", [".yaml", ".toml", ".json"])
def test_saved_scenario_loads_back_identical(tmp_path: Path, suffix: str) -> None:
    src = next(p for p in EXAMPLES if p.name == "llama3-70b-disagg-h100.yaml")
    raw = read_raw(src)
    v = values_from_raw(raw)
    v["slo.tpot_s"] = "75 ms"
    fb = build(v, raw, src.parent)
    out = write_scenario(fb.raw, tmp_path / f"saved{suffix}")
    again = load_scenario(out)
    assert scenario_sha256(again.model_copy(update={"name": fb.scenario.name})) == scenario_sha256(fb.scenario)
    assert again.slo.tpot_s == pytest.approx(0.075, rel=0, abs=1e-15)


def test_toml_writer_nests_tables() -> None:
    data = {"name": "x \"q\"", "a": {"b": 1, "c": {"d": 2.5, "e": True}}, "skip": None}
    assert tomllib.loads(to_toml(data)) == {"name": "x \"q\"", "a": {"b": 1, "c": {"d": 2.5, "e": True}}}


def test_form_modules_do_not_import_textual() -> None:
    import subprocess

    code = ("import sys, qmodel.tui.form, qmodel.tui.compute, qmodel.tui.files, qmodel.tui.report, "
            "qmodel.tui.charts, qmodel.tui.planning; assert 'textual' not in sys.modules, 'textual imported'")
    subprocess.run([sys.executable, "-c", code], check=True)
