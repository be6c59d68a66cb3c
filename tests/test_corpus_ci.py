"""The corpus CI subset: ``qmodel validate --suite corpus-ci`` must not regress beyond its bands.

36 data-free generated scenarios (seed 18, :data:`qmodel.cli.cmd_validate.CI_N` / ``CI_SEED``),
replays of 4000-20000 requests x 2 seeds (a closed loop of N clients: at least 100 N, up to 20000);
~35 s of CPU (80 s wall with one job on the shared 2-core machine).
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

METRICS = ["ttft_p50", "ttft_p90", "ttft_p99", "tpot_p50", "tpot_p90", "tpot_p99", "attainment", "throughput"]

#: group -> metric -> (median, p90) of |error|: the overall and per-topology groups, and the two
#: strata added with the subset's current draws, closed loops ("closed": arrivals = closed) and jsq
#: dispatch ("jsq"); "throughput" is the closed loops' X(N) error (only closed rows have it).
#: Measured afresh when the corpus gained those two strata (issue 18 §1/§3): a new deck value
#: changes every draw after it, so the 36 scenarios are new ones (9 closed, 9 jsq) and no old
#: figure applies; measured on this branch merged with main 15444c2 (i17fit's MoE refit and
#: i18burst's bursty pools included); the figures, and the old draws' pins and their history, are
#: in docs/validation.md ("Generated corpus", "CI subset").
#: Re-measured when the closed cases' placement became model-independent (validation/corpus_closed.py:
#: N and Z from the stability limit and the unloaded latency, no longer from the analytic latency): the
#: 27 open rows are byte-identical with identical errors, the 9 closed rows are new draws (fewer clients,
#: N 4-107), so every group holding one was re-pinned to its new measurement, up or down; the old
#: figures and the per-case errors are in docs/validation.md ("CI subset"). Lowered where the median
#: all-reduce for unmeasured architectures (h/i17fit2-ar; c0015 on MI300X, the only row that moved) improved them.
#: "all" and "chunked" re-pinned when the chunked limit under a binding slot cap (the saturated
#: schedule, issue 18) moved 5 of the 12 chunked rows' limits, so their rates re-drew (new scenarios:
#: c0005, c0008, c0023, c0025, c0028); the 31 other rows are unchanged. Per-row errors and the reason:
#: docs/validation.md, "Chunked limit with a binding slot cap".
#: Three TPOT pins re-pinned when the MoE kernel's fixed time was measured at one token (h/fit4, h/fit5;
#: docs/step_times.md): 20 of the 36 rows re-draw (hopper's MoE and decode overheads, MI300X's borrow of
#: them, ampere/blackwell MoE), and three order statistics move through kimi-k2 rows only (per row and why:
#: docs/validation.md, "CI subset").
MEASURED: dict[str, dict[str, tuple[float, float]]] = {
    "all": {"ttft_p50": (0.2089, 1.0831), "ttft_p90": (0.1999, 2.9351), "ttft_p99": (0.2142, 1.6016), "tpot_p50": (0.0343, 0.4652), "tpot_p90": (0.0606, 0.3473), "tpot_p99": (0.1034, 0.7578), "attainment": (0.0819, 0.3881), "throughput": (0.0230, 0.0868)},
    "chunked": {"ttft_p50": (0.5630, 1.1212), "ttft_p90": (0.5932, 2.3384), "ttft_p99": (0.3887, 1.0274), "tpot_p50": (0.0396, 0.3871), "tpot_p90": (0.0580, 0.2660), "tpot_p99": (0.0780, 0.7945), "attainment": (0.1075, 0.2774), "throughput": (0.0211, 0.0659)},
    "colocated": {"ttft_p50": (0.2609, 1.6271), "ttft_p90": (0.0975, 4.5512), "ttft_p99": (0.1426, 7.4217), "tpot_p50": (0.0275, 0.0576), "tpot_p90": (0.0593, 0.1859), "tpot_p99": (0.1190, 0.4689), "attainment": (0.0696, 0.5979), "throughput": (0.0174, 0.0948)},
    "disaggregated": {"ttft_p50": (0.1441, 0.9445), "ttft_p90": (0.2360, 0.9259), "ttft_p99": (0.2029, 0.9350), "tpot_p50": (0.0358, 0.6822), "tpot_p90": (0.0785, 1.1229), "tpot_p99": (0.1206, 1.0344), "attainment": (0.0070, 0.3666), "throughput": (0.0453, 0.0545)},
    "closed": {"ttft_p50": (0.0800, 1.1010), "ttft_p90": (0.0680, 7.2968), "ttft_p99": (0.6594, 11.9071), "tpot_p50": (0.0237, 0.0471), "tpot_p90": (0.0623, 0.1299), "tpot_p99": (0.0630, 0.4764), "attainment": (0.0828, 0.2539), "throughput": (0.0230, 0.0868)},
    "jsq": {"ttft_p50": (0.4189, 1.4798), "ttft_p90": (0.3418, 1.3340), "ttft_p99": (0.4143, 4.4406), "tpot_p50": (0.0227, 0.0373), "tpot_p90": (0.0604, 0.1312), "tpot_p99": (0.1413, 0.4764), "attainment": (0.0970, 0.1111), "throughput": (0.0283, 0.0640)},
}
#: scenarios whose analytic side failed when the subset was added (a solve below the stated limit
#: that raises: docs/validation.md, "Generated corpus")
KNOWN_FAILURES: set[str] = set()
#: stratum groups: name -> (feature axis, value)
STRATA = {"closed": ("arrivals", "closed"), "jsq": ("dispatch", "jsq")}
MIN_ALLOWANCE = 0.005
ATTAINMENT_ALLOWANCE = 0.02


def _allowance(rows: list[dict], metric: str) -> float:
    if metric == "attainment":
        return ATTAINMENT_ALLOWANCE
    noise = [r["replay_noise"][metric] for r in rows if r.get("error_rel") and metric in r["replay_noise"]]
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
    for name, (axis, value) in STRATA.items():
        groups[name] = (s["by_feature"][axis][value], [r for r in rows if r["features"].get(axis) == value])
    exceeded = []
    for name, bands in MEASURED.items():
        stats, grows = groups[name]
        for m, (med, p90) in bands.items():
            allow = _allowance(grows, m)
            got_med, got_p90 = stats[m]["median_abs_rel_error"], stats[m]["p90_abs_rel_error"]
            if stats[m]["n"] == 0:
                exceeded.append(f"{name} {m}: no rows (the draws changed?)")
            elif got_med > med + allow:
                exceeded.append(f"{name} {m} median {got_med:.4f} > {med:.4f} + {allow:.4f}")
            if got_p90 > p90 + allow:
                exceeded.append(f"{name} {m} p90 {got_p90:.4f} > {p90:.4f} + {allow:.4f}")
    assert not exceeded, "corpus-ci regression beyond the bands: " + "; ".join(exceeded)
