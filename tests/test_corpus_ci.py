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
#: All groups re-measured when the length sample became stratified in solver and replay alike
#: (qmodel.workload.lognormal_pairs): every replay of a lognormal/preset scenario is a new
#: realisation and every rate moves with its limit (<= 3%). Overall TTFT p90 p90 1.309 -> 0.907,
#: TTFT p50 median 0.151 -> 0.110; worse: chunked TTFT p99 median 0.247 -> 0.461 and chunked
#: attainment p90 0.151 -> 0.237, colocated TPOT p90/p99 p90 0.313/0.750 -> 0.338/0.802. The chunked
#: moves are the replay's p99 at 0.95-0.97 of the limit (c0014: analytic 12.3 -> 12.5 s, replay
#: 11.6 -> 25.2 s; c0027: 6.86 -> 6.48 s vs 7.08 -> 4.10 s), a realisation effect larger than the
#: two-seed noise estimate there, not an analytic change.
MEASURED: dict[str, dict[str, tuple[float, float]]] = {
    "all": {"ttft_p50": (0.1096, 2.0857), "ttft_p90": (0.2875, 0.9066), "ttft_p99": (0.3840, 1.0454), "tpot_p50": (0.0156, 0.2331), "tpot_p90": (0.0429, 0.5495), "tpot_p99": (0.1115, 0.9497), "attainment": (0.0683, 0.2684)},
    "chunked": {"ttft_p50": (0.1323, 2.1215), "ttft_p90": (0.3603, 0.9677), "ttft_p99": (0.4610, 1.0303), "tpot_p50": (0.0184, 0.1187), "tpot_p90": (0.0407, 0.4911), "tpot_p99": (0.0951, 0.2819), "attainment": (0.0657, 0.2369)},
    "colocated": {"ttft_p50": (0.3061, 1.8252), "ttft_p90": (0.3118, 0.7805), "ttft_p99": (0.3503, 0.8404), "tpot_p50": (0.0219, 0.0756), "tpot_p90": (0.0385, 0.3382), "tpot_p99": (0.1259, 0.8023), "attainment": (0.0461, 0.2885)},
    "disaggregated": {"ttft_p50": (0.0859, 0.3202), "ttft_p90": (0.1266, 0.7901), "ttft_p99": (0.1918, 1.0180), "tpot_p50": (0.0110, 0.5217), "tpot_p90": (0.0525, 2.1864), "tpot_p99": (0.1137, 6.1448), "attainment": (0.1091, 0.2761)},
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
