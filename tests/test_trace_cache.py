"""The on-disk cache of parsed traces (validation/trace_cache.py): a second process reads back exactly
the trace the parser made, never a stale or corrupt one.

"A second process" is simulated by clearing the in-memory cache (``clear_cache``); a hit is proven
by making the parser raise. Equality is exact: arrays bit for bit (``tobytes``), dtypes, meta (with
its key order), hash ids, checksum, source and format.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from qmodel.settings import cache_dir
from qmodel.validation import trace_cache, traces
from qmodel.validation.traces import clear_cache, load_trace

from tests.trace_files import fresh_trace_cache, write_trace  # noqa: F401 (autouse fixture)

AZURE = ("TIMESTAMP,ContextTokens,GeneratedTokens\n"
         "2023-11-16 18:15:46.6805900,374,44\n"
         "2023-11-16 18:15:50.9951690,396,109\n"
         "2023-11-16 18:15:45.0000001,10,7\n"  # out of order: resorted
         "2023-11-16 18:15:52.1234567,xx,7")  # a bad row (skip mode)
MOON = "\n".join(json.dumps(r) for r in [
    {"timestamp": 0, "input_length": 600, "output_length": 5, "hash_ids": [0, 1]},
    {"timestamp": 0, "input_length": 700, "output_length": 6, "hash_ids": []},
    {"timestamp": 3000, "input_length": 100, "output_length": 7, "hash_ids": [2**62, 3]},
    {"timestamp": 6001, "input_length": 1100, "output_length": 8, "hash_ids": [0, 2, 4]},
]) + "\n"


@pytest.fixture(autouse=True)
def own_cache(tmp_path, monkeypatch) -> Path:
    monkeypatch.setenv("QMODEL_CACHE_DIR", str(tmp_path / "cache"))
    return tmp_path / "cache"


def _no_parse(monkeypatch) -> None:
    def refuse(*a, **k):
        raise AssertionError("parsed although the cache holds this trace")

    monkeypatch.setattr(traces, "_parse", refuse)


def _same(a, b) -> None:
    for name in ("arrival_s", "prompt_tokens", "output_tokens"):
        x, y = getattr(a, name), getattr(b, name)
        assert x.dtype == y.dtype and x.tobytes() == y.tobytes(), name
        assert not y.flags.writeable
    assert (a.source, a.format, a.sha256, a.hash_ids, a.block_tokens) == (b.source, b.format, b.sha256, b.hash_ids, b.block_tokens)
    assert list(a.meta.items()) == list(b.meta.items())


def _entries(root: Path) -> list[Path]:
    return sorted((root / "traces").glob("*.qtr"))


def test_cache_dir_override(monkeypatch, tmp_path):
    monkeypatch.setenv("QMODEL_CACHE_DIR", str(tmp_path / "x"))
    assert cache_dir() == tmp_path / "x"
    monkeypatch.delenv("QMODEL_CACHE_DIR")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert cache_dir() == tmp_path / "xdg" / "qmodel"


@pytest.mark.parametrize("name,text,kw", [
    ("a.csv", AZURE, {"on_error": "skip"}),
    ("a.csv", AZURE, {"on_error": "skip", "jitter_seed": 5}),
    ("m.jsonl", MOON, {}),
    ("m.jsonl", MOON, {"jitter_seed": 3}),
])
def test_a_second_process_reads_the_parsed_trace_back_exactly(tmp_path, monkeypatch, own_cache, name, text, kw):
    p = write_trace(tmp_path, name, text)
    first = load_trace(p, **kw)
    assert len(_entries(own_cache)) == 1
    clear_cache()
    _no_parse(monkeypatch)
    again = load_trace(p, **kw)
    _same(first, again)


def test_options_have_their_own_entries(tmp_path, monkeypatch, own_cache):
    p = write_trace(tmp_path, "m.jsonl", MOON)
    plain, jittered = load_trace(p), load_trace(p, jitter_seed=1)
    assert len(_entries(own_cache)) == 2
    clear_cache()
    _no_parse(monkeypatch)
    _same(plain, load_trace(p))
    _same(jittered, load_trace(p, jitter_seed=1))


def test_an_edit_that_keeps_size_and_mtime_is_still_seen(tmp_path, own_cache):
    p = write_trace(tmp_path, "a.csv", AZURE)
    st = p.stat()
    before = load_trace(p, on_error="skip")
    p.write_bytes(AZURE.replace("374,44", "375,44").encode())  # same size
    os.utime(p, ns=(st.st_atime_ns, st.st_mtime_ns))  # same mtime
    clear_cache()
    after = load_trace(p, on_error="skip")
    assert int(before.prompt_tokens[1]) == 374 and int(after.prompt_tokens[1]) == 375
    assert before.sha256 != after.sha256
    assert len(_entries(own_cache)) == 1  # the entry was overwritten, not added to
    clear_cache()
    assert int(load_trace(p, on_error="skip").prompt_tokens[1]) == 375


@pytest.mark.parametrize("damage", ["flip-payload", "truncate", "garbage", "empty", "header-lies"])
def test_a_corrupt_entry_is_ignored_and_rebuilt(tmp_path, monkeypatch, own_cache, damage):
    p = write_trace(tmp_path, "m.jsonl", MOON)
    good = load_trace(p)
    (entry,) = _entries(own_cache)
    blob = bytearray(entry.read_bytes())
    if damage == "flip-payload":
        blob[-3] ^= 0x40
    elif damage == "truncate":
        del blob[-5:]
    elif damage == "garbage":
        blob = bytearray(b"\x00not a cache entry" * 3)
    elif damage == "empty":
        blob = bytearray()
    else:  # a header claiming other rows' count over the same bytes: the layout check refuses it
        blob = bytearray(bytes(blob).replace(b'"n": 4', b'"n": 3'))
    entry.write_bytes(bytes(blob))
    clear_cache()
    calls = []
    parse = traces._parse
    monkeypatch.setattr(traces, "_parse", lambda *a: calls.append(1) or parse(*a))
    _same(good, load_trace(p))
    assert calls == [1]  # not trusted: parsed again
    clear_cache()
    _same(good, load_trace(p))
    assert calls == [1]  # and rewritten whole
    assert trace_cache.MAGIC in entry.read_bytes()


def test_an_unwritable_cache_is_skipped(tmp_path, monkeypatch):
    blocker = tmp_path / "not-a-folder"
    blocker.write_text("x")
    monkeypatch.setenv("QMODEL_CACHE_DIR", str(blocker))
    p = write_trace(tmp_path, "a.csv", AZURE)
    a = load_trace(p, on_error="skip")
    clear_cache()
    _same(a, load_trace(p, on_error="skip"))


def test_a_changed_loader_is_not_served_the_old_loaders_result(tmp_path, monkeypatch, own_cache):
    p = write_trace(tmp_path, "m.jsonl", MOON)
    good = load_trace(p)
    clear_cache()
    monkeypatch.setattr(trace_cache, "code_digest", lambda: "another parser")
    calls = []
    parse = traces._parse
    monkeypatch.setattr(traces, "_parse", lambda *a: calls.append(1) or parse(*a))
    _same(good, load_trace(p))
    assert calls == [1]
    assert len(_entries(own_cache)) == 1  # the entry was replaced, not added to
    clear_cache()
    load_trace(p)
    assert calls == [1]


def test_the_code_digest_covers_every_module_the_loader_imports():
    """The qmodel modules reachable from traces.py's imports, less the error classes and the data
    folder lookup, are all in the digest: a fix to any of them is a cache miss."""
    import ast
    import importlib.util

    assert trace_cache.code_digest() is not None
    outside = {"qmodel.errors", "qmodel.settings"}
    seen, todo = set(), ["qmodel.validation.traces"]
    while todo:
        name = todo.pop()
        if name in seen or name in outside or importlib.util.find_spec(name).submodule_search_locations:
            continue  # a package's __init__ is reached through its modules
        seen.add(name)
        tree = ast.parse(Path(importlib.util.find_spec(name).origin).read_text())
        for node in ast.walk(tree):
            mods = [node.module] if isinstance(node, ast.ImportFrom) and node.module else \
                [a.name for a in node.names] if isinstance(node, ast.Import) else []
            todo += [m for m in mods if m.startswith("qmodel.")]
            if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("qmodel"):
                todo += [f"{node.module}.{a.name}" for a in node.names
                         if importlib.util.find_spec(node.module).submodule_search_locations
                         and importlib.util.find_spec(f"{node.module}.{a.name}") is not None]
    assert seen == set(trace_cache.LOADER_MODULES)


def test_malformed_rows_are_reported_every_time(tmp_path, own_cache):
    from qmodel.errors import TraceRowError

    p = write_trace(tmp_path, "a.csv", AZURE)
    for _ in range(2):
        clear_cache()
        with pytest.raises(TraceRowError):
            load_trace(p)
    assert _entries(own_cache) == []


def test_a_trace_json_cannot_hold_exactly_is_not_cached(tmp_path, monkeypatch, own_cache):
    p = write_trace(tmp_path, "m.jsonl", MOON)
    assemble = traces.assemble_trace

    def with_tuple(*a):
        t = assemble(*a)
        t.meta["shape"] = (1, 2)  # JSON would give back a list
        return t

    monkeypatch.setattr(traces, "assemble_trace", with_tuple)
    assert load_trace(p).meta["shape"] == (1, 2)
    assert _entries(own_cache) == []
