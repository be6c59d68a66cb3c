"""The scenario YAML cache (qmodel/inputfiles.py load_yaml_cached): a parsed tree is kept as JSON
under a key of the text, PyYAML and the loader, so a repeated run reads JSON without importing
PyYAML; a changed text has a new key, a corrupt or unwritable cache is skipped, a tree JSON cannot
reproduce exactly (a shared alias, a date, a non-string key) is never stored, and the loaded
scenario is the same either way."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from qmodel.inputfiles import load_yaml_cached, yaml_loader
from qmodel.scenario import load_scenario

REPO = Path(__file__).resolve().parents[1]
TEXT = "name: x\nrate: 1.5e-3\nflags: [true, null, .inf, -0.0]\nn: 12345678901234567890\nnested: {a: {b: [1, 2.0]}}\n"


def _folder(monkeypatch, tmp_path) -> Path:
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    return tmp_path / "cache" / "qmodel" / "parsed" / "yaml-1"


def _same(a, b) -> bool:
    """Equal with the same types throughout (1 is not 1.0, True is not 1)."""
    if type(a) is not type(b):
        return False
    if isinstance(a, dict):
        return list(a) == list(b) and all(_same(a[k], b[k]) for k in a)
    if isinstance(a, list):
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b))
    return repr(a) == repr(b)


def test_written_then_read_with_the_same_tree_and_types(monkeypatch, tmp_path):
    folder = _folder(monkeypatch, tmp_path)
    want = yaml.load(TEXT, Loader=yaml_loader())
    cold = load_yaml_cached(TEXT)
    files = list(folder.glob("*.json"))
    assert len(files) == 1
    warm = load_yaml_cached(TEXT)
    assert _same(cold, want) and _same(warm, want)
    assert warm is not cold


def test_a_changed_text_has_a_new_key_and_a_corrupt_entry_is_reparsed(monkeypatch, tmp_path):
    folder = _folder(monkeypatch, tmp_path)
    load_yaml_cached(TEXT)
    (entry,) = folder.glob("*.json")
    entry.write_text("{not json")
    assert _same(load_yaml_cached(TEXT), yaml.load(TEXT, Loader=yaml_loader()))
    assert load_yaml_cached(TEXT.replace("name: x", "name: y"))["name"] == "y"
    assert len(list(folder.glob("*.json"))) == 2


@pytest.mark.parametrize("text", ["a: &s {k: 1}\nb: *s\n", "when: 2024-01-01\n", "1: one\n", "s: !!set {a, b}\n"])
def test_trees_json_cannot_reproduce_are_not_stored(monkeypatch, tmp_path, text):
    folder = _folder(monkeypatch, tmp_path)
    assert load_yaml_cached(text) == yaml.load(text, Loader=yaml_loader())
    assert not (folder.is_dir() and list(folder.glob("*.json")))


def test_a_shared_alias_stays_shared_for_set_overrides(monkeypatch, tmp_path):
    _folder(monkeypatch, tmp_path)
    for _ in range(2):
        data = load_yaml_cached("a: &s {k: 1}\nb: *s\n")
        assert data["a"] is data["b"]


def test_parse_errors_raise_as_before_and_store_nothing(monkeypatch, tmp_path):
    folder = _folder(monkeypatch, tmp_path)
    with pytest.raises(yaml.YAMLError, match="duplicate key"):
        load_yaml_cached("a: 1\na: 2\n")
    assert not folder.is_dir() or not list(folder.glob("*.json"))


def test_an_unwritable_cache_is_skipped(monkeypatch, tmp_path):
    folder = _folder(monkeypatch, tmp_path)
    folder.parent.mkdir(parents=True)
    folder.write_text("a file where the folder should be")  # mkdir fails: OSError
    assert _same(load_yaml_cached(TEXT), yaml.load(TEXT, Loader=yaml_loader()))
    assert os.path.isfile(folder)


def test_the_scenario_is_the_same_cold_and_cached(monkeypatch, tmp_path):
    folder = _folder(monkeypatch, tmp_path)
    path = REPO / "examples" / "llama3-70b-disagg-h100.yaml"
    cold = load_scenario(path)
    assert len(list(folder.glob("*.json"))) == 1
    assert load_scenario(path) == cold
    assert json.loads(next(folder.glob("*.json")).read_text()) == yaml.load(path.read_text(), Loader=yaml_loader())


def test_a_cached_run_does_not_import_pyyaml(tmp_path):
    env = {**os.environ, "XDG_CACHE_HOME": str(tmp_path / "cache")}
    code = ("import sys\n"
            "from qmodel.scenario import load_scenario\n"
            "load_scenario('examples/llama3-70b-disagg-h100.yaml')\n"
            "print('yaml' in sys.modules)\n")
    runs = [subprocess.run([sys.executable, "-c", code], cwd=REPO, env=env, capture_output=True, text=True,
                           timeout=120) for _ in range(2)]
    assert [r.returncode for r in runs] == [0, 0], runs[-1].stderr[-2000:]
    assert [r.stdout.strip() for r in runs] == ["True", "False"]
