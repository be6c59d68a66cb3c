"""The generated validation corpus: stratification, determinism, validity, summaries, CLI errors."""

from __future__ import annotations

import collections
import json

import pytest

from qmodel.cli.main import main
from qmodel.validation.corpus import AXES, LOAD_BANDS, case_json, generate, load_band
from qmodel.validation.corpus_run import summarize_corpus


def _counts(corpus) -> dict[str, collections.Counter]:
    out: dict[str, collections.Counter] = collections.defaultdict(collections.Counter)
    for c in corpus.cases:
        for axis in AXES:
            if axis in c.features:
                out[axis][c.features[axis]] += 1
    return out


def _check_strata(corpus, dropped: dict[str, set[str]]) -> None:
    counts = _counts(corpus)
    for axis, values in AXES.items():
        for v in set(values) - dropped.get(axis, set()):
            assert counts[axis][v] >= 20, (axis, v, dict(counts[axis]))
        assert not set(counts[axis]) & dropped.get(axis, set()), (axis, dict(counts[axis]))


def test_each_feature_value_at_least_20_times_in_300_draws_without_data():
    corpus = generate(300, 0, data=False)
    assert len(corpus.cases) == 300 and not corpus.data
    _check_strata(corpus, {"arrivals": {"trace"}, "lengths": {"empirical"}})
    # the new strata (issue 18 §1/§3): jsq dispatch and closed loops, each think-time value of a loop
    counts = _counts(corpus)
    assert counts["dispatch"]["jsq"] == 75 and counts["arrivals"]["closed"] == 75  # 300 / 4 exactly (one deck each)
    assert sum(counts["think_time"].values()) == 75
    # the skipped strata are named, with the reason
    assert any(s.startswith("arrivals=trace") for s in corpus.skipped)
    assert any(s.startswith("lengths=empirical") for s in corpus.skipped)
    assert all("data" in s for s in corpus.skipped)
    # no scenario reads the data folder
    assert not any("data:" in case_json(c) for c in corpus.cases)


@pytest.mark.needs_data("azure_llm_2023/AzureLLMInferenceTrace_conv.csv", "azure_llm_2023/AzureLLMInferenceTrace_code.csv",
                        "mooncake/conversation_trace.jsonl", "splitwise_sim/perf_model.csv",
                        "length_distributions/sharegpt_8k_filtered_stats_llama2_tokenizer.csv")
def test_each_feature_value_at_least_20_times_with_data():
    corpus = generate(300, 0, data=True)
    assert corpus.data and corpus.skipped == ()
    _check_strata(corpus, {})
    assert any(c.features.get("table", "").startswith("splitwise") for c in corpus.cases)


def test_same_seed_byte_identical_other_seed_differs():
    a = [case_json(c) for c in generate(40, 7, data=False).cases]
    b = [case_json(c) for c in generate(40, 7, data=False).cases]
    c = [case_json(c) for c in generate(40, 8, data=False).cases]
    assert a == b
    assert sum(x != y for x, y in zip(a, c)) >= 35


def test_case_ids_are_dense():
    corpus = generate(25, 1, data=False)
    assert [c.id for c in corpus.cases] == [f"c{i:04d}" for i in range(25)]


def test_utilization_inside_its_band_and_scenarios_valid():
    from qmodel.closed import solve_closed
    from qmodel.solver import Solver
    from qmodel.validation.corpus_closed import fluid_load, unloaded_latency_s

    corpus = generate(60, 3, data=False)
    closed = 0
    for c in corpus.cases:
        assert load_band(c.utilization) == c.features["band"]
        assert LOAD_BANDS[0][1] <= c.utilization <= LOAD_BANDS[-1][2]
        solver = Solver(c.scenario)
        lam, _ = solver.max_stable_rate()  # valid by construction: resolves, finite limit
        assert 0.0 < lam < float("inf")
        dep = c.scenario.deployment
        pools = [dep.prefill, dep.decode] if c.features["topology"] == "disaggregated" else [dep.pool]
        assert all(p.dispatch == c.features["dispatch"] for p in pools)
        arr = c.scenario.workload.arrivals
        assert (arr.kind == "closed") == (c.features["arrivals"] == "closed")
        if arr.kind == "closed":
            # u is the loop's fluid load N / (lambda_max (T0 + Z)) (validation/corpus_closed.py):
            # 4-decimal rounding of u and Z's 6 digits: 1.5e-4; the analytic loop solves, unsaturated
            closed += 1
            arr_n, arr_z = arr.concurrency, arr.think_time_s
            assert fluid_load(lam, unloaded_latency_s(solver.resolved), arr_n, arr_z) == pytest.approx(c.utilization,
                                                                                                       abs=1.5e-4)
            assert not solve_closed(c.scenario, solver).loop.saturated
            assert arr.concurrency == int(c.features["clients"]) >= 1
            assert (arr.think_time_s == 0.0) == (c.features["think_time"] == "0")
    assert closed >= 10
    for c in corpus.cases:
        dep = c.scenario.deployment
        if c.features["topology"] == "disaggregated":
            assert dep.link_sharing == c.features["link_sharing"] and dep.first_token_from == c.features["first_token_from"]
            assert (dep.prefill.gpu != dep.decode.gpu) == (c.features["pd_gpus"] == "hetero")


