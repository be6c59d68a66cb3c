"""``compare`` reports all three topologies, each with a goodput or a reason, and evaluates the
scenario's own layout as the scenario itself would be evaluated (issue 15, "Properties to add",
item 1).

* Three rows, in the order colocated, chunked, disaggregated; a row with ``reason`` None carries
  finite, non-negative figures with goodput <= its stability limit; a row with a reason has zero
  figures and the reason in its binding.
* The row of the scenario's own topology, laid out as the scenario lays it out, is the scenario's
  own goodput: exactly (the same deployment solved by the same search) for colocated and chunked,
  and for a disaggregated scenario whose only split is its own (one prefill and one decode
  instance of one GPU type and TP); a disaggregated scenario of one GPU type and TP is among the
  splits compared, so the best split's goodput is at least its own. Anything less means compare
  rebuilt the deployment without some of the scenario's fields.
"""

from __future__ import annotations

import math

import pytest
from hypothesis import given, settings

import qmodel
from qmodel.compare import compare_topologies
from qmodel.errors import QmodelError
from qmodel.scenario import DisaggregatedDeployment
from tests.prop_scenarios import CHEAP, PROP, SCENARIOS, label, variant, variants

TOPOLOGIES = ["colocated", "chunked", "disaggregated"]


def _check_rows(name: str, sets: tuple[str, ...]) -> None:
    sc = variant(name, sets)
    out = compare_topologies(sc)
    where = label(name, sets)
    assert [c.topology for c in out.candidates] == TOPOLOGIES, where
    assert out.best in TOPOLOGIES
    for c in out.candidates:
        figures = (c.goodput_rps, c.goodput_per_gpu, c.knee_rps, c.max_stable_rate_per_s)
        assert all(math.isfinite(x) and x >= 0 for x in figures), (where, c)
        if c.reason is None:
            assert c.gpus > 0 and c.goodput_rps <= c.max_stable_rate_per_s, (where, c)
        else:
            assert c.reason.strip() and c.goodput_rps == 0.0 and c.binding.startswith("not evaluated"), (where, c)
    _check_own_layout(sc, out, where)


def _check_own_layout(sc, out, where: str) -> None:
    dep = sc.deployment
    row = next(c for c in out.candidates if c.topology == dep.topology)
    if isinstance(dep, DisaggregatedDeployment):
        same = (dep.prefill.gpu == dep.decode.gpu and dep.prefill.tp == dep.decode.tp
                and dep.prefill.pp == dep.decode.pp == 1)
        if not same:
            return
        own = _own_goodput(sc, row, where)
        if own is None:
            return
        assert row.reason is None, (where, row.reason)
        if dep.prefill.instances == dep.decode.instances == 1:
            assert row.goodput_rps == own, f"compare's only split gives {row.goodput_rps:.6g}, the scenario {own:.6g}: {where}"
        else:
            assert row.goodput_rps >= own, f"compare's best split gives {row.goodput_rps:.6g} < the scenario's own {own:.6g}: {where}"
        return
    own = _own_goodput(sc, row, where)
    if own is None:
        return
    assert row.goodput_rps == own, f"compare's {dep.topology} row gives {row.goodput_rps:.6g}, the scenario {own:.6g}: {where}"


def _own_goodput(sc, row, where: str) -> float | None:
    """The scenario's goodput; None when it cannot be evaluated, after checking that compare's row
    for the same layout names the same reason (a station defect seen through both, not hidden)."""
    try:
        return qmodel.goodput(sc).goodput_rps
    except QmodelError as err:
        if row.layout.startswith("P:D") and not row.layout.startswith("P:D = 1:1"):
            return None  # compare's best split is another one; nothing to compare the reason with
        assert row.reason is not None and str(err) in row.reason, (where, str(err), row)
        return None


@settings(max_examples=5, **PROP)
@given(v=variants([s for s in CHEAP if not s.startswith("llama3-8b")]))
def test_compare_has_three_rows(v):
    _check_rows(*v)


@pytest.mark.parametrize("sets", [
    ("deployment.prefill.instances=1", "deployment.link_bandwidth_bytes_per_s=1 GB/s"),
    ("deployment.prefill.instances=1", "deployment.first_token_from=decode"),
    ("deployment.prefill.instances=1", "deployment.prefill.dispatch=random", "deployment.decode.max_batch=8"),
])
def test_compare_evaluates_the_scenarios_own_split(sets):
    """One prefill and one decode instance: compare's only split is the scenario itself."""
    _check_rows("fuzz:disaggregated", sets)


@pytest.mark.slow
@settings(max_examples=25, **PROP)
@given(v=variants(SCENARIOS))
def test_compare_has_three_rows_wide(v):
    _check_rows(*v)
