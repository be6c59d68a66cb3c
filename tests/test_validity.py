"""The validity label: measured errors per topology and load band, kept equal to docs/validation.md."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from qmodel.validity import BANDS, MEASURED, MEASURED_AT, band_of, validity_label

DOC = Path(__file__).resolve().parent.parent / "docs" / "validation.md"


def _doc_table() -> dict[tuple[str, str], dict[str, tuple[float, float]]]:
    text = DOC.read_text()
    head = "| topology | band | ttft_p50 | ttft_p90 | ttft_p99 | tpot_p50 | tpot_p90 | tpot_p99 |"
    assert head in text
    cols = ["ttft_p50", "ttft_p90", "ttft_p99", "tpot_p50", "tpot_p90", "tpot_p99"]
    out = {}
    for line in text.split(head, 1)[1].splitlines()[2:]:
        if not line.startswith("|"):
            break
        cells = [c.strip() for c in line.strip("|").split("|")]
        vals = {}
        for name, cell in zip(cols, cells[2:]):
            med, p90 = re.findall(r"([\d.]+)%", cell)
            vals[name] = (float(med) / 100, float(p90) / 100)
        out[(cells[0], cells[1])] = vals
    return out


def test_table_matches_the_docs() -> None:
    # a rerun of the suite rewrites the docs table: the label must quote the same numbers
    doc = _doc_table()
    assert set(doc) == set(MEASURED)
    for key, cell in MEASURED.items():
        for metric, (med, p90) in cell.items():
            assert (med, p90) == pytest.approx(doc[key][metric], abs=5e-4), (key, metric)
    assert MEASURED_AT in DOC.read_text()


def test_bands_and_grades() -> None:
    assert [band_of(u) for u in (0.1, 0.5, 0.51, 0.8, 0.81, 0.99, 1.2)] == \
        ["u<=0.5", "u<=0.5", "0.5<u<=0.8", "0.5<u<=0.8", "u>0.8", "u>0.8", "u>0.8"]
    assert [b[0] for b in BANDS] == ["u<=0.5", "0.5<u<=0.8", "u>0.8"]
    # disaggregated at low load: every median <= 5% -> good; colocated past half load -> poor
    assert validity_label("disaggregated", 0.3).startswith("good: at 0.30 of the largest stable rate (u<=0.5)")
    assert validity_label("chunked", 0.6).startswith("fair")
    assert validity_label("colocated", 0.7).startswith("poor")
    assert "90th percentile up to 63%" in validity_label("colocated", 0.7)  # TTFT p99, 0.628
    assert validity_label("nowhere", 0.3).startswith("unmeasured")
    # burstier arrivals than any suite scenario: the label says so, with what was seen beyond it
    assert "caution" not in validity_label("colocated", 0.3, 4.0)
    assert "caution: arrival SCV 173 is burstier" in validity_label("colocated", 0.3, 173.0)
