"""Every verb's ``--json`` is one schema: it opens with ``schema_version``, validates against the JSON
Schema generated from the pydantic models (docs/output-schema.json, checked current here), and names
a figure the same way everywhere with its unit in the key (issue: TTFT p90 was ``ttft.p90`` in solve,
``ttft_p90`` in sweep, ``ttft_p90_s`` in plan; cost ``cost_per_hour_usd`` in goodput, ``cost_per_hour``
in plan)."""

from __future__ import annotations

import csv
import io
import json
from pathlib import Path

import pytest

from qmodel.cli.main import main
from qmodel.output_schema import DOCUMENTS, LOOSE, SCHEMA_VERSION, document_models, json_schema

jsonschema = pytest.importorskip("jsonschema")

ROOT = Path(__file__).resolve().parent.parent
EX = str(ROOT / "examples" / "opt13b-disagg-a100.yaml")

RUNS = {
    "solve": ["solve", EX, "--json"],
    "solve --check": ["solve", EX, "--json", "--check", "--requests", "400"],
    "goodput": ["goodput", EX, "--json"],
    "sweep": ["sweep", EX, "--rate", "5:45:20", "--json"],
    "compare": ["compare", EX, "--json"],
    "plan": ["plan", EX, "--top", "2", "--json"],
    "replay": ["replay", EX, "--requests", "400", "--json"],
    "catalog": ["catalog", "list", "--json"],
}


def _json(argv: list[str], capsys) -> dict:
    assert main(argv) == 0
    return json.loads(capsys.readouterr().out)


@pytest.fixture(scope="module")
def schema() -> dict:
    return json_schema()


def test_schema_file_is_current(schema):
    on_disk = json.loads((ROOT / "docs" / "output-schema.json").read_text(encoding="utf-8"))
    assert on_disk == schema, "regenerate: python -m qmodel.output_schema > docs/output-schema.json"


def test_schema_is_a_valid_json_schema(schema):
    jsonschema.Draft202012Validator.check_schema(schema)
    assert set(DOCUMENTS) | set(LOOSE) <= set(schema["$defs"])


@pytest.mark.parametrize("name", list(RUNS))
def test_every_verb_output_validates(name, schema, capsys):
    doc = _json(RUNS[name], capsys)
    assert next(iter(doc)) == "schema_version" and doc["schema_version"] == SCHEMA_VERSION
    verb = name.split()[0]
    validator = jsonschema.Draft202012Validator({"$ref": f"#/$defs/{verb}", "$defs": schema["$defs"]})
    errors = [e.message for e in validator.iter_errors(doc)]
    assert not errors, errors[:3]


def test_a_wrong_key_fails_the_schema(schema, capsys):
    """The schema is strict where the models are: a renamed key is caught (so the test above can fail)."""
    doc = _json(RUNS["solve"], capsys)
    doc["ttft"]["p90"] = doc["ttft"].pop("p90_s")
    validator = jsonschema.Draft202012Validator({"$ref": "#/$defs/solve", "$defs": schema["$defs"]})
    assert list(validator.iter_errors(doc))
    doc = _json(RUNS["solve"], capsys)
    doc["schema_version"] = SCHEMA_VERSION - 1
    assert list(validator.iter_errors(doc))


def test_one_name_per_figure_across_verbs(capsys):
    solve = _json(RUNS["solve"], capsys)
    sweep = _json(["sweep", EX, "--rate", str(solve["rate_per_s"]), "--json"], capsys)
    plan = _json(RUNS["plan"], capsys)
    goodput = _json(RUNS["goodput"], capsys)
    assert set(solve["ttft"]) == {"mean_s", "p50_s", "p90_s", "p99_s"}
    assert sweep["rows"][0]["ttft_p90_s"] == pytest.approx(solve["ttft"]["p90_s"], rel=1e-12)
    assert "ttft_p90_s" in plan["plans"][0] and "cost_per_hour_usd" in plan["plans"][0]
    assert "cost_per_hour_usd" in goodput
    for doc in (solve, sweep, plan, goodput):
        text = json.dumps(doc)
        assert '"cost_per_hour"' not in text and '"ttft_p90"' not in text and '"p90"' not in text


def test_every_modelled_verb_loads():
    for verb, models in document_models().items():
        assert models and all(hasattr(m, "model_json_schema") for m in models), verb


def test_sweep_csv_has_units_and_six_digits(capsys):
    assert main(["sweep", EX, "--rate", "5,15", "--csv"]) == 0
    rows = list(csv.DictReader(io.StringIO(capsys.readouterr().out)))
    assert "ttft_p90_s" in rows[0] and "ttft_p90" not in rows[0]
    for r in rows:
        for k in ("ttft_p90_s", "attainment"):
            digits = r[k].replace(".", "").replace("-", "").lstrip("0").split("e")[0]
            assert len(digits) <= 6, (k, r[k])