def test_bad_n_and_seed_are_one_line_errors():
    from qmodel.errors import InputError

    with pytest.raises(InputError, match="--n"):
        generate(0)
    with pytest.raises(InputError, match="--seed"):
        generate(5, -1)


def _row(i: str, topology: str, band: str, err: float, att: float = 0.0, noise: float = 0.01) -> dict:
    m = ["ttft_p50", "ttft_p90", "ttft_p99", "tpot_p50", "tpot_p90", "tpot_p99"]
    return {"id": i, "topology": topology, "band": band, "features": {"topology": topology, "band": band, "kv": "ample"},
            "error_rel": dict({k: err for k in m}, attainment=att), "replay_noise": {k: noise for k in m}}


def test_summary_targets_met_and_missed():
    rows = [_row(f"a{i}", "chunked", "0.2-0.5", 0.01 * (i % 3)) for i in range(10)]
    rows += [_row(f"b{i}", "colocated", "0.5-0.8", 0.2, att=0.05) for i in range(10)]
    rows += [_row(f"c{i}", "colocated", "0.95-0.97", 0.9) for i in range(3)]  # beyond 0.95: not a target cell
    rows.append({"id": "z", "topology": "chunked", "band": "0.2-0.5", "features": {"topology": "chunked"},
                 "analytic": None, "error": "analytic: boom"})
    s = summarize_corpus(rows)
    assert s["by_topology_band"]["colocated/0.5-0.8"]["ttft_p90"]["median_abs_rel_error"] == pytest.approx(0.2)
    cells = s["targets"]["cells"]
    assert set(cells) == {"chunked/0.2-0.5", "colocated/0.5-0.8"}
    assert not cells["colocated/0.5-0.8"]["met"] and any("attainment" in x for x in cells["colocated/0.5-0.8"]["misses"])
    assert not cells["chunked/0.2-0.5"]["met"] and cells["chunked/0.2-0.5"]["failures"] == 1  # the failed row
    assert s["failures"] == ["z: analytic: boom"]
    assert s["by_feature"]["kv"]["ample"]["n"] == 23


@pytest.mark.parametrize("argv, flag", [
    (["--suite", "corpus", "--n", "0"], "--n"),
    (["--suite", "corpus", "--seed", "-3"], "--seed"),
    (["--suite", "corpus", "--jobs", "0"], "--jobs"),
    (["--suite", "quick", "--n", "5"], "--n"),
    (["--suite", "corpus-ci", "--n", "5"], "--n"),
    (["--suite", "corpus", "--json", "/nonexistent-folder-qmodel/x.json"], "--json"),
])
def test_validate_corpus_bad_flags(capsys, argv, flag):
    assert main(["validate", *argv]) == 2
    err = capsys.readouterr().err
    assert flag in err and err.count("\n") == 1 and "Traceback" not in err


def test_validate_corpus_small_run_text_and_json(capsys, tmp_path):
    path = tmp_path / "c.json"
    assert main(["validate", "--suite", "corpus", "--n", "3", "--seed", "11", "--no-data", "--json", str(path)]) == 0
    text = capsys.readouterr().out
    assert "by topology and load band" in text and "targets (" in text and "skipped stratum arrivals=trace" in text
    out = json.loads(path.read_text())
    assert out["n"] == 3 and len(out["scenarios"]) == 3 and out["seed"] == 11
    row = out["scenarios"][0]
    assert {"id", "features", "band", "utilization", "replay_noise", "replay_requests"} <= set(row)
    assert set(row["features"]) >= {"topology", "perf", "model_family", "arrivals", "lengths", "band"}


