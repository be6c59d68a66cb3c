"""Every trace loader on small inline files: exact values, malformed rows with line numbers,
skip mode, auto-detection, sorting, jitter, caching and checksums."""

from __future__ import annotations

import gzip
import hashlib
import json
import os
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from qmodel.errors import DataError, InputError, TraceRowError
from qmodel.validation.traces import (clear_cache, detect_format, load_trace, require_arrivals,
                                      write_qmodel_csv)


from tests.trace_files import fresh_trace_cache, write_trace as _write  # noqa: F401 (autouse fixture)


AZURE = ("TIMESTAMP,ContextTokens,GeneratedTokens\n"
         "2023-11-16 18:15:46.6805900,374,44\n"
         "2023-11-16 18:15:50.9951690,396,109\n"
         "2023-11-16 18:15:51.0000001,10,7")  # no trailing newline, like the real files


# ---- azure ----------------------------------------------------------------------------------------

def test_azure_exact_times_and_lengths(tmp_path):
    tr = load_trace(_write(tmp_path, "a.csv", AZURE))
    assert tr.format == "azure" and len(tr) == 3
    # 7 fractional digits are parsed in integer ns, so the only error is the final float64
    # rounding of a ~4 s value (~1e-15 s); 1e-12 s leaves room and still catches any truncation
    # to microseconds (which would be off by 1e-7 s in the last row).
    np.testing.assert_allclose(tr.arrival_s, [0.0, 4.314579, 4.3194101], rtol=0, atol=1e-12)
    assert tr.prompt_tokens.tolist() == [374, 396, 10]
    assert tr.output_tokens.tolist() == [44, 109, 7]
    assert tr.prompt_tokens.dtype == np.int64 and tr.arrival_s.dtype == np.float64
    assert tr.meta["first_timestamp"] == "2023-11-16 18:15:46.680590"
    assert tr.meta["lengths_only"] is False


def test_azure_malformed_rows_name_every_line(tmp_path):
    text = ("TIMESTAMP,ContextTokens,GeneratedTokens\n"
            "2023-11-16 18:15:46.6805900,374,44\n"
            "2023-11-16 25:15:46.6805900,374,44\n"   # line 3: hour 25
            "2023-11-16 18:15:47.0,374\n"            # line 4: two fields
            "2023-11-16 18:15:48.0,abc,44\n"         # line 5: not a number
            "2023-11-16 18:15:49.0,12,0\n"           # line 6: zero output tokens
            "2023-11-16 18:15:50.0,12.5,3\n"         # line 7: fractional tokens
            "2023-11-16 18:15:51.0,12,3")
    p = _write(tmp_path, "bad.csv", text)
    with pytest.raises(TraceRowError) as ei:
        load_trace(p)
    assert [ln for ln, _ in ei.value.bad] == [3, 4, 5, 6, 7]
    msg = str(ei.value)
    assert "5 malformed row(s)" in msg and "line 3:" in msg and "line 4: expected 3 fields, got 2" in msg
    assert ei.value.exit_code == 2


def test_skip_mode_records_skipped_lines(tmp_path):
    text = AZURE.replace("396,109", "396,x")
    tr = load_trace(_write(tmp_path, "a.csv", text), on_error="skip")
    assert len(tr) == 2
    assert tr.meta["skipped_lines"] == [3]
    assert tr.meta["skipped"][0].startswith("line 3: GeneratedTokens 'x'")


def test_azure_without_fraction_and_with_T_separator(tmp_path):
    text = "TIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16T23:59:59,1,1\n2023-11-17 00:00:00.5,2,2\n"
    tr = load_trace(_write(tmp_path, "a.csv", text))
    np.testing.assert_allclose(tr.arrival_s, [0.0, 1.5], rtol=0, atol=1e-12)  # crosses midnight


# ---- mooncake -------------------------------------------------------------------------------------

MOON = "\n".join(json.dumps(r) for r in [
    {"timestamp": 0, "input_length": 600, "output_length": 5, "hash_ids": [0, 1]},
    {"timestamp": 0, "input_length": 700, "output_length": 6, "hash_ids": [0, 2]},
    {"timestamp": 3000, "input_length": 100, "output_length": 7, "hash_ids": [3]},
    {"timestamp": 6001, "input_length": 1100, "output_length": 8, "hash_ids": [0, 2, 4]},
]) + "\n"


