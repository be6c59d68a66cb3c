"""Bad input through the CLI: one line on stderr naming field and value, exit code 2, no traceback."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from qmodel.cli.main import main

EX = Path(__file__).resolve().parent.parent / "examples" / "llama3-70b-disagg-h100.yaml"


def run(capsys, *argv: str) -> tuple[int, str, str]:
    rc = main(list(argv))
    out, err = capsys.readouterr()
    return rc, out, err


@pytest.mark.parametrize("override, fragment", [
    ("model=llama-3.1-70", "did you mean 'llama-3.1-70b'"),
    ("deployment.prefill.gpu=h100", "h100-sxm"),
    ("deployment.link=infiniband", "unknown link"),
    ("slo.ttft_s=1 parsec", "slo.ttft_s"),
    ("workload.arrivals.rate_per_s=-3", "workload.arrivals.rate_per_s"),
    ("deployment.prefill.tp=3", "deployment.prefill.tp"),
    ("deployment.decode.tp=5", "deployment.decode.tp"),
    ("deployment.link_bandwidth_bytes_per_s=400 Gbit", "deployment.link_bandwidth_bytes_per_s"),
])
def test_bad_input_exit_2_one_line(capsys, override, fragment):
    rc, out, err = run(capsys, "solve", str(EX), "--set", override)
    assert rc == 2, err
    lines = [ln for ln in err.splitlines() if ln.strip()]
    assert len(lines) == 1, err
    assert fragment in lines[0]
    assert "Traceback" not in err and out == ""


def test_model_that_does_not_fit_names_pool_and_memory(capsys):
    # 405B in bf16 is ~811 GB of weights: it cannot fit 8 x 80 GB per instance.
    rc, _, err = run(capsys, "solve", str(EX), "--set", "model=llama-3.1-405b", "--set", "deployment.prefill.tp=8")
    assert rc == 2
    assert "deployment.prefill.tp" in err and "GB per GPU" in err and "at least" in err
    assert len(err.strip().splitlines()) == 1


def test_unstable_exit_3_names_station(capsys):
    rc, _, err = run(capsys, "solve", str(EX), "--rate", "500")
    assert rc == 3
    assert "unstable" in err and "largest stable rate" in err
    assert len(err.strip().splitlines()) == 1


def test_missing_file_and_bad_rate_flag(capsys):
    rc, _, err = run(capsys, "solve", "no-such-scenario.yaml")
    assert rc == 2 and "no such file" in err
    rc, _, err = run(capsys, "solve", str(EX), "--rate", "fast")
    assert rc == 2 and "--rate" in err


def test_solve_json_shape(capsys):
    rc, out, _ = run(capsys, "solve", str(EX), "--json")
    assert rc == 0
    d = json.loads(out)
    for k in ("ttft", "tpot"):
        assert set(d[k]) == {"mean_s", "p50_s", "p90_s", "p99_s"}
    assert {"attainment", "stations", "binding", "inputs_sha256"} <= set(d)
    assert all({"name", "utilization"} <= set(s) for s in d["stations"])


def test_goodput_json_shape(capsys):
    rc, out, _ = run(capsys, "goodput", str(EX), "--json")
    assert rc == 0
    d = json.loads(out)
    assert {"goodput_rps", "goodput_per_gpu", "attainment_at_goodput", "binding"} <= set(d)
    assert d["attainment_at_goodput"] >= 0.9


def test_sweep_csv_and_unstable_rows(capsys):
    rc, out, _ = run(capsys, "sweep", str(EX), "--rate", "2:30:14", "--csv")
    assert rc == 0
    rows = out.strip().splitlines()
    assert rows[0].startswith("rate_per_s,attainment")
    assert len(rows) == 4
    assert "unstable: prefill" in rows[-1]
    assert "nan" not in out.lower() and "inf" not in out.lower()
