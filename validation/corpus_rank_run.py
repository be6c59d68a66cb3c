"""Running the ranking groups (:mod:`qmodel.validation.corpus_rank`): goodput per candidate, analytic
vs replay, and per group the ranking agreement (issue 18 §2).

Per candidate: :func:`qmodel.validation.harness.compare_goodput`, the suites' one comparison:
the analytic goodput (:func:`qmodel.goodput.goodput_search`) against the replay bisection (one seed
at every rate, bracket 2% of the rate, replays max(4000, 1000/(1-u)^2 up to 20000) requests, u =
rate / analytic limit capped at 0.95), plus the replay's noise at its goodput (a second seed: the
attainment's standard error and the goodput noise it implies through the curve's slope). The
row also says which SLO binds at the analytic goodput (the lower of the TTFT and TPOT
attainments) and the limiting station, the first suspects where the ranking goes wrong.

Per group (:func:`rank_stats`, exact on hand-built numbers in tests/test_corpus_rank.py):

* Kendall τ-b between the analytic and the replay goodputs (``scipy.stats.kendalltau``; τ-b
  counts a tie on either side as neither concordant nor discordant and normalises by
  sqrt((n0 - n1)(n0 - n2)), so tied candidates, e.g. several at zero goodput, neither help nor
  hurt); undefined (None) when either side is constant, and the discordant pairs listed;
* top-1: the analytic choice is the candidate of largest analytic goodput (the first in label order
  among equals, as one answer must be given); it agrees when its replay goodput is the replay's
  largest; **regret** = 1 - replay goodput of that choice / the largest replay goodput, the share
  of the goodput a user loses by following the analytic engine (0 when it agrees);
* the culprit of a miss: among candidates in a discordant pair (or the analytic choice and the
  replay's best, for a top-1 miss), the one with the largest |goodput error|.

Summary: goodput |error| median / p90 and the share within 5% (overall and per topology), τ median
and the share of groups with τ >= 0.9, top-1 agreements, regret median / max, goodput noise.
"""

from __future__ import annotations

import math
from concurrent.futures import ProcessPoolExecutor
from typing import Any, Callable, Iterable

import numpy as np

from qmodel.validation.corpus_rank import RankCandidate, RankCorpus, RankGroup
from qmodel.validation.harness import GOODPUT_WITHIN, abs_error_stats, compare_goodput
from qmodel.validation.suites import Suite

__all__ = ["RANK_LENGTHS", "NOISE_SEED", "TARGET_TAU", "run_candidate", "rank_stats", "run_rank", "summarize_rank",
           "group_table", "candidate_table", "summary_lines", "GROUP_HEADERS", "CANDIDATE_HEADERS"]

#: replay lengths of the goodput bisection (the suites' Suite fields; seeds[0] bisects)
RANK_LENGTHS = Suite("corpus-rank", (), base_requests=1000, min_requests=4000, max_requests=20000,
                     goodput_requests=4000, seeds=(0,))
#: the second seed replayed at the replay goodput (its noise)
NOISE_SEED = 1
TARGET_TAU = 0.9


def run_candidate(group: RankGroup, cand: RankCandidate, lengths: Suite | None = None) -> dict[str, Any]:
    """One candidate's goodputs (module docstring; ``lengths`` default :data:`RANK_LENGTHS`);
    failures are a row with ``error``, never a crash."""
    lengths = RANK_LENGTHS if lengths is None else lengths
    rec: dict[str, Any] = {"group": group.id, "label": cand.label, "topology": cand.topology,
                           "dispatch": cand.dispatch}
    try:
        rec.update(compare_goodput(cand.scenario, lengths, noise_seed=NOISE_SEED))
        g = (rec.get("analytic") or {}).get("goodput")
        if g:
            from qmodel.solver import Solver

            res = Solver(cand.scenario).solve(g)
            rec["binding_slo"] = "ttft" if res.ttft_attainment < res.tpot_attainment else "tpot"
    except Exception as err:  # noqa: BLE001 -- a row saying why
        rec["analytic"] = rec.get("analytic")
        rec["error"] = f"{type(err).__name__}: {err}"
    return rec


def _job(item: tuple[RankGroup, RankCandidate, Suite]) -> dict[str, Any]:
    return run_candidate(*item)


