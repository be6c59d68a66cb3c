"""The validity band: the fit's exact rule on a tiny input, the shipped table's lookup, the envelope
flag, and the held-out coverage docs/validation.md quotes (equal to the table's)."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

import pytest

from qmodel.scenario import load_scenario, parse_scenario
from qmodel.solver import Solver
from scipy.special import betainc

from qmodel.validation.band_fit import conformal_interval, fit_table, table_toml, tail_rank
from qmodel.validation.harness import LATENCY_METRICS
from qmodel.validity import (BAND_METRICS, arrival_class, band_table, cell_features, cell_of, load_band, outside_envelope,
                             validity_of)

ROOT = Path(__file__).resolve().parent.parent
DOC = ROOT / "docs" / "validation.md"
EXAMPLE = ROOT / "examples" / "llama3-70b-disagg-h100.yaml"


def test_metrics_are_the_harness_metrics() -> None:
    assert list(BAND_METRICS) == LATENCY_METRICS


def test_conformal_ranks() -> None:
    # the largest k whose [x_(k), x_(n+1-k)] covers 90% of new errors with probability >= 0.9:
    # its coverage is Beta(n+1-2k, 2k), P(< 0.9) = I_0.9(n+1-2k, 2k) <= 0.1
    assert [tail_rank(n) for n in (10, 37, 38, 80, 100, 200)] == [0, 0, 1, 2, 3, 7]
    assert betainc(37, 2, 0.9) <= 0.1 < betainc(36, 2, 0.9)  # n = 38 is the first with k = 1
    x = [i / 100 for i in range(100)]  # the k-th smallest is (k - 1) / 100
    assert conformal_interval(x) == (0.02, 0.97)  # n = 100: 3rd smallest and 3rd largest
    assert conformal_interval(x[:38]) == (0.0, 0.37)  # n = 38: the extremes
    assert conformal_interval(x[:37]) == (0.0, 0.36)  # too few for the guarantee: clamped to the extremes
    assert conformal_interval([0.5, -2.0, 1.0]) == (-2.0, 1.0)


def _row(i: int, top: str, load: str, arr: str, err: float, kind: str = "poisson", scv: float = 1.0) -> dict:
    return {"id": f"c{i:04d}", "cell": {"topology": top, "load": load, "arrivals": arr},
            "kinds": {"arrivals": [kind], "dispatch": ["random"]}, "numbers": {"arrival SCV": scv, "load": 0.2 + i / 1000},
            "errors": {m: err * (1 + k) for k, m in enumerate(BAND_METRICS)}}


def test_fit_on_a_tiny_input_is_exact() -> None:
    rows = [_row(i, "chunked", "u<=0.5", "smooth", (i - 5) / 100) for i in range(40)]
    rows += [_row(40 + i, "chunked", "0.8-0.9", "bursty", 1.0, kind="gamma", scv=4.0) for i in range(5)]
    rows.append(_row(45, "chunked", "0.8-0.9", "trace", 0.0, kind="trace", scv=173.0) | {"errors": None})  # failed
    t = fit_table(rows)
    assert t["corpus_cases"] == 45 and t["levels"] == ["topology", "load", "arrivals"] and t["min_cases"] == 38
    # the 40-row group is a cell at both depths; the 5-row group is not; the topology always is
    assert set(t["cells"]) == {"chunked", "chunked/u<=0.5", "chunked/u<=0.5/smooth"}
    assert t["cells"]["chunked/u<=0.5/smooth"]["ttft_p50"] == [-0.05, 0.34]  # the extremes of 40 (k = 1)
    assert t["cells"]["chunked/u<=0.5"]["tpot_p99"] == [pytest.approx(-0.3), pytest.approx(2.04)]  # x (1 + 5)
    # the topology cell: 45 errors, k = 1
    assert t["cells"]["chunked"] == {"cases": 45} | {m: [pytest.approx(-0.05 * (1 + k)), pytest.approx(1.0 * (1 + k))]
                                                       for k, m in enumerate(BAND_METRICS)}
    # the envelope counts every drawn row, the failed one too; the load widens to two decimals
    assert t["envelope"] == {"kinds": {"arrivals": ["gamma", "poisson", "trace"], "dispatch": ["random"]},
                             "ranges": {"arrival SCV": [1.0, 173.0], "load": [0.2, 0.25]}}
    # a 5-row cell falls back to its topology; an unseen topology has no cell
    assert cell_of(t, {"topology": "chunked", "load": "0.8-0.9", "arrivals": "bursty"}) == "chunked"
    assert cell_of(t, {"topology": "colocated", "load": "u<=0.5", "arrivals": "smooth"}) is None


def test_table_toml_reads_back() -> None:
    rows = [_row(i, "colocated", "0.9-0.97", "bursty", (i - 3) / 7) for i in range(50)]
    t = fit_table(rows) | {"measured_at": "abc1234", "command": "x", "corpus_seed": 0, "corpus_n": 30, "folds": 5,
                           "coverage": {"all": {"ttft_p50": 0.9, "n": 30}}}
    back = tomllib.loads(table_toml(t, ["header"]))
    assert back["cells"].keys() == t["cells"].keys() and back["envelope"] == t["envelope"]
    for key, c in t["cells"].items():
        for m in BAND_METRICS:
            assert back["cells"][key][m] == pytest.approx(c[m], abs=5e-5)


def test_features() -> None:
    assert [load_band(u) for u in (0.0, 0.5, 0.51, 0.8, 0.85, 0.9, 0.95, 0.97, 0.99)] == \
        ["u<=0.5", "u<=0.5", "0.5-0.8", "0.5-0.8", "0.8-0.9", "0.8-0.9", "0.9-0.97", "0.9-0.97", "0.9-0.97"]
    assert [arrival_class("gamma", x) for x in (0.25, 1.0, 1.0 + 1e-12, 1.5)] == ["smooth", "smooth", "smooth", "bursty"]
    assert arrival_class("poisson", 1.0) == "smooth" and arrival_class("trace", 0.5) == "trace"
    assert arrival_class("closed", 1.0) == "closed"  # a bounded population, whatever its placeholder SCV
    # the example: Poisson, 2 prefill instances round_robin, decode max_batch 128 with KV room for more
    r = Solver(load_scenario(EXAMPLE)).resolved
    assert cell_features(r, "disaggregated", 0.6) == {
        "topology": "disaggregated", "load": "0.5-0.8", "arrivals": "smooth", "kv": "ample",
        "lengths": r.scenario.workload.lengths.kind, "dispatch": r.scenario.deployment.prefill.dispatch,
        "pool": "split", "batch": "128+", "perf": "roofline"}
    assert r.scenario.deployment.prefill.dispatch == "round_robin" and r.scenario.perf.kind == "roofline"


def test_outside_envelope_names_the_feature() -> None:
    env = {"kinds": {"perf": ["roofline", "table"]}, "ranges": {"load": [0.2, 0.97], "arrival SCV": [0.25, 173.0]}}
    assert outside_envelope({"perf": ["table"]}, {"load": 0.5, "arrival SCV": 1.0}, env) == []
    assert outside_envelope({"perf": ["fixed"]}, {"load": 0.99, "arrival SCV": 0.01}, env) == [
        "perf fixed never drawn", "load 0.99 > 0.97", "arrival SCV 0.01 < 0.25"]
    assert outside_envelope({}, {"load": 0.05, "arrival SCV": 200.0}, env) == ["arrival SCV 200 > 173"]  # low load: in


def test_solve_reads_the_shipped_table() -> None:
    t = band_table()
    solver = Solver(load_scenario(EXAMPLE))
    lam = solver.max_stable_rate()[0]
    for u in (0.3, 0.85, 0.95):
        v = solver.solve(u * lam).validity
        feats = cell_features(solver.resolved, "disaggregated", u)
        key = cell_of(t, feats)
        assert v.cell == key and v.cell_cases == t["cells"][key]["cases"] and v.corpus_cases == t["corpus_cases"]
        assert [(f"{b.metric}_p{b.percentile}", b.low, b.high) for b in v.bands] == \
            [(m, *t["cells"][key][m]) for m in BAND_METRICS]
        assert v.measured_at == t["measured_at"] and v.level == 0.9
        assert v.text.startswith("TTFT p50 ") and f"corpus cell {key}, {v.cell_cases} of " in v.text
    # past the corpus's highest load: flagged, with the value, in the structure and the line
    top = t["envelope"]["ranges"]["load"][1]  # the corpus's highest load, rounded up to 0.01 (0.97-0.98)
    assert 0.97 <= top < 0.99
    v = solver.validity(0.99 * lam)
    assert not v.inside_envelope and v.outside == [f"load 0.99 > {top:.2f}"]
    assert v.text.endswith(f"; outside the validated envelope: load 0.99 > {top:.2f}; check this scenario with --check")
    # the goodput answer carries the band at its rate
    from qmodel.goodput import goodput

    g = goodput(load_scenario(EXAMPLE))
    assert g.validity == solver.validity(g.goodput_rps)


def test_envelope_flags_what_the_corpus_never_drew() -> None:
    d = load_scenario(EXAMPLE).model_dump(mode="json")
    d["workload"]["arrivals"] = {"kind": "gamma", "rate_per_s": 6.0, "cv": 0.1}
    d["workload"]["prefix_hit_ratio"] = 0.5
    smooth = parse_scenario(d)
    v = validity_of(Solver(smooth).resolved, "disaggregated", 0.5)
    assert "arrival SCV 0.01 < " in v.text and "prefix hit ratio 0.5 > 0" in v.text and not v.inside_envelope
    assert v.cell == cell_of(band_table(), {"topology": "disaggregated", "load": "u<=0.5", "arrivals": "smooth"})


def test_docs_quote_the_shipped_coverage() -> None:
    """docs/validation.md's held-out coverage table is the shipped table's (a refit rewrites both)."""
    t = band_table()
    text = DOC.read_text()
    head = "| group | n | TTFT p50 | TTFT p90 | TTFT p99 | TPOT p50 | TPOT p90 | TPOT p99 |"
    assert head in text and t["measured_at"] in text
    doc = {}
    for line in text.split(head, 1)[1].splitlines()[2:]:
        if not line.startswith("|"):
            break
        cells = [c.strip() for c in line.strip("|").split("|")]
        doc[cells[0]] = [int(cells[1])] + [float(re.fullmatch(r"([\d.]+)%", c).group(1)) / 100 for c in cells[2:]]
    assert doc.keys() == t["coverage"].keys()
    for group, c in t["coverage"].items():
        assert doc[group][0] == c["n"]
        assert doc[group][1:] == pytest.approx([c[m] for m in BAND_METRICS], abs=5e-4), group
    tomllib.loads((ROOT / "catalog" / "validity_bands.toml").read_text())  # parses


def test_text_line() -> None:
    from qmodel.result import MetricBand, Validity
    from qmodel.validity import validity_text

    bands = [MetricBand(metric=m, percentile=p, low=lo, high=hi) for m in ("ttft", "tpot")
             for p, lo, hi in ((50, -0.9952, 0.004), (90, -1.0, 2.37), (99, 0.0, 12.5))]
    v = Validity(level=0.9, bands=bands, cell="chunked/0.8-0.9", cell_cases=38, corpus_cases=600, measured_at="abc1234",
                 inside_envelope=False, outside=["load 0.99 > 0.97", "instances 8 > 4"], text="")
    # -99.52% keeps a decimal (it is not -100%: the analytic value zero); 0.4% rounds to 0%
    assert validity_text(v) == (
        "TTFT p50 -99.5%..0%, p90 -100%..+237%, p99 0%..+1250%; TPOT p50 -99.5%..0%, p90 -100%..+237%, p99 0%..+1250% "
        "(90% band of (analytic - replay) / replay; corpus cell chunked/0.8-0.9, 38 of 600 cases, at abc1234); "
        "outside the validated envelope: load 0.99 > 0.97, instances 8 > 4; check this scenario with --check")
    empty = v.model_copy(update={"bands": [], "cell": "nowhere"})
    assert validity_text(empty) == "unmeasured: the corpus holds no nowhere scenario; check this scenario with --check"


def test_holdout_coverage_is_exact_on_a_tiny_input() -> None:
    from qmodel.validation.band_fit import holdout_coverage

    # 50 rows, one cell, error i/100 for id i: fold f (id mod 5 == f) is checked against the extremes
    # of the other 40 (k = 1). Fold 0 misses its 0.00 (the others' minimum is 0.01), fold 4 its 0.49
    # (their maximum 0.48); folds 1-3 catch all: 48 of 50. Widths 0.48 (folds 0, 4) and 0.49 (30 rows).
    rows = [_row(i, "chunked", "u<=0.5", "smooth", i / 100) | {"errors": {m: i / 100 for m in BAND_METRICS}}
            for i in range(50)]
    cov = holdout_coverage(rows)
    assert cov["coverage"] == {"all": {m: 0.96 for m in BAND_METRICS} | {"n": 50},
                               "chunked": {m: 0.96 for m in BAND_METRICS} | {"n": 50}}
    assert cov["median_width"] == {m: pytest.approx(0.49) for m in BAND_METRICS}
    # fresh half: fitted on ids 0-24 (n = 25 < 38: the topology cell's extremes 0.00..0.24), all 25 later ones miss
    fresh = holdout_coverage(rows, fresh_from=25, by=("topology", "load"))
    assert fresh["coverage"]["all"]["ttft_p50"] == 0.0 and fresh["coverage"]["u<=0.5"]["n"] == 25


def test_refit_in_one_command_reuses_the_rescore(tmp_path, monkeypatch) -> None:
    """``band_fit BASE --rescore``: the re-scored rows' errors give the table's bands (exact order
    statistics), its provenance names the solving code and the replays' commit separately."""
    import json

    import qmodel.validation.band_fit as bf
    import qmodel.validation.corpus_run as cr
    from qmodel.validation.corpus import generate

    corpus = generate(6, seed=3, data=False)

    def fake_rescore(base, where=(), jobs=1, corpus=None):  # the re-scored rows: error j/10 + id number / 100 per metric j
        new = [{"id": c.id, "topology": c.features["topology"], "band": c.features["band"], "features": dict(c.features),
                "replay_reused": i != 2, "replay_noise": {m: 0.0 for m in BAND_METRICS},
                "error_rel": {m: j / 10 + i / 100 for j, m in enumerate(BAND_METRICS)}}
               for i, c in enumerate(corpus.cases)]
        return base["scenarios"], new

    monkeypatch.setattr(cr, "rescore_corpus", fake_rescore)
    monkeypatch.setattr(bf, "tree_commit", lambda: "def5678")
    base = tmp_path / "base.json"
    base.write_text(json.dumps({"suite": "corpus", "n": 6, "seed": 3, "data": False, "scenarios": []}))
    out = tmp_path / "bands.toml"
    assert bf.main([str(base), "--rescore", "--replays-at", "abc1234", "--out", str(out)]) == 0
    t = tomllib.loads(out.read_text())
    assert (t["measured_at"], t["replays_at"], t["replays_reused"], t["replays_rerun"]) == ("def5678", "abc1234", 5, 1)
    assert "--rescore" in t["command"] and t["corpus_cases"] == 6
    for top in {c.features["topology"] for c in corpus.cases}:  # cells under 38 cases: their extremes
        ids = [i for i, c in enumerate(corpus.cases) if c.features["topology"] == top]
        for j, m in enumerate(BAND_METRICS):
            assert t["cells"][top][m] == pytest.approx([j / 10 + min(ids) / 100, j / 10 + max(ids) / 100], abs=5e-5)
            assert t["cells"][top]["cases"] == len(ids)


