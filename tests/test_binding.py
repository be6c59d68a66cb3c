"""The binding diagnosis (qmodel/binding.py) reads the link's queue: the issue-15 scenario
(qwen2.5-32b on h200, 7 prefill + 1 decode TP1, Poisson 20 req/s, azure-code-2023, SLO 2 s / 50 ms / 0.9)
with the link cut to 25 Gbps per path must name the KV link as the largest part and its bandwidth
as insufficient; at the catalog's 400 Gbps the prefill binds and the link is sufficient."""

from __future__ import annotations

import pytest

from qmodel.solver import Solver
from qmodel.scenario import parse_scenario

SCENARIO = {
    "name": "qwen32b-disagg-h200", "model": "qwen2.5-32b",
    "workload": {"arrivals": {"kind": "poisson", "rate_per_s": "20 req/s"},
                 "lengths": {"kind": "preset", "name": "azure-code-2023"}},
    "slo": {"ttft_s": "2 s", "tpot_s": "50 ms", "attainment_goal": 0.9},
    "deployment": {"topology": "disaggregated", "prefill": {"gpu": "h200-sxm", "tp": 1, "instances": 7},
                   "decode": {"gpu": "h200-sxm", "tp": 1, "instances": 1}, "link": "ib-ndr-400"},
    "perf": {"kind": "roofline"},
}


def _solve(bw: str | None):
    raw = dict(SCENARIO, deployment=dict(SCENARIO["deployment"]))
    if bw:
        raw["deployment"]["link_bandwidth_bytes_per_s"] = bw
    return Solver(parse_scenario(raw)).solve()


@pytest.fixture(scope="module")
def slow_link():
    return _solve("25 Gbps")


def test_slow_link_is_the_binding_part(slow_link):
    # was "largest part: decode batch size" although the link's waits average ~0.5 s
    assert slow_link.binding.startswith("TPOT binds")
    assert "largest part: KV link wait and transfer" in slow_link.binding


def test_bandwidth_needed_is_not_the_mean_byte_rate(slow_link):
    lk = slow_link.link
    # was "needs 84.1 Gbps ... has 158 Gbps (sufficient)": the mean byte rate, not what the SLO needs
    assert lk.sufficient is False
    assert lk.bandwidth_needed_bytes_per_s > lk.bandwidth_available_bytes_per_s
    # 85.21 Gbps with the preset's exact mean prompt (2031.6 tokens); 84.1 on the i.i.d. sample it replaced
    # (mean prompt -1.28%: 84.1 / (1 - 0.0128) = 85.19)
    assert lk.mean_byte_rate_bytes_per_s == pytest.approx(85.21e9 / 8, rel=2e-3)
    assert lk.share_of_target == pytest.approx(0.10)


def test_link_at_its_needed_bandwidth_keeps_its_share(slow_link):
    """At the reported bandwidth the link adds at most 10% of each target to the p90s (2%: the
    search's precision; 10% on TPOT: the search keeps the decode solution, whose KV reserved for
    transfers in flight shrinks at the higher bandwidth, moving the TPOT handoff by ~7% here)."""
    from qmodel.binding import contributions
    from qmodel.registry import load_catalog

    eff = load_catalog().link("ib-ndr-400").efficiency
    per_path = slow_link.link.bandwidth_needed_bytes_per_s / 7 / eff * 1.02
    raw = dict(SCENARIO, deployment=dict(SCENARIO["deployment"], link_bandwidth_bytes_per_s=per_path))
    s = Solver(parse_scenario(raw))
    parts = contributions(s, s.compose(20.0))
    assert parts["TTFT"]["KV link wait and transfer"] <= 0.10 * 2.0
    assert parts["TPOT"]["KV link wait and transfer"] <= 0.10 * 0.050 * 1.10


def test_full_bandwidth_prefill_binds():
    res = _solve(None)
    assert res.binding.startswith("TTFT binds")
    assert "largest part: prefill queue and batch" in res.binding
    assert res.link.sufficient is True
