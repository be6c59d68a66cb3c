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
    # the example: Poisson, 2 prefill instances round_robin, decode max_batch 128 with KV room for more
    r = Solver(load_scenario(EXAMPLE)).resolved
    assert cell_features(r, "disaggregated", 0.6) == {
        "topology": "disaggregated", "load": "0.5-0.8", "arrivals": "smooth", "kv": "ample",
        "lengths": r.scenario.workload.lengths.kind, "dispatch": r.scenario.deployment.prefill.dispatch, "batch": "128+"}


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
    v = solver.validity(0.99 * lam)
    assert not v.inside_envelope and v.outside == ["load 0.99 > 0.97"]
    assert v.text.endswith("; outside the validated envelope: load 0.99 > 0.97; check this scenario with --check")
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
