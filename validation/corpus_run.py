"""Running the generated corpus (:mod:`qmodel.validation.corpus`): analytic vs replay per scenario,
grouped error tables and the issue-18 targets.

Per case: :func:`qmodel.validation.harness.compare_scenario` at the case's utilization (rate =
u x the analytic stability limit), replayed once per seed with n = base/(1-u)² requests clipped to
[min, max] (waiting times are autocorrelated over ~1/(1-u)² arrivals; docs/validation.md), first
10% cut as warm-up. Each row keeps the relative errors (analytic - replay)/replay of TTFT/TPOT
p50/p90/p99, the attainment difference, the replay noise (relative standard error over the seeds)
and the case's feature values. A case whose analytic side raises is a row with ``error`` set.

A closed-loop case (arrivals ``closed``, :mod:`qmodel.validation.corpus_closed`) is the loop's own
analytic answer (:func:`qmodel.closed.solve_closed`: latencies at its seen rate) against the
replay of the same loop, plus the throughput error (analytic X(N) / replay completions per second
- 1, column ``X``; only closed rows have it). Its replay runs at least ``LOOP_REQUESTS`` x N
requests (clipped to the run length's maximum): the loop starts with all N clients sending at
once, and the 10% warm-up then covers >= 10 cycles of every client.

Summary groups: by topology, load band, topology x band, every feature value, and for each stratum
of :data:`STRATA` (closed loops, jsq dispatch) its rows by topology, load band and topology x
band; each group gives
per metric the median and 90th percentile of |error| (attainment: of |difference|) and n. The
targets (issue 18 §2) are checked per topology x band up to 0.95: median |error| <= 5% and
90th percentile <= 15% for the six latency metrics, |attainment difference| <= 0.03.
"""

from __future__ import annotations

from concurrent.futures import ProcessPoolExecutor
from typing import Any, Callable, Iterable

import numpy as np

from qmodel.validation.corpus import AXES, LOAD_BANDS, Corpus, CorpusCase, load_band
from qmodel.validation.harness import LATENCY_METRICS, abs_error_stats, compare_scenario
from qmodel.validation.suites import Suite

__all__ = ["METRICS", "STRATA", "UTILIZATION_DEFINITION", "LOOP_REQUESTS", "replay_requests", "TARGET_MEDIAN", "TARGET_P90", "TARGET_ATTAINMENT", "TARGET_MAX_U", "RUN_LENGTHS",
           "TABLE_HEADERS", "run_corpus_case", "run_corpus", "summarize_corpus", "markdown_tables", "group_rows",
           "table_rows", "sections", "replay_saturated", "keep_case", "rescore_corpus", "map_rows"]

METRICS = LATENCY_METRICS + ["attainment", "throughput"]
#: strata (axis, value) whose rows are also tabled by topology and load band
STRATA: tuple[tuple[str, str], ...] = (("arrivals", "closed"), ("dispatch", "jsq"))
#: what a row's ``utilization`` is (written into the run's JSON, and by a re-score)
UTILIZATION_DEFINITION = ("rate / Solver(scenario).max_stable_rate() (the smallest station limit); closed loops: the "
                          "fluid load N / (limit x (T0 + Z)), T0 the unloaded latency (validation/corpus_closed.py); "
                          "rate_per_s is the analytic X(N)")
#: a closed loop's replay: at least this many requests per client (module docstring)
LOOP_REQUESTS = 100
TARGET_MEDIAN = 0.05
TARGET_P90 = 0.15
TARGET_ATTAINMENT = 0.03
#: the targets apply in the load bands up to this utilization
TARGET_MAX_U = 0.95
#: replay lengths: name -> Suite holding base/min/max requests and seeds (cases come from the corpus)
RUN_LENGTHS: dict[str, Suite] = {
    "full": Suite("corpus", (), base_requests=3000, min_requests=10000, max_requests=100000),
    "ci": Suite("corpus-ci", (), base_requests=1000, min_requests=4000, max_requests=20000),
}


