"""``qmodel trace stats``: table and JSON output, exit 2 with line numbers on malformed rows,
skipped lines named on stderr."""

from __future__ import annotations

import json

import pytest

from qmodel.cli.main import main
from qmodel.validation.traces import clear_cache


@pytest.fixture(autouse=True)
def _fresh_cache():
    clear_cache()
    yield
    clear_cache()


MOON = "\n".join(json.dumps(r) for r in [
    {"timestamp": 0, "input_length": 1024, "output_length": 5, "hash_ids": [0, 1]},
    {"timestamp": 1000, "input_length": 1024, "output_length": 7, "hash_ids": [0, 1]},
    {"timestamp": 3000, "input_length": 1536, "output_length": 9, "hash_ids": [0, 2, 3]},
])


def test_stats_json_exact_values(tmp_path, capsys):
    p = tmp_path / "m.jsonl"
    p.write_text(MOON)
    assert main(["trace", "stats", str(p), "--json"]) == 0
    st = json.loads(capsys.readouterr().out)
    assert st["count"] == 3 and st["format"] == "mooncake"
    assert st["duration_s"] == 3.0
    assert st["mean_rate_per_s"] == pytest.approx(2 / 3, rel=1e-12)
    # gaps 1 s and 2 s: mean 1.5, population std 0.5 -> CV 1/3
    assert st["interarrival_cv"] == pytest.approx(1 / 3, rel=1e-12)
    assert st["prompt_tokens"]["mean"] == pytest.approx(3584 / 3, rel=1e-12)
    assert st["output_tokens"]["p50"] == 7.0
    # blocks: 2 (miss, miss) + 2 (hit, hit) + 3 (hit, miss, miss) -> 3 hits of 7
    assert st["prefix_block_hit_ratio"] == pytest.approx(3 / 7, rel=1e-12)


def test_stats_table(tmp_path, capsys):
    p = tmp_path / "m.jsonl"
    p.write_text(MOON)
    assert main(["trace", "stats", str(p)]) == 0
    out = capsys.readouterr().out
    assert "requests   3" in out and "mean rate  0.667 req/s" in out and "42.9%" in out
    assert "prompt tokens" in out and "output tokens" in out


def test_lengths_only_table(tmp_path, capsys):
    p = tmp_path / "l.csv"
    p.write_text("num_prefill_tokens,num_decode_tokens\n5,6\n7,8\n")
    assert main(["trace", "stats", str(p), "--format", "vidur"]) == 0
    assert "lengths-only" in capsys.readouterr().out


def test_malformed_rows_exit_2_with_line_numbers(tmp_path, capsys):
    p = tmp_path / "bad.csv"
    p.write_text("arrival_s,prompt_tokens,output_tokens\n0,1,1\nx,2,2\n1,3,3\n2,0,1\n")
    assert main(["trace", "stats", str(p)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1  # one line, no traceback
    assert "line 3: arrival_s 'x' is not a number" in err and "line 5:" in err


def test_skip_bad_rows_prints_skipped_lines(tmp_path, capsys):
    p = tmp_path / "bad.csv"
    p.write_text("arrival_s,prompt_tokens,output_tokens\n0,1,1\nx,2,2\n1,3,3\n2,0,1\n")
    assert main(["trace", "stats", str(p), "--skip-bad-rows", "--json"]) == 0
    cap = capsys.readouterr()
    assert "skipped 2 malformed row(s) at line(s) 3, 5" in cap.err
    st = json.loads(cap.out)
    assert st["count"] == 2 and st["skipped_lines"] == [3, 5]


def test_missing_file_and_unknown_format(tmp_path, capsys):
    assert main(["trace", "stats", str(tmp_path / "none.csv")]) == 2
    assert "no such trace file" in capsys.readouterr().err
    with pytest.raises(SystemExit) as ei:
        main(["trace", "stats", "x.csv", "--format", "parquet"])
    assert ei.value.code == 2


def test_real_azure_conv_cli(data_dir, capsys):
    path = data_dir / "azure_llm_2023/AzureLLMInferenceTrace_conv.csv"
    if not path.exists():
        pytest.skip("azure conv trace not in the data folder")
    assert main(["trace", "stats", str(path), "--json"]) == 0
    st = json.loads(capsys.readouterr().out)
    # README: 19,366 rows, 5.53 req/s, IA CV 1.09, input mean 1,154.7 (half a unit in the last digit)
    assert st["count"] == 19366
    assert st["mean_rate_per_s"] == pytest.approx(5.53, abs=0.005)
    assert st["interarrival_cv"] == pytest.approx(1.09, abs=0.005)
    assert st["prompt_tokens"]["mean"] == pytest.approx(1154.7, abs=0.05)
    assert st["prefix_block_hit_ratio"] is None


def test_stats_with_jitter_seed(tmp_path, capsys):
    p = tmp_path / "m.jsonl"
    p.write_text(MOON)
    assert main(["trace", "stats", str(p), "--json", "--jitter-seed", "1"]) == 0
    st = json.loads(capsys.readouterr().out)
    assert st["count"] == 3 and st["zero_gap_fraction"] == 0.0


def test_cli_format_choices_match_loader_formats():
    from qmodel.cli.cmd_trace import _FORMATS
    from qmodel.validation.traces import FORMATS

    assert _FORMATS == ("auto", *FORMATS)