def test_mooncake_ms_to_seconds_and_hash_ids(tmp_path):
    tr = load_trace(_write(tmp_path, "m.jsonl", MOON))
    assert tr.format == "mooncake"
    np.testing.assert_array_equal(tr.arrival_s, [0.0, 0.0, 3.0, 6.001])
    assert tr.hash_ids == ((0, 1), (0, 2), (3,), (0, 2, 4))
    assert tr.block_tokens == 512
    assert tr.meta["distinct_arrivals"] == 3


def test_mooncake_jitter_is_deterministic_in_slot_and_order_keeping(tmp_path):
    p = _write(tmp_path, "m.jsonl", MOON)
    a = load_trace(p, jitter_seed=3)
    b = load_trace(p, jitter_seed=3)
    c = load_trace(p, jitter_seed=4)
    np.testing.assert_array_equal(a.arrival_s, b.arrival_s)
    assert not np.array_equal(a.arrival_s, c.arrival_s)
    assert np.all(np.diff(a.arrival_s) >= 0) and a.arrival_s[0] == 0.0
    # Slots: [0, 3) for the first two requests, [3, 6.001) for the third; the last slot gets the
    # median slot width (3.0005 s), so [6.001, 9.0015).
    t = a.arrival_s + a.meta["jitter_shift_s"]
    assert 0 <= t[0] <= t[1] < 3.0 <= t[2] < 6.001 <= t[3] < 9.0015
    assert a.meta["jitter_seed"] == 3
    assert a.prompt_tokens.tolist() == [600, 700, 100, 1100]  # order kept
    assert a.hash_ids == load_trace(p).hash_ids


def test_mooncake_malformed_lines(tmp_path):
    text = MOON + '{"timestamp": 9000, "input_length": 5}\nnot json\n[1,2]\n{"timestamp": -1, "input_length": 5, "output_length": 1}\n'
    with pytest.raises(TraceRowError) as ei:
        load_trace(_write(tmp_path, "m.jsonl", text))
    assert [ln for ln, _ in ei.value.bad] == [5, 6, 7, 8]
    assert "missing key(s) output_length" in str(ei.value)
    assert "not valid JSON" in str(ei.value)


# ---- splitwise / vidur / sharegpt / distserve -------------------------------------------------------

def test_splitwise_trace(tmp_path):
    text = ("request_id,request_type,application_id,arrival_timestamp,batch_size,prompt_size,token_size\n"
            "0,2,0,1,1,4096,32\n1,2,0,3,1,2048,8\n2,2,0,4.5,1,2048,16\n")
    tr = load_trace(_write(tmp_path, "rr_conv_50.csv", text))
    assert tr.format == "splitwise"
    np.testing.assert_array_equal(tr.arrival_s, [0.0, 2.0, 3.5])
    assert tr.meta["time_offset_s"] == 1.0
    assert tr.prompt_tokens.tolist() == [4096, 2048, 2048] and tr.output_tokens.tolist() == [32, 8, 16]


def test_vidur_lengths_only(tmp_path):
    text = "num_prefill_tokens,num_decode_tokens,num_total_tokens,pd_ratio\n3772,54,3826,69.8\n2015,156,2171,12.9\n"
    tr = load_trace(_write(tmp_path, "arxiv_stats.csv", text))
    assert tr.format == "vidur"
    assert tr.meta["lengths_only"] is True
    np.testing.assert_array_equal(tr.arrival_s, [0.0, 0.0])
    assert tr.prompt_tokens.tolist() == [3772, 2015]
    with pytest.raises(InputError, match="no arrival times"):
        require_arrivals(tr)


def test_vidur_with_arrivals(tmp_path):
    text = "arrived_at,num_prefill_tokens,num_decode_tokens\n0.5,10,2\n0.25,20,3\n"
    tr = load_trace(_write(tmp_path, "splitwise_conv.csv", text))
    assert tr.meta["lengths_only"] is False and tr.meta["resorted"] is True
    np.testing.assert_array_equal(tr.arrival_s, [0.0, 0.25])
    assert tr.prompt_tokens.tolist() == [20, 10]  # rows follow their times
    assert require_arrivals(tr) is tr


def test_sharegpt_detected_by_name(tmp_path):
    text = "num_prefill_tokens,num_decode_tokens,num_total_tokens,pd_ratio\n74,918,992,0.08\n"
    assert load_trace(_write(tmp_path, "sharegpt_8k_stats.csv", text)).format == "sharegpt"


def test_distserve_pairs_triples_and_objects(tmp_path):
    p = _write(tmp_path, "ds.json", '[[10, 2],\n ["hello", 20, 3],\n {"prompt_len": 30, "output_len": 4},\n {"prompt_len": 40, "decode_len": 5}]')
    tr = load_trace(p)
    assert tr.format == "distserve" and tr.meta["lengths_only"] is True
    assert tr.prompt_tokens.tolist() == [10, 20, 30, 40]
    assert tr.output_tokens.tolist() == [2, 3, 4, 5]