def _example_with(**workload) -> dict:
    d = load_scenario(EXAMPLE).model_dump(mode="json")
    d["workload"].update(workload)
    return d


def _jsq_and_closed() -> tuple[Solver, Solver]:
    from qmodel.closed import with_concurrency

    d = load_scenario(EXAMPLE).model_dump(mode="json")
    d["deployment"]["prefill"]["dispatch"] = "jsq"
    return Solver(parse_scenario(d)), Solver(with_concurrency(load_scenario(EXAMPLE), 40, 1.0))


def test_envelope_of_jsq_and_closed_loops() -> None:
    """Against a table whose corpus drew jsq and closed loops (1-700 clients, think none or
    exponential): a jsq and a closed-loop answer are inside; a fixed think time, more clients, a
    prefix-cache mixture are flagged; a closed loop's band is read at X(N) / lambda_max."""
    import copy

    from qmodel.closed import solve_closed, with_concurrency

    t = copy.deepcopy(band_table())
    kinds, ranges = t["envelope"]["kinds"], t["envelope"]["ranges"]
    kinds["dispatch"] = sorted(set(kinds["dispatch"]) | {"jsq"})
    kinds["arrivals"] = sorted(set(kinds["arrivals"]) | {"closed"})
    kinds["think time"], ranges["clients"] = ["exponential", "none"], [1.0, 700.0]
    jsq, closed = _jsq_and_closed()
    v = validity_of(jsq.resolved, "disaggregated", 0.5, t)
    assert v.inside_envelope and v.outside == [] and "outside" not in v.text
    u = solve_closed(closed.scenario, closed).loop.throughput_per_s / closed.max_stable_rate()[0]
    v = validity_of(closed.resolved, "disaggregated", u, t)
    assert v.inside_envelope and cell_features(closed.resolved, "disaggregated", u)["arrivals"] == "closed"
    fixed = with_concurrency(load_scenario(EXAMPLE), 1400, 1.0).model_dump(mode="json")
    fixed["workload"]["arrivals"]["think_time_dist"] = "fixed"
    v = validity_of(Solver(parse_scenario(fixed)).resolved, "disaggregated", 0.5, t)
    assert v.outside == ["think time fixed never drawn", "clients 1.4e+03 > 700"] and not v.inside_envelope
    mix = parse_scenario(_example_with(prefix_cache={"kind": "mixture", "hit_fraction": 0.5, "hit_ratio": 0.9}))
    v = validity_of(Solver(mix).resolved, "disaggregated", 0.5, t)
    assert not v.inside_envelope and len(v.outside) == 1 and v.outside[0].startswith("prefix hit ratio 0.4")  # ~0.5 x 0.9


