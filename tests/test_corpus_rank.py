"""Ranking groups (issue 18 §2): tau / top-1 / regret on hand-built numbers, the groups' draws and
determinism, the CLI's errors, and one tiny group end to end (slow)."""

from __future__ import annotations

import json
import math

import pytest

from qmodel.cli.main import main
from qmodel.validation.corpus_rank import DISPATCH, generate_groups, group_json
from qmodel.validation.corpus_rank_run import rank_stats, summarize_rank


def test_rank_stats_identical_order():
    s = rank_stats(["a", "b", "c", "d"], [4, 3, 2, 1], [8, 6, 4, 2], [0.0, 0.1, -0.2, 0.3])
    assert s["tau"] == pytest.approx(1.0, abs=1e-12)
    assert s["discordant"] == [] and s["top1"] and s["regret"] == 0.0 and s["culprit"] is None


def test_rank_stats_one_swap_at_the_top():
    """One discordant pair of six: tau = (5 - 1) / 6; the analytic choice a has replay 3 against b's
    4, so regret = 1 - 3/4; the culprit is the one of the swapped pair with the larger |error|."""
    s = rank_stats(["a", "b", "c", "d"], [4, 3, 2, 1], [3, 4, 2, 1], [0.30, -0.05, 0.0, 0.9])
    assert s["tau"] == pytest.approx(4 / 6, abs=1e-12)
    assert s["discordant"] == [("a", "b")]
    assert not s["top1"] and s["analytic_choice"] == "a" and s["replay_best"] == "b"
    assert s["regret"] == pytest.approx(0.25, abs=1e-12)
    assert s["culprit"] == "a"  # d's larger error is in no discordant pair


def test_rank_stats_ties_are_tau_b():
    """A tie on the analytic side counts in neither direction: 5 concordant pairs of 6, one tied in
    x: tau-b = 5 / sqrt((6 - 1)(6 - 0)). The first of two tied analytic maxima is the choice."""
    s = rank_stats(["a", "b", "c", "d"], [2, 2, 1, 0], [3, 2, 1, 0], [0.0] * 4)
    assert s["tau"] == pytest.approx(5 / math.sqrt(30), abs=1e-12)
    assert s["analytic_choice"] == "a" and s["top1"] and s["regret"] == 0.0
    s = rank_stats(["a", "b", "c", "d"], [2, 2, 1, 0], [2, 3, 1, 0], [0.0] * 4)
    assert s["analytic_choice"] == "a" and not s["top1"] and s["regret"] == pytest.approx(1 / 3, abs=1e-12)


def test_rank_stats_constant_side_has_no_tau():
    s = rank_stats(["a", "b", "c"], [0.0, 0.0, 0.0], [1.0, 2.0, 3.0], [-1.0, -1.0, -1.0])
    assert s["tau"] is None and s["analytic_choice"] == "a" and s["regret"] == pytest.approx(2 / 3, abs=1e-12)
    assert rank_stats(["a", "b"], [1.0, 2.0], [0.0, 0.0])["regret"] == 0.0  # nothing to lose


def test_summary_counts():
    groups = [{"tau": 1.0, "top1": True, "regret": 0.0}, {"tau": 0.5, "top1": False, "regret": 0.2},
              {"tau": None, "top1": True, "regret": 0.0}]
    rows = [{"group": "g", "label": str(i), "topology": "chunked", "error_rel": {"goodput": e},
             "replay": {"goodput": 1.0, "goodput_noise": 0.01}} for i, e in enumerate([0.01, -0.04, 0.2, -0.06])]
    s = summarize_rank(groups, rows)
    assert s["goodput"]["within_5pct"] == 2 and s["goodput"]["n"] == 4
    assert s["goodput"]["median_abs_rel_error"] == pytest.approx(0.05, abs=1e-12)
    assert s["tau"] == {"median": 0.75, "at_least_target": 1, "defined": 2, "groups": 3}
    assert s["top1"] == {"agree": 2, "of": 3} and s["regret"]["max"] == 0.2


def test_groups_are_deterministic_and_planner_shaped():
    a, b = generate_groups(4, 3, data=False), generate_groups(4, 3, data=False)
    assert [group_json(g) for g in a.groups] == [group_json(g) for g in b.groups]
    assert [group_json(g) for g in generate_groups(4, 4, data=False).groups] != [group_json(g) for g in a.groups]
    assert a.skipped and all("data" in s for s in a.skipped)
    for g in a.groups:
        assert 4 <= len(g.candidates) <= 6
        assert len({c.label for c in g.candidates}) == len(g.candidates)
        budget = int(g.features["budget"])
        first = g.candidates[0].scenario
        for c in g.candidates:
            sc = c.scenario
            assert sc.model == first.model == g.features["model"] and sc.slo == first.slo
            assert sc.workload == first.workload and c.dispatch in DISPATCH + ("-",)
            from qmodel.topology import topology_named

            pools = [getattr(sc.deployment, r) for r in topology_named(sc.deployment.topology).pool_roles]
            assert sum(p.tp * p.instances for p in pools) == budget
            assert all(p.gpu == g.features["gpu"] for p in pools)
        assert {c.topology for c in g.candidates} == {"colocated", "chunked", "disaggregated"}


def test_bad_flags_are_one_line_errors(capsys):
    for argv, flag in ((["--suite", "corpus-rank", "--n", "0"], "--n"), (["--suite", "corpus-rank", "--seed", "-1"], "--seed"),
                       (["--suite", "corpus-rank", "--no-data"], "--no-data"), (["--suite", "corpus", "--data"], "--data")):
        assert main(["validate", *argv]) == 2
        err = capsys.readouterr().err
        assert flag in err and err.count("\n") == 1 and "Traceback" not in err


@pytest.mark.slow
def test_tiny_group_end_to_end(capsys, tmp_path, monkeypatch):
    """One group through the CLI with short replays: every candidate answered, the group's tau /
    top-1 / regret are rank_stats of its own rows, the analytic goodput is `qmodel goodput`'s."""
    from qmodel.goodput import goodput
    from qmodel.validation import corpus_rank_run
    from qmodel.validation.suites import Suite

    monkeypatch.setattr(corpus_rank_run, "RANK_LENGTHS", Suite("t", (), base_requests=100, min_requests=1000,
                                                                 max_requests=1500, goodput_requests=1000, seeds=(0,)))
    path = tmp_path / "r.json"
    assert main(["validate", "--suite", "corpus-rank", "--n", "1", "--seed", "2", "--json", str(path)]) == 0
    text = capsys.readouterr().out
    assert "Kendall tau-b per group" in text and "top-1" in text
    out = json.loads(path.read_text())
    (g,) = out["groups"]
    rows = out["candidates"]
    assert g["answered"] == g["n"] == len(rows) and not out["summary"]["failures"]
    want = rank_stats([r["label"] for r in rows], [r["analytic"]["goodput"] for r in rows],
                      [r["replay"]["goodput"] for r in rows], [r["error_rel"]["goodput"] for r in rows])
    assert {k: g[k] for k in ("tau", "top1", "regret", "analytic_choice")} == {
        k: (list(map(list, want[k])) if k == "discordant" else want[k]) for k in ("tau", "top1", "regret", "analytic_choice")}
    cand = generate_groups(1, 2, data=False).groups[0].candidates[0]
    assert rows[0]["analytic"]["goodput"] == pytest.approx(goodput(cand.scenario).goodput_rps, rel=1e-12)
    assert all(0 <= r["replay"]["goodput_noise"] < 1 for r in rows if r["replay"].get("goodput_noise") is not None)
