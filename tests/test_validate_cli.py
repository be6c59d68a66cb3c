"""``qmodel validate``: JSON shape, text output, bad input."""

from __future__ import annotations

import json

from qmodel.cli.main import main


def test_validate_json_snapshot_suite(capsys):
    assert main(["validate", "--suite", "snapshot", "--no-goodput", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["suite"] == "snapshot" and len(out["scenarios"]) == 3 and out["goodput"] == []
    assert out["summary"]["tpot_p99"]["n"] == 3 and out["summary"]["goodput"]["n"] == 0
    assert {c["topology"] for c in out["scenarios"]} == {"colocated", "chunked", "disaggregated"}


def test_validate_text(capsys):
    assert main(["validate", "--suite", "snapshot", "--no-goodput"]) == 0
    text = capsys.readouterr().out
    assert "summary: median / 90th percentile" in text and "disagg-qwen7b-a100/poisson/u0.5" in text


def test_validate_bad_suite(capsys):
    assert main(["validate", "--suite", "nope"]) == 2
    err = capsys.readouterr().err
    assert "--suite" in err and "quick" in err and "\n" == err[-1] and err.count("\n") == 1


def test_validate_without_flags_runs_the_quick_suite():
    """Issue 21: a bare `qmodel validate` must not start the many-minute full suite."""
    from qmodel.cli.main import build_parser

    args = build_parser().parse_args(["validate"])
    assert args.suite == "quick" and args.progress is None


def test_validate_progress_goes_to_stderr(capsys):
    assert main(["validate", "--suite", "snapshot", "--no-goodput", "--progress"]) == 0
    out = capsys.readouterr()
    assert "validate: cases 3/3" in out.err and "summary:" in out.out