def replay_requests(case: CorpusCase, lengths: Suite) -> int:
    """The case's replay length: ``lengths.n_requests(u)``; a closed loop of N clients at least
    min(LOOP_REQUESTS x N, the maximum) (module docstring)."""
    from qmodel.scenario import ClosedArrivals

    n = lengths.n_requests(case.utilization)
    a = case.scenario.workload.arrivals
    if isinstance(a, ClosedArrivals):
        n = max(n, min(LOOP_REQUESTS * a.concurrency, lengths.max_requests))
    return n


def run_corpus_case(case: CorpusCase, lengths: Suite, reuse: dict[str, Any] | None = None) -> dict[str, Any]:
    """One corpus case through the analytic engine and the replay (see the module docstring);
    ``reuse``: an earlier row of this case whose replay is kept if it ran at the same rate
    (:func:`~qmodel.validation.harness.compare_scenario`)."""
    rec: dict[str, Any] = {"id": case.id, "topology": case.features["topology"], "band": load_band(case.utilization),
                           "utilization": case.utilization, "features": dict(case.features)}
    try:
        rec.update(compare_scenario(case.scenario, case.utilization, replay_requests(case, lengths), lengths.seeds,
                                    reuse=reuse))
    except Exception as err:  # noqa: BLE001 -- a limit or replay failure is a row saying why, never a crash
        rec["analytic"] = None
        rec["error"] = f"{type(err).__name__}: {err}"
    return rec


def map_rows(job: Callable[[Any], dict[str, Any]], items: list[Any], jobs: int = 1,
             progress: Callable[[dict], None] | None = None) -> list[dict[str, Any]]:
    """``job`` over ``items`` in order (``jobs`` > 1: a process pool, ``job`` picklable), calling
    ``progress`` with each row as it arrives: the one runner of the corpus suites."""
    ex = ProcessPoolExecutor(max_workers=jobs) if jobs > 1 else None
    results: Iterable[dict[str, Any]] = ex.map(job, items) if ex is not None else map(job, items)
    rows: list[dict[str, Any]] = []
    try:
        for rec in results:
            rows.append(rec)
            if progress is not None:
                progress(rec)
    finally:
        if ex is not None:
            ex.shutdown()
    return rows


def _job(item: tuple[CorpusCase, Suite]) -> dict[str, Any]:
    return run_corpus_case(*item)


def keep_case(features: dict[str, str], where: Iterable[str]) -> bool:
    """Whether a case's feature values pass every ``axis=value`` / ``axis!=value`` filter."""
    for w in where:
        neg = "!=" in w
        axis, value = w.split("!=" if neg else "=", 1)
        if (features.get(axis) == value) == neg:
            return False
    return True


def _rescore_job(item: tuple[CorpusCase, dict[str, Any] | None]) -> dict[str, Any]:
    return run_corpus_case(item[0], RUN_LENGTHS["full"], reuse=item[1])


def rescore_corpus(base: dict[str, Any], where: Iterable[str] = (), jobs: int = 1,
                   corpus: Corpus | None = None) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """(BASE's rows, new rows) of the selected cases of a corpus run re-scored with this code: the
    corpus regenerated from BASE's n, seed and data flag, each case solved again and BASE's replay
    of the case reused where :func:`~qmodel.validation.harness.compare_scenario` allows (same
    scenario, rate, requests and seeds; the new row says ``replay_reused``), replayed otherwise
    (``full`` lengths, as BASE's). ``corpus``: BASE's, already regenerated."""
    from qmodel.validation.corpus import generate

    rows = {r["id"]: r for r in base["scenarios"]}
    if corpus is None:
        corpus = generate(int(base["n"]), seed=int(base["seed"]), data=bool(base["data"]))
    items = [(c, rows.get(c.id)) for c in corpus.cases if keep_case(dict(c.features), where)]
    new = map_rows(_rescore_job, items, jobs)
    return [r for _, r in items if r is not None], new