def rank_stats(labels: list[str], analytic: list[float], replay: list[float],
               errors: list[float] | None = None) -> dict[str, Any]:
    """τ-b, discordant pairs, top-1 agreement, regret and culprit of one group (module docstring)."""
    from scipy.stats import kendalltau

    a, r = np.asarray(analytic, dtype=float), np.asarray(replay, dtype=float)
    tau = None
    if len(a) >= 2 and np.ptp(a) > 0 and np.ptp(r) > 0:
        tau = float(kendalltau(a, r).statistic)
    disc = [(labels[i], labels[j]) for i in range(len(a)) for j in range(i + 1, len(a))
            if (a[i] - a[j]) * (r[i] - r[j]) < 0]
    choice = int(np.argmax(a))
    best = float(r.max()) if len(r) else 0.0
    agree = bool(r[choice] == best)
    regret = 0.0 if best <= 0 else 1.0 - float(r[choice]) / best
    culprit = None
    if errors is not None and (not agree or (tau is not None and tau < TARGET_TAU)):
        suspects = {x for p in disc for x in p} | ({labels[choice], labels[int(np.argmax(r))]} if not agree else set())
        culprit = max(sorted(suspects), key=lambda x: abs(errors[labels.index(x)]))
    return {"tau": tau, "discordant": disc, "analytic_choice": labels[choice], "replay_best": labels[int(np.argmax(r))],
            "top1": agree, "regret": regret, "culprit": culprit}


def _group_result(group: RankGroup, rows: list[dict]) -> dict[str, Any]:
    ok = [x for x in rows if x.get("analytic") and x.get("replay")]
    out: dict[str, Any] = {"id": group.id, "features": dict(group.features), "n": len(rows),
                           "answered": len(ok), "failures": [f"{x['label']}: {x['error']}" for x in rows if x.get("error")]}
    if len(ok) >= 2:
        out.update(rank_stats([x["label"] for x in ok], [x["analytic"]["goodput"] for x in ok],
                              [x["replay"]["goodput"] for x in ok], [x["error_rel"]["goodput"] for x in ok]))
    return out


def summarize_rank(groups: list[dict], rows: list[dict]) -> dict[str, Any]:
    """Goodput error, noise and ranking figures over all groups (module docstring)."""
    ok = [x for x in rows if x.get("error_rel")]

    def gp(sel: list[dict]) -> dict[str, Any]:
        e = [x["error_rel"]["goodput"] for x in sel]
        return dict(abs_error_stats(e), within_5pct=int(sum(abs(v) <= GOODPUT_WITHIN for v in e)),
                    signed_median=float(np.median(e)) if e else 0.0)

    taus = [g["tau"] for g in groups if g.get("tau") is not None]
    noise = [x["replay"]["goodput_noise"] for x in ok if x["replay"].get("goodput_noise") is not None]
    ranked = [g for g in groups if "top1" in g]
    return {
        "goodput": gp(ok),
        "goodput_by_topology": {t: gp([x for x in ok if x["topology"] == t]) for t in sorted({x["topology"] for x in ok})},
        "goodput_noise": {"median": float(np.median(noise)) if noise else 0.0,
                          "p90": float(np.quantile(noise, 0.9)) if noise else 0.0, "n": len(noise)},
        "tau": {"median": float(np.median(taus)) if taus else None, "at_least_target": sum(t >= TARGET_TAU for t in taus),
                "defined": len(taus), "groups": len(groups)},
        "top1": {"agree": sum(g["top1"] for g in ranked), "of": len(ranked)},
        "regret": {"median": float(np.median([g["regret"] for g in ranked])) if ranked else 0.0,
                   "max": max((g["regret"] for g in ranked), default=0.0)},
        "failures": [f"{x['group']} {x['label']}: {x['error']}" for x in rows if x.get("error")],
    }


def run_rank(corpus: RankCorpus, lengths: Suite | None = None, jobs: int = 1,
             progress: Callable[[dict], None] | None = None) -> dict[str, Any]:
    """Every candidate of every group (``jobs`` > 1: a process pool; rows keep the corpus order);
    ``lengths``: the replays' lengths (default :data:`RANK_LENGTHS`)."""
    lengths = RANK_LENGTHS if lengths is None else lengths
    items = [(g, c, lengths) for g in corpus.groups for c in g.candidates]
    ex = ProcessPoolExecutor(max_workers=jobs) if jobs > 1 else None
    results: Iterable[dict] = ex.map(_job, items) if ex is not None else map(_job, items)
    rows: list[dict] = []
    try:
        for rec in results:
            rows.append(rec)
            if progress is not None:
                progress(rec)
    finally:
        if ex is not None:
            ex.shutdown()
    groups = [_group_result(g, [x for x in rows if x["group"] == g.id]) for g in corpus.groups]
    return {"suite": "corpus-rank", "seed": corpus.seed, "n": len(corpus.groups), "data": corpus.data,
            "skipped_strata": list(corpus.skipped),
            "definition": {"goodput": "largest rate whose SLO attainment meets the goal; analytic: goodput_search; "
                                      "replay: bisection, one seed at every rate, bracket 2% of the rate",
                           "replay_requests": f"max({lengths.goodput_requests}, {lengths.base_requests}/(1-u)^2 up to "
                                              f"{lengths.max_requests}), u = rate / analytic limit capped at 0.95, "
                                              f"seed {lengths.seeds[0]}, warm-up 10%",
                           "goodput_noise": f"attainment standard error at the replay goodput over seeds "
                                            f"{lengths.seeds[0]} and {NOISE_SEED}, over the curve's slope, / goodput",
                           "tau": "Kendall tau-b (scipy.stats.kendalltau; ties count in neither direction); "
                                  "None when either side is constant",
                           "regret": "1 - replay goodput of the analytic choice / the largest replay goodput"},
            "summary": summarize_rank(groups, rows), "groups": groups, "candidates": rows}


