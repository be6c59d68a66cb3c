"""The examples ship in the package: ``qmodel examples list|copy``, and the README's first command
(``qmodel solve examples/NAME.yaml``) finds the bundled file when run outside the repository."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from qmodel.cli.main import main
from qmodel.example_files import bundled_fallback, copy_example, list_examples
from qmodel.errors import InputError

REPO_EXAMPLES = sorted(p.stem for p in (Path(__file__).resolve().parent.parent / "examples").iterdir()
                       if p.suffix in (".yaml", ".toml", ".json"))


def test_list_has_every_repository_example_and_its_data_needs(capsys):
    items = list_examples()
    assert [e.name for e in items] == REPO_EXAMPLES
    by = {e.name: e for e in items}
    assert by["llama2-70b-disagg-splitwise"].needs_data == ["data:splitwise_sim/perf_model.csv"]
    assert by["opt13b-disagg-a100"].needs_data == [] and "DistServe" in by["opt13b-disagg-a100"].summary
    assert main(["examples", "list", "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert [e["name"] for e in doc["examples"]] == REPO_EXAMPLES
    assert main(["examples", "list"]) == 0
    assert max(len(x) for x in capsys.readouterr().out.splitlines()) <= 100


def test_copy_writes_refuses_to_overwrite_and_forces(tmp_path, capsys):
    assert main(["examples", "copy", "opt13b-disagg-a100", "--dest", str(tmp_path)]) == 0
    target = tmp_path / "opt13b-disagg-a100.yaml"
    assert str(target) in capsys.readouterr().out and target.read_text().startswith("# DistServe")
    assert main(["examples", "copy", "opt13b-disagg-a100", "--dest", str(tmp_path)]) == 2
    assert "--force" in capsys.readouterr().err
    target.write_text("edited")
    assert copy_example("examples/opt13b-disagg-a100.yaml", tmp_path, force=True) == target
    assert target.read_text().startswith("# DistServe")


def test_unknown_example_is_one_line_with_suggestions(capsys):
    assert main(["examples", "copy", "llama3-70b"]) == 2
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and "did you mean llama3-70b-disagg-h100" in err
    with pytest.raises(InputError):
        copy_example("nope")


def test_the_readme_command_runs_outside_the_repository(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    assert bundled_fallback("examples/opt13b-disagg-a100.yaml") is not None
    assert bundled_fallback("examples/opt13b-disagg-a100.toml") is None  # not the bundled file's name
    assert main(["solve", "examples/opt13b-disagg-a100.yaml"]) == 0
    out = capsys.readouterr()
    assert out.out.startswith("opt13b-disagg-a100: disaggregated") and "bundled example" in out.err
    (tmp_path / "examples").mkdir()
    (tmp_path / "examples" / "opt13b-disagg-a100.yaml").write_text("model: [")  # a real file wins, even broken
    assert main(["solve", "examples/opt13b-disagg-a100.yaml"]) == 2