def replay_saturated(row: dict) -> bool:
    """Whether the replay did not keep up at the case's rate (its own warning: < 95% of the window's
    arrivals completed), i.e. the analytic stability limit lies above what the replay sustains."""
    return any(w.startswith(_NOT_KEPT_UP) for w in row.get("replay_warnings", ()))


_NOT_KEPT_UP = "the deployment did not keep up"


def _group_stats(rows: list[dict]) -> dict[str, Any]:
    ok = [r for r in rows if r.get("error_rel")]
    out: dict[str, Any] = {m: abs_error_stats([r["error_rel"][m] for r in ok if m in r["error_rel"]]) for m in METRICS}
    out["n"] = len(rows)
    out["failures"] = sum(1 for r in rows if r.get("error"))
    out["replay_saturated"] = sum(1 for r in rows if replay_saturated(r))
    return out


def group_rows(rows: list[dict], key: Callable[[dict], str | None]) -> dict[str, list[dict]]:
    """Rows by ``key(row)`` (None: left out), keys sorted."""
    groups: dict[str, list[dict]] = {}
    for r in rows:
        k = key(r)
        if k is not None:
            groups.setdefault(k, []).append(r)
    return dict(sorted(groups.items()))


def _targets(by_top_band: dict[str, dict]) -> dict[str, Any]:
    cells: dict[str, Any] = {}
    for name, g in by_top_band.items():
        band = name.split("/", 1)[1]
        if next(hi for b, _, hi in LOAD_BANDS if b == band) > TARGET_MAX_U + 1e-12:
            continue
        misses = [f"{m} median {g[m]['median_abs_rel_error']:.3f}" for m in LATENCY_METRICS
                  if g[m]["n"] and g[m]["median_abs_rel_error"] > TARGET_MEDIAN]
        misses += [f"{m} p90 {g[m]['p90_abs_rel_error']:.3f}" for m in LATENCY_METRICS
                   if g[m]["n"] and g[m]["p90_abs_rel_error"] > TARGET_P90]
        if g["attainment"]["n"] and g["attainment"]["p90_abs_rel_error"] > TARGET_ATTAINMENT:
            misses.append(f"attainment p90 |diff| {g['attainment']['p90_abs_rel_error']:.3f}")
        cells[name] = {"met": not misses and not g["failures"], "misses": misses, "failures": g["failures"]}
    return {"cells": cells, "met": sum(c["met"] for c in cells.values()), "of": len(cells)}


def _by_topology_band(rows: list[dict]) -> dict[str, dict]:
    return {k: _group_stats(v) for k, v in group_rows(rows, lambda r: f"{r['topology']}/{r['band']}").items()}


def _stratum(rows: list[dict]) -> dict[str, dict]:
    """A stratum's rows by topology, load band and topology x band (keys prefixed, one table)."""
    return ({f"topology {k}": _group_stats(v) for k, v in group_rows(rows, lambda r: r["topology"]).items()}
            | {f"band {k}": _group_stats(v) for k, v in group_rows(rows, lambda r: r["band"]).items()}
            | _by_topology_band(rows))


def summarize_corpus(rows: list[dict]) -> dict[str, Any]:
    """Grouped |error| statistics, replay noise and the target check (module docstring)."""
    ok = [r for r in rows if r.get("error_rel")]
    by_top_band = _by_topology_band(rows)
    noise = {m: float(np.median([r["replay_noise"][m] for r in ok])) if ok else 0.0 for m in LATENCY_METRICS}
    worst_noise = [max(r["replay_noise"][m] for m in LATENCY_METRICS) for r in ok]
    return {
        "all": _group_stats(rows),
        "by_topology": {k: _group_stats(v) for k, v in group_rows(rows, lambda r: r["topology"]).items()},
        "by_band": {k: _group_stats(v) for k, v in group_rows(rows, lambda r: r["band"]).items()},
        "by_topology_band": by_top_band,
        "by_feature": {axis: {k: _group_stats(v) for k, v in group_rows(rows, lambda r, a=axis: r["features"].get(a)).items()}
                       for axis in AXES if axis not in ("topology", "band")},
        "by_stratum": {f"{axis}={v}": _stratum(sel) for axis, v in STRATA
                       if (sel := [r for r in rows if r["features"].get(axis) == v])},
        "replay_noise": {"median_by_metric": noise,
                         "fraction_below_2pct": float(np.mean(np.asarray(worst_noise) < 0.02)) if ok else 0.0},
        "targets": _targets(by_top_band),
        "failures": [f"{r['id']}: {r['error']}" for r in rows if r.get("error")],
    }


