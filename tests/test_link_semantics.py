"""What a link override and a bandwidth-string link mean (issue 15 item 7).

``deployment.link_bandwidth_bytes_per_s`` is the nominal bandwidth of ONE transfer path (one per
prefill instance) before the link's efficiency; ``link: "400 Gbps"`` is an anonymous link whose
paths each have that bandwidth, efficiency 1, latency 0 s. The issue's scenario (qwen2.5-32b,
7 prefill instances on ib-ndr-400, override 400 Gbps) printed "has 2.52 Tbps" with nothing to say
that it was 7 paths x 400 Gbps x 0.9; the figures are checked exactly (they are products of
catalog numbers), the printed text by its parts.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from qmodel.build import resolve
from qmodel.cli.main import main
from qmodel.solver import Solver
from qmodel.errors import InputError
from qmodel.scenario import DisaggregatedDeployment, load_scenario, parse_scenario
from qmodel.validation.replay import build_plan

SCENARIO = {
    "name": "qwen32b-disagg-h200", "model": "qwen2.5-32b",
    "workload": {"arrivals": {"kind": "poisson", "rate_per_s": "20 req/s"},
                 "lengths": {"kind": "preset", "name": "azure-code-2023"}},
    "slo": {"ttft_s": "2 s", "tpot_s": "50 ms", "attainment_goal": 0.9},
    "deployment": {"topology": "disaggregated", "prefill": {"gpu": "h200-sxm", "tp": 1, "instances": 7},
                   "decode": {"gpu": "h200-sxm", "tp": 1, "instances": 1}, "link": "ib-ndr-400"},
    "perf": {"kind": "roofline"},
}


def _scenario(**dep):
    return parse_scenario(dict(SCENARIO, deployment=dict(SCENARIO["deployment"], **dep)))


def test_override_is_defined_in_one_sentence_of_the_schema():
    desc = DisaggregatedDeployment.model_fields["link_bandwidth_bytes_per_s"].description
    assert "one transfer path" in desc and "before the link's efficiency" in desc and "prefill instance" in desc
    assert desc.replace("e.g. ", "").count(". ") == 0  # one sentence
    link_desc = DisaggregatedDeployment.model_fields["link"].description
    assert "efficiency 1" in link_desc and "latency 0 s" in link_desc


def test_override_is_nominal_per_path_before_efficiency():
    """400 Gbps = 50 GB/s nominal per path; ib-ndr-400's efficiency 0.9 -> 45 GB/s per path;
    7 paths -> 315 GB/s = 2.52 Tbps aggregate (exact products)."""
    r = resolve(_scenario(link_bandwidth_bytes_per_s="400 Gbps"))
    assert r.link.bandwidth_bytes_per_s == 50e9 and r.link.efficiency == 0.9
    assert r.link_bandwidth_bytes_per_s == pytest.approx(45e9, rel=1e-15)
    assert r.link_paths == 7
    lk = Solver(r.scenario, r).solve().link
    assert (lk.link, lk.paths, lk.efficiency) == ("ib-ndr-400", 7, 0.9)
    assert lk.nominal_per_path_bytes_per_s == 50e9
    assert lk.bandwidth_per_path_bytes_per_s == pytest.approx(45e9, rel=1e-15)
    assert lk.bandwidth_available_bytes_per_s == pytest.approx(7 * 45e9, rel=1e-12)
    assert lk.capacity_text() == ("ib-ndr-400: 7 paths (one per prefill instance) x 360 Gbps effective "
                                  "(400 Gbps nominal x 0.9) = 2.52 Tbps aggregate")


def test_solve_prints_per_path_and_aggregate(capsys, tmp_path: Path):
    import json

    path = tmp_path / "s.json"
    path.write_text(json.dumps(SCENARIO), encoding="utf-8")
    assert main(["solve", str(path), "--wide", "--set", "deployment.link_bandwidth_bytes_per_s=400 Gbps"]) == 0
    out = capsys.readouterr().out
    line = next(ln for ln in out.splitlines() if ln.startswith("KV link: has"))
    assert "7 paths (one per prefill instance) x 360 Gbps effective (400 Gbps nominal x 0.9)" in line
    assert "= 2.52 Tbps aggregate" in line


@pytest.mark.parametrize("text, bytes_per_s", [("400 Gbps", 50e9), ("25 GB/s", 25e9), ("1.5 Tb/s", 187.5e9)])
def test_bandwidth_string_is_an_anonymous_link(text, bytes_per_s):
    r = resolve(_scenario(link=text))
    assert (r.link.name, r.link.efficiency, r.link.latency_s, r.link.kind) == (text, 1.0, 0.0, "other")
    assert r.link_bandwidth_bytes_per_s == bytes_per_s
    plan = build_plan(r.scenario)
    assert (plan.path_bandwidth_bytes_per_s, plan.link_latency_s) == (bytes_per_s, 0.0)
    # an override still replaces the nominal figure, efficiency 1 keeps it as the effective one
    r2 = resolve(_scenario(link=text, link_bandwidth_bytes_per_s="10 GB/s"))
    assert r2.link_bandwidth_bytes_per_s == 10e9


@pytest.mark.parametrize("text, fragment", [
    ("400 Gbit", "bandwidth units are"), ("400", "bandwidth units are"), ("1 kbps", "from 1 MB/s"),
    ("1e9 Tbps", "from 1 MB/s"), ("-5 Gbps", "from 1 MB/s"), ("12 parsec", "bandwidth units are"),
])
def test_bad_bandwidth_link_is_one_line_naming_the_field(capsys, tmp_path: Path, text, fragment):
    with pytest.raises(InputError) as err:
        _scenario(link=text)
    assert err.value.field == "deployment.link" and fragment in str(err.value)
    ex = Path(__file__).resolve().parent.parent / "examples" / "llama3-70b-disagg-h100.yaml"
    rc = main(["solve", str(ex), "--set", f"deployment.link={text}"])
    _, stderr = capsys.readouterr()
    lines = [ln for ln in stderr.splitlines() if ln.strip()]
    assert rc == 2 and len(lines) == 1 and "deployment.link" in lines[0] and "Traceback" not in stderr


def test_planner_keeps_the_override_on_the_scenarios_link(repo_root: Path):
    """plan re-targets the deployment; the what-if bandwidth must survive for the scenario's own
    link (main dropped it, so plan and solve answered for different links)."""
    from qmodel.planner.evaluate import EngineEvaluator, deployment_for
    from qmodel.planner.space import Family

    scn = _scenario(link_bandwidth_bytes_per_s="25 Gbps")
    same = Family("disaggregated", "h200-sxm", 1, "h200-sxm", 1, "ib-ndr-400", "serialized").plan(1, 7)
    other = Family("disaggregated", "h200-sxm", 1, "h200-sxm", 1, "ib-hdr-200", "serialized").plan(1, 7)
    assert deployment_for(scn, same).link_bandwidth_bytes_per_s == 25e9 / 8
    assert deployment_for(scn, other).link_bandwidth_bytes_per_s is None
    ev = EngineEvaluator(scn)
    assert ev.solver(same).transfer_station.bandwidth_bytes_per_s == pytest.approx(25e9 / 8 * 0.9, rel=1e-15)