def test_distserve_bad_items_carry_their_line(tmp_path):
    p = _write(tmp_path, "ds.json", '[\n  [10, 2],\n  [10],\n  [0, 5],\n  [7, 7]\n]\n')
    with pytest.raises(TraceRowError) as ei:
        load_trace(p)
    assert [ln for ln, _ in ei.value.bad] == [3, 4]


def test_distserve_broken_json_names_line(tmp_path):
    with pytest.raises(DataError, match="line 2"):
        load_trace(_write(tmp_path, "ds.json", '[[1, 2],\n [3, 4}\n]'))


# ---- qmodel format --------------------------------------------------------------------------------

def test_qmodel_csv_with_hash_ids_and_comments(tmp_path):
    text = "# made by hand\narrival_s,prompt_tokens,output_tokens,hash_ids\n0,600,5,0 1\n0.5,100,7,\"[0, 2]\"\n1.25,10,1,\n"
    tr = load_trace(_write(tmp_path, "q.csv", text))
    assert tr.format == "qmodel"
    np.testing.assert_array_equal(tr.arrival_s, [0.0, 0.5, 1.25])
    assert tr.hash_ids == ((0, 1), (0, 2), ())


def test_qmodel_jsonl(tmp_path):
    text = '{"arrival_s": 0.0, "prompt_tokens": 5, "output_tokens": 2}\n\n{"arrival_s": 2.5, "prompt_tokens": 6, "output_tokens": 3}\n'
    tr = load_trace(_write(tmp_path, "q.jsonl", text))
    assert tr.format == "qmodel" and tr.hash_ids is None
    np.testing.assert_array_equal(tr.arrival_s, [0.0, 2.5])


def test_qmodel_csv_bad_rows(tmp_path):
    text = "arrival_s,prompt_tokens,output_tokens\n0,1,1\nnan,1,1\n1,1,-3\ninf,2,2\n"
    with pytest.raises(TraceRowError) as ei:
        load_trace(_write(tmp_path, "q.csv", text))
    assert [ln for ln, _ in ei.value.bad] == [3, 4, 5]


@settings(max_examples=25, deadline=None)
@given(st.lists(st.tuples(st.floats(0, 1e6, allow_nan=False), st.integers(1, 10**6), st.integers(1, 10**5),
                          st.lists(st.integers(0, 10**9), max_size=4)), min_size=1, max_size=30))
def test_qmodel_csv_round_trip(tmp_path_factory, rows):
    from qmodel.validation.trace_types import Trace

    rows = sorted(rows, key=lambda r: r[0])
    t = np.array([r[0] for r in rows]) - rows[0][0]
    tr = Trace(t, np.array([r[1] for r in rows]), np.array([r[2] for r in rows]), "x", "qmodel", "0",
               hash_ids=tuple(tuple(r[3]) for r in rows))
    p = write_qmodel_csv(tr, tmp_path_factory.mktemp("rt") / "t.csv")
    back = load_trace(p)
    np.testing.assert_array_equal(back.arrival_s, tr.arrival_s)  # repr() round-trips float64 exactly
    np.testing.assert_array_equal(back.prompt_tokens, tr.prompt_tokens)
    np.testing.assert_array_equal(back.output_tokens, tr.output_tokens)
    assert back.hash_ids == tr.hash_ids


# ---- detection, errors, cache, checksum -------------------------------------------------------------

def test_unknown_header_is_one_clear_error(tmp_path):
    with pytest.raises(DataError, match="cannot tell the trace format.*pass --format"):
        load_trace(_write(tmp_path, "x.csv", "a,b,c\n1,2,3\n"))


def test_explicit_format_with_wrong_columns(tmp_path):
    with pytest.raises(DataError, match="not a splitwise trace: missing column"):
        load_trace(_write(tmp_path, "a.csv", AZURE), format="splitwise")


def test_missing_file_empty_file_and_bad_options(tmp_path):
    with pytest.raises(DataError, match="no such trace file"):
        load_trace(tmp_path / "nope.csv")
    with pytest.raises(DataError, match="no requests"):
        load_trace(_write(tmp_path, "e.csv", "TIMESTAMP,ContextTokens,GeneratedTokens\n"))
    with pytest.raises(InputError, match="format"):
        load_trace(_write(tmp_path, "a.csv", AZURE), format="parquet")
    with pytest.raises(InputError, match="on_error"):
        load_trace(tmp_path / "a.csv", on_error="ignore")  # type: ignore[arg-type]
    with pytest.raises(DataError, match="no valid requests"):
        load_trace(_write(tmp_path, "b.csv", "arrival_s,prompt_tokens,output_tokens\nx,1,1\n"), on_error="skip")