def run_corpus(corpus: Corpus, lengths: Suite, jobs: int = 1,
               progress: Callable[[dict], None] | None = None) -> dict[str, Any]:
    """Every case of ``corpus``; ``jobs`` > 1 uses a process pool (rows keep the corpus order)."""
    rows = map_rows(_job, [(c, lengths) for c in corpus.cases], jobs, progress)
    return {"suite": "corpus", "seed": corpus.seed, "n": len(corpus.cases), "data": corpus.data,
            "skipped_strata": list(corpus.skipped),
            "definition": {"utilization": UTILIZATION_DEFINITION,
                           "rel_error": "(analytic - replay) / replay; attainment: analytic - replay",
                           "replay_noise": "standard error of the mean over seeds, relative to the mean",
                           "replay_requests": f"{lengths.base_requests}/(1-u)^2 clipped to [{lengths.min_requests}, "
                                              f"{lengths.max_requests}] (closed loops: at least {LOOP_REQUESTS} per client "
                                              f"up to the maximum), seeds {list(lengths.seeds)}, warm-up 10%"},
            "summary": summarize_corpus(rows), "scenarios": rows}


def _cell(g: dict, m: str) -> str:
    s = g[m]
    if not s["n"]:
        return "-"
    if m == "attainment":
        return f"{s['median_abs_rel_error']:.3f}/{s['p90_abs_rel_error']:.3f}"
    return f"{s['median_abs_rel_error'] * 100:.1f}/{s['p90_abs_rel_error'] * 100:.1f}"


def table_rows(groups: dict[str, dict]) -> list[list[str]]:
    """One row per group: name, n (failures), replays saturated below the analytic limit, then
    median/p90 |error| % per metric (attainment: absolute; X: closed loops' throughput, '-' without one)."""
    return [[name, f"{g['n']}" + (f" ({g['failures']} failed)" if g["failures"] else ""), str(g["replay_saturated"])]
            + [_cell(g, m) for m in METRICS] for name, g in groups.items()]


TABLE_HEADERS = ["group", "n", "sat.", "TTFT p50", "TTFT p90", "TTFT p99", "TPOT p50", "TPOT p90", "TPOT p99", "attain.", "X"]


def sections(out: dict) -> list[tuple[str, dict[str, dict]]]:
    """(title, groups) of every summary table, in print order."""
    s = out["summary"]
    secs = [("all", {"all": s["all"]}), ("by topology", s["by_topology"]), ("by load band", s["by_band"]),
            ("by topology and load band", s["by_topology_band"])]
    secs += [(f"by {axis}", groups) for axis, groups in s["by_feature"].items() if groups]
    secs += [(f"{name} by topology and load band", groups) for name, groups in s.get("by_stratum", {}).items()]
    return secs


def markdown_tables(out: dict) -> str:
    """The summary tables as Markdown (docs/validation.md, section "Generated corpus")."""
    lines: list[str] = []
    for title, groups in sections(out):
        lines += [f"**{title}** (median / 90th percentile of |error|, %; attainment: |difference|; sat.: replays that "
                  "did not keep up at a rate below the analytic limit)", "",
                  "| " + " | ".join(TABLE_HEADERS) + " |", "|" + "---|" * len(TABLE_HEADERS)]
        lines += ["| " + " | ".join(r) + " |" for r in table_rows(groups)]
        lines.append("")
    return "\n".join(lines)
