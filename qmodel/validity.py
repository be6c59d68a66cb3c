"""How far the analytical engine is from the replay, as measured: the validity label of a result.

The numbers are the validation suite's (``benchmarks/run_validation.py validation --suite full``,
72 scenarios: 3 topologies x 2 arrival processes x utilization 0.3-0.95, empirical Azure 2023
lengths; docs/validation.md, "Per topology and utilization band"). Each cell is (median, 90th
percentile) of |relative error| against the replay over the scenarios of that topology and band.
``tests/test_validity.py`` checks this table against the one in docs/validation.md, so a rerun of
the suite that moves the numbers fails until they are copied here.

The label of a solved scenario is read off its topology and its load u = rate / the smallest
station stability limit (the suite's definition), from the largest median |error| of TTFT and
TPOT p90/p99 in that cell: good up to 5%, fair up to 15%, poor above; the line also gives the
90th percentile of the errors there.
"""

from __future__ import annotations

__all__ = ["BANDS", "MEASURED_AT", "MEASURED", "SUITE_MAX_ARRIVAL_SCV", "band_of", "validity_label"]

#: commit of the validation run the table comes from
MEASURED_AT = "6d49965"

#: the suite's load bands: (name, lower, upper); u above the last upper bound falls in the last band
BANDS = (("u<=0.5", 0.0, 0.5), ("0.5<u<=0.8", 0.5, 0.8), ("u>0.8", 0.8, 1.0))

_METRICS = ("ttft_p90", "ttft_p99", "tpot_p90", "tpot_p99")

#: (topology, band) -> metric -> (median, p90) of |relative error| against the replay
MEASURED: dict[tuple[str, str], dict[str, tuple[float, float]]] = {
    ("chunked", "u<=0.5"): {"ttft_p90": (0.069, 0.094), "ttft_p99": (0.076, 0.103), "tpot_p90": (0.040, 0.181), "tpot_p99": (0.049, 0.099)},
    ("chunked", "0.5<u<=0.8"): {"ttft_p90": (0.071, 0.089), "ttft_p99": (0.089, 0.144), "tpot_p90": (0.020, 0.062), "tpot_p99": (0.042, 0.189)},
    ("chunked", "u>0.8"): {"ttft_p90": (0.128, 0.303), "ttft_p99": (0.224, 0.433), "tpot_p90": (0.004, 0.110), "tpot_p99": (0.019, 0.048)},
    ("colocated", "u<=0.5"): {"ttft_p90": (0.070, 0.149), "ttft_p99": (0.097, 0.228), "tpot_p90": (0.106, 0.207), "tpot_p99": (0.100, 0.405)},
    ("colocated", "0.5<u<=0.8"): {"ttft_p90": (0.117, 0.520), "ttft_p99": (0.258, 0.628), "tpot_p90": (0.152, 0.423), "tpot_p99": (0.193, 0.296)},
    ("colocated", "u>0.8"): {"ttft_p90": (0.279, 0.752), "ttft_p99": (0.334, 0.854), "tpot_p90": (0.286, 0.428), "tpot_p99": (0.429, 1.830)},
    ("disaggregated", "u<=0.5"): {"ttft_p90": (0.022, 0.056), "ttft_p99": (0.047, 0.111), "tpot_p90": (0.005, 0.015), "tpot_p99": (0.011, 0.023)},
    ("disaggregated", "0.5<u<=0.8"): {"ttft_p90": (0.050, 0.104), "ttft_p99": (0.083, 0.162), "tpot_p90": (0.006, 0.014), "tpot_p99": (0.021, 0.063)},
    ("disaggregated", "u>0.8"): {"ttft_p90": (0.085, 0.265), "ttft_p99": (0.148, 0.370), "tpot_p90": (0.013, 0.025), "tpot_p99": (0.057, 0.108)},
}


def band_of(u: float) -> str:
    """The suite's utilization band of load u."""
    for name, lo, hi in BANDS:
        if lo < u <= hi or (lo == 0.0 and u <= hi):
            return name
    return BANDS[-1][0]


#: the burstiest arrivals in the suite (Gamma, CV 2)
SUITE_MAX_ARRIVAL_SCV = 4.0


def validity_label(topology: str, u: float, arrival_scv: float = 1.0) -> str:
    """One line: good / fair / poor, the band, and the measured errors that back it; arrivals
    burstier than the suite's get a caveat with what the seed experiment found beyond it."""
    band = band_of(u)
    cell = MEASURED.get((topology, band))
    if cell is None:
        return f"unmeasured: no validation cell for {topology}; check with --check"
    caveat = ""
    if arrival_scv > SUITE_MAX_ARRIVAL_SCV * (1.0 + 1e-9):
        caveat = (f"; caution: arrival SCV {arrival_scv:.3g} is burstier than the suite's (<= {SUITE_MAX_ARRIVAL_SCV:g}). "
                  "On the Azure code trace (SCV 173) attainment was optimistic by up to 30 points for colocated "
                  "and up to 20 for disaggregated (docs/seed-experiment.md)")
    typical = max(cell[m][0] for m in _METRICS)
    worst = max(cell[m][1] for m in _METRICS)
    grade = "good" if typical <= 0.05 else "fair" if typical <= 0.15 else "poor"
    pct = " / ".join(f"{cell[m][0] * 100:.0f}" for m in _METRICS)
    return (f"{grade}: at {u:.2f} of the largest stable rate ({band}) the validation suite measured median |error| {pct}% "
            f"on TTFT p90 / p99 and TPOT p90 / p99 against the replay, 90th percentile up to "
            f"{worst * 100:.0f}% (suite at {MEASURED_AT}); check this scenario with --check{caveat}")
