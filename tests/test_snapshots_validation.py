"""Syrupy snapshots of analytic and replay outputs for the fixed `snapshot` suite.

Values are rounded to 4 significant digits (``round_sig``): the replay is deterministic (same
seed, same bytes) and the analytical engine is deterministic, so any change here is a change of
a model. Update deliberately, after reading the diff: ``pytest --snapshot-update tests/test_snapshots_validation.py``.
"""

from __future__ import annotations

import pytest

from qmodel.validation.harness import round_sig, run_case
from qmodel.validation.suites import get_suite

SUITE = get_suite("snapshot")


@pytest.mark.parametrize("case", SUITE.cases, ids=[c.name for c in SUITE.cases])
def test_snapshot(case, snapshot):
    rec = run_case(case, SUITE)
    keep = ("rate_per_s", "max_stable_rate_per_s", "limiting_station", "replay_requests", "analytic", "replay",
            "replay_station_utilization")
    assert round_sig({k: rec[k] for k in keep}, 4) == snapshot