def test_closed_loop_validity_is_read_at_its_throughput() -> None:
    from qmodel.closed import solve_closed

    _, closed = _jsq_and_closed()
    sol = solve_closed(closed.scenario, closed)
    assert sol.loop.seen_rate_per_s < sol.loop.throughput_per_s  # X (N - 1) / N: a lower load band could be read
    assert sol.result.validity == closed.validity(sol.loop.throughput_per_s)


def test_the_shipped_corpus_drew_jsq_and_closed_loops() -> None:
    env = band_table()["envelope"]
    assert "jsq" in env["kinds"]["dispatch"] and "closed" in env["kinds"]["arrivals"] and "clients" in env["ranges"]
    jsq, closed = _jsq_and_closed()
    assert jsq.validity(0.5 * jsq.max_stable_rate()[0]).inside_envelope
    assert closed.validity(0.5 * closed.max_stable_rate()[0]).inside_envelope


def test_a_number_the_corpus_never_drew_is_flagged() -> None:
    env = {"kinds": {"arrivals": ["closed", "poisson"]}, "ranges": {"load": [0.2, 0.97]}}
    assert outside_envelope({"arrivals": ["closed"]}, {"load": 0.5, "clients": 8.0}, env) == ["clients 8 never drawn"]


def test_compare_levels_tables_each_candidate() -> None:
    from qmodel.validation.band_fit import compare_levels, holdout_coverage, levels_markdown

    rows = [_row(i, "chunked", "u<=0.5" if i % 2 else "0.8-0.9", "smooth", ((i * 37) % 100 - 50) / 100) for i in range(100)]
    for r in rows:
        r["cell"]["pool"] = "pooled" if _number_of(r) % 3 else "split"
    res = compare_levels(rows, [("topology",), ("topology", "load"), ("topology", "load", "pool")])
    assert [c["cells"] for c in res] == [1, 3, 3]  # 100 rows; 50 per load band; pool sub-cells (17 / 33) too small
    assert res[0]["fresh_from"] == 50
    one = holdout_coverage(rows, levels=("topology",))
    assert res[0]["folds_min"] == min(one["coverage"]["chunked"][m] for m in BAND_METRICS)
    assert res[0]["median_width"] == one["median_width"]
    assert levels_markdown(res).splitlines()[2].startswith("| topology | 1 | ")


def _number_of(row: dict) -> int:
    return int(row["id"].lstrip("c"))
