"""Scenario schema: every example loads; overrides; bad input is one line naming field and value."""

from pathlib import Path

import pytest

from qmodel.errors import DataError, InputError
from qmodel.scenario import (ChunkedDeployment, ColocatedDeployment, DisaggregatedDeployment, apply_overrides,
                             load_scenario, parse_scenario, scenario_sha256)

EXAMPLES = sorted((Path(__file__).resolve().parent.parent / "examples").glob("*.*"))

BASE = {
    "model": "llama-3.1-8b",
    "workload": {"arrivals": {"kind": "poisson", "rate_per_s": 2}, "lengths": {"kind": "fixed", "prompt_tokens": 512, "output_tokens": 64}},
    "slo": {"ttft_s": "400 ms", "tpot_s": "40 ms"},
    "deployment": {"topology": "colocated", "pool": {"gpu": "h100-sxm"}},
}


@pytest.mark.parametrize("path", EXAMPLES, ids=[p.name for p in EXAMPLES])
def test_examples_load(path):
    sc = load_scenario(path)
    topo = sc.deployment.topology
    assert topo in path.name.replace("disagg", "disaggregated") or topo in path.name
    assert sc.slo.ttft_s > 0 and sc.slo.tpot_s > 0


def test_examples_cover_every_topology():
    names = " ".join(p.name for p in EXAMPLES)
    for t in ("colocated", "chunked", "disagg"):
        assert t in names


def test_human_units_become_si():
    sc = parse_scenario(BASE)
    assert sc.slo.ttft_s == pytest.approx(0.4)
    assert sc.slo.tpot_s == pytest.approx(0.04)
    assert isinstance(sc.deployment, ColocatedDeployment)
    assert sc.slo.attainment_goal == 0.9


def test_overrides_apply_before_validation():
    d = apply_overrides(BASE, ["deployment.pool.instances=3", "slo.ttft_s=1 s", "workload.arrivals.rate_per_s=7.5"])
    sc = parse_scenario(d)
    assert sc.deployment.pool.instances == 3
    assert sc.slo.ttft_s == 1.0
    assert sc.rate_per_s == 7.5
    assert BASE["deployment"]["pool"].get("instances") is None  # original untouched


def test_with_rate_and_hash_are_deterministic():
    sc = parse_scenario(BASE)
    assert scenario_sha256(sc) == scenario_sha256(parse_scenario(BASE))
    assert sc.with_rate(3.0).rate_per_s == 3.0
    assert scenario_sha256(sc.with_rate(3.0)) != scenario_sha256(sc)


@pytest.mark.parametrize("override, field, fragment", [
    ("workload.arrivals.rate_per_s=-1", "workload.arrivals.rate_per_s", "greater than 0"),
    ("slo.ttft_s=5 parsecs", "slo.ttft_s", "duration"),
    ("deployment.pool.tp=0", "deployment.pool.tp", "greater than or equal to 1"),
    ("deployment.pool.gpuu=h100-sxm", "deployment.pool.gpuu", "unknown field"),
    ("deployment.topology=pipelined", "deployment", "topology"),
    ("slo.attainment_goal=1.5", "slo.attainment_goal", "less than 1"),
])
def test_bad_input_is_one_line_with_field(override, field, fragment):
    with pytest.raises(InputError) as ei:
        parse_scenario(apply_overrides(BASE, [override]))
    msg = str(ei.value)
    assert "\n" not in msg
    assert msg.startswith(field), msg
    assert fragment in msg


def test_disaggregated_and_chunked_parse():
    d = dict(BASE, deployment={"topology": "disaggregated", "prefill": {"gpu": "h100-sxm", "instances": 2},
                               "decode": {"gpu": "h200-sxm"}, "link": "ib-ndr-400", "link_bandwidth_bytes_per_s": "200 Gbps"})
    sc = parse_scenario(d)
    assert isinstance(sc.deployment, DisaggregatedDeployment)
    assert sc.deployment.link_bandwidth_bytes_per_s == 25e9
    assert sc.deployment.gpus == 3
    c = parse_scenario(dict(BASE, deployment={"topology": "chunked", "pool": {"gpu": "h100-sxm", "tp": 2, "instances": 2}, "chunk_tokens": 1024}))
    assert isinstance(c.deployment, ChunkedDeployment) and c.deployment.gpus == 4


def test_unreadable_files_are_data_errors(tmp_path):
    with pytest.raises(DataError, match="no such file"):
        load_scenario(tmp_path / "missing.yaml")
    bad = tmp_path / "bad.yaml"
    bad.write_text("model: [unclosed\n")
    with pytest.raises(DataError, match="not valid YAML"):
        load_scenario(bad)
    txt = tmp_path / "s.txt"
    txt.write_text("{}")
    with pytest.raises(DataError, match="must end in"):
        load_scenario(txt)
