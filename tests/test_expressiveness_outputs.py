"""The issue-18 §3 outputs reach every front end: ``rejected_fraction`` and TBT in ``solve`` and
``replay`` (text and JSON) and in the TUI's results panel, each where the scenario sets the field
and absent where it does not (docs/methods.md, "KV reservation, context window, TPOT and TBT").
The numbers are the library's (test_expressiveness.py checks them); here, that they are shown.
"""

from __future__ import annotations

import copy
import io
import json
from pathlib import Path

import yaml

from qmodel.cli.main import main
from qmodel.scenario import parse_scenario
from qmodel.solver import Solver
from qmodel.units import format_duration

from test_expressiveness import BASE


def _lengths(tmp_path: Path) -> str:
    """Ten requests; three exceed a 2048-token window (prompt + output 2100, 3000, 5000): 30% refused."""
    rows = [(1000, 100)] * 6 + [(2000, 100), (2900, 100), (4000, 1000), (1500, 548)]
    path = tmp_path / "lengths.csv"
    path.write_text("arrival_s,prompt_tokens,output_tokens\n"
                    + "".join(f"{i * 0.1},{p},{o}\n" for i, (p, o) in enumerate(rows)))
    return str(path)


def _file(tmp_path: Path, **workload_slo: object) -> Path:
    d = copy.deepcopy(BASE)
    d["workload"]["arrivals"]["rate_per_s"] = 0.5
    for key, value in workload_slo.items():
        section, field = key.split("__")
        d[section][field] = value
    path = tmp_path / "s.yaml"
    path.write_text(yaml.safe_dump(d))
    return path


def _reject(tmp_path: Path) -> Path:
    path = _file(tmp_path, workload__lengths={"kind": "empirical", "path": _lengths(tmp_path), "format": "qmodel"},
                 workload__context_overflow="reject", slo__tpot_definition="per_token")
    d = yaml.safe_load(path.read_text())
    d["deployment"]["max_context_tokens"] = 2048
    path.write_text(yaml.safe_dump(d))
    return path


def _run(capsys, *argv: str) -> str:
    assert main(list(argv)) == 0
    return capsys.readouterr().out


def test_solve_text_and_json_show_rejected_and_tbt(tmp_path, capsys):
    path = _reject(tmp_path)
    res = Solver(parse_scenario(yaml.safe_load(path.read_text()))).solve(0.5)
    data = json.loads(_run(capsys, "solve", str(path), "--json"))
    assert data["rejected_fraction"] == 0.3 and data["tbt"]["p90_s"] == res.tbt.p90
    text = _run(capsys, "solve", str(path))
    assert "rejected: 30.00% of requests exceed the context window" in text
    tbt_row = next(line for line in text.splitlines() if line.strip().startswith("TBT"))
    assert format_duration(res.tbt.p90) in tbt_row
    plain = _file(tmp_path)
    assert "rejected_fraction" not in json.loads(_run(capsys, "solve", str(plain), "--json"))
    text = _run(capsys, "solve", str(plain))
    assert "rejected" not in text and not any(line.strip().startswith("TBT") for line in text.splitlines())


def test_replay_text_and_json_show_rejected_and_tbt(tmp_path, capsys):
    path = _reject(tmp_path)
    data = json.loads(_run(capsys, "replay", str(path), "--requests", "1500", "--json"))
    assert 0.2 < data["rejected_fraction"] < 0.4 and data["tbt"]["p50_s"] > 0
    text = _run(capsys, "replay", str(path), "--requests", "1500")
    assert f"rejected: {data['rejected_fraction']:.2%} of requests exceed the context window" in text
    tbt_row = next(line for line in text.splitlines() if line.strip().startswith("TBT"))
    assert format_duration(data["tbt"]["p50_s"]) in tbt_row
    plain = _file(tmp_path)
    text = _run(capsys, "replay", str(plain), "--requests", "500")
    assert "rejected:" not in text and not any(line.strip().startswith("TBT") for line in text.splitlines())


def test_tui_results_panel_shows_rejected_and_tbt(tmp_path):
    from rich.console import Console

    from qmodel.tui.compute import WhatIfSession
    from qmodel.tui.report import render_results

    def shown(path: Path) -> str:
        con = Console(width=120, record=True, file=io.StringIO())
        sc = parse_scenario(yaml.safe_load(path.read_text()))
        con.print(render_results(WhatIfSession().solve(sc)))
        return con.export_text()

    rej = parse_scenario(yaml.safe_load(_reject(tmp_path).read_text()))
    res = Solver(rej).solve()
    text = shown(_reject(tmp_path))
    assert "Rejected 30.0% of requests" in text
    assert any(line.strip().startswith("TBT") and format_duration(res.tbt.p90) in line for line in text.splitlines())
    assert "TBT≤" in text  # per_token: the TPOT target is judged against TBT
    text = shown(_file(tmp_path))
    assert "Rejected" not in text and "TBT" not in text
