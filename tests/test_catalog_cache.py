"""The compiled catalog: each TOML file's parse is kept as JSON under the SHA-256 of its text, so a
cold `qmodel` process reads JSON instead of parsing TOML; a changed file gets a new key, a broken or
unwritable cache is skipped, and the catalog is the same either way."""

from __future__ import annotations

import hashlib
import os

from qmodel import registry


def _fresh(monkeypatch, tmp_path):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    registry.clear_cache()
    return tmp_path / "cache" / "qmodel" / "catalog"


def test_cache_is_written_then_read_and_gives_the_same_catalog(monkeypatch, tmp_path):
    folder = _fresh(monkeypatch, tmp_path)
    cold = registry._load(str(tmp_path / "none"))
    files = sorted(folder.glob("*.json"))
    assert len(files) >= 7
    registry.clear_cache()
    warm = registry._load(str(tmp_path / "none"))
    assert warm.names() == cold.names() and warm.model("llama-3.1-70b") == cold.model("llama-3.1-70b")
    registry.clear_cache()


def test_a_changed_text_has_a_new_key_and_a_corrupt_entry_is_reparsed(monkeypatch, tmp_path):
    folder = _fresh(monkeypatch, tmp_path)
    text = '[[link]]\nname = "x"\n'
    assert registry.parse_toml_cached(text, "t") == {"link": [{"name": "x"}]}
    key = folder / f"{hashlib.sha256(text.encode()).hexdigest()}.json"
    assert key.is_file()
    key.write_text("{not json")
    assert registry.parse_toml_cached(text, "t") == {"link": [{"name": "x"}]}
    other = text.replace('"x"', '"y"')
    assert registry.parse_toml_cached(other, "t") == {"link": [{"name": "y"}]}
    assert len(list(folder.glob("*.json"))) == 2


def test_an_unwritable_cache_is_skipped(monkeypatch, tmp_path):
    folder = _fresh(monkeypatch, tmp_path)
    folder.parent.mkdir(parents=True)
    folder.write_text("a file where the folder should be")  # mkdir fails: OSError
    assert registry.parse_toml_cached('a = 1\n', "t") == {"a": 1}
    assert os.path.isfile(folder)