def test_gzip_and_checksum_of_stored_bytes(tmp_path):
    raw = gzip.compress(MOON.encode())
    p = tmp_path / "m.jsonl.gz"
    p.write_bytes(raw)
    tr = load_trace(p)
    assert tr.format == "mooncake" and len(tr) == 4
    assert tr.sha256 == hashlib.sha256(raw).hexdigest()


def test_cache_hits_and_invalidation(tmp_path):
    p = _write(tmp_path, "a.csv", AZURE)
    a = load_trace(p)
    assert load_trace(p) is a
    assert load_trace(str(p)) is a
    with pytest.raises(ValueError):
        a.arrival_s[0] = 5.0  # cached arrays are read-only
    st0 = p.stat()
    p.write_bytes((AZURE + "\n2023-11-16 18:16:00.0,1,1").encode())
    os.utime(p, ns=(st0.st_atime_ns, st0.st_mtime_ns + 10**9))  # a new (mtime, size) key
    b = load_trace(p)
    assert b is not a and len(b) == 4


def test_data_prefix_resolves_under_data_dir(tmp_path, monkeypatch):
    (tmp_path / "sub").mkdir()
    _write(tmp_path / "sub", "a.csv", AZURE)
    monkeypatch.setenv("QMODEL_DATA_DIR", str(tmp_path))
    assert len(load_trace("data:sub/a.csv")) == 3


def test_detect_format_table(tmp_path):
    assert detect_format("x.csv", AZURE) == "azure"
    assert detect_format("x.jsonl", MOON) == "mooncake"
    assert detect_format("x.json", "[[1,2]]") == "distserve"
    assert detect_format("x.csv", "arrival_s,prompt_tokens,output_tokens\n") == "qmodel"


def test_arrival_stats_refuses_lengths_only_trace(tmp_path):
    from qmodel.scenario import Workload
    from qmodel.workload import arrival_stats

    p = _write(tmp_path, "l.csv", "num_prefill_tokens,num_decode_tokens\n5,6\n7,8\n")
    w = Workload.model_validate({"arrivals": {"kind": "trace", "path": str(p)},
                                 "lengths": {"kind": "fixed", "prompt_tokens": 1, "output_tokens": 1}})
    with pytest.raises(InputError, match="workload.arrivals.path.*no arrival times"):
        arrival_stats(w)


def test_arrival_stats_of_a_trace(tmp_path):
    from qmodel.scenario import Workload
    from qmodel.workload import arrival_stats

    p = _write(tmp_path, "q.csv", "arrival_s,prompt_tokens,output_tokens\n0,1,1\n1,1,1\n3,1,1\n")
    w = Workload.model_validate({"arrivals": {"kind": "trace", "path": str(p)},
                                 "lengths": {"kind": "empirical", "path": str(p)}})
    rate, ca2 = arrival_stats(w)
    # gaps 1 and 2 s: rate (3-1)/3 s; squared CV var/mean^2 = 0.25/2.25
    assert rate == pytest.approx(2 / 3, rel=1e-12) and ca2 == pytest.approx(1 / 9, rel=1e-12)


@settings(max_examples=30, deadline=None)
@given(st.lists(st.integers(0, 40), min_size=2, max_size=60), st.integers(0, 2**32 - 1))
def test_jitter_keeps_every_request_in_its_slot(tmp_path_factory, slots, seed):
    slots = sorted(slots)
    text = "arrival_s,prompt_tokens,output_tokens\n" + "".join(f"{3 * s},{i + 1},1\n" for i, s in enumerate(slots))
    p = tmp_path_factory.mktemp("j") / "q.csv"
    p.write_text(text)
    raw = load_trace(p)
    jit = load_trace(p, jitter_seed=seed)
    t = jit.arrival_s + jit.meta["jitter_shift_s"] + raw.meta["time_offset_s"]
    u = np.unique(np.array(slots) * 3.0)
    width = np.append(np.diff(u), np.median(np.diff(u))) if len(u) > 1 else np.array([np.inf])
    k = np.searchsorted(u, np.array(slots) * 3.0)
    if len(u) > 1:
        assert np.all(t >= u[k] - 1e-9) and np.all(t < u[k] + width[k] + 1e-9)
    assert np.all(np.diff(jit.arrival_s) >= 0)
    np.testing.assert_array_equal(jit.prompt_tokens, raw.prompt_tokens)
