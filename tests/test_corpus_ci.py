"""The corpus CI subset: ``qmodel validate --suite corpus-ci`` must not regress beyond its bands.

36 data-free generated scenarios (seed 18, :data:`qmodel.cli.cmd_validate.CI_N` / ``CI_SEED``),
replays of 4000-20000 requests x 2 seeds; ~25 s of CPU (40 s wall on the shared 2-core machine).
Marked ``slow`` so the fast suite (run twice by ``.ci/run``) does not pay for it; ``.ci/run`` runs
it once as its own step, with the data folder hidden.

**Bands.** :data:`MEASURED` is what the subset measured at the commit that added it (per group:
median and 90th percentile of |relative error| against the replay; attainment: of |difference|).
A group fails when a statistic exceeds measured + allowance, where the allowance is twice the
group's median replay noise for that metric (the relative standard error of the replay percentile
over the two seeds: an analytic change that moves the error by less than this is not
distinguishable from the replay's own noise), at least 0.005 (float differences across numpy
builds); attainment allows 0.02 (twice the binomial standard error of an attainment near 0.5 over
~4000 effective requests). Failures (an analytic error) may not appear in new scenarios. The
figures are not targets (docs/validation.md, "Generated corpus", lists those and the misses):
they pin today's accuracy so a change that worsens it fails; a change that improves it should
lower them, with the new figures in its commit message.
"""

from __future__ import annotations

import json

import numpy as np
import pytest

from qmodel.cli.main import main

METRICS = ["ttft_p50", "ttft_p90", "ttft_p99", "tpot_p50", "tpot_p90", "tpot_p99", "attainment"]

#: group -> metric -> (median, p90) of |error| measured when the subset was added; "all" and
#: "disaggregated" re-measured at 481a7f5, where c0010 (the one scenario whose solve raised below
#: the stated limit) became an answer: its limit now counts the in-flight KV reservation, and its
#: TPOT p90 is +248% against the replay (Gamma cv 0.59, fixed 1024/16, KV for 5 sequences: the
#: chain's slot wait at 0.91 of the limit; docs/validation.md, "Generated corpus"). No other
#: scenario moved. All groups re-measured again when the measured-efficiency roofline became the
#: default step times (stations unchanged; the corpus draws perf: roofline): overall TTFT p90/p99 p90
#: 1.66/2.24 -> 1.31/1.34, TPOT p90/p99 median 0.020/0.065 -> 0.044/0.129 (docs/validation.md).
#: Tightened when the colocated KV wall's wait took the arrival SCV (Allen-Cunneen, issue 18): colocated
#: TTFT p50 p90 1.8615 -> 1.8506 and attainment p90 0.2823 -> 0.2680, all attainment p90 0.2836 -> 0.2756.
MEASURED: dict[str, dict[str, tuple[float, float]]] = {
    "all": {"ttft_p50": (0.1506, 2.3607), "ttft_p90": (0.2868, 1.3093), "ttft_p99": (0.3111, 1.3391), "tpot_p50": (0.0192, 0.2402), "tpot_p90": (0.0443, 0.5934), "tpot_p99": (0.1286, 0.9235), "attainment": (0.0717, 0.2756)},
    "chunked": {"ttft_p50": (0.1757, 3.7398), "ttft_p90": (0.3462, 1.3288), "ttft_p99": (0.2465, 1.2771), "tpot_p50": (0.0186, 0.2062), "tpot_p90": (0.0441, 0.5683), "tpot_p99": (0.1173, 0.2783), "attainment": (0.0674, 0.1513)},
    "colocated": {"ttft_p50": (0.2651, 1.8506), "ttft_p90": (0.2802, 1.1504), "ttft_p99": (0.2875, 1.2524), "tpot_p50": (0.0236, 0.0812), "tpot_p90": (0.0311, 0.3127), "tpot_p99": (0.1286, 0.7497), "attainment": (0.0487, 0.2680)},
    "disaggregated": {"ttft_p50": (0.0792, 0.5486), "ttft_p90": (0.1354, 0.8121), "ttft_p99": (0.3475, 1.0223), "tpot_p50": (0.0133, 0.5217), "tpot_p90": (0.0684, 2.1693), "tpot_p99": (0.1089, 6.1448), "attainment": (0.1102, 0.2761)},
}
#: scenarios whose analytic side failed when the subset was added (a solve below the stated limit
#: that raises: docs/validation.md, "Generated corpus")
KNOWN_FAILURES: set[str] = set()
MIN_ALLOWANCE = 0.005
ATTAINMENT_ALLOWANCE = 0.02


def _allowance(rows: list[dict], metric: str) -> float:
    if metric == "attainment":
        return ATTAINMENT_ALLOWANCE
    noise = [r["replay_noise"][metric] for r in rows if r.get("error_rel")]
    return max(MIN_ALLOWANCE, 2.0 * float(np.median(noise))) if noise else MIN_ALLOWANCE


@pytest.mark.slow
def test_corpus_ci_subset_within_bands(tmp_path, capsys):
    path = tmp_path / "ci.json"
    assert main(["validate", "--suite", "corpus-ci", "--jobs", "2", "--json", str(path)]) == 0
    capsys.readouterr()
    out = json.loads(path.read_text())
    rows = out["scenarios"]
    assert len(rows) == 36 and not out["data"]
    failed = {r["id"] for r in rows if r.get("error")}
    assert failed <= KNOWN_FAILURES, f"new analytic failures: {sorted(failed - KNOWN_FAILURES)}"
    s = out["summary"]
    groups = {"all": (s["all"], rows)} | {t: (g, [r for r in rows if r["topology"] == t]) for t, g in s["by_topology"].items()}
    exceeded = []
    for name, bands in MEASURED.items():
        stats, grows = groups[name]
        for m, (med, p90) in bands.items():
            allow = _allowance(grows, m)
            got_med, got_p90 = stats[m]["median_abs_rel_error"], stats[m]["p90_abs_rel_error"]
            if got_med > med + allow:
                exceeded.append(f"{name} {m} median {got_med:.4f} > {med:.4f} + {allow:.4f}")
            if got_p90 > p90 + allow:
                exceeded.append(f"{name} {m} p90 {got_p90:.4f} > {p90:.4f} + {allow:.4f}")
    assert not exceeded, "corpus-ci regression beyond the bands: " + "; ".join(exceeded)