def _synthetic_rows(n: int, seed: int) -> list[dict]:
    """Rows whose |error| is a known feature effect times lognormal noise (sigma 0.5)."""
    import numpy as np

    rng = np.random.default_rng(seed)
    scale = {"colocated": 0.3, "chunked": 0.1, "disaggregated": 0.03}
    band_mult = {b: 1.0 + i for i, (b, _, _) in enumerate(LOAD_BANDS)}
    m = ["ttft_p50", "ttft_p90", "ttft_p99", "tpot_p50", "tpot_p90", "tpot_p99"]
    rows = []
    for i in range(n):
        t = ("colocated", "chunked", "disaggregated")[i % 3]
        b = LOAD_BANDS[(i // 3) % len(LOAD_BANDS)][0]
        kv = ("binding", "ample")[int(rng.integers(2))]
        err = {k: scale[t] * band_mult[b] * (1.5 if kv == "binding" else 1.0) * float(np.exp(rng.normal(0, 0.5)))
               * float(rng.choice([-1, 1])) for k in m}
        rows.append({"id": f"s{i}", "topology": t, "band": b, "features": {"topology": t, "kv": kv},
                     "error_rel": dict(err, attainment=0.0), "replay_noise": {k: 0.01 for k in m}})
    return rows


def test_corpus_report_renders_tables_and_targets():
    from qmodel.validation.corpus_report import report

    rows = _synthetic_rows(120, 2)
    out = {"n": len(rows), "seed": 0, "data": False, "skipped_strata": ["arrivals=trace: no data folder"],
           "definition": {"replay_requests": "x"}, "summary": summarize_corpus(rows), "scenarios": rows}
    md = report(out)
    assert "**by topology and load band**" in md and "**Targets**" in md and "**Worst feature groups**" in md
    assert "| axis = value | n | TTFT p90 | signed | TPOT p90 | signed | attain. | signed |" in md


def test_signed_medians_and_case_filter():
    from qmodel.validation.corpus_report import signed_medians
    from qmodel.validation.corpus_run import keep_case

    rows = [{"error_rel": {"ttft_p90": e, "attainment": -e / 10}} for e in (-0.5, 0.1, 0.3)] + [{"error": "x"}]
    s = signed_medians(rows)
    assert s["ttft_p90"] == 0.1 and s["attainment"] == pytest.approx(-0.01) and s["tpot_p50"] == 0.0
    f = {"topology": "chunked", "arrivals": "closed"}
    assert keep_case(f, ["topology=chunked", "arrivals!=trace"]) and not keep_case(f, ["arrivals!=closed"])


def test_closed_case_runs_against_the_replays_loop():
    """A closed corpus case: analytic X(N) and latencies from solve_closed, the replay runs the loop
    (at least LOOP_REQUESTS x N requests), the throughput error is in the row and in the tables'
    X column (closed rows only), and the closed / jsq strata get their own tables."""
    from qmodel.closed import solve_closed
    from qmodel.validation.corpus_run import LOOP_REQUESTS, markdown_tables, replay_requests, run_corpus_case
    from qmodel.validation.suites import Suite

    lengths = Suite("t", (), base_requests=100, min_requests=500, max_requests=3000)
    cases = generate(8, 18, data=False).cases
    case = next(c for c in cases if c.features["arrivals"] == "closed")
    n_clients = case.scenario.workload.arrivals.concurrency
    assert replay_requests(case, lengths) == max(lengths.n_requests(case.utilization), min(LOOP_REQUESTS * n_clients, 3000))
    row = run_corpus_case(case, lengths)
    assert not row.get("error") and row["replay_requests"] == replay_requests(case, lengths)
    x = solve_closed(case.scenario).loop.throughput_per_s
    assert row["analytic"]["throughput"] == pytest.approx(x, rel=1e-12) and row["rate_per_s"] == row["analytic"]["throughput"]
    assert row["error_rel"]["throughput"] == pytest.approx(x / row["replay"]["throughput"] - 1.0, rel=1e-12)
    # a closed row's replay is reused only for the same scenario (its hash), whatever its rate
    again = run_corpus_case(case, lengths, reuse=row)
    assert again.get("replay_reused") and again["error_rel"] == row["error_rel"]
    assert not run_corpus_case(case, lengths, reuse=dict(row, scenario_sha256="0" * 64)).get("replay_reused")
    open_rows = [_row("o1", "chunked", "0.2-0.5", 0.1), _row("o2", "colocated", "0.5-0.8", 0.1)]
    open_rows[0]["features"]["dispatch"] = "jsq"
    rows = open_rows + [row]
    s = summarize_corpus(rows)
    assert s["all"]["throughput"]["n"] == 1 and s["all"]["ttft_p50"]["n"] == 3
    assert s["all"]["throughput"]["median_abs_rel_error"] == pytest.approx(abs(row["error_rel"]["throughput"]))
    assert set(s["by_stratum"]) == {"arrivals=closed", "dispatch=jsq"}
    assert s["by_stratum"]["dispatch=jsq"]["topology chunked"]["n"] == 1
    md = markdown_tables({"summary": s})
    assert "**arrivals=closed by topology and load band**" in md and "| X |" in md


def test_band_fit_refuses_rows_of_other_draws(tmp_path, capsys):
    """A corpus JSON is matched to the regenerated cases by id: a row whose features differ (a JSON
    written before the decks changed) is refused with one line, never paired with another scenario."""
    from qmodel.validation.band_fit import band_rows, main as band_fit_main

    corpus = generate(2, 5, data=False)
    rows = [{"id": c.id, "features": dict(c.features), "error_rel": None} for c in corpus.cases]
    out = {"n": 2, "seed": 5, "data": False, "scenarios": rows}
    assert [r["id"] for r in band_rows(out)] == ["c0000", "c0001"]
    rows[1]["features"] = dict(rows[1]["features"], dispatch="other")
    path = tmp_path / "old.json"
    path.write_text(json.dumps(out))
    assert band_fit_main([str(path)]) == 2
    err = capsys.readouterr().err
    assert "c0001" in err and "re-run the corpus" in err and err.count("\n") == 1
