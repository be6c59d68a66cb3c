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
#: scenario moved. All four re-measured on h/pipeline (the pp > 1 pipeline instance,
#: qmodel/perf/pipeline.py): the four pp = 2 scenarios (c0001, c0022, c0025, c0030; big MLA models
#: at tp 8 x pp 2) now decode at pp stage times of a micro-batch in both engines, so their limits
#: and rates moved (before, solver and replay agreed on the same too-fast steps). c0022
#: (disaggregated, decode max_batch 2, least_loaded, first token from decode) became decode-bound:
#: the decode limit's pre-existing overestimate for it (+12% over the replay's sustained rate
#: at 1 decode instance on main, +6.8% now) puts the replay at its own limit at 0.93 of the
#: solver's: TTFT p50 -9% -> -75%. c0025 (colocated, KV soft wall): P(wait) crossed 0.5, TTFT p50
#: +5% -> +83% (p90 -35% -> -39%). c0001 and c0030 improved (TPOT p90 +7.6% -> +5.6%, -24% -> -9%).
MEASURED: dict[str, dict[str, tuple[float, float]]] = {
    "all": {"ttft_p50": (0.1799, 3.5861), "ttft_p90": (0.3034, 1.6607), "ttft_p99": (0.4120, 2.2437), "tpot_p50": (0.0155, 0.1769), "tpot_p90": (0.0203, 0.5461), "tpot_p99": (0.0667, 1.0604), "attainment": (0.0724, 0.3213)},
    "chunked": {"ttft_p50": (0.2233, 3.7018), "ttft_p90": (0.3227, 1.3288), "ttft_p99": (0.2478, 1.2771), "tpot_p50": (0.0155, 0.1431), "tpot_p90": (0.0435, 0.2270), "tpot_p99": (0.0838, 0.2745), "attainment": (0.0764, 0.1347)},
    "colocated": {"ttft_p50": (0.4938, 3.0490), "ttft_p90": (0.3535, 1.8283), "ttft_p99": (0.4364, 2.9519), "tpot_p50": (0.0229, 0.0699), "tpot_p90": (0.0189, 0.4428), "tpot_p99": (0.0918, 0.9961), "attainment": (0.0647, 0.2825)},
    "disaggregated": {"ttft_p50": (0.0501, 0.6983), "ttft_p90": (0.1204, 0.8192), "ttft_p99": (0.3333, 0.8473), "tpot_p50": (0.0122, 0.5269), "tpot_p90": (0.0196, 2.3979), "tpot_p99": (0.0446, 5.9444), "attainment": (0.0830, 0.3616)},
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