# ---- tables -------------------------------------------------------------------------------------

GROUP_HEADERS = ["group", "model", "GPU", "budget", "workload", "cand.", "tau", "top-1", "regret", "culprit"]
CANDIDATE_HEADERS = ["group", "candidate", "limit", "station", "SLO", "analytic", "replay [bracket]", "error", "noise"]


def _f(x: float | None, fmt: str) -> str:
    return "-" if x is None or (isinstance(x, float) and not math.isfinite(x)) else format(x, fmt)


def group_table(out: dict) -> list[list[str]]:
    """One row per group: its draw, τ-b, top-1 agreement, regret and the culprit (topology,
    limiting station, binding SLO and goodput error of that candidate)."""
    by = {(x["group"], x["label"]): x for x in out["candidates"]}
    rows = []
    for g in out["groups"]:
        f = g["features"]
        c = by.get((g["id"], g.get("culprit")))
        culprit = "-" if c is None else (f"{c['label']}: {c.get('limiting_station', '?')}-limited, "
                                         f"{c.get('binding_slo', '?')} binds, {c['error_rel']['goodput'] * 100:+.0f}%")
        rows.append([g["id"], f["model"], f["gpu"], f["budget"], f"{f['arrivals']}/{f['length_source']}",
                     f"{g['answered']}/{g['n']}", _f(g.get("tau"), ".2f"),
                     "-" if "top1" not in g else ("yes" if g["top1"] else "no"), _f(g.get("regret"), ".1%"), culprit])
    return rows


def candidate_table(out: dict, groups: set[str] | None = None) -> list[list[str]]:
    """One row per candidate (of ``groups`` when given)."""
    rows = []
    for x in out["candidates"]:
        if groups is not None and x["group"] not in groups:
            continue
        a, r = x.get("analytic"), x.get("replay")
        rep = "-" if not r else f"{r['goodput']:.4g} [{r['bracket'][0]:.4g}, {r['bracket'][1]:.4g}]"
        rows.append([x["group"], x["label"], _f(x.get("max_stable_rate_per_s"), ".4g"), x.get("limiting_station", "-"),
                     x.get("binding_slo", "-"), "-" if not a else f"{a['goodput']:.4g}", rep,
                     "-" if "error_rel" not in x else f"{x['error_rel']['goodput'] * 100:+.1f}%",
                     "-" if not r or r.get("goodput_noise") is None else f"{r['goodput_noise'] * 100:.1f}%"])
    return rows


def summary_lines(out: dict) -> list[str]:
    """The summary as sentences (text output and docs)."""
    s = out["summary"]
    g, t, n = s["goodput"], s["tau"], s["goodput_noise"]
    lines = [f"goodput |error|: median {g['median_abs_rel_error'] * 100:.1f}%, p90 {g['p90_abs_rel_error'] * 100:.1f}%, "
             f"within 5%: {g['within_5pct']} of {g['n']} ({g['within_5pct'] / max(g['n'], 1) * 100:.0f}%; target >= 90%), "
             f"signed median {g['signed_median'] * 100:+.1f}%"]
    lines += [f"  {top}: median {v['median_abs_rel_error'] * 100:.1f}%, p90 {v['p90_abs_rel_error'] * 100:.1f}%, "
              f"within 5% {v['within_5pct']} of {v['n']}, signed median {v['signed_median'] * 100:+.1f}%"
              for top, v in s["goodput_by_topology"].items()]
    lines.append(f"replay goodput noise (seed {RANK_LENGTHS.seeds[0]} vs {NOISE_SEED} at the replay goodput): median "
                 f"{n['median'] * 100:.2f}%, p90 {n['p90'] * 100:.2f}% of {n['n']} candidates")
    lines.append(f"Kendall tau-b per group: median {_f(t['median'], '.2f')}, >= {TARGET_TAU}: {t['at_least_target']} of "
                 f"{t['defined']} defined ({t['groups']} groups)")
    lines.append(f"top-1 (analytic choice = replay best): {s['top1']['agree']} of {s['top1']['of']}; regret median "
                 f"{s['regret']['median'] * 100:.1f}%, max {s['regret']['max'] * 100:.1f}%")
    lines += [f"failed: {f}" for f in s["failures"]]
    return lines
